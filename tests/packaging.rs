//! The packaging files (packaging/): the systemd unit passes `systemd-analyze verify` (with the
//! built binary and the generated man page in place of the installed ones), the DaemonSet is
//! the YAML Kubernetes needs, and the generated completions and man page name every command.
use imc_tests::deb::{built_deb_for, lintian_passes, stdout_ok};
use imc_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use yaml_rust2::{Yaml, YamlLoader};

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging")
}

fn imc_stdout(args: &[&str]) -> String {
    let out = run_ok(imc().args(args));
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
    // An explicit file limit (systemd's default soft limit is 1024).
    let nofile: Vec<u64> = values("LimitNOFILE")
        .iter()
        .map(|v| v.parse().expect("a number"))
        .collect();
    assert!(
        matches!(nofile.as_slice(), [n] if *n > 1024),
        "LimitNOFILE {nofile:?}"
    );
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
    run_ok(imc().args(&dry));
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

fn have_promtool() -> bool {
    require(
        Command::new("promtool")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "promtool not installed: scripts/setup.sh installs Debian's prometheus",
    )
}

/// Unit tests of the rules, written here: a host whose package 0 runs at 90% of its peak for
/// 10 minutes with one cgroup taking 5/6 of it, and a host well below.
const RULE_TESTS: &str = r#"
evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      # 1.8e10 bytes/s on package 0 of h1 (read 1.0e10 + write 0.8e10), peak 2e10: 90%.
      - series: 'imc_dram_bytes_total{job="imc",instance="h1:10160",package="0",channel="uncore_imc_0",direction="read"}'
        values: '0+150000000000x60'
      - series: 'imc_dram_bytes_total{job="imc",instance="h1:10160",package="0",channel="uncore_imc_0",direction="write"}'
        values: '0+120000000000x60'
      - series: 'imc_dram_peak_bytes_per_second{job="imc",instance="h1:10160",package="0"}'
        values: '20000000000x60'
      # 1.5e10 bytes/s in /db.slice, 0.3e10 elsewhere.
      - series: 'imc_cgroup_dram_bytes_total{job="imc",instance="h1:10160",cgroup="/db.slice",direction="read"}'
        values: '0+225000000000x60'
      - series: 'imc_cgroup_dram_bytes_total{job="imc",instance="h1:10160",cgroup="/batch.slice",direction="read"}'
        values: '0+45000000000x60'
      - series: 'imc_process_dram_bytes_total{job="imc",instance="h1:10160",pid="42",comm="postgres",cgroup="/db.slice",direction="read"}'
        values: '0+150000000000x60'
      - series: 'imc_unattributed_dram_bytes_total{job="imc",instance="h1:10160",package="0",direction="read"}'
        values: '0+15000000000x60'
      # h2: 2e9 bytes/s of a 2e10 peak (10%), all in one cgroup: no alert.
      - series: 'imc_dram_bytes_total{job="imc",instance="h2:10160",package="0",channel="uncore_imc_0",direction="read"}'
        values: '0+30000000000x60'
      - series: 'imc_dram_peak_bytes_per_second{job="imc",instance="h2:10160",package="0"}'
        values: '20000000000x60'
      - series: 'imc_cgroup_dram_bytes_total{job="imc",instance="h2:10160",cgroup="/db.slice",direction="read"}'
        values: '0+30000000000x60'
      - series: 'imc_lost_records_total{job="imc",instance="h1:10160"}'
        values: '0x60'
      # Victims: /batch.slice stalls 60% of its cycles on saturated h1; /db.slice 10%; on h2
      # (10% of peak) a cgroup stalled 70% is no victim of saturation.
      - series: 'imc_cgroup_memory_stall_cycles_total{job="imc",instance="h1:10160",cgroup="/batch.slice"}'
        values: '0+18000000000x60'
      - series: 'imc_cgroup_cycles_total{job="imc",instance="h1:10160",cgroup="/batch.slice"}'
        values: '0+30000000000x60'
      - series: 'imc_cgroup_memory_stall_cycles_total{job="imc",instance="h1:10160",cgroup="/db.slice"}'
        values: '0+3000000000x60'
      - series: 'imc_cgroup_cycles_total{job="imc",instance="h1:10160",cgroup="/db.slice"}'
        values: '0+30000000000x60'
      - series: 'imc_cgroup_memory_stall_cycles_total{job="imc",instance="h2:10160",cgroup="/db.slice"}'
        values: '0+21000000000x60'
      - series: 'imc_cgroup_cycles_total{job="imc",instance="h2:10160",cgroup="/db.slice"}'
        values: '0+30000000000x60'
      - series: 'imc_process_memory_stall_cycles_total{job="imc",instance="h1:10160",pid="7",comm="etl",cgroup="/batch.slice"}'
        values: '0+18000000000x60'
      - series: 'imc_process_cycles_total{job="imc",instance="h1:10160",pid="7",comm="etl",cgroup="/batch.slice"}'
        values: '0+30000000000x60'
      # Loaded latency: h1's saturated channel waits 210 ns; h2's 300 ns at 10% of peak is no
      # alert; a latency with no channel bandwidth of its own (an AMD CCX) on saturated h1's
      # package 0 takes the package's utilisation.
      - series: 'imc_dram_read_latency_seconds{job="imc",instance="h1:10160",package="0",channel="uncore_imc_0"}'
        values: '0.00000021x60'
      - series: 'imc_dram_read_latency_seconds{job="imc",instance="h2:10160",package="0",channel="uncore_imc_0"}'
        values: '0.0000003x60'
      - series: 'imc_dram_read_latency_seconds{job="imc",instance="h1:10160",package="0",channel="amd_l3@cpu0"}'
        values: '0.00000016x60'
    promql_expr_test:
      - expr: instance_package_channel:imc_dram_utilisation:ratio1m
        eval_time: 10m
        exp_samples:
          - labels: 'instance_package_channel:imc_dram_utilisation:ratio1m{job="imc",instance="h1:10160",package="0",channel="uncore_imc_0"}'
            value: 0.9
          - labels: 'instance_package_channel:imc_dram_utilisation:ratio1m{job="imc",instance="h2:10160",package="0",channel="uncore_imc_0"}'
            value: 0.1
      - expr: instance_package_channel:imc_dram_read_latency_seconds:avg1m{instance="h2:10160"}
        eval_time: 10m
        exp_samples:
          - labels: 'instance_package_channel:imc_dram_read_latency_seconds:avg1m{job="imc",instance="h2:10160",package="0",channel="uncore_imc_0"}'
            value: 3.0e-7
      - expr: instance_cgroup:imc_cgroup_memory_stall:ratio1m{instance="h1:10160"}
        eval_time: 10m
        exp_samples:
          - labels: 'instance_cgroup:imc_cgroup_memory_stall:ratio1m{job="imc",instance="h1:10160",cgroup="/batch.slice"}'
            value: 0.6
          - labels: 'instance_cgroup:imc_cgroup_memory_stall:ratio1m{job="imc",instance="h1:10160",cgroup="/db.slice"}'
            value: 0.1
      - expr: instance_process:imc_process_memory_stall:ratio1m
        eval_time: 10m
        exp_samples:
          - labels: 'instance_process:imc_process_memory_stall:ratio1m{job="imc",instance="h1:10160",pid="7",comm="etl",cgroup="/batch.slice"}'
            value: 0.6
      - expr: instance_package:imc_dram_utilisation:ratio1m
        eval_time: 10m
        exp_samples:
          - labels: 'instance_package:imc_dram_utilisation:ratio1m{job="imc",instance="h1:10160",package="0"}'
            value: 0.9
          - labels: 'instance_package:imc_dram_utilisation:ratio1m{job="imc",instance="h2:10160",package="0"}'
            value: 0.1
      - expr: instance_package_direction:imc_dram_bytes:rate1m{instance="h1:10160"}
        eval_time: 10m
        exp_samples:
          - labels: 'instance_package_direction:imc_dram_bytes:rate1m{job="imc",instance="h1:10160",package="0",direction="read"}'
            value: 1.0e10
          - labels: 'instance_package_direction:imc_dram_bytes:rate1m{job="imc",instance="h1:10160",package="0",direction="write"}'
            value: 0.8e10
      - expr: instance_cgroup:imc_cgroup_dram_bytes:rate1m{cgroup="/db.slice",instance="h1:10160"}
        eval_time: 10m
        exp_samples:
          - labels: 'instance_cgroup:imc_cgroup_dram_bytes:rate1m{job="imc",instance="h1:10160",cgroup="/db.slice"}'
            value: 1.5e10
      - expr: instance_process:imc_process_dram_bytes:rate1m
        eval_time: 10m
        exp_samples:
          - labels: 'instance_process:imc_process_dram_bytes:rate1m{job="imc",instance="h1:10160",pid="42",comm="postgres",cgroup="/db.slice"}'
            value: 1.0e10
      - expr: instance_package:imc_unattributed_dram_bytes:rate1m
        eval_time: 10m
        exp_samples:
          - labels: 'instance_package:imc_unattributed_dram_bytes:rate1m{job="imc",instance="h1:10160",package="0"}'
            value: 1.0e9
    alert_rule_test:
      # Not yet: the condition has held for less than 5 minutes.
      - eval_time: 4m
        alertname: ImcPackageBandwidthNearPeak
        exp_alerts: []
      - eval_time: 10m
        alertname: ImcPackageBandwidthNearPeak
        exp_alerts:
          - exp_labels:
              severity: warning
              job: imc
              instance: h1:10160
              package: "0"
            exp_annotations:
              summary: "DRAM bandwidth of package 0 on h1:10160 is above 85% of its peak"
              description: "90% of the theoretical peak for 5 minutes: memory-bound work there is slowed by queueing. See the top cgroups and processes on the imc dashboard."
      - eval_time: 10m
        alertname: ImcCgroupDominatesSaturatedHost
        exp_alerts:
          - exp_labels:
              severity: warning
              job: imc
              instance: h1:10160
              cgroup: /db.slice
            exp_annotations:
              summary: "cgroup /db.slice takes most of the DRAM bandwidth of saturated h1:10160"
              description: "83.33% of the host's memory traffic, while a package is above 85% of its peak."
      - eval_time: 10m
        alertname: ImcVictimsOfSaturation
        exp_alerts:
          - exp_labels:
              severity: warning
              job: imc
              instance: h1:10160
              cgroup: /batch.slice
            exp_annotations:
              summary: "cgroup /batch.slice on saturated h1:10160 waits on memory"
              description: "60% of its core cycles stalled on memory loads while a package is above 85% of its peak: it is slowed by the culprits on the imc dashboard."
      - eval_time: 4m
        alertname: ImcDramLatencyHigh
        exp_alerts: []
      - eval_time: 10m
        alertname: ImcDramLatencyHigh
        exp_alerts:
          - exp_labels:
              severity: warning
              job: imc
              instance: h1:10160
              package: "0"
              channel: uncore_imc_0
            exp_annotations:
              summary: "DRAM reads on package 0 channel uncore_imc_0 of h1:10160 wait long at high utilisation"
              description: "Reads waited 210ns on average in the memory controller's queue for 5 minutes while the channel (for a CCX, its package) ran above 70% of its share of the peak: memory-bound work there is slowed by the traffic. See the top processes and the victims on the imc dashboard."
          - exp_labels:
              severity: warning
              job: imc
              instance: h1:10160
              package: "0"
              channel: amd_l3@cpu0
            exp_annotations:
              summary: "DRAM reads on package 0 channel amd_l3@cpu0 of h1:10160 wait long at high utilisation"
              description: "Reads waited 160ns on average in the memory controller's queue for 5 minutes while the channel (for a CCX, its package) ran above 70% of its share of the peak: memory-bound work there is slowed by the traffic. See the top processes and the victims on the imc dashboard."
      - eval_time: 10m
        alertname: ImcLosingRecords
        exp_alerts: []
"#;

#[test]
fn the_rules_pass_promtool_and_their_unit_tests() {
    if !have_promtool() {
        return;
    }
    let rules = packaging().join("prometheus/imc.rules.yml");
    run_ok(
        Command::new("promtool")
            .args(["check", "rules"])
            .arg(&rules),
    );
    let dir = tempfile::tempdir().unwrap();
    let test = dir.path().join("imc.rules.test.yml");
    std::fs::write(
        &test,
        format!("rule_files:\n  - '{}'\n{RULE_TESTS}", rules.display()),
    )
    .unwrap();
    run_ok(Command::new("promtool").args(["test", "rules"]).arg(&test));
}

#[test]
fn the_dashboard_has_the_panels_an_operator_reads() {
    let text = std::fs::read_to_string(packaging().join("prometheus/imc-dashboard.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exprs: Vec<&str> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    for family in [
        "imc_dram_bytes_total",
        "imc_dram_peak_bytes_per_second",
        "imc_cgroup_dram_bytes_total",
        "imc_process_dram_bytes_total",
        "imc_unattributed_dram_bytes_total",
        "imc_lost_records_total",
        "imc_read_errors_total",
        "imc_process_memory_stall_cycles_total",
        "imc_process_cycles_total",
        "imc_dram_read_latency_seconds",
        "imc_dram_write_latency_seconds",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(family)),
            "no panel reads {family}"
        );
    }
    // Every panel uses the dashboard's data source variable.
    for p in d["panels"].as_array().unwrap() {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
    }
}

