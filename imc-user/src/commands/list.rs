//! `imc list`.
use crate::cli::{GlobalArgs, ListArgs};
use crate::error::{CliError, CliResult};
use std::process::ExitCode;

pub fn run(_global: &GlobalArgs, _args: &ListArgs) -> CliResult<ExitCode> {
    Err(CliError::runtime("imc list: not implemented in this build"))
}
