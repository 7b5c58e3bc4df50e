//! Reading PMUs from `sys/bus/event_source/devices` under a root directory.
//!
//! Every file is trimmed before parsing: Intel uncore `events/*` files have no trailing newline
//! (uncore_event_show prints "%s"), POWER and `msr` ones do. Errors name the file and what was
//! expected, because the usual cause is a truncated or hand-made tree passed with `--root`.
use super::cpulist::{CpuListError, parse_cpulist};
use super::format::{FormatError, parse_format};
use crate::model::{EventAlias, Pmu};
use crate::text::quote;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum DiscoveryError {
    #[error("{path}: does not exist (expected {expected}); is --root right?")]
    Missing { path: PathBuf, expected: String },
    #[error("cannot read {path}: {message}")]
    Io {
        path: PathBuf,
        message: String,
        permission: bool,
    },
    #[error("{path}: expected {expected}, found '{}'", quote(found))]
    Invalid {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("{path}: larger than {what} can be (more than {max} bytes); is --root a sysfs tree?")]
    TooLarge {
        path: PathBuf,
        what: &'static str,
        max: u64,
    },
    #[error("{path}")]
    CpuList {
        path: PathBuf,
        #[source]
        source: CpuListError,
    },
    #[error("{path}")]
    Format {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
    #[error("no PMU named '{name}' under {dir}")]
    NoSuchPmu { name: String, dir: PathBuf },
    #[error("{path}: PMU {pmu} has no event aliases, but '{alias}' is needed")]
    NoEvents {
        path: PathBuf,
        pmu: String,
        alias: String,
    },
}

impl DiscoveryError {
    /// True when the input tree is wrong (exit 2); false for a runtime condition such as a
    /// permission problem on a real system (exit 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(
            self,
            DiscoveryError::Io {
                permission: true,
                ..
            }
        )
    }
}

pub(crate) fn io_error(path: &Path, e: &io::Error) -> DiscoveryError {
    if e.kind() == io::ErrorKind::NotFound {
        return DiscoveryError::Missing {
            path: path.to_path_buf(),
            expected: "a sysfs file".into(),
        };
    }
    DiscoveryError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
        permission: e.kind() == io::ErrorKind::PermissionDenied,
    }
}

/// Largest sysfs text file: a sysfs attribute is at most one page, 64 KiB on the largest pages
/// (POWER, arm64); real ones are one short line.
const MAX_TEXT: u64 = 64 * 1024;

/// Largest decimal number file (`type`, `physical_package_id`): `4294967295` and a newline,
/// with room to spare.
const MAX_NUMBER: u64 = 32;

/// Reads a small file under the root: a regular file only (a FIFO there must not hang
/// discovery), at most [`MAX_TEXT`] bytes (only the head of a larger one is read). For files
/// whose head is all imc needs (`proc/cpuinfo`, DMI tables, PCI config space).
pub(crate) fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    crate::sys::file::read_capped(path, MAX_TEXT)
}

/// Reads a whole file of at most `max` bytes: a larger one is not the kind of file it should
/// be (`what`), and is refused naming it rather than cut and its head parsed as if it were all.
fn read_limited(path: &Path, max: u64, what: &'static str) -> Result<Vec<u8>, DiscoveryError> {
    let buf = crate::sys::file::read_capped(path, max + 1).map_err(|e| io_error(path, &e))?;
    if buf.len() as u64 > max {
        return Err(DiscoveryError::TooLarge {
            path: path.to_path_buf(),
            what,
            max,
        });
    }
    Ok(buf)
}

/// Reads a sysfs text file (at most a page), trimmed. Non-UTF-8 content is an `Invalid` error
/// naming the file.
pub(crate) fn read_text(path: &Path) -> Result<String, DiscoveryError> {
    read_text_of(path, MAX_TEXT, "a sysfs file")
}

/// [`read_text`] of a file of kind `what`, at most `max` bytes.
fn read_text_of(path: &Path, max: u64, what: &'static str) -> Result<String, DiscoveryError> {
    let buf = read_limited(path, max, what)?;
    String::from_utf8(buf)
        .map(|s| s.trim().to_string())
        .map_err(|_| DiscoveryError::Invalid {
            path: path.to_path_buf(),
            expected: "UTF-8 text".into(),
            found: "binary data".into(),
        })
}

/// The head (at most 64 KiB) of a text file that may be absent (`Ok(None)`) and may be longer
/// than that: `proc/cpuinfo`, whose first processor is what imc reads (thousands of CPUs make
/// it megabytes).
pub(crate) fn read_head_optional(path: &Path) -> Result<Option<String>, DiscoveryError> {
    match read_small(path) {
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
        Err(e) => match io_error(path, &e) {
            DiscoveryError::Missing { .. } => Ok(None),
            other => Err(other),
        },
    }
}

