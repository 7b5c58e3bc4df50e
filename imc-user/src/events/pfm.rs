//! libpfm4 event strings (`[pmu::]EVENT[:UMASK]...[:MOD=VAL]`), encoded by the real libpfm4
//! loaded at run time with `libloading`, so imc builds and runs where libpfm4 is not installed
//! (the other event forms keep working; this one says what to install).
//!
//! The library is `libpfm.so.4` (Debian package `libpfm4`), or the path in `IMC_LIBPFM`.
//! It is initialised once per process with `pfm_initialize`, which is when libpfm reads its own
//! environment: `LIBPFM_FORCE_PMU=knl` makes it encode for Knights Landing on any host (and only
//! for that PMU), `LIBPFM_ENCODE_INACTIVE=1` lets it encode for PMUs it did not detect. Set them
//! before imc starts; changing them later in the process has no effect.
//!
//! Encoding goes through `pfm_get_os_event_encoding(…, PFM_OS_PERF_EVENT_EXT, …)` with a
//! `perf_event_attr`, so the result is exactly libpfm's perf encoding: the event select, umask
//! and PMU modifiers (e, i, c, t …) in `config`, extra registers such as the offcore-response MSR
//! value in `config1`, and `u`/`k` expressed as `exclude_user`/`exclude_kernel`. libpfm's own
//! rules apply (modifiers a PMU lacks are refused, e needs c≥1 on Intel, OUTSTANDING only on
//! OFFCORE_RESPONSE_0 on KNL, …); imc only explains its error codes in one line.
use super::error::EventError;
use super::terms::{close_matches, parse_u64};
use crate::model::Encoded;
use crate::sys::perf::{FLAG_EXCLUDE_KERNEL, FLAG_EXCLUDE_USER, FLAG_FREQ, PerfEventAttr};
use libloading::Library;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

/// Environment variable naming the libpfm shared object to load instead of `libpfm.so.4`.
pub use crate::settings::LIBPFM_ENV;
const DEFAULT_LIB: &str = "libpfm.so.4";

// pfmlib.h constants (ABI of libpfm 4.x).
const PFM_SUCCESS: c_int = 0;
const PFM_ERR_NOTSUPP: c_int = -1;
const PFM_ERR_INVAL: c_int = -2;
const PFM_ERR_NOTFOUND: c_int = -4;
const PFM_ERR_FEATCOMB: c_int = -5;
const PFM_ERR_UMASK: c_int = -6;
const PFM_ERR_ATTR: c_int = -8;
const PFM_ERR_ATTR_VAL: c_int = -9;
const PFM_ERR_ATTR_SET: c_int = -10;
const PFM_ERR_TOOMANY: c_int = -11;
const PFM_PLM0: c_int = 0x01;
const PFM_PLM3: c_int = 0x08;
const PFM_OS_PERF_EVENT_EXT: c_int = 2;
const PFM_ATTR_UMASK: c_int = 1;
const PFM_ATTR_RAW_UMASK: c_int = 4;
/// pfm_pmu_t values are small; libpfm 4.13 has 517. Scanning further only costs failed calls.
const PFM_PMU_SCAN: c_int = 1024;

/// pfm_perf_encode_arg_t (pfmlib_perf_event.h), 40 bytes on 64-bit.
#[repr(C)]
#[allow(dead_code)] // mirrors the C layout; not every field is read
struct PerfEncodeArg {
    attr: *mut PerfEventAttr,
    fstr: *mut *mut c_char,
    size: usize,
    idx: c_int,
    cpu: c_int,
    flags: c_int,
    pad0: c_int,
}

/// pfm_event_info_t, 64 bytes.
#[repr(C)]
#[allow(dead_code)] // mirrors the C layout; not every field is read
struct EventInfo {
    name: *const c_char,
    desc: *const c_char,
    equiv: *const c_char,
    size: usize,
    code: u64,
    pmu: c_int,
    dtype: c_int,
    idx: c_int,
    nattrs: c_int,
    reserved: c_int,
    flags: u32,
}

