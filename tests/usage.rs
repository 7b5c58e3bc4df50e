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

/// The recording's name without -o, a plot named as a PNG and the report's JSON keys: each
/// mistake is told in one line with the form to use (issue 31, item 12).
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