/// Reads a text file that may be absent (`Ok(None)`).
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, DiscoveryError> {
    match read_text(path) {
        Ok(s) => Ok(Some(s)),
        Err(DiscoveryError::Missing { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(crate) fn read_cpulist_file(path: &Path) -> Result<Vec<u32>, DiscoveryError> {
    let text = read_text_of(path, super::cpulist::MAX_CPULIST_BYTES, "a CPU list")?;
    parse_cpulist(&text).map_err(|source| DiscoveryError::CpuList {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a decimal unsigned integer file (`type`, `physical_package_id`).
pub(crate) fn read_u32(path: &Path, expected: &str) -> Result<u32, DiscoveryError> {
    let text = read_text_of(path, MAX_NUMBER, "a decimal number")?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DiscoveryError::Invalid {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            found: text,
        });
    }
    text.parse().map_err(|_| DiscoveryError::Invalid {
        path: path.to_path_buf(),
        expected: expected.to_string(),
        found: text.clone(),
    })
}

/// `DIR/sys/bus/event_source/devices`.
pub fn devices_dir(root: &Path) -> PathBuf {
    root.join("sys/bus/event_source/devices")
}

/// Every PMU, sorted by name. A missing `devices` directory is an error (not a sysfs tree).
pub fn read_pmus(root: &Path) -> Result<Vec<Pmu>, DiscoveryError> {
    let dir = devices_dir(root);
    let entries = std::fs::read_dir(&dir).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => DiscoveryError::Missing {
            path: dir.clone(),
            expected: "the perf event_source devices directory of a sysfs tree".into(),
        },
        _ => io_error(&dir, &e),
    })?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(&dir, &e))?;
        // Entries are symlinks to ../../../devices/<pmu>; skip names that are not UTF-8 (no
        // kernel PMU has one) rather than failing the whole listing.
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    names.sort();
    names.iter().map(|n| read_pmu(root, n)).collect()
}

/// One PMU by name. Follows the `devices/<name>` symlink (std::fs follows links).
pub fn read_pmu(root: &Path, name: &str) -> Result<Pmu, DiscoveryError> {
    let dir = pmu_dir(root, name)?;
    let type_path = dir.join("type");
    let pmu_type = read_u32(&type_path, "a decimal PMU type number")?;

    // `cpumask` on uncore PMUs; hybrid core PMUs (cpu_core/cpu_atom) have `cpus` instead.
    let mut cpumask = None;
    for file in ["cpumask", "cpus"] {
        let p = dir.join(file);
        // exists(), not is_file(): something else there (a FIFO) is an error, not "no mask".
        if p.exists() {
            cpumask = Some(read_cpulist_file(&p)?);
            break;
        }
    }

    let mut formats = BTreeMap::new();
    let fdir = dir.join("format");
    if fdir.is_dir() {
        for (fname, path) in list_files(&fdir)? {
            let text = read_text(&path)?;
            let field = parse_format(&fname, &text)
                .map_err(|source| DiscoveryError::Format { path, source })?;
            formats.insert(fname, field);
        }
    }

    let events = read_events(&dir.join("events"))?;
    Ok(Pmu {
        name: name.to_string(),
        pmu_type,
        cpumask,
        formats,
        events,
        path: dir,
    })
}

/// The directory of PMU `name`: `devices/<name>` is a symlink to `../../../devices/<name>`.
/// Trees copied without symlink support (git with core.symlinks=false, some archivers) hold a
/// small regular file containing the link target instead; that is followed too, as long as it
/// stays inside the root.
fn pmu_dir(root: &Path, name: &str) -> Result<PathBuf, DiscoveryError> {
    let entry = devices_dir(root).join(name);
    let no_such = || DiscoveryError::NoSuchPmu {
        name: name.to_string(),
        dir: devices_dir(root),
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(no_such());
    }
    if entry.is_dir() {
        return Ok(entry);
    }
    if !entry.is_file() {
        return Err(no_such());
    }
    let target = read_text(&entry)?;
    let not_link = || DiscoveryError::Invalid {
        path: entry.clone(),
        expected: "a symlink (or a file holding the link target) to the PMU's directory".into(),
        found: target.chars().take(80).collect(),
    };
    if target.is_empty() || target.starts_with('/') || target.contains('\n') {
        return Err(not_link());
    }
    let resolved = devices_dir(root).join(&target);
    // Stay inside the tree: a stand-in file must not send us to the host's /sys.
    let inside = match (resolved.canonicalize(), root.canonicalize()) {
        (Ok(r), Ok(base)) => r.starts_with(base),
        _ => false,
    };
    if inside && resolved.is_dir() {
        Ok(resolved)
    } else {
        Err(not_link())
    }
}

fn list_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, DiscoveryError> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, &e))?;
        let path = entry.path();
        if let (Some(name), true) = (entry.file_name().to_str(), path.is_file()) {
            out.push((name.to_string(), path));
        }
    }
    out.sort();
    Ok(out)
}

