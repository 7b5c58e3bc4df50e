//! `imc record`.
use crate::cli::{GlobalArgs, RecordArgs};
use crate::error::{CliError, CliResult};
use std::process::ExitCode;

pub fn run(_global: &GlobalArgs, _args: &RecordArgs) -> CliResult<ExitCode> {
    Err(CliError::runtime(
        "imc record: not implemented in this build",
    ))
}