/// pfm_pmu_info_t, 56 bytes.
#[repr(C)]
#[allow(dead_code)] // mirrors the C layout; not every field is read
struct PmuInfo {
    name: *const c_char,
    desc: *const c_char,
    size: usize,
    pmu: c_int,
    pmu_type: c_int,
    nevents: c_int,
    first_event: c_int,
    max_encoding: c_int,
    num_cntrs: c_int,
    num_fixed_cntrs: c_int,
    flags: u32,
}

/// pfm_event_attr_info_t, 64 bytes.
#[repr(C)]
#[allow(dead_code)] // mirrors the C layout; not every field is read
struct AttrInfo {
    name: *const c_char,
    desc: *const c_char,
    equiv: *const c_char,
    size: usize,
    code: u64,
    attr_type: c_int,
    idx: c_int,
    ctrl: c_int,
    flags: u32,
    dfl: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEncodeArg>() == 40);
const _: () = assert!(std::mem::size_of::<EventInfo>() == 64);
const _: () = assert!(std::mem::size_of::<PmuInfo>() == 56);
const _: () = assert!(std::mem::size_of::<AttrInfo>() == 64);

type InitFn = unsafe extern "C" fn() -> c_int;
type StrerrorFn = unsafe extern "C" fn(c_int) -> *const c_char;
type EncodeFn = unsafe extern "C" fn(*const c_char, c_int, c_int, *mut c_void) -> c_int;
type FindEventFn = unsafe extern "C" fn(*const c_char) -> c_int;
type EventInfoFn = unsafe extern "C" fn(c_int, c_int, *mut EventInfo) -> c_int;
type PmuInfoFn = unsafe extern "C" fn(c_int, *mut PmuInfo) -> c_int;
type AttrInfoFn = unsafe extern "C" fn(c_int, c_int, c_int, *mut AttrInfo) -> c_int;

/// The loaded, initialised library. Lives in a static for the whole process, so the function
/// pointers copied out of it never outlive the mapping.
struct Pfm {
    _lib: Library,
    strerror: StrerrorFn,
    encode: EncodeFn,
    find_event: FindEventFn,
    event_info: EventInfoFn,
    pmu_info: PmuInfoFn,
    attr_info: AttrInfoFn,
}

static PFM: OnceLock<Result<Pfm, String>> = OnceLock::new();
/// libpfm keeps global state (the event tables it activated) and documents no thread safety;
/// every call after initialisation is serialised.
static CALLS: Mutex<()> = Mutex::new(());

fn load() -> Result<Pfm, String> {
    let name = crate::settings::get()
        .libpfm
        .clone()
        .unwrap_or_else(|| DEFAULT_LIB.into());
    // SAFETY: dlopen runs the library's load-time initialisers; libpfm4 does its real set-up in
    // pfm_initialize (called below, once), so loading it has no preconditions of ours to break.
    // IMC_LIBPFM is trusted like LD_LIBRARY_PATH: whoever sets it chooses the code that runs.
    let lib = unsafe { Library::new(&name) }
        .map_err(|e| format!("cannot load {}: {e}", name.to_string_lossy()))?;
    // SAFETY: each symbol is looked up with the C signature pfmlib.h declares for it.
    let pfm = unsafe {
        let init: InitFn = *lib
            .get::<InitFn>(b"pfm_initialize\0")
            .map_err(|e| e.to_string())?;
        let pfm = Pfm {
            strerror: *lib.get(b"pfm_strerror\0").map_err(|e| e.to_string())?,
            encode: *lib
                .get(b"pfm_get_os_event_encoding\0")
                .map_err(|e| e.to_string())?,
            find_event: *lib.get(b"pfm_find_event\0").map_err(|e| e.to_string())?,
            event_info: *lib
                .get(b"pfm_get_event_info\0")
                .map_err(|e| e.to_string())?,
            pmu_info: *lib.get(b"pfm_get_pmu_info\0").map_err(|e| e.to_string())?,
            attr_info: *lib
                .get(b"pfm_get_event_attr_info\0")
                .map_err(|e| e.to_string())?,
            _lib: lib,
        };
        let rc = init();
        if rc != PFM_SUCCESS {
            return Err(format!("pfm_initialize failed: {}", pfm.error_text(rc)));
        }
        pfm
    };
    Ok(pfm)
}

