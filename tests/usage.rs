//! The command line's own errors, run through the real binary: each is one line on stderr that
//! names the input (the missing argument, the bad value and what would do) and points to the
//! subcommand's help, with exit code 2; and the help says what every option is.
use imc_tests::imc;

/// Runs `imc ARGS`; returns (exit code, stderr), checking that stdout stayed empty.
fn fails(args: &[&str]) -> (i32, String) {
    let out = imc().args(args).output().expect("run imc");
    assert!(out.stdout.is_empty(), "{args:?} printed on stdout");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), err)
}

/// A usage error: exit 2, one line, pointing to `imc SUB --help`.
fn usage_error(args: &[&str], sub: &str) -> String {
    let (code, err) = fails(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.contains(&format!("(see 'imc {sub} --help')")),
        "{args:?}: {err}"
    );
    err
}

#[test]
fn a_missing_required_argument_is_named() {
    let err = usage_error(&["record", "--duration", "1"], "record");
    assert!(err.contains("--output <FILE>"), "{err}");
    let err = usage_error(&["report"], "report");
    assert!(err.contains("<FILE>"), "{err}");
    let err = usage_error(&["encode"], "encode");
    assert!(err.contains("<EVENT>"), "{err}");
}

#[test]
fn an_option_without_its_value_lists_the_choices() {
    let err = usage_error(&["report", "x.imc", "--by"], "report");
    for v in ["pid", "tgid", "comm", "cgroup"] {
        assert!(err.contains(v), "{v} missing: {err}");
    }
    let err = usage_error(&["stat", "--backend", "nonsense"], "stat");
    assert!(
        err.contains("'nonsense'") && err.contains("auto") && err.contains("intel-uncore-imc"),
        "{err}"
    );
}

