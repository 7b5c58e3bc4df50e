//! The README cannot drift from the program: every `imc …` command in its `sh` code blocks that
//! can run on a fixture tree (`--root tests/fixtures/…`, `--dry-run`, `list`, `encode`) is run
//! with the built binary and must exit 0, and a figure the README states beside it (`# 27
//! counters`) must be what the program prints. Commands that need root, the BPF sampler or a
//! recording are listed below with the reason they are not run; a new command that is neither
//! runnable nor listed fails the test, so each one is looked at.
use imc_tests::imc;
use std::path::Path;

/// Commands of the README that are not run here, and why.
const SKIPPED: [(&str, &str); 8] = [
    (
        "imc top --by container",
        "loads the BPF sampler: needs root and a live machine",
    ),
    (
        "imc record -o run.imc --duration 60",
        "loads the BPF sampler: needs root and 60 s",
    ),
    (
        "imc report run.imc --by cgroup --json",
        "reads run.imc, which the record above makes",
    ),
    (
        "imc report run.imc --perfetto run.pftrace",
        "reads run.imc, which the record above makes",
    ),
    (
        "imc report run.imc --plot run.svg --by comm",
        "reads run.imc, which the record above makes",
    ),
    (
        "imc top --weight cpu-time",
        "loads the BPF sampler: needs root and a live machine",
    ),
    (
        "imc record --stacks -o app.imc -- ./app",
        "loads the BPF sampler and runs ./app: tests/stacks.rs runs the same with a program of its own",
    ),
    (
        "imc report app.imc --folded app.folded --flamegraph app.svg --pprof app.pb.gz",
        "reads app.imc, which the record above makes",
    ),
];

/// Every line of a ```sh block that runs imc: (command, the comment after `#`).
fn readme_commands(readme: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = !in_sh && (t == "```sh" || t == "```bash");
            continue;
        }
        if !in_sh || !t.starts_with("imc ") {
            continue;
        }
        let (cmd, comment) = t.split_once('#').unwrap_or((t, ""));
        out.push((cmd.trim().to_string(), comment.trim().to_string()));
    }
    out
}

fn runnable(cmd: &str) -> bool {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    words.iter().any(|w| w.starts_with("tests/fixtures/"))
        || words.contains(&"--dry-run")
        || matches!(words.get(1), Some(&"list") | Some(&"encode"))
}

/// The figures a comment states that the output must carry: `27 counters` is the plan's
/// `counters (27):`; `weighting: by X…` is the plan's weighting line's beginning.
fn figures(comment: &str) -> Vec<String> {
    let mut want = Vec::new();
    let words: Vec<&str> = comment.split_whitespace().collect();
    for w in words.windows(2) {
        if w[1].trim_end_matches([':', ',']) == "counters"
            && let Ok(n) = w[0].parse::<u32>()
        {
            want.push(format!("counters ({n}):"));
        }
    }
    if let Some(rest) = comment.strip_prefix("weighting: ") {
        let head = rest.split('…').next().unwrap_or(rest);
        want.push(format!("weighting: {head}"));
    }
    want
}

#[test]
fn every_readme_command_runs_and_its_figures_hold() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let commands = readme_commands(&readme);
    assert!(commands.len() >= 5, "the README's commands: {commands:?}");
    let mut ran = 0;
    for (cmd, comment) in &commands {
        if let Some((_, why)) = SKIPPED.iter().find(|(c, _)| c == cmd) {
            eprintln!("SKIPPED: `{cmd}`: {why}");
            continue;
        }
        assert!(
            runnable(cmd),
            "`{cmd}` runs on no fixture tree: make it one, or list it in SKIPPED with why"
        );
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let out = imc().current_dir(&repo).args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "`{cmd}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for want in figures(comment) {
            assert!(
                text.contains(&want),
                "the README says `{comment}` beside `{cmd}`, but the program prints no `{want}`:\n{text}"
            );
        }
        ran += 1;
    }
    assert!(ran >= 2, "ran {ran} of the README's commands");
    // Every skipped command is still in the README (the list does not outlive its lines).
    for (c, _) in SKIPPED {
        assert!(
            commands.iter().any(|(cmd, _)| cmd == c),
            "`{c}` is no longer in the README"
        );
    }
}

#[test]
fn figures_are_read_from_comments() {
    assert_eq!(
        figures("27 counters: 24 of traffic (6 channels x 2 directions x 2 sockets) and 3 weights"),
        ["counters (27):"]
    );
    assert_eq!(figures("weighting: by OCR… (reads)"), ["weighting: by OCR"]);
    assert!(figures("which container is using the bandwidth").is_empty());
}