fn library() -> Result<&'static Pfm, String> {
    PFM.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Whether libpfm4 could be loaded and initialised (tests skip libpfm cases when not).
pub fn available() -> Result<(), String> {
    library().map(|_| ())
}

/// The PMUs libpfm4 activated (detected on this host, or forced), for `-v`.
pub fn active_pmus() -> Result<Vec<String>, String> {
    let pfm = library()?;
    let _guard = CALLS.lock().unwrap_or_else(|p| p.into_inner());
    Ok(pfm.active_pmus())
}

impl Pfm {
    fn error_text(&self, rc: c_int) -> String {
        // SAFETY: pfm_strerror returns a static string (or NULL) for any code.
        let p = unsafe { (self.strerror)(rc) };
        if p.is_null() {
            return format!("libpfm error {rc}");
        }
        // SAFETY: non-null, NUL-terminated static string owned by the library.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The name of the libpfm PMU an event index belongs to (`knl`, `perf`).
    fn pmu_of_event(&self, idx: c_int) -> Option<String> {
        // SAFETY: zeroed plain-old-data structs with their size filled in, as the API requires.
        let mut info: EventInfo = unsafe { std::mem::zeroed() };
        info.size = std::mem::size_of::<EventInfo>();
        if unsafe { (self.event_info)(idx, PFM_OS_PERF_EVENT_EXT, &mut info) } != PFM_SUCCESS {
            return None;
        }
        self.pmu_name(info.pmu).map(|(n, _)| n)
    }

    /// Name and presence of a libpfm PMU id.
    fn pmu_name(&self, pmu: c_int) -> Option<(String, bool)> {
        // SAFETY: as above.
        let mut p: PmuInfo = unsafe { std::mem::zeroed() };
        p.size = std::mem::size_of::<PmuInfo>();
        if unsafe { (self.pmu_info)(pmu, &mut p) } != PFM_SUCCESS || p.name.is_null() {
            return None;
        }
        // SAFETY: non-null static string from the PMU table.
        let name = unsafe { CStr::from_ptr(p.name) }
            .to_string_lossy()
            .into_owned();
        Some((name, p.flags & 1 != 0))
    }

    /// The PMUs libpfm activated at initialisation (detected or forced).
    fn active_pmus(&self) -> Vec<String> {
        (0..PFM_PMU_SCAN)
            .filter_map(|id| self.pmu_name(id))
            .filter(|(_, present)| *present)
            .map(|(n, _)| n)
            .collect()
    }

    /// Umask and modifier names of the event `text` names (its attributes), for error hints.
    fn event_attrs(&self, text: &CStr) -> Option<(String, Vec<(String, c_int)>)> {
        // SAFETY: text is NUL-terminated; the info structs are zeroed with size set.
        let idx = unsafe { (self.find_event)(text.as_ptr()) };
        if idx < 0 {
            return None;
        }
        let mut info: EventInfo = unsafe { std::mem::zeroed() };
        info.size = std::mem::size_of::<EventInfo>();
        if unsafe { (self.event_info)(idx, PFM_OS_PERF_EVENT_EXT, &mut info) } != PFM_SUCCESS {
            return None;
        }
        let ev = if info.name.is_null() {
            String::new()
        } else {
            // SAFETY: static string from the event table.
            unsafe { CStr::from_ptr(info.name) }
                .to_string_lossy()
                .into_owned()
        };
        let pmu = self.pmu_name(info.pmu).map(|(n, _)| n).unwrap_or_default();
        let mut attrs = Vec::new();
        for a in 0..info.nattrs.max(0) {
            let mut ai: AttrInfo = unsafe { std::mem::zeroed() };
            ai.size = std::mem::size_of::<AttrInfo>();
            if unsafe { (self.attr_info)(idx, a, PFM_OS_PERF_EVENT_EXT, &mut ai) } != PFM_SUCCESS
                || ai.name.is_null()
            {
                continue;
            }
            // SAFETY: static attribute name.
            let n = unsafe { CStr::from_ptr(ai.name) }
                .to_string_lossy()
                .into_owned();
            if !attrs.iter().any(|(x, _): &(String, c_int)| *x == n) {
                attrs.push((n, ai.attr_type));
            }
        }
        Some((format!("{pmu}::{ev}"), attrs))
    }
}

/// Checks the string's shape before it reaches C: libpfm's own grammar is permissive, and a
/// clear "malformed" beats "event not found" for `knl::` or `A::B::C`.
fn check_syntax(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("empty event".into());
    }
    if let Some(c) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.' | '=' | '-' | '+')))
    {
        return Err(format!(
            "unexpected character {c:?} (expected [pmu::]EVENT[:UMASK]...[:MOD=VAL])"
        ));
    }
    let (pmu, rest) = match text.split_once("::") {
        Some((p, r)) => (Some(p), r),
        None => (None, text),
    };
    if pmu.is_some_and(|p| p.is_empty() || p.contains(':')) {
        return Err("empty or malformed PMU name before '::'".into());
    }
    if rest.contains("::") {
        return Err("more than one '::'".into());
    }
    let mut parts = rest.split(':');
    if parts.next().is_none_or(str::is_empty) {
        return Err("missing event name".into());
    }
    for p in parts {
        if p.is_empty() {
            return Err("empty umask or modifier (doubled or trailing ':')".into());
        }
        if let Some((k, v)) = p.split_once('=')
            && (k.is_empty() || v.is_empty() || v.contains('='))
        {
            return Err(format!("malformed modifier '{p}' (expected NAME=VALUE)"));
        }
    }
    Ok(())
}

