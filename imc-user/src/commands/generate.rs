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
        .and_then(|()| man.render_version_section(&mut buf))
        .map_err(|e| CliError::runtime(format!("rendering the man page: {e}")))?;
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

pub fn run_completions(shell: Shell) -> CliResult<ExitCode> {
    write_out(&completions(shell))
}

pub fn run_manpage() -> CliResult<ExitCode> {
    write_out(&manpage()?)
}
