//! The sampler's errors: each area's cause kept as its source, shown on one line.
use crate::settings::BPF_OBJECT_ENV;
use imc_common::{MAX_PKG_COUNTERS, MAX_SLOTS};
use std::io;
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SamplerError {
    #[error(
        "this imc was built without its eBPF program: build it with `cargo xtask build` (or set {env} to the object file)",
        env = BPF_OBJECT_ENV
    )]
    NoObject,
    #[error("cannot read the eBPF object {}", path.display())]
    ObjectRead { path: PathBuf, source: io::Error },
    #[error(
        "the eBPF object is of record ABI {}, this imc reads ABI {expected}: rebuild both with \
         `cargo xtask build` (or unset {env})",
        found.map_or_else(|| "unknown (no IMC_ABI_VERSION)".to_string(), |v| v.to_string()),
        env = BPF_OBJECT_ENV
    )]
    Abi { found: Option<u32>, expected: u32 },
    #[error("loading the eBPF sampler needs root, or CAP_BPF and CAP_PERFMON: run imc with sudo")]
    NotPrivileged,
    #[error("at most {MAX_SLOTS} counters can be read per tick; {0} were asked for")]
    TooManySlots(usize),
    #[error(
        "package {package}: {count} counters for one reader, at most {MAX_PKG_COUNTERS}: name fewer with -e"
    )]
    TooManyPackageCounters { package: u32, count: usize },
    #[error("no CPUs to sample (is {0} the right --root?)")]
    NoCpus(String),
    #[error("{message}")]
    OpenCounter {
        message: String,
        #[source]
        source: io::Error,
    },
    #[error("the kernel refused the eBPF program{}", said(.message))]
    Load {
        message: String,
        #[source]
        source: Option<Cause>,
    },
    #[error("attaching the sampler to {what}{}", said(.message))]
    Attach {
        what: String,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    #[error("setting up map {map}{}", said(.message))]
    Map {
        map: String,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    #[error("visiting each CPU to end its open slice at the run's end")]
    VisitCpus(#[source] io::Error),
}

impl SamplerError {
    /// The user's input is at fault: the object named by IMC_BPF_OBJECT (unreadable, or of
    /// another ABI), more counters than a tick reads, or a --root without CPUs. Everything
    /// else is the machine's (privileges, the kernel's refusals).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            SamplerError::ObjectRead { .. }
                | SamplerError::Abi { .. }
                | SamplerError::TooManySlots(_)
                | SamplerError::TooManyPackageCounters { .. }
                | SamplerError::NoCpus(_)
        )
    }
}

/// The cause an error of the sampler keeps: aya's and the kernel's errors as they came.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

impl SamplerError {
    /// The kernel refused `source` (loading, verifying).
    pub(super) fn load(source: impl Into<Cause>) -> SamplerError {
        SamplerError::Load {
            message: String::new(),
            source: Some(source.into()),
        }
    }

    /// Map `map` could not be set up: `message` says what was being done, `source` why not.
    pub(super) fn map(
        map: &str,
        message: impl Into<String>,
        source: impl Into<Cause>,
    ) -> SamplerError {
        SamplerError::Map {
            map: map.into(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Map `map` is not as the object should have it (no cause beyond the message).
    pub(super) fn map_shape(map: &str, message: impl Into<String>) -> SamplerError {
        SamplerError::Map {
            map: map.into(),
            message: message.into(),
            source: None,
        }
    }
}

/// `message` after its error's words (`: message`), or nothing where it is empty: the cause
/// is the chain's to say.
fn said(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl SamplerError {
    /// Missing privileges are a runtime failure (exit 1), like every error here.
    pub fn is_privilege(&self) -> bool {
        matches!(self, SamplerError::NotPrivileged)
    }
}

#[cfg(test)]
mod tests {
    use super::super::counters::open_error;
    use super::*;
    use crate::text::error_line;
    use imc_common::TICKS_MAP_NAME;
    use std::error::Error as _;

    /// An object or configuration the user gave is theirs to fix (exit 2); what the machine
    /// refuses is not (exit 1), through the pipeline's error as through the sampler's.
    #[test]
    fn the_users_object_is_bad_input_and_the_machines_refusals_are_not() {
        use crate::error::{CliError, ErrorKind};
        use crate::pipeline::PipelineError;
        let abi = SamplerError::Abi {
            found: None,
            expected: imc_common::RECORD_ABI_VERSION,
        };
        assert!(abi.is_bad_input());
        assert!(SamplerError::NoCpus("/tmp/x".into()).is_bad_input());
        assert!(!SamplerError::NotPrivileged.is_bad_input());
        let code = |e: PipelineError| CliError::from(e).kind() == ErrorKind::BadInput;
        assert!(code(PipelineError::Sampler(abi)));
        assert!(!code(PipelineError::Sampler(SamplerError::NotPrivileged)));
    }

    #[test]
    fn errors_say_their_own_part_and_keep_their_cause_for_the_line() {
        let e = SamplerError::map(
            TICKS_MAP_NAME,
            "mmap of 4096 bytes",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert_eq!(e.to_string(), "setting up map TICKS: mmap of 4096 bytes");
        assert_eq!(
            error_line(&e),
            format!(
                "setting up map TICKS: mmap of 4096 bytes: {}",
                io::Error::from_raw_os_error(libc::EPERM)
            )
        );
        let cause = e.source().expect("the cause is kept");
        assert_eq!(
            cause.downcast_ref::<io::Error>().map(|c| c.raw_os_error()),
            Some(Some(libc::EPERM))
        );
        // Without a message of its own, the cause is the whole story; without a cause, the
        // message is.
        let bare = SamplerError::load(io::Error::other("invalid argument\nverifier log"));
        assert_eq!(bare.to_string(), "the kernel refused the eBPF program");
        assert_eq!(
            error_line(&bare),
            "the kernel refused the eBPF program: invalid argument | verifier log"
        );
        let shape = SamplerError::map_shape("PKG", "is not a PERF_EVENT_ARRAY");
        assert_eq!(
            error_line(&shape),
            "setting up map PKG: is not a PERF_EVENT_ARRAY"
        );
        assert!(shape.source().is_none());
        let open = open_error("page-faults", 3, io::Error::from_raw_os_error(libc::EACCES));
        let line = error_line(&open);
        assert!(
            line.starts_with("opening 'page-faults' on CPU 3 (permission denied: run as root")
                && line.ends_with(&io::Error::from_raw_os_error(libc::EACCES).to_string()),
            "{line}"
        );
        assert!(open.source().is_some());
    }
}
