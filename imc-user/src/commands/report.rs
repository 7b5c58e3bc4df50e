//! `imc report`.
use crate::cli::{GlobalArgs, ReportArgs};
use crate::error::{CliError, CliResult};
use std::process::ExitCode;

pub fn run(_global: &GlobalArgs, _args: &ReportArgs) -> CliResult<ExitCode> {
    Err(CliError::runtime(
        "imc report: not implemented in this build",
    ))
}
