use clap::Parser;
use clap::error::ErrorKind;
use imc::cli::Cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!(
                "imc: a command is needed: list, encode, stat, top, record, report or serve (see 'imc --help')"
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            // clap's message is several lines (usage, a tip); the contract is one line.
            let text = e.render().to_string();
            // The error line, not the about text clap prints first when a subcommand is missing.
            let first = text
                .lines()
                .find(|l| l.starts_with("error:"))
                .or_else(|| text.lines().find(|l| !l.trim().is_empty()))
                .unwrap_or("bad usage");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("imc: {first} (see 'imc --help')");
            return ExitCode::from(2);
        }
    };
    let level = match cli.global.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        .init();
    match imc::commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("imc: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
