//! Why an event string could not be encoded: the error every form's encoder returns, in a file
//! of its own below them and the module that picks the form.
use thiserror::Error;

/// Why an event string could not be encoded. Every message names the string and says what was
/// expected, on one line.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EventError {
    #[error("event '{event}': malformed: {reason}")]
    Syntax { event: String, reason: String },
    #[error("event '{event}': unknown PMU '{pmu}'{hint}")]
    UnknownPmu {
        event: String,
        pmu: String,
        /// Close matches or the PMUs there are, already formatted (` (did you mean …?)`).
        hint: String,
    },
    #[error("event '{event}': PMU '{pmu}' has no event '{alias}'{hint}")]
    UnknownAlias {
        event: String,
        pmu: String,
        alias: String,
        hint: String,
    },
    #[error("event '{event}'")]
    Term {
        event: String,
        #[source]
        source: crate::discovery::format::FormatError,
    },
    #[error("event '{event}': {reason}")]
    Modifier { event: String, reason: String },
    #[error("event '{event}': {reason}")]
    Libpfm { event: String, reason: String },
    #[error(
        "event '{event}' is libpfm4 syntax but libpfm4 is not available ({detail}): install it \
         (apt-get install libpfm4)"
    )]
    NoLibpfm { event: String, detail: String },
    #[error("cannot read the PMUs under {root}: {reason}")]
    Discovery {
        root: String,
        reason: String,
        /// Discovery's own verdict: a wrong tree is bad input, a permission problem is not.
        bad_input: bool,
    },
}

impl EventError {
    /// The same error with control characters in the event text escaped, so the message stays
    /// one line whatever the user passed (`$'a\nb'`).
    pub(super) fn escaped(mut self) -> Self {
        let (EventError::Syntax { event, .. }
        | EventError::UnknownPmu { event, .. }
        | EventError::UnknownAlias { event, .. }
        | EventError::Term { event, .. }
        | EventError::Modifier { event, .. }
        | EventError::Libpfm { event, .. }
        | EventError::NoLibpfm { event, .. }) = &mut self
        else {
            return self;
        };
        if event.chars().any(char::is_control) {
            *event = event.escape_debug().to_string();
        }
        self
    }

    /// True when the input is at fault (exit 2): the event string, or a `--root` that is not a
    /// sysfs tree; false for a missing library or a permission problem (exit 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            EventError::NoLibpfm { .. } => false,
            EventError::Discovery { bad_input, .. } => *bad_input,
            _ => true,
        }
    }
}
