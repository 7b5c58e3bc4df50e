//! `imc encode`.
use crate::cli::{EncodeArgs, GlobalArgs};
use crate::error::{CliError, CliResult};
use std::process::ExitCode;

pub fn run(_global: &GlobalArgs, _args: &EncodeArgs) -> CliResult<ExitCode> {
    Err(CliError::runtime(
        "imc encode: not implemented in this build",
    ))
}
