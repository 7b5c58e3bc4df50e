//! The `imc` binary: parse the command line, run the command, and turn any failure into one
//! line on stderr and an exit code (2 bad usage or input, 1 runtime failure). The library's
//! errors are typed (`CliError` and each area's own); anyhow only gathers them here.
use anyhow::Result;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser};
use imc::cli::{Cli, Command};
use imc::error::CliError;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Standard output was closed when imc started (`imc list >&-`). Rust's runtime puts /dev/null
/// in its place before `main`, so output would vanish with exit 0: it is looked at earlier, by
/// a constructor (the loader runs `.init_array` before the runtime's setup).
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_closed_stdout() {
    let closed = !imc::sys::file::is_open(libc::STDOUT_FILENO);
    STDOUT_CLOSED.store(closed, Ordering::Relaxed);
}

#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

fn main() -> ExitCode {
    imc::sys::malloc::map_large_buffers_alone();
    let result = if STDOUT_CLOSED.load(Ordering::Relaxed) {
        // What a write to it fails with, through the rule every output failure follows.
        Err(
            CliError::output(std::io::Error::from_raw_os_error(libc::EBADF))
                .hint("imc was started with its standard output closed")
                .into(),
        )
    } else {
        run()
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let typed = e.downcast_ref::<CliError>();
            // The reader of our output went away: a normal end, nothing to say.
            if typed.is_some_and(CliError::is_quiet) {
                return ExitCode::SUCCESS;
            }
            // Messages quote input (paths, file contents, names): escaped, so that none of it
            // reaches the terminal as a control sequence. A stderr that cannot be written is
            // no reason to panic.
            // A typed error prints its own chain (each cause once); anything else, anyhow's.
            let text = typed.map_or_else(|| format!("{e:#}"), ToString::to_string);
            let _ = writeln!(std::io::stderr(), "imc: {}", imc::text::escape(&text));
            // Failures that are not the library's typed ones are runtime failures.
            ExitCode::from(typed.map_or(1, CliError::code))
        }
    }
}

fn run() -> Result<ExitCode> {
    // As the OS gave them: an argument need not be UTF-8 (a program path after `--`), and
    // reading it as a String would panic.
    let argv: Vec<OsString> = help_help(std::env::args_os().collect());
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            e.print().map_err(CliError::output)?;
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) if e.kind() == ErrorKind::InvalidUtf8 => {
            return Err(CliError::bad_input(not_utf8_message(&argv)).into());
        }
        Err(e) => {
            let args: Vec<String> = argv
                .iter()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let mut line = usage_message(&e, &args);
            // clap quotes a non-UTF-8 argument lossily (U+FFFD): named by its bytes instead.
            for a in argv.iter().skip(1).filter(|a| a.to_str().is_none()) {
                line = line.replace(&*a.to_string_lossy(), &imc::text::quote_os(a));
            }
            return Err(CliError::bad_input(line).into());
        }
    };
    init_logging(cli.global.verbose);
    // Every IMC_* and LIBPFM_* variable, read before imc sets any of them (choose_libpfm_model).
    imc::settings::get();
    choose_libpfm_model(&cli);
    Ok(imc::commands::run(cli)?)
}

/// libpfm4 encodes for the CPU --root describes: decided before any thread starts and before
/// libpfm4 is loaded, since it reads LIBPFM_FORCE_PMU once, when it initialises.
fn choose_libpfm_model(cli: &Cli) {
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
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        // Standard error, except while `top`'s full-screen view holds the terminal.
        .target(env_logger::Target::Pipe(Box::new(
            imc::text::held_log::Writer,
        )))
        .init();
}