/// This machine's package: IMC_TEST_DEB, else the target directory's of this architecture.
fn built_deb() -> Option<PathBuf> {
    let arch = stdout_ok(Command::new("dpkg").arg("--print-architecture"));
    built_deb_for("IMC_TEST_DEB", arch.trim())
}

#[test]
fn the_debian_package_holds_a_stripped_imc_that_runs_and_passes_lintian() {
    let deb = built_deb();
    if !require(
        deb.as_ref().is_some_and(|d| d.is_file()),
        "no imc_*.deb: `cargo xtask package` builds it (and `cargo xtask test` does first)",
    ) {
        return;
    }
    let deb = deb.unwrap();
    let name = deb.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with(&format!("imc_{}_", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );
    let contents = stdout_ok(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    for path in [
        "./usr/bin/imc",
        "./usr/lib/systemd/system/imc.service",
        "./usr/share/bash-completion/completions/imc",
        "./usr/share/zsh/vendor-completions/_imc",
        "./usr/share/fish/vendor_completions.d/imc.fish",
        "./usr/share/man/man1/imc.1.gz",
        "./usr/share/imc/prometheus/imc.rules.yml",
        "./usr/share/imc/prometheus/imc-dashboard.json",
        "./usr/share/doc/imc/copyright",
        "./usr/share/doc/imc/changelog.gz",
        "./usr/share/doc/imc/README.md.gz",
    ] {
        assert!(
            contents
                .lines()
                .any(|l| l.ends_with(&format!(" {path}")) && l.contains("root/root")),
            "{path} missing (or not root's):\n{contents}"
        );
    }
    // The product alone: none of imc-tools' benchmark or accuracy binaries is installed.
    let installed: Vec<&str> = contents
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|p| p.starts_with("./usr/bin/") && *p != "./usr/bin/")
        .collect();
    assert_eq!(installed, ["./usr/bin/imc"], "{contents}");
    let control = stdout_ok(Command::new("dpkg-deb").arg("--field").arg(&deb));
    assert!(control.contains("Depends: libc6"), "{control}");

    // Extracted into a scratch directory, the binary runs as installed.
    let dir = tempfile::tempdir().unwrap();
    stdout_ok(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir.path()));
    let bin = dir.path().join("usr/bin/imc");
    let version = stdout_ok(Command::new(&bin).arg("--version"));
    assert_eq!(version.trim(), format!("imc {}", env!("CARGO_PKG_VERSION")));
    let list = stdout_ok(Command::new(&bin).arg("list"));
    assert!(list.contains("software"), "{list}");
    let dry = stdout_ok(Command::new(&bin).args(["serve", "--dry-run", "-e", "page-faults"]));
    assert!(
        dry.contains("listen: http://127.0.0.1:10160/metrics"),
        "{dry}"
    );
    // Stripped: no symbol table or debug sections left.
    let sections = stdout_ok(Command::new("readelf").args(["-S", "-W"]).arg(&bin));
    for s in [".debug_info", ".symtab"] {
        assert!(!sections.contains(s), "{s} in the packaged binary");
    }
    let size = std::fs::metadata(&bin).unwrap().len();
    eprintln!("packaged /usr/bin/imc: {size} bytes");
    // The shipped rules are the checkout's.
    assert_eq!(
        std::fs::read(dir.path().join("usr/share/imc/prometheus/imc.rules.yml")).unwrap(),
        std::fs::read(packaging().join("prometheus/imc.rules.yml")).unwrap()
    );

    lintian_passes(&deb);
}
