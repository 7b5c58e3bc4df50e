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

/// What kind of failure an error is, which alone chooses the exit code of the command-line
/// contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad usage or bad input, the user's to fix: exit 2.
    BadInput,
    /// A runtime failure (including missing privileges or hardware): exit 1.
    Runtime,
    /// The reader of our output went away: a normal end, exit 0, nothing said.
    Quiet,
}

impl ErrorKind {
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::BadInput => 2,
            ErrorKind::Runtime => 1,
            ErrorKind::Quiet => 0,
        }
    }

    /// Bad input where the area's error says so, else a runtime failure.
    pub fn bad_input_if(yes: bool) -> ErrorKind {
        if yes {
            ErrorKind::BadInput
        } else {
            ErrorKind::Runtime
        }
    }
}

type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The error every command returns to `main`: its kind (the exit code), the command's own words
/// where it has any, and the typed error that caused it, kept whole to the door so that the
/// line `main` prints carries the cause chain.
#[derive(Debug)]
pub struct CliError {
    kind: ErrorKind,
    /// The command's words, outermost first ("imc list", "--weight X").
    words: Vec<String>,
    source: Option<Cause>,
    /// What to do about it (`use --json`), after the chain.
    hint: Option<String>,
}

impl CliError {
    /// An error of `kind` caused by `source` (kept, its chain printed after any context).
    pub fn new(kind: ErrorKind, source: impl Into<Cause>) -> Self {
        CliError {
            kind,
            words: Vec::new(),
            source: Some(source.into()),
            hint: None,
        }
    }

    /// Bad input, in the command's words (what it was doing), caused by `source`.
    pub fn bad_input_because(words: impl Into<String>, source: impl Into<Cause>) -> Self {
        CliError::new(ErrorKind::BadInput, source).context(words)
    }

    /// A runtime failure, in the command's words (what it was doing), caused by `source`.
    pub fn runtime_because(words: impl Into<String>, source: impl Into<Cause>) -> Self {
        CliError::new(ErrorKind::Runtime, source).context(words)
    }

    /// What the user can do about it, said at the end of the line in parentheses.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Bad usage or bad input that only the command names: exit 2.
    pub fn bad_input(message: impl Into<String>) -> Self {
        CliError::said(ErrorKind::BadInput, message.into())
    }

    /// A runtime failure that only the command names: exit 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        CliError::said(ErrorKind::Runtime, message.into())
    }

    fn said(kind: ErrorKind, message: String) -> Self {
        CliError {
            kind,
            words: vec![message],
            source: None,
            hint: None,
        }
    }

    /// Standard output could not be written. The reader going away (`imc list | head -1`) ends
    /// the command quietly and successfully, as it ends `cat`; any other failure (a full disk,
    /// `> /dev/full`) is a runtime failure. Every command's output errors come through here.
    pub fn output(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::new(ErrorKind::Quiet, e)
        } else {
            CliError::new(ErrorKind::Runtime, e).context("cannot write to standard output")
        }
    }

    /// A file the command was told to write (`what`, naming it) that cannot be: a path the user
    /// is to fix (missing directory, no permission, a read-only file system) is bad input (2),
    /// any other failure (a full or failing disk) a runtime one (1). Every output file's
    /// failures come through here.
    pub fn output_file(what: impl Into<String>, e: std::io::Error) -> Self {
        let to_fix = crate::sys::file::is_path_to_fix(&e);
        CliError::new(ErrorKind::bad_input_if(to_fix), e).context(what)
    }

    /// The same error with `context: ` before its message (the command or step that failed).
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.words.insert(0, context.into());
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The process exit code, from the kind.
    pub fn code(&self) -> u8 {
        self.kind.exit_code()
    }

    /// The end [`output`](Self::output) makes of a closed pipe: exit 0, nothing said.
    pub fn is_quiet(&self) -> bool {
        self.kind == ErrorKind::Quiet
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

/// One line: the command's words, then each cause in the chain, joined by `: `
/// ([`crate::text::error_line`]: each error says its own part), then the hint.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.words.join(": ");
        if let Some(cause) = self.source.as_deref() {
            let chain = crate::text::error_line(cause);
            if !line.is_empty() && !chain.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&chain);
        }
        if let Some(hint) = &self.hint {
            line.push_str(&format!(" ({hint})"));
        }
        f.write_str(&line)
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// A request the plan cannot meet as asked is bad input (exit 2); nothing to read is a runtime
/// failure (exit 1).
impl From<PlanError> for CliError {
    fn from(e: PlanError) -> Self {
        let kind = ErrorKind::bad_input_if(e.is_bad_request());
        CliError::new(kind, e)
    }
}

