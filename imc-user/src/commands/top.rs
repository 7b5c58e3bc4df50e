//! `imc top`.
use crate::cli::{GlobalArgs, TopArgs};
use crate::error::{CliError, CliResult};
use std::process::ExitCode;

pub fn run(_global: &GlobalArgs, _args: &TopArgs) -> CliResult<ExitCode> {
    Err(CliError::runtime("imc top: not implemented in this build"))
}
