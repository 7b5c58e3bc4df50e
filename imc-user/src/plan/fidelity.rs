//! The measured fidelity of the weight events: how many of the bytes the controller counted for
//! a known workload each weight event's counts stand for (f = weight counts × bytes per count ÷
//! controller bytes). `imc validate --save` keeps it as `{"weights": {"<event>": f}}` at
//! `IMC_FIDELITY_FILE` (default `/var/lib/imc/fidelity.json`); the commands that build a plan
//! read it once and set it into the plan's `weighting.fidelity` ([`super::weights::apply_fidelity`]).
//! No file: every event at 1 (not measured). A file that is there but not what it should be is
//! bad input, named, never half-used.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A fidelity file is a few events' figures: a bigger one is not one.
const MAX_BYTES: u64 = 1 << 20;
/// Fidelity beyond this is no measurement (a weight counting ten times what the controller saw).
const MAX_FIDELITY: f64 = 10.0;

#[derive(Debug, Error)]
pub enum FidelityError {
    #[error(
        "{path}: cannot read the weights' fidelity file (set IMC_FIDELITY_FILE to another file, \
         or remove it)"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: {message}: expected {{\"weights\": {{\"EVENT\": fidelity}}}} with each \
         fidelity above 0 and at most 10; run `imc validate --save` again or remove the file"
    )]
    Malformed { path: PathBuf, message: String },
}

#[derive(serde::Deserialize)]
struct File {
    weights: BTreeMap<String, serde_json::Value>,
}

/// The fidelity of each weight event named in the file at `path`; an empty map when there is no
/// file.
pub fn load(path: &Path) -> Result<BTreeMap<String, f64>, FidelityError> {
    let bytes = match crate::sys::file::read_capped(path, MAX_BYTES + 1) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => {
            return Err(FidelityError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    parse(path, &bytes)
}

/// The file's text (see [`load`]).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, f64>, FidelityError> {
    let bad = |message: String| FidelityError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    if bytes.len() as u64 > MAX_BYTES {
        return Err(bad(format!("larger than {MAX_BYTES} bytes")));
    }
    let file: File = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let mut out = BTreeMap::new();
    for (event, v) in file.weights {
        match v.as_f64() {
            Some(f) if f.is_finite() && f > 0.0 && f <= MAX_FIDELITY => {
                out.insert(event, f);
            }
            _ => return Err(bad(format!("weights.{event}: {v}"))),
        }
    }
    Ok(out)
}

/// Writes `weights` as the file [`load`] reads, whole: a temporary file beside it renamed over
/// it, so a reader never sees half a file (`imc validate --save`).
pub fn save(path: &Path, weights: &BTreeMap<String, f64>) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(&serde_json::json!({ "weights": weights }))? + "\n";
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("/x/fidelity.json")
    }

    #[test]
    fn the_events_figures_are_read() {
        let m = parse(
            p(),
            br#"{"weights": {"OCR.A": 0.75, "L2_LINES_OUT.NON_SILENT": 1.1}, "machine": "x"}"#,
        )
        .unwrap();
        assert_eq!(m.get("OCR.A"), Some(&0.75));
        assert_eq!(m.get("L2_LINES_OUT.NON_SILENT"), Some(&1.1));
    }

    #[test]
    fn what_save_writes_load_reads_back() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("state/fidelity.json");
        let weights: BTreeMap<String, f64> = [
            ("LLC-load-misses".to_string(), 0.82),
            ("x/y/".to_string(), 1.0),
        ]
        .into();
        save(&path, &weights).unwrap();
        assert_eq!(load(&path).unwrap(), weights);
    }

    #[test]
    fn a_missing_file_means_unmeasured() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(&dir.path().join("none.json")).unwrap().is_empty());
    }

    #[test]
    fn malformed_files_are_named_with_the_fix() {
        for text in [
            &b"{"[..],
            br#"{"weights": {"A": 0}}"#,
            br#"{"weights": {"A": -1}}"#,
            br#"{"weights": {"A": "x"}}"#,
            br#"{"weights": {"A": 1e9}}"#,
            br#"{"other": 1}"#,
            br#"[1]"#,
        ] {
            let e = parse(p(), text).unwrap_err().to_string();
            assert!(e.starts_with("/x/fidelity.json: "), "{e}");
            assert!(e.contains("validate --save"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("fidelity file"), "{e}");
    }
}
