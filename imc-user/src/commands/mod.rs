//! One module per subcommand. Each takes the global options and its own arguments and returns
//! the process exit code, or a `CliError` whose one-line message `main` prints.
use crate::cli::{Cli, Command};
use crate::error::CliResult;
use std::process::ExitCode;

pub mod encode;
pub mod generate;
pub mod ibs_top;
pub mod latency;
pub mod list;
pub mod naming_sink;
pub mod record;
pub mod report;
pub mod report_stacks;
pub mod sampling;
pub mod serve;
pub mod stat;
pub mod top;
pub mod validate;

pub fn run(cli: Cli) -> CliResult<ExitCode> {
    let g = &cli.global;
    match cli.command {
        Command::List(a) => list::run(g, &a),
        Command::Encode(a) => encode::run(g, &a),
        Command::Stat(a) => stat::run(g, &a),
        Command::Top(a) => top::run(g, &a),
        Command::Record(a) => record::run(g, &a),
        Command::Report(a) => report::run(g, &a),
        Command::Serve(a) => serve::run(g, &a),
        Command::Validate(a) => validate::run(g, &a),
        Command::Completions(a) => generate::run_completions(a.shell),
        Command::Manpage => generate::run_manpage(),
    }
}
