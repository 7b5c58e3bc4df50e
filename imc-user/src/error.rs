//! The error every command returns to `main`: a one-line message and the exit code of the
//! command-line contract (1 runtime failure, 2 bad usage or bad input). Module errors are typed
//! (thiserror) and convert into this at the command boundary, choosing their code there.
use crate::counting::BackendError;
use crate::counting::latency::LatencyError;
use crate::discovery::DiscoveryError;
use crate::events::EventError;
use crate::pipeline::PipelineError;
use crate::plan::PlanError;
use crate::record::RecordError;
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

    /// Standard output could not be written. The reader going away (`imc list | head -1`) ends
    /// the command quietly and successfully, as it ends `cat`; any other failure (a full disk,
    /// `> /dev/full`) is a runtime failure. Every command's output errors come through here.
    pub fn output(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError {
                code: 0,
                message: String::new(),
            }
        } else {
            CliError::runtime(format!("cannot write to standard output: {e}"))
        }
    }

    /// The same error with `context: ` before its message (the command or step that failed).
    pub fn context(mut self, context: &str) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// The end [`output`](Self::output) makes of a closed pipe: exit 0, nothing said.
    pub fn is_quiet(&self) -> bool {
        self.code == 0
    }
}

/// Writes a command's whole output to standard output and flushes it; failures as
/// [`CliError::output`] says.
pub fn write_stdout(bytes: &[u8]) -> CliResult<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(CliError::output)
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// A request the plan cannot meet as asked is bad input (exit 2); nothing to read is a runtime
/// failure (exit 1).
impl From<PlanError> for CliError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::BadRequest(m) => CliError::bad_input(m),
            PlanError::Unavailable(m) => CliError::runtime(m),
        }
    }
}

/// A tree under `--root` that is wrong is bad input (exit 2); a permission problem on a real
/// system is a runtime failure (exit 1).
impl From<DiscoveryError> for CliError {
    fn from(e: DiscoveryError) -> Self {
        let code = if e.is_bad_input() { 2 } else { 1 };
        CliError {
            code,
            message: e.to_string(),
        }
    }
}

/// An event the user wrote that does not parse or encode is bad input (exit 2); a missing
/// libpfm4 or an unreadable sysfs is a runtime failure (exit 1).
impl From<EventError> for CliError {
    fn from(e: EventError) -> Self {
        let code = if e.is_bad_input() { 2 } else { 1 };
        CliError {
            code,
            message: e.to_string(),
        }
    }
}

/// As [`EventError`]: a request type or PMU the user named wrongly is bad input.
impl From<LatencyError> for CliError {
    fn from(e: LatencyError) -> Self {
        let code = if e.is_bad_input() { 2 } else { 1 };
        CliError {
            code,
            message: e.to_string(),
        }
    }
}

/// Counters that do not open or read are a runtime failure (exit 1).
impl From<BackendError> for CliError {
    fn from(e: BackendError) -> Self {
        CliError::runtime(e.to_string())
    }
}

/// A recording path that is missing, a directory, a FIFO or a symlink loop is bad input (exit
/// 2), as is a file that is not a recording; a permission the user lacks too; a failing disk is a runtime
/// failure (1). The message names the path once (the error's own text does).
impl From<RecordError> for CliError {
    fn from(e: RecordError) -> Self {
        match &e {
            // A recording the user may not read (or a directory they may not write in) is
            // theirs to fix, like a missing one: bad input naming the file.
            RecordError::Io { source, .. }
                if !crate::sys::file::is_bad_path(source)
                    && source.kind() != std::io::ErrorKind::PermissionDenied =>
            {
                CliError::runtime(e.to_string())
            }
            _ => CliError::bad_input(e.to_string()),
        }
    }
}

/// A command after `--` that cannot run is bad input (exit 2); a sampler that does not load, a
/// signal handler or an output that fails is a runtime failure (exit 1).
impl From<PipelineError> for CliError {
    fn from(e: PipelineError) -> Self {
        let code = if e.is_bad_input() { 2 } else { 1 };
        CliError {
            code,
            message: e.to_string(),
        }
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;
