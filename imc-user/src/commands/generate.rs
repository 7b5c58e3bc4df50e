//! `imc completions SHELL` and `imc manpage` (hidden): shell completions and the man page
//! generated from the clap definitions, for packagers (see packaging/README.md).
use crate::cli::{Cli, Shell};
use crate::error::{CliError, CliResult};
use clap::CommandFactory;
use std::io::Write;
use std::process::ExitCode;

fn write_out(bytes: &[u8]) -> CliResult<ExitCode> {
    crate::error::write_stdout(bytes)?;
    Ok(ExitCode::SUCCESS)
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    use clap_complete::Shell as S;
    let s = match shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
        Shell::Elvish => S::Elvish,
        Shell::Powershell => S::PowerShell,
    };
    let mut cmd = visible(&Cli::command());
    let mut buf = Vec::new();
    clap_complete::generate(s, &mut cmd, "imc", &mut buf);
    buf
}

/// The command without its hidden subcommands (clap_complete would offer them in bash).
fn visible(cmd: &clap::Command) -> clap::Command {
    let subs: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    clap::Command::new("imc")
        .version(env!("CARGO_PKG_VERSION"))
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(subs)
}

/// imc(1) in roff: the top-level page with every visible subcommand and its options.
pub fn manpage() -> CliResult<Vec<u8>> {
    let cmd = Cli::command();
    let mut buf = Vec::new();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(&mut buf)
        .and_then(|()| man.render_name_section(&mut buf))
        .and_then(|()| man.render_synopsis_section(&mut buf))
        .and_then(|()| man.render_description_section(&mut buf))
        .and_then(|()| man.render_options_section(&mut buf))
        .and_then(|()| render_subcommands(&cmd, &mut buf))
        .and_then(|()| render_exit_status_and_examples(&mut buf))
        .and_then(|()| man.render_version_section(&mut buf))
        .map_err(|e| CliError::runtime_because("rendering the man page", e))?;
    Ok(buf)
}

/// One section per visible subcommand: its synopsis, description and options, so that the
/// single page documents every command's flags (clap_mangen's own section lists names only).
fn render_subcommands(cmd: &clap::Command, buf: &mut Vec<u8>) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("imc {}", sub.get_name());
        let sub = sub.clone().bin_name(name.clone());
        let man = clap_mangen::Man::new(sub).title(name.to_uppercase().replace(' ', "-"));
        writeln!(buf, ".SH \"{}\"", name.to_uppercase())?;
        man.render_synopsis_section(buf)?;
        man.render_description_section(buf)?;
        man.render_options_section(buf)?;
    }
    Ok(())
}

/// imc's exit codes, as main.rs maps errors to them; the README's "Commands" states the same.
pub const EXIT_CODES: [(&str, &str); 4] = [
    ("0", "Success."),
    (
        "1",
        "A runtime failure: the machine refused (no privileges to load the sampler, a counter that did not open), or output could not be written.",
    ),
    (
        "2",
        "Bad usage or bad input: a malformed value, a missing or unreadable file, an unknown event. One line on standard error names the input and what to do.",
    ),
    (
        "N",
        "With -- CMD (stat, record): the command's own exit status, or 128 plus the signal that ended it.",
    ),
];

/// Examples for the man page: each is parsed by the real command line in a test.
pub const EXAMPLES: [(&str, &str); 9] = [
    (
        "imc list",
        "What this machine offers: each backend, available or not, and why.",
    ),
    (
        "imc stat -I 100ms --duration 10s",
        "System bandwidth per package, ten times a second, for ten seconds.",
    ),
    (
        "imc stat --per-channel -- ./stream",
        "Bandwidth per memory channel while ./stream runs; exits with its status.",
    ),
    ("imc top --by container", "Live bandwidth per container."),
    (
        "imc top --json --duration 1m",
        "One JSON object per second for a minute.",
    ),
    (
        "imc record -o run.imc --max-size 100M -- make -j8",
        "Record while make runs, at most 100 MiB.",
    ),
    (
        "imc report run.imc --by cgroup --bursts",
        "Traffic per cgroup and the bursts of a recording.",
    ),
    (
        "imc serve --listen 127.0.0.1:10160",
        "Prometheus metrics at http://127.0.0.1:10160/metrics.",
    ),
    (
        "imc --root tests/fixtures/skx-2socket stat --dry-run",
        "The plan for another machine's sysfs tree, without privileges.",
    ),
];

/// EXIT STATUS and EXAMPLES, which clap has no notion of.
fn render_exit_status_and_examples(buf: &mut Vec<u8>) -> std::io::Result<()> {
    // roff: a leading '.' or '\'' would be a request, a backslash an escape.
    let roff = |s: &str| s.replace('\\', "\\e").replace('-', "\\-");
    writeln!(buf, ".SH \"EXIT STATUS\"")?;
    for (code, what) in EXIT_CODES {
        writeln!(buf, ".TP\n\\fB{code}\\fR\n{}", roff(what))?;
    }
    writeln!(buf, ".SH EXAMPLES")?;
    for (cmd, what) in EXAMPLES {
        writeln!(buf, ".TP\n\\fB{}\\fR\n{}", roff(cmd), roff(what))?;
    }
    Ok(())
}

pub fn run_completions(shell: Shell) -> CliResult<ExitCode> {
    write_out(&completions(shell))
}

pub fn run_manpage() -> CliResult<ExitCode> {
    write_out(&manpage()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn every_example_parses_and_the_page_has_exit_codes() {
        for (cmd, _) in EXAMPLES {
            let argv: Vec<&str> = cmd.split_whitespace().collect();
            assert!(Cli::try_parse_from(&argv).is_ok(), "{cmd}");
        }
        let page = String::from_utf8(manpage().unwrap()).unwrap();
        assert!(page.contains(".SH \"EXIT STATUS\""), "{page}");
        assert!(page.contains(".SH EXAMPLES"));
        assert!(page.contains("imc top \\-\\-by container"), "{page}");
    }
}
