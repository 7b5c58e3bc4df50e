//! Every environment variable imc reads, read once, here. The commands and the modules below
//! them take the values from [`get`] (or are handed them); nothing else calls `std::env::var`.
//!
//! | variable | meaning |
//! |---|---|
//! | `IMC_STAT_MODE` | `imc stat`'s read mode: `auto` (default), `deadline`, `kernel-timed` |
//! | `IMC_STAT_KERNEL_TIMED` | `1`: kernel-timed reads (as `IMC_STAT_MODE=kernel-timed`) |
//! | `IMC_BPF_OBJECT` | the eBPF object file to load instead of the one built in |
//! | `IMC_LIBPFM` | the libpfm4 shared library to load (default `libpfm.so.4`) |
//! | `LIBPFM_FORCE_PMU` | libpfm4's own: the PMU it encodes for; imc sets it for `--root` when unset |
//! | `IMC_FIDELITY_FILE` | the weight events' measured fidelity (`imc validate --save`), default `/var/lib/imc/fidelity.json` |
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

pub const STAT_MODE_ENV: &str = "IMC_STAT_MODE";
pub const STAT_KERNEL_TIMED_ENV: &str = "IMC_STAT_KERNEL_TIMED";
pub const BPF_OBJECT_ENV: &str = "IMC_BPF_OBJECT";
pub const LIBPFM_ENV: &str = "IMC_LIBPFM";
pub const LIBPFM_FORCE_PMU_ENV: &str = "LIBPFM_FORCE_PMU";
pub const FIDELITY_FILE_ENV: &str = "IMC_FIDELITY_FILE";
/// Where `imc validate --save` keeps the measured fidelity when `IMC_FIDELITY_FILE` is unset.
pub const FIDELITY_FILE_DEFAULT: &str = "/var/lib/imc/fidelity.json";

/// The environment as imc found it when it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `IMC_STAT_MODE` as set (None: unset or not Unicode, which both mean `auto`).
    pub stat_mode: Option<String>,
    /// `IMC_STAT_KERNEL_TIMED=1`.
    pub stat_kernel_timed: bool,
    /// `IMC_BPF_OBJECT`.
    pub bpf_object: Option<PathBuf>,
    /// `IMC_LIBPFM`.
    pub libpfm: Option<OsString>,
    /// `LIBPFM_FORCE_PMU` as the user set it (not as imc may set it for libpfm4 itself).
    pub libpfm_force_pmu: Option<String>,
    /// `IMC_FIDELITY_FILE` (None: unset, [`FIDELITY_FILE_DEFAULT`]).
    pub fidelity_file: Option<PathBuf>,
}

impl Settings {
    /// Reads every variable of the table above from this process' environment.
    pub fn from_env() -> Settings {
        Settings {
            stat_mode: std::env::var(STAT_MODE_ENV).ok(),
            stat_kernel_timed: std::env::var(STAT_KERNEL_TIMED_ENV).is_ok_and(|v| v == "1"),
            bpf_object: std::env::var_os(BPF_OBJECT_ENV).map(PathBuf::from),
            libpfm: std::env::var_os(LIBPFM_ENV),
            libpfm_force_pmu: std::env::var(LIBPFM_FORCE_PMU_ENV).ok(),
            fidelity_file: std::env::var_os(FIDELITY_FILE_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }

    /// The fidelity file: `IMC_FIDELITY_FILE`, else [`FIDELITY_FILE_DEFAULT`].
    pub fn fidelity_path(&self) -> PathBuf {
        self.fidelity_file
            .clone()
            .unwrap_or_else(|| PathBuf::from(FIDELITY_FILE_DEFAULT))
    }
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// This process' settings, read from the environment the first time they are asked for: `main`
/// asks first thing, before it or anything else changes the environment.
pub fn get() -> &'static Settings {
    SETTINGS.get_or_init(Settings::from_env)
}
