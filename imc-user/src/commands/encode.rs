//! `imc encode EVENT... [--json]`: how each event string becomes `perf_event_attr` fields.
//!
//! Every string is encoded before anything is printed, so a bad one yields only its one-line
//! error (exit 2, or 1 when libpfm4 is missing or the PMUs cannot be read) and no partial output.
//! With `--json`, one object per counter per line (a wildcard PMU name gives one per instance):
//! `{ "event", "pmu", "type", "config", "config1", "config2", "exclude_user", "exclude_kernel" }`
//! plus `scale`, `unit`, `bytes_per_count` and `cpus` when known. Without it, one line per
//! counter with the configs in hex.
use crate::cli::{EncodeArgs, GlobalArgs};
use crate::error::{CliError, CliResult};
use crate::events::{self, EventError, Form};
use crate::model::{Encoded, Pmu};
use std::process::ExitCode;

/// Encodes every string; the PMUs under the root are read only once, and only a sysfs string
/// needs them to be readable (generic and libpfm4 names encode on any root).
pub fn encode_all(global: &GlobalArgs, texts: &[String]) -> Result<Vec<Encoded>, EventError> {
    let pmus: Result<Vec<Pmu>, EventError> = events::read_pmus(&global.root);
    let mut out = Vec::new();
    for text in texts {
        let found = match &pmus {
            Ok(p) => p.as_slice(),
            Err(e) if events::form_of(text) == Form::Sysfs => return Err(e.clone()),
            Err(_) => &[],
        };
        out.extend(events::parse_event(found, text)?);
    }
    Ok(out)
}

/// One human-readable line per counter.
pub fn human_line(e: &Encoded) -> String {
    let privilege = match (e.exclude_user, e.exclude_kernel) {
        (false, false) => "user+kernel",
        (false, true) => "user",
        (true, false) => "kernel",
        (true, true) => "none",
    };
    let mut line = format!(
        "{}  pmu={} type={} config={:#x} config1={:#x} config2={:#x} count={}",
        e.event, e.pmu, e.pmu_type, e.config, e.config1, e.config2, privilege
    );
    if let Some(s) = e.scale {
        line.push_str(&format!(" scale={s}"));
    }
    if let Some(u) = &e.unit {
        line.push_str(&format!(" unit={u}"));
    }
    if let Some(b) = e.bytes_per_count {
        line.push_str(&format!(" bytes/count={b}"));
    }
    if let Some(c) = &e.cpus {
        let cpus: Vec<String> = c.iter().map(u32::to_string).collect();
        line.push_str(&format!(" cpus={}", cpus.join(",")));
    }
    line
}

pub fn run(global: &GlobalArgs, args: &EncodeArgs) -> CliResult<ExitCode> {
    let encoded = encode_all(global, &args.events)?;
    let mut text = String::new();
    for e in &encoded {
        if args.json {
            let json = serde_json::to_string(e)
                .map_err(|err| CliError::runtime_because("cannot write JSON", err))?;
            text.push_str(&json);
        } else {
            text.push_str(&crate::text::escape(&human_line(e)));
        }
        text.push('\n');
    }
    crate::error::write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn global(root: &str) -> GlobalArgs {
        GlobalArgs {
            root: PathBuf::from(root),
            devmem: PathBuf::from("/dev/mem"),
            verbose: 0,
        }
    }

    #[test]
    fn human_line_shows_hex_configs_and_bytes() {
        let e = Encoded {
            event: "uncore_imc/cas_count_read/".into(),
            pmu: "uncore_imc_0".into(),
            pmu_type: 13,
            config: 0x304,
            scale: Some(6.103515625e-5),
            unit: Some("MiB".into()),
            bytes_per_count: Some(64.0),
            cpus: Some(vec![0, 20]),
            exclude_kernel: true,
            ..Default::default()
        };
        let l = human_line(&e);
        assert_eq!(
            l,
            "uncore_imc/cas_count_read/  pmu=uncore_imc_0 type=13 config=0x304 config1=0x0 \
             config2=0x0 count=user scale=0.00006103515625 unit=MiB bytes/count=64 cpus=0,20"
        );
    }

    #[test]
    fn generic_names_need_no_readable_root() {
        let g = global("/nonexistent-root");
        let v = encode_all(&g, &["cycles:u".to_string()]).unwrap();
        assert_eq!(v.len(), 1);
        // a sysfs string does, and says which root it could not read
        let e = encode_all(&g, &["uncore_imc/cas_count_read/".to_string()]).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-root"), "{e}");
    }
}
