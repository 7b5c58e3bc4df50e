//! `imc stat`.
use crate::cli::{GlobalArgs, StatArgs};
use crate::error::{CliError, CliResult};
use std::process::ExitCode;

pub fn run(_global: &GlobalArgs, _args: &StatArgs) -> CliResult<ExitCode> {
    Err(CliError::runtime("imc stat: not implemented in this build"))
}