/// The umask/modifier tokens after the event name, lower-cased name and optional value.
fn tokens(text: &str) -> Vec<(String, Option<String>)> {
    let rest = text.split_once("::").map_or(text, |(_, r)| r);
    rest.split(':')
        .skip(1)
        .map(|t| match t.split_once('=') {
            Some((k, v)) => (k.to_ascii_lowercase(), Some(v.to_string())),
            None => (t.to_ascii_lowercase(), None),
        })
        .collect()
}

/// libpfm's perf_event modifiers that imc refuses (see `encode`).
const REFUSED_MODS: &[&str] = &[
    "period", "freq", "precise", "excl", "cpu", "pinned", "hw_smpl", "h", "mg", "mh",
];

/// Encodes a libpfm4 event string.
pub fn encode(text: &str) -> Result<Encoded, EventError> {
    check_syntax(text).map_err(|reason| EventError::Syntax {
        event: text.to_string(),
        reason,
    })?;
    let pfm = library().map_err(|detail| EventError::NoLibpfm {
        event: text.to_string(),
        detail,
    })?;
    let c_text = CString::new(text).map_err(|_| EventError::Syntax {
        event: text.to_string(),
        reason: "NUL byte in event".into(),
    })?;
    let _guard = CALLS.lock().unwrap_or_else(|p| p.into_inner());
    let mut attr = PerfEventAttr {
        // libpfm copies min(its size, ours) back; 0 would mean PERF_ATTR_SIZE_VER0 (64 bytes),
        // which ends before config2.
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        ..Default::default()
    };
    let mut arg = PerfEncodeArg {
        attr: &mut attr,
        fstr: std::ptr::null_mut(),
        size: std::mem::size_of::<PerfEncodeArg>(),
        idx: 0,
        cpu: -1,
        flags: 0,
        pad0: 0,
    };
    // perf's default privilege levels: user and kernel.
    // SAFETY: c_text is NUL-terminated; arg and attr are valid, initialised and outlive the call;
    // fstr is NULL (not requested).
    let rc = unsafe {
        (pfm.encode)(
            c_text.as_ptr(),
            PFM_PLM0 | PFM_PLM3,
            PFM_OS_PERF_EVENT_EXT,
            (&mut arg as *mut PerfEncodeArg).cast(),
        )
    };
    if rc != PFM_SUCCESS {
        return Err(EventError::Libpfm {
            event: text.to_string(),
            reason: explain(pfm, text, rc),
        });
    }
    if let Some(what) = unsupported_modifier(&attr, arg.cpu, text) {
        return Err(EventError::Libpfm {
            event: text.to_string(),
            reason: format!("modifier {what} is not supported"),
        });
    }
    // The PMU's name: the kernel's generic type (`hardware`, `raw`), else libpfm's (`knl`).
    let pmu = super::generic::type_name(attr.type_)
        .map(str::to_string)
        .or_else(|| pfm.pmu_of_event(arg.idx))
        .unwrap_or_else(|| format!("type{}", attr.type_));
    Ok(Encoded {
        event: text.to_string(),
        pmu,
        pmu_type: attr.type_,
        config: attr.config,
        config1: attr.config1,
        config2: attr.config2,
        exclude_user: attr.flags & FLAG_EXCLUDE_USER != 0,
        exclude_kernel: attr.flags & FLAG_EXCLUDE_KERNEL != 0,
        ..Default::default()
    })
}

