use clap::Parser;
use clap::error::ErrorKind;
use imc::cli::{Cli, Command};
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
    // libpfm4 encodes for the CPU --root describes: decided before any thread starts and before
    // libpfm4 is loaded, since it reads LIBPFM_FORCE_PMU once, when it initialises.
    let pfm = imc::events::pfm_model::decide(&cli.global.root);
    // SAFETY: no other thread exists yet (clap and env_logger start none), and nothing has read
    // the environment through libc.
    unsafe { imc::events::pfm_model::apply(&pfm) };
    if matches!(
        cli.command,
        Command::Encode(_) | Command::Stat(_) | Command::Top(_) | Command::Record(_)
    ) {
        match (&pfm.pmu, log::log_enabled!(log::Level::Info)) {
            (None, true) => match imc::events::pfm::active_pmus() {
                Ok(active) => log::info!("{}; active: {}", pfm.why, active.join(", ")),
                Err(e) => log::info!("{}; libpfm4 not loaded: {e}", pfm.why),
            },
            _ => log::info!("{}", pfm.why),
        }
    }
    match imc::commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("imc: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
