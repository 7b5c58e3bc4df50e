//! The packaging files (packaging/): the systemd unit passes `systemd-analyze verify` (with the
//! built binary and the generated man page in place of the installed ones), the DaemonSet is
//! the YAML Kubernetes needs, and the generated completions and man page name every command.
use imc_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use yaml_rust2::{Yaml, YamlLoader};

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging")
}

fn imc_stdout(args: &[&str]) -> String {
    let out = imc().args(args).output().expect("run imc");
    assert!(
        out.status.success(),
        "imc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

const COMMANDS: [&str; 7] = ["list", "encode", "stat", "top", "record", "report", "serve"];

#[test]
fn the_systemd_unit_verifies_and_grants_only_bpf_and_perfmon() {
    let text = std::fs::read_to_string(packaging().join("systemd/imc.service")).unwrap();
    let values = |key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(values("CapabilityBoundingSet"), ["CAP_BPF CAP_PERFMON"]);
    assert_eq!(values("AmbientCapabilities"), ["CAP_BPF CAP_PERFMON"]);
    assert_eq!(values("NoNewPrivileges"), ["yes"]);
    let exec = values("ExecStart");
    assert_eq!(exec.len(), 1);
    assert!(
        exec[0].starts_with("/usr/bin/imc serve --listen 127.0.0.1:"),
        "{exec:?}"
    );

    let have = Command::new("systemd-analyze")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!("SKIPPED: systemd-analyze not installed: the unit was only read, not verified");
        return;
    }
    // The unit as installed, but with the built binary and the generated man page.
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man/man1");
    std::fs::create_dir_all(&man1).unwrap();
    std::fs::write(man1.join("imc.1"), imc_stdout(&["manpage"])).unwrap();
    let unit = dir.path().join("imc.service");
    std::fs::write(
        &unit,
        text.replace("/usr/bin/imc", imc_bin().to_str().unwrap()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", dir.path().join("man"))
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let sec = Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(&unit)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&sec.stdout);
    let level: f64 = report
        .lines()
        .find_map(|l| l.split("exposure level for ").nth(1))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {report}"));
    eprintln!("systemd-analyze security: exposure {level}");
    assert!(level <= 2.0, "exposure {level} (was 1.9)\n{report}");
}

fn key<'a>(y: &'a Yaml, path: &[&str]) -> &'a Yaml {
    path.iter().fold(y, |y, k| &y[*k])
}

#[test]
fn the_daemonset_mounts_the_host_read_only_and_reads_it_with_root() {
    let text = std::fs::read_to_string(packaging().join("kubernetes/daemonset.yaml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    let ds = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .expect("a DaemonSet document");
    assert_eq!(ds["apiVersion"].as_str(), Some("apps/v1"));
    let spec = key(ds, &["spec", "template", "spec"]);
    assert_eq!(spec["hostPID"].as_bool(), Some(true));
    // The selector picks the template's pods.
    assert_eq!(
        key(ds, &["spec", "selector", "matchLabels"]),
        key(ds, &["spec", "template", "metadata", "labels"])
    );
    let c = &spec["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = |flag: &str| args.iter().position(|a| *a == flag).map(|i| args[i + 1]);
    assert_eq!(at("--root"), Some("/host"));
    assert!(args.contains(&"serve"), "{args:?}");
    let port = at("--listen").unwrap().rsplit(':').next().unwrap();
    assert_eq!(
        c["ports"][0]["containerPort"]
            .as_i64()
            .map(|p| p.to_string()),
        Some(port.to_string())
    );

    // /sys and /proc of the host, read-only, under /host.
    let volumes = spec["volumes"].as_vec().unwrap();
    for (host, inside) in [("/sys", "/host/sys"), ("/proc", "/host/proc")] {
        let v = volumes
            .iter()
            .find(|v| v["hostPath"]["path"].as_str() == Some(host))
            .unwrap_or_else(|| panic!("no hostPath volume for {host}"));
        let name = v["name"].as_str().unwrap();
        let m = c["volumeMounts"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|m| m["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("volume {name} not mounted"));
        assert_eq!(m["mountPath"].as_str(), Some(inside));
        assert_eq!(
            m["readOnly"].as_bool(),
            Some(true),
            "{inside} must be read-only"
        );
    }
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["capabilities"]["drop"][0].as_str(), Some("ALL"));
    let mut add: Vec<&str> = sc["capabilities"]["add"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    add.sort();
    assert_eq!(add, ["BPF", "PERFMON"]);
    // The arguments are ones imc accepts: --dry-run parses them without privileges.
    let mut dry: Vec<&str> = args.clone();
    dry[at_index(&args, "--root")] = "/";
    dry.extend(["-e", "page-faults", "--dry-run"]);
    let out = imc().args(&dry).output().unwrap();
    assert!(
        out.status.success(),
        "imc {dry:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn at_index(args: &[&str], flag: &str) -> usize {
    args.iter().position(|a| *a == flag).unwrap() + 1
}

#[test]
fn completions_name_every_command_and_bash_parses_them() {
    let bash = imc_stdout(&["completions", "bash"]);
    for c in COMMANDS {
        assert!(bash.contains(c), "bash completion lacks {c}");
    }
    assert!(
        bash.contains("--max-processes"),
        "serve's options are completed"
    );
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("imc.bash");
    std::fs::write(&f, &bash).unwrap();
    let st = Command::new("bash").arg("-n").arg(&f).status().unwrap();
    assert!(st.success(), "bash -n rejects the completion script");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let text = imc_stdout(&["completions", shell]);
        assert!(text.contains("serve") && text.contains("report"), "{shell}");
    }
    // Hidden helpers stay out of the user's completions.
    assert!(!bash.contains("manpage"));
}

#[test]
fn the_man_page_documents_every_command() {
    let man = imc_stdout(&["manpage"]);
    assert!(man.contains("\n.TH imc 1 "), "not a roff man page: {man}");
    for c in COMMANDS {
        assert!(
            man.contains(&format!(".SH \"IMC {}\"", c.to_uppercase())),
            "no section for imc {c}"
        );
    }
    assert!(
        man.contains("max\\-processes"),
        "serve's options are documented"
    );
    // man renders it (where man-db is installed).
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("imc.1");
    std::fs::write(&f, &man).unwrap();
    match Command::new("man")
        .arg("-l")
        .arg(&f)
        .env("MANWIDTH", "100")
        .env("MAN_KEEP_FORMATTING", "0")
        .stderr(Stdio::piped())
        .output()
    {
        Ok(out) if out.status.success() => {
            // Without a terminal man still overstrikes bold text: "X\bX".
            let mut text = String::new();
            for ch in String::from_utf8_lossy(&out.stdout).chars() {
                if ch == '\u{8}' {
                    text.pop();
                } else {
                    text.push(ch);
                }
            }
            assert!(text.contains("IMC SERVE"), "{text}");
        }
        Ok(out) => panic!("man -l: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("SKIPPED rendering: man not available ({e})"),
    }
}