/// imc counts; it never samples, pins or binds a counter to a CPU from the event string, so
/// libpfm's perf_event extensions that ask for that are refused rather than dropped: the one
/// `text` asked for (encoded into `attr`, with `cpu`), if any.
fn unsupported_modifier(attr: &PerfEventAttr, cpu: c_int, text: &str) -> Option<&'static str> {
    if attr.sample_period != 0 || attr.flags & FLAG_FREQ != 0 {
        Some("period=/freq= (imc counts, it does not sample)")
    } else if attr.flags & (0b11 << 15) != 0 {
        Some("precise=/hw_smpl (imc counts, it does not sample)")
    } else if attr.flags & (1 << 2 | 1 << 3) != 0 {
        Some("pinned/excl")
    } else if cpu >= 0 {
        Some("cpu= (imc chooses the CPUs from the PMU's cpumask)")
    } else {
        tokens(text)
            .iter()
            .find(|(k, _)| matches!(k.as_str(), "h" | "mg" | "mh"))
            .map(|_| "h/mg/mh (imc carries only the u and k privilege levels)")
    }
}

/// One line saying why libpfm refused `text`, naming the umask or modifier where it can.
fn explain(pfm: &Pfm, text: &str, rc: c_int) -> String {
    match rc {
        PFM_ERR_NOTFOUND => unknown_event(pfm, text),
        PFM_ERR_ATTR | PFM_ERR_UMASK | PFM_ERR_ATTR_VAL | PFM_ERR_FEATCOMB | PFM_ERR_ATTR_SET => {
            bad_attributes(pfm, text, rc)
        }
        PFM_ERR_INVAL | PFM_ERR_NOTSUPP | PFM_ERR_TOOMANY => {
            format!("libpfm4: {}", pfm.error_text(rc))
        }
        _ => format!("libpfm4: {}", pfm.error_text(rc)),
    }
}

/// No PMU active here knows the event: the active PMUs, and how to encode for another model.
fn unknown_event(pfm: &Pfm, text: &str) -> String {
    let active = pfm.active_pmus();
    if active.is_empty()
        && let Some(forced) = super::pfm_model::forced()
    {
        return format!(
            "libpfm4 has no PMU '{forced}' to encode for (LIBPFM_FORCE_PMU={forced}; \
             this libpfm4 build lacks it, e.g. it was built for another architecture)"
        );
    }
    let active = if active.is_empty() {
        "none".to_string()
    } else {
        active.join(", ")
    };
    let force = match text.split_once("::") {
        Some((p, _)) => format!("LIBPFM_FORCE_PMU={p}"),
        None => "LIBPFM_FORCE_PMU=<pmu>".to_string(),
    };
    format!(
        "unknown event: not a perf generic name, and libpfm4 knows no such event on \
         the PMUs active here ({active}); to encode it for another CPU model, set {force}"
    )
}