/// clap's error as one line that names the input and where help is: the subcommand's own help
/// when a subcommand was given.
fn usage_message(e: &clap::Error, args: &[String]) -> String {
    let sub = subcommand_of(args);
    let help = match &sub {
        Some(s) => format!("see 'imc {s} --help'"),
        None => "see 'imc --help'".to_string(),
    };
    let what = match e.kind() {
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand
            if sub.is_none() =>
        {
            format!("a command is needed: {}", commands())
        }
        ErrorKind::MissingRequiredArgument => match strings(e, ContextKind::InvalidArg) {
            Some(missing) => format!("missing {}", missing.join(", ")),
            None => first_error_line(e),
        },
        _ => {
            let mut line = first_error_line(e);
            if let Some(values) = strings(e, ContextKind::ValidValue) {
                line.push_str(&format!("; choose one of: {}", values.join(", ")));
            }
            let similar = strings(e, ContextKind::SuggestedArg)
                .or_else(|| strings(e, ContextKind::SuggestedSubcommand))
                .or_else(|| misspelt_command(e));
            if let Some(similar) = similar {
                line.push_str(&format!(" (did you mean {}?)", quoted(&similar)));
            }
            line
        }
    };
    match sub {
        Some(s) => format!("{s}: {what} ({help})"),
        None => format!("{what} ({help})"),
    }
}

/// The commands `imc --help` lists, in its order: "list, encode, … or validate".
fn commands() -> String {
    let cmd = Cli::command();
    let names: Vec<&str> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name())
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// clap's "invalid UTF-8 was detected in one or more arguments", naming the argument (its
/// bytes as `\xNN`) and what may be any bytes.
fn not_utf8_message(argv: &[OsString]) -> String {
    let args: Vec<String> = argv
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let bad = argv.iter().skip(1).find(|a| a.to_str().is_none());
    let what = bad.map_or_else(String::new, |a| format!("'{}' ", imc::text::quote_os(a)));
    let line = format!(
        "the argument {what}is not UTF-8 text: give it as UTF-8 (only a program and its arguments after -- may be any bytes)"
    );
    match subcommand_of(&args) {
        Some(s) => format!("{s}: {line} (see 'imc {s} --help')"),
        None => format!("{line} (see 'imc --help')"),
    }
}

/// A command name one edit (a letter added, dropped, changed, or two swapped) from what was
/// typed, where clap's own likeness measure finds none (`tpo` for `top`).
fn misspelt_command(e: &clap::Error) -> Option<Vec<String>> {
    if e.kind() != ErrorKind::InvalidSubcommand {
        return None;
    }
    let typed = strings(e, ContextKind::InvalidSubcommand)?
        .into_iter()
        .next()?;
    let cmd = Cli::command();
    let near: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .filter(|name| strsim::osa_distance(name, &typed) <= 1)
        .collect();
    (!near.is_empty()).then_some(near)
}

/// `imc help --help` (and `imc help top -h`): clap's help command takes no options, so the
/// help flags after it are dropped and it shows the help it was asked for.
fn help_help(argv: Vec<OsString>) -> Vec<OsString> {
    let cmd = Cli::command();
    let is_sub = |a: &OsString| cmd.get_subcommands().any(|s| a == s.get_name());
    let first = argv
        .iter()
        .skip(1)
        .position(|a| a == "help" || a == "--" || is_sub(a));
    match first {
        Some(i) if argv[i + 1] == "help" => argv
            .iter()
            .enumerate()
            .filter(|&(j, a)| j <= i + 1 || !(a == "--help" || a == "-h"))
            .map(|(_, a)| a.clone())
            .collect(),
        _ => argv,
    }
}

/// The error line of clap's rendering, without its `error: ` prefix.
fn first_error_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("error:"))
        .or_else(|| text.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("bad usage");
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

fn strings(e: &clap::Error, kind: ContextKind) -> Option<Vec<String>> {
    match e.get(kind)? {
        ContextValue::Strings(v) if !v.is_empty() => Some(v.clone()),
        ContextValue::String(s) => Some(vec![s.clone()]),
        _ => None,
    }
}

fn quoted(v: &[String]) -> String {
    v.iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The subcommand named on the command line, if any (the first argument that is one; a
/// global option's value cannot be a subcommand name in practice).
fn subcommand_of(args: &[String]) -> Option<String> {
    let cmd = Cli::command();
    args.iter()
        .take_while(|a| a.as_str() != "--")
        .find(|a| cmd.get_subcommands().any(|s| s.get_name() == a.as_str()))
        .cloned()
}