#[test]
fn a_negative_number_is_a_bad_value_not_an_unknown_argument() {
    for (sub, args) in [
        ("stat", vec!["stat", "--duration", "-1"]),
        ("top", vec!["top", "--duration", "-1"]),
        ("record", vec!["record", "-o", "x.imc", "--duration", "-1"]),
        ("stat", vec!["stat", "-I", "-5"]),
        (
            "report",
            vec!["report", "x.imc", "--burst-threshold", "-3K"],
        ),
    ] {
        let err = usage_error(&args, sub);
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
        assert!(err.contains("invalid value '-"), "{args:?}: {err}");
        assert!(
            err.contains("positive") || err.contains("1 or more"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_mistyped_option_is_named_with_the_likely_one() {
    let err = usage_error(&["list", "--jsn"], "list");
    assert!(err.contains("'--jsn'") && err.contains("'--json'"), "{err}");
    // Without a subcommand the pointer is the top-level help.
    let (code, err) = fails(&[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("a command is needed") && err.contains("'imc --help'"),
        "{err}"
    );
    // It names every command `imc --help` lists.
    for c in [
        "list", "encode", "stat", "top", "record", "report", "serve", "validate",
    ] {
        assert!(err.contains(c), "{c} not named: {err}");
    }
}

#[test]
fn an_unknown_event_says_unknown_before_how_to_encode_for_another_model() {
    let (code, err) = fails(&["stat", "-e", "bogus", "--duration", "0.1"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("'bogus'"), "{err}");
    let unknown = err.find("unknown").expect("says unknown");
    if let Some(force) = err.find("LIBPFM_FORCE_PMU") {
        assert!(unknown < force, "{err}");
    }
}

/// The help of `imc SUB`: every option named here has its explanation beside it.
fn help(sub: &str) -> String {
    let out = imc().args([sub, "--help"]).output().expect("run imc");
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text after `flag` on its help line (empty when the option has no help).
fn explained(help: &str, flag: &str) -> String {
    let line = help
        .lines()
        .find(|l| l.trim_start().starts_with(flag) || l.contains(&format!(", {flag}")))
        .unwrap_or_else(|| panic!("{flag} not in the help:\n{help}"));
    let after = &line[line.find(flag).unwrap() + flag.len()..];
    // Past the value name (`<S>`), if any.
    let after = after.split_once('>').map_or(after, |(_, r)| r);
    after.trim().to_string()
}

#[test]
fn every_option_the_issue_named_has_help_text() {
    for (sub, flag) in [
        ("list", "--json"),
        ("encode", "--json"),
        ("stat", "--json"),
        ("stat", "--backend"),
        ("top", "--backend"),
        ("record", "--duration"),
        ("report", "--json"),
        ("report", "--by"),
        ("report", "<FILE>"),
    ] {
        let h = help(sub);
        assert!(
            !explained(&h, flag).is_empty(),
            "imc {sub} {flag}: no help:\n{h}"
        );
    }
    let h = help("stat");
    assert!(
        h.contains("possible values") && h.contains("intel-uncore-imc"),
        "--backend lists its values:\n{h}"
    );
}

/// An argument that is not UTF-8 never panics (exit 101) in any command: it is a usage error
/// or, for a file or a program, an error about that file, in one line.
#[test]
fn a_non_utf8_argument_never_panics() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let bad = || OsString::from_vec(b"x\xff".to_vec());
    let root = imc_tests::own_fixtures().join("skx-2socket");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.imc");
    let cases: Vec<Vec<OsString>> = vec![
        vec!["list".into(), bad()],
        vec!["encode".into(), bad()],
        vec!["stat".into(), "-e".into(), bad()],
        vec!["top".into(), "--by".into(), bad()],
        vec![
            "record".into(),
            "-o".into(),
            bad(),
            "--dry-run".into(),
            "-e".into(),
            bad(),
        ],
        vec!["report".into(), bad()],
        vec![
            "serve".into(),
            "--web.config.file".into(),
            bad(),
            "--dry-run".into(),
        ],
        vec![bad()],
        vec!["--root".into(), bad(), "list".into()],
        vec![
            "record".into(),
            "-o".into(),
            out.clone().into(),
            "--dry-run".into(),
            "--".into(),
            OsString::from_vec(b"/x\xff".to_vec()),
        ],
    ];
    for args in cases {
        let run = imc()
            .args(["--root".as_ref(), root.as_os_str()])
            .args(&args)
            .output()
            .expect("run imc");
        let err = String::from_utf8_lossy(&run.stderr);
        let code = run.status.code();
        assert!(
            matches!(code, Some(0..=2)),
            "{args:?}: exit {code:?}, stderr: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if code != Some(0) {
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        }
    }
}

/// A non-UTF-8 argument is named by its own bytes (`\xff`), not by clap's "invalid UTF-8 was
/// detected in one or more arguments" nor as U+FFFD, which names a path that is not the one given.
#[test]
fn a_non_utf8_argument_is_named_by_its_bytes() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let root = imc_tests::own_fixtures().join("skx-2socket");
    let run = imc()
        .args(["--root".as_ref(), root.as_os_str()])
        .args(["stat", "--dry-run", "-e"])
        .arg(OsString::from_vec(b"x\xff".to_vec()))
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(r"'x\xff' is not UTF-8"), "{err}");
    // An unexpected argument and an unknown command: their bytes too.
    for args in [
        vec!["list".into(), OsString::from_vec(b"x\xff".to_vec())],
        vec![OsString::from_vec(b"x\xff".to_vec())],
    ] {
        let run = imc().args(&args).output().expect("run imc");
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(err.contains(r"'x\xff'"), "{args:?}: {err}");
    }
    let run = imc()
        .args(["stat", "-e", "page-faults", "--"])
        .arg(OsString::from_vec(b"/no-such-dir/x\xff".to_vec()))
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains(r"cannot run '/no-such-dir/x\xff'"), "{err}");
}

/// A program whose path is not UTF-8 is still a program: `stat -- PATH` runs it and exits with
/// its status (no privileges needed for the page-fault stand-in on a fixture tree).
#[test]
fn a_program_path_that_is_not_utf8_runs() {
    use std::os::unix::ffi::OsStringExt;
    let dir = tempfile::tempdir().unwrap();
    let prog = dir
        .path()
        .join(std::ffi::OsString::from_vec(b"exit3\xff".to_vec()));
    std::fs::write(&prog, "#!/bin/sh\nexit 3\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = imc()
        .args(["stat", "-e", "page-faults", "--"])
        .arg(&prog)
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "the program's status: {err}");
}

/// A command that does not exist is the user's mistake, the same exit 2 for `stat -- CMD` as for
/// `record -- CMD` (never 1), in one line naming the program.
#[test]
fn stat_of_a_missing_program_is_bad_input() {
    let run = imc()
        .args(["stat", "-e", "page-faults", "--", "./no-such-program-here"])
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("no-such-program-here"))
        .unwrap_or_else(|| panic!("the program is not named: {err}"));
    assert!(line.contains("cannot run"), "{err}");
    // One line, before anything is planned: no stand-in's notice before it, in stat as in
    // record.
    assert_eq!(err.lines().count(), 1, "{err}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.imc");
    for args in [
        vec!["stat", "--", "no-such-program-here"],
        vec![
            "record",
            "-o",
            out.to_str().unwrap(),
            "--",
            "./no-such-program-here",
        ],
    ] {
        let run = imc().args(&args).output().expect("run imc");
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("cannot run 'no-such-program-here'")
                || err.contains("cannot run './no-such-program-here'"),
            "{args:?}: {err}"
        );
        assert!(!out.exists(), "nothing recorded");
    }
}

/// `imc tpo` suggests `top` (clap's own likeness measure misses swapped letters), `imc lst`
/// suggests list.
#[test]
fn a_mistyped_command_is_named_with_the_likely_one() {
    let (code, err) = fails(&["tpo"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did you mean 'top'?"), "{err}");
    let (_, err) = fails(&["lst"]);
    assert!(err.contains("'list'"), "{err}");
    let (_, err) = fails(&["xyzzy"]);
    assert!(!err.contains("did you mean"), "{err}");
}

/// `imc help --help` failed ("unrecognized subcommand '--help'"): it shows the help.
#[test]
fn help_help_shows_help() {
    for args in [
        &["help", "--help"][..],
        &["help", "-h"],
        &["help", "top", "--help"],
    ] {
        let out = imc().args(args).output().expect("run imc");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("Usage: imc"), "{args:?}: {text}");
    }
    let out = imc().args(["help", "top", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: imc top"));
}

/// `--duration 10s` and `-I 100ms` are accepted: durations take units in every command (a bare
/// number keeps its unit: seconds for --duration, milliseconds for -I), within the same bounds, and
/// a bad one is one line.
#[test]
fn durations_take_units_in_every_command() {
    let root = imc_tests::own_fixtures().join("skx-2socket");
    let root = root.to_str().unwrap();
    for args in [
        &["stat", "--duration", "10s", "-I", "100ms", "--dry-run"][..],
        &["top", "--duration", "2m", "-I", "1s", "--dry-run"],
        &[
            "record",
            "-o",
            "x.imc",
            "--duration",
            "1h",
            "-I",
            "2s",
            "--dry-run",
        ],
        &["serve", "-I", "5s", "--dry-run"],
    ] {
        let out = imc().args(["--root", root]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
    // The record plan names its interval: 2s is 2000 ms, and a bare 2000 is the same.
    for i in ["2s", "2000"] {
        let out = imc()
            .args([
                "--root",
                root,
                "record",
                "-o",
                "x.imc",
                "-I",
                i,
                "--dry-run",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("2000 ms interval"), "-I {i}: {text}");
    }
    for (sub, args) in [
        ("stat", &["stat", "--duration", "10parsecs"][..]),
        ("top", &["top", "-I", "500us"]),
        ("record", &["record", "-o", "x.imc", "--duration", "400d"]),
        ("serve", &["serve", "-I", "2d"]),
    ] {
        let err = usage_error(args, sub);
        assert!(err.contains("with units"), "{err}");
    }
}

/// `--per-channel` where the counters have no channels (a VM's stand-in) never does nothing
/// silently: one line says why.
#[test]
fn per_channel_without_channels_says_why() {
    let out = imc()
        .args(["stat", "--per-channel", "--duration", "200ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(0) {
        eprintln!("SKIPPED: stat cannot count here: {err}");
        return;
    }
    if err.contains("as a stand-in") {
        let said: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("--per-channel"))
            .collect();
        assert_eq!(said.len(), 1, "{err}");
        assert!(said[0].contains("no memory channels"), "{err}");
    }
}

/// HZ is read, not "assumed", where `proc/config.gz` says CONFIG_HZ=250: the plan reads the
/// kernel's config under --root (gzip) and says where HZ came from.
#[test]
fn the_plan_reads_hz_from_proc_config_gz_and_says_so() {
    let fixture = imc_tests::own_fixtures().join("skx-2socket");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for entry in std::fs::read_dir(&fixture).unwrap() {
        let e = entry.unwrap();
        if e.file_name() != "proc" {
            std::os::unix::fs::symlink(e.path(), root.join(e.file_name())).unwrap();
        }
    }
    std::fs::create_dir_all(root.join("proc")).unwrap();
    if fixture.join("proc").is_dir() {
        for entry in std::fs::read_dir(fixture.join("proc")).unwrap() {
            let e = entry.unwrap();
            std::os::unix::fs::symlink(e.path(), root.join("proc").join(e.file_name())).unwrap();
        }
    }
    let plan = |root: &std::path::Path| {
        let out = imc()
            .args(["--root", root.to_str().unwrap(), "top", "--dry-run"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(plan(root).contains("(assumed"), "no config: assumed");
    let config = root.join("proc/config");
    std::fs::write(&config, "# CONFIG_HZ_1000 is not set\nCONFIG_HZ=300\n").unwrap();
    let gz = std::process::Command::new("gzip").arg(&config).status();
    if !gz.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: gzip is not installed");
        return;
    }
    let text = plan(root);
    assert!(
        text.contains("HZ=300 (CONFIG_HZ in proc/config.gz)"),
        "{text}"
    );
}

/// The recording's name without -o, a plot named as a PNG and the report's JSON keys: each mistake
/// is told in one line with the form to use.
#[test]
fn record_and_report_name_the_form_to_use() {
    let (code, err) = fails(&["record", "x.imc"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("imc record -o x.imc"), "{err}");
    assert!(!err.contains("unexpected argument"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.imc");
    std::fs::write(&rec, b"IMCREC\0\n").unwrap();
    let png = dir.path().join("out.png");
    let (code, err) = fails(&[
        "report",
        rec.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--plot writes SVG") && err.contains(".svg"),
        "{err}"
    );
    assert!(!png.exists(), "nothing written into the .png");
    // An existing plot file: the error speaks of --plot, not of -o.
    let svg = dir.path().join("out.svg");
    std::fs::write(&svg, b"x").unwrap();
    let (code, err) = fails(&[
        "report",
        rec.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("another --plot") && !err.contains("-o"),
        "{err}"
    );
    let help = imc().args(["report", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(!help.contains("groups, bursts, totals"), "{help}");
    for key in ["`packages`", "`tasks`", "`others`", "`bursts`"] {
        assert!(help.contains(key), "{key}: {help}");
    }
}
