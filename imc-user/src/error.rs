//! The error every command returns to `main`: a one-line message and the exit code of the
//! command-line contract (1 runtime failure, 2 bad usage or bad input). Module errors are typed
//! (thiserror) and convert into this at the command boundary, choosing their code there.
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    /// Bad usage or bad input: exit 2.
    pub fn bad_input(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
        }
    }
    /// Runtime failure (including missing privileges or hardware): exit 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

pub type CliResult<T = ()> = Result<T, CliError>;