/// `events/<name>` aliases with `<name>.scale` and `<name>.unit`. `.per-pkg` and `.snapshot`
/// carry flags perf uses for aggregation; imc aggregates per package itself, so they are read
/// past, not parsed.
fn read_events(edir: &Path) -> Result<BTreeMap<String, EventAlias>, DiscoveryError> {
    let mut events = BTreeMap::new();
    if !edir.is_dir() {
        return Ok(events);
    }
    let files = list_files(edir)?;
    for (fname, path) in &files {
        if fname.ends_with(".scale")
            || fname.ends_with(".unit")
            || fname.ends_with(".per-pkg")
            || fname.ends_with(".snapshot")
        {
            continue;
        }
        let terms = read_text_of(path, MAX_TEXT, "an event alias")?;
        let scale_path = edir.join(format!("{fname}.scale"));
        let scale = match read_optional(&scale_path)? {
            None => None,
            Some(s) => Some(parse_scale(&scale_path, &s)?),
        };
        let unit = read_optional(&edir.join(format!("{fname}.unit")))?.filter(|u| !u.is_empty());
        events.insert(
            fname.clone(),
            EventAlias {
                name: fname.clone(),
                terms,
                scale,
                unit,
            },
        );
    }
    Ok(events)
}

fn parse_scale(path: &Path, s: &str) -> Result<f64, DiscoveryError> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(DiscoveryError::Invalid {
            path: path.to_path_buf(),
            expected: "a positive decimal scale such as 6.103515625e-5".into(),
            found: s.to_string(),
        }),
    }
}

/// Bytes per raw count from an alias' scale and unit: perf multiplies counts by `.scale` and
/// prints them in `.unit`, so bytes = count × scale × unit size. `None` when the unit is not a
/// byte unit (a unit-less scale is not bytes by itself).
pub fn bytes_per_count(scale: Option<f64>, unit: Option<&str>) -> Option<f64> {
    let mult = match unit?.trim() {
        "B" | "Bytes" | "bytes" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => return None,
    };
    Some(scale.unwrap_or(1.0) * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mib_scale_is_64_bytes() {
        assert_eq!(
            bytes_per_count(Some(6.103515625e-5), Some("MiB")),
            Some(64.0)
        );
        assert_eq!(bytes_per_count(Some(256.0), None), None);
        assert_eq!(bytes_per_count(None, Some("B")), Some(1.0));
        assert_eq!(bytes_per_count(Some(1.0), Some("Joules")), None);
    }
}

#[cfg(test)]
mod tree_tests {
    use super::*;

    fn pmu_tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let p = d.path().join("sys/devices/p").join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let link = d.path().join("sys/bus/event_source/devices");
        std::fs::create_dir_all(&link).unwrap();
        std::os::unix::fs::symlink("../../../devices/p", link.join("p")).unwrap();
        d
    }

    #[test]
    fn aliases_scale_unit_and_flag_files() {
        let d = pmu_tree(&[
            ("type", "13\n"),
            ("cpumask", "0,20\n"),
            ("format/event", "config:0-7\n"),
            ("events/a", "event=0x04"),
            ("events/a.scale", " 6.103515625e-5 "),
            ("events/a.unit", "MiB"),
            ("events/a.per-pkg", "1"),
            ("events/a.snapshot", "1"),
        ]);
        let p = read_pmu(d.path(), "p").unwrap();
        assert_eq!(p.pmu_type, 13);
        assert_eq!(p.cpumask, Some(vec![0, 20]));
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events["a"].terms, "event=0x04");
        assert_eq!(p.events["a"].scale, Some(6.103515625e-5));
        assert_eq!(read_pmus(d.path()).unwrap().len(), 1);
    }

    #[test]
    fn malformed_files_name_the_file() {
        for (file, text, want) in [
            ("type", "", "type"),
            ("type", "-1\n", "type"),
            ("cpumask", "zz\n", "cpumask"),
            ("events/a.scale", "fast", "a.scale"),
        ] {
            let mut files = vec![("type", "13\n"), ("events/a", "event=1")];
            files.retain(|(f, _)| *f != file);
            files.push((file, text));
            let d = pmu_tree(&files);
            let e = crate::text::error_line(&read_pmu(d.path(), "p").unwrap_err());
            assert!(e.contains(want), "{file}: {e}");
            assert!(e.contains("expected") || e.contains("CPU"), "{e}");
        }
    }

    #[test]
    fn link_stand_in_files_stay_inside_the_root() {
        let d = pmu_tree(&[("type", "7\n")]);
        let devs = d.path().join("sys/bus/event_source/devices");
        std::fs::write(devs.join("q"), "../../../devices/p").unwrap();
        assert_eq!(read_pmu(d.path(), "q").unwrap().pmu_type, 7);
        std::fs::write(devs.join("r"), "../../../../../../../../sys/devices/cpu").unwrap();
        assert!(matches!(
            read_pmu(d.path(), "r"),
            Err(DiscoveryError::Invalid { .. })
        ));
        assert!(matches!(
            read_pmu(d.path(), "../x"),
            Err(DiscoveryError::NoSuchPmu { .. })
        ));
    }
}