/// The event exists but its umasks or modifiers were refused: the one it does not have (with
/// close matches), an edge without a counter mask, or what libpfm says of the combination.
fn bad_attributes(pfm: &Pfm, text: &str, rc: c_int) -> String {
    let toks = tokens(text);
    // Look the event up by name alone: libpfm refuses the whole string for a bad umask.
    let name_only = match text.split_once("::") {
        Some((p, r)) => format!("{p}::{}", r.split(':').next().unwrap_or("")),
        None => text.split(':').next().unwrap_or("").to_string(),
    };
    let Some((event, attrs)) = CString::new(name_only)
        .ok()
        .and_then(|n| pfm.event_attrs(&n))
    else {
        return format!("libpfm4: {}", pfm.error_text(rc));
    };
    let known = |k: &str| attrs.iter().any(|(n, _)| n.eq_ignore_ascii_case(k));
    let raw_umask = attrs.iter().any(|(_, t)| *t == PFM_ATTR_RAW_UMASK);
    if let Some((bad, _)) = toks
        .iter()
        .find(|(k, _)| !(known(k) || (raw_umask && k.starts_with("0x"))))
    {
        return no_such_attribute(&event, bad, &attrs);
    }
    if rc == PFM_ERR_ATTR && edge_without_cmask(&toks) {
        return format!("{event}: modifier e (edge detect) needs a counter mask c>=1");
    }
    let why = match rc {
        PFM_ERR_FEATCOMB => "these umasks/modifiers cannot be combined",
        PFM_ERR_ATTR_VAL => "a modifier value is out of range",
        PFM_ERR_ATTR_SET => "a modifier is given twice or conflicts with the event's preset",
        PFM_ERR_UMASK => "missing or invalid unit mask",
        _ => "umask or modifier not valid here",
    };
    format!("{event}: {why} (libpfm4: {})", pfm.error_text(rc))
}

/// `{event}` has no umask or modifier `bad`: the close matches, its modifiers and how many
/// umasks it has.
fn no_such_attribute(event: &str, bad: &str, attrs: &[(String, c_int)]) -> String {
    let mods: Vec<&str> = attrs
        .iter()
        .filter(|(_, t)| *t != PFM_ATTR_UMASK && *t != PFM_ATTR_RAW_UMASK)
        // perf_event extensions imc refuses anyway are not worth suggesting
        .filter(|(n, _)| !REFUSED_MODS.contains(&n.as_str()))
        .map(|(n, _)| n.as_str())
        .collect();
    let umasks: Vec<&str> = attrs
        .iter()
        .filter(|(_, t)| *t == PFM_ATTR_UMASK)
        .map(|(n, _)| n.as_str())
        .collect();
    let close = close_matches(bad, umasks.iter().copied());
    let close = if close.is_empty() {
        String::new()
    } else {
        format!("did you mean {}? ", close.join(", "))
    };
    format!(
        "{event} has no umask or modifier '{bad}' ({close}modifiers: {}; {} umasks)",
        mods.join(", "),
        umasks.len()
    )
}

/// Edge detect (`e`, not `e=0`) asked for without a counter mask of at least 1.
fn edge_without_cmask(toks: &[(String, Option<String>)]) -> bool {
    let has = |k: &str| toks.iter().find(|(n, _)| n == k);
    let edge = has("e").is_some_and(|(_, v)| v.as_deref().is_none_or(|v| v != "0"));
    let cmask = has("c").and_then(|(_, v)| v.as_deref().map(str::to_string));
    edge && cmask
        .as_deref()
        .is_none_or(|c| parse_u64(c).is_none_or(|v| v == 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_checks() {
        for bad in [
            "", "knl::", "::X", "a::b::c", "X:", "X::", "X:a:", "X::Y:", "X:c=", "X:=1", "X:c=1=2",
            "X Y", "X,Y", "X:é", ":X",
        ] {
            assert!(check_syntax(bad).is_err(), "{bad:?} accepted");
        }
        for ok in [
            "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:ANY_RESPONSE:u=1:c=2",
            "INST_RETIRED",
            "perf::PERF_COUNT_HW_CPU_CYCLES",
            "wsm::offcore_response_0:0xffff",
            "glm::ISSUE_SLOTS_NOT_CONSUMED.RESOURCE_FULL.k=1",
        ] {
            assert_eq!(check_syntax(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn tokens_are_split_after_the_event() {
        assert_eq!(
            tokens("knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:u=1:C=2"),
            vec![
                ("dmnd_data_rd".to_string(), None),
                ("u".to_string(), Some("1".to_string())),
                ("c".to_string(), Some("2".to_string())),
            ]
        );
        assert!(tokens("cycles").is_empty());
    }
}