/// A tree under `--root` that is wrong is bad input (exit 2); a permission problem on a real
/// system is a runtime failure (exit 1).
impl From<DiscoveryError> for CliError {
    fn from(e: DiscoveryError) -> Self {
        CliError::new(ErrorKind::bad_input_if(e.is_bad_input()), e)
    }
}

/// An event the user wrote that does not parse or encode is bad input (exit 2); a missing
/// libpfm4 or an unreadable sysfs is a runtime failure (exit 1).
impl From<EventError> for CliError {
    fn from(e: EventError) -> Self {
        CliError::new(ErrorKind::bad_input_if(e.is_bad_input()), e)
    }
}

/// As [`EventError`]: a request type or PMU the user named wrongly is bad input.
impl From<LatencyError> for CliError {
    fn from(e: LatencyError) -> Self {
        CliError::new(ErrorKind::bad_input_if(e.is_bad_input()), e)
    }
}

/// Counters that do not open or read are a runtime failure (exit 1).
impl From<BackendError> for CliError {
    fn from(e: BackendError) -> Self {
        CliError::new(ErrorKind::Runtime, e)
    }
}

/// A recording path that is missing, a directory, a FIFO or a symlink loop is bad input (exit
/// 2), as is a file that is not a recording; a permission the user lacks too; a failing disk is a runtime
/// failure (1). The message names the path once (the error's own text does).
impl From<RecordError> for CliError {
    fn from(e: RecordError) -> Self {
        // A recording the user may not read (or a directory they may not write in) is theirs
        // to fix, like a missing one: bad input naming the file.
        let runtime = matches!(&e, RecordError::Io { source, .. }
            if !crate::sys::file::is_path_to_fix(source));
        CliError::new(ErrorKind::bad_input_if(!runtime), e)
    }
}

/// A command after `--` that cannot run is bad input (exit 2); a sampler that does not load, a
/// signal handler or an output that fails is a runtime failure (exit 1).
impl From<PipelineError> for CliError {
    fn from(e: PipelineError) -> Self {
        CliError::new(ErrorKind::bad_input_if(e.is_bad_input()), e)
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// One that leaves its source to the chain.
    #[derive(Debug, thiserror::Error)]
    #[error("reading /y")]
    struct Hides {
        #[source]
        source: std::io::Error,
    }

    fn io() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::NotFound)
    }

    #[test]
    fn the_line_carries_the_chain_once_with_context_and_hint() {
        let e = CliError::new(ErrorKind::Runtime, Hides { source: io() }).context("imc list");
        assert_eq!(e.to_string(), "imc list: reading /y: entity not found");
        let e = CliError::new(ErrorKind::BadInput, Hides { source: io() })
            .context("--weight x")
            .hint("auto or EVENT");
        assert_eq!(
            e.to_string(),
            "--weight x: reading /y: entity not found (auto or EVENT)"
        );
        // The cause is kept, not flattened: a caller can still walk to the io::Error.
        let cause = std::error::Error::source(&e).unwrap();
        assert!(cause.downcast_ref::<Hides>().is_some());
    }

    #[test]
    fn the_exit_code_comes_from_the_kind() {
        assert_eq!(CliError::bad_input("x").code(), 2);
        assert_eq!(CliError::runtime("x").code(), 1);
        let pipe = CliError::output(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(pipe.is_quiet() && pipe.code() == 0);
        let full = CliError::output(std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert_eq!(full.code(), 1);
        assert!(
            full.to_string()
                .starts_with("cannot write to standard output: ")
        );
        let plan = CliError::from(PlanError::StackPeriodZero);
        assert_eq!(
            (plan.code(), plan.to_string().as_str()),
            (
                2,
                "--stack-period 0: give the events between two samples, 1 or more"
            )
        );
        let plan = CliError::from(PlanError::NoOnlineCpu);
        assert_eq!(plan.kind(), ErrorKind::Runtime);
    }
}
