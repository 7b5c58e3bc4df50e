//! The sysfs forms: `PMU/alias/`, `PMU/term=value,.../`, both mixed (`PMU/alias,thresh=1/`),
//! each optionally followed by perf's `u`/`k` modifiers (`cpu/event=0x3c/u`, `/:u` too).
//!
//! Which PMUs a name selects follows perf (tools/perf/util/pmus.c, pmu.c): the PMU of exactly
//! that name if there is one; otherwise every instance `NAME_<digits>` (numbering may have gaps),
//! in numeric order; otherwise the same two rules with `uncore_` in front, so `imc/…/` finds
//! `uncore_imc_N`. An alias is looked up exactly, then ignoring case (perf does the latter). With
//! several instances, those lacking the alias are skipped, and the alias must exist on at least
//! one. Terms are encoded by discovery's `encode_terms`: the alias' terms first, the user's after,
//! so a user term overrides what the alias set (`uncore_imc/cas_count_read,umask=0x1/`).
//! Bytes per count come from the alias' scale and unit (discovery's `bytes_per_count`: MiB →
//! scale × 1048576, KiB, GiB, B; no unit → None).
use super::error::EventError;
use super::terms::{Modifiers, close_matches};
use crate::discovery::format::{encode_terms, parse_word};
use crate::discovery::sysfs::bytes_per_count;
use crate::model::{Encoded, EventAlias, Pmu};

/// The parts of `PMU/BODY/MODS`.
#[derive(Debug, PartialEq, Eq)]
struct Parsed<'a> {
    pmu: &'a str,
    terms: Vec<&'a str>,
    mods: Option<&'a str>,
}

fn syntax(event: &str, reason: impl Into<String>) -> EventError {
    EventError::Syntax {
        event: event.to_string(),
        reason: reason.into(),
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn parse(text: &str) -> Result<Parsed<'_>, EventError> {
    let shape = "expected PMU/alias/ or PMU/term=value,.../";
    let (pmu, rest) = text
        .split_once('/')
        .ok_or_else(|| syntax(text, shape.to_string()))?;
    let (body, after) = rest
        .split_once('/')
        .ok_or_else(|| syntax(text, format!("missing closing '/' ({shape})")))?;
    if pmu.is_empty() {
        return Err(syntax(text, format!("missing PMU name ({shape})")));
    }
    if let Some(c) = pmu.chars().find(|c| !is_name_char(*c)) {
        return Err(syntax(
            text,
            format!("unexpected character {c:?} in PMU name"),
        ));
    }
    if after.contains('/') {
        return Err(syntax(
            text,
            format!(
                "text after the closing '/' contains another '/' ({shape}; one event per argument)"
            ),
        ));
    }
    if body.is_empty() {
        return Err(syntax(
            text,
            format!("nothing between the slashes ({shape})"),
        ));
    }
    let mut terms: Vec<&str> = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    for term in body.split(',') {
        if term.is_empty() {
            return Err(syntax(text, "empty term (doubled or trailing ',')"));
        }
        let (key, value) = match term.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (term, None),
        };
        if key.is_empty() || !key.chars().all(is_name_char) {
            return Err(syntax(
                text,
                format!("term '{term}' is not NAME or NAME=VALUE"),
            ));
        }
        if let Some(v) = value
            && (v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric()))
        {
            return Err(syntax(
                text,
                format!("term '{term}' has no usable value (expected a decimal or 0x-hex number)"),
            ));
        }
        // Which of two values would count is not obvious (perf keeps the last): refuse, as a
        // repeated u/k modifier is refused.
        if keys.contains(&key) {
            return Err(syntax(
                text,
                format!("term '{key}' given twice (give each term once)"),
            ));
        }
        keys.push(key);
        terms.push(term);
    }
    let mods = if after.is_empty() {
        None
    } else {
        Some(after.strip_prefix(':').unwrap_or(after))
    };
    Ok(Parsed { pmu, terms, mods })
}

/// The instance number of `name` if it is `base_<digits>`.
fn instance_number(name: &str, base: &str) -> Option<u64> {
    let digits = name.strip_prefix(base)?.strip_prefix('_')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The PMUs a name selects, in order (see the module documentation).
fn select<'a>(pmus: &'a [Pmu], name: &str) -> Vec<&'a Pmu> {
    let by_base = |base: &str| -> Vec<&'a Pmu> {
        if let Some(p) = pmus.iter().find(|p| p.name == base) {
            return vec![p];
        }
        let mut inst: Vec<(u64, &Pmu)> = pmus
            .iter()
            .filter_map(|p| instance_number(&p.name, base).map(|n| (n, p)))
            .collect();
        inst.sort_by_key(|(n, _)| *n);
        inst.into_iter().map(|(_, p)| p).collect()
    };
    let found = by_base(name);
    if !found.is_empty() || name.starts_with("uncore_") {
        return found;
    }
    by_base(&format!("uncore_{name}"))
}

/// ` (did you mean a, b?)`, or the PMUs there are when nothing is close.
fn pmu_hint(pmus: &[Pmu], name: &str) -> String {
    let mut bases: Vec<&str> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for p in pmus {
        let base = match p.name.rsplit_once('_') {
            Some((b, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => b,
            _ => p.name.as_str(),
        };
        if !bases.contains(&base) {
            bases.push(base);
        }
        names.push(p.name.as_str());
    }
    // Base names first: `uncore_imc` says more than six `uncore_imc_N`.
    let mut close = close_matches(name, bases.iter().copied());
    if close.is_empty() {
        close = close_matches(name, names.iter().copied());
    }
    if !close.is_empty() {
        return format!(" (did you mean {}?)", close.join(", "));
    }
    if pmus.is_empty() {
        return " (no PMUs were found under the root)".into();
    }
    let more = if bases.len() > 12 { ", …" } else { "" };
    bases.truncate(12);
    format!(" (PMUs here: {}{more})", bases.join(", "))
}

/// The alias `word` names on `pmu`: exact name first, then ignoring case.
fn find_alias<'a>(pmu: &'a Pmu, word: &str) -> Option<&'a EventAlias> {
    pmu.events.get(word).or_else(|| {
        pmu.events
            .values()
            .find(|a| a.name.eq_ignore_ascii_case(word))
    })
}

/// Is `word` something `encode_terms` accepts bare (a format field or a config word)?
fn is_term_name(pmu: &Pmu, word: &str) -> bool {
    pmu.formats.contains_key(word) || parse_word(word).is_some()
}

pub fn encode(pmus: &[Pmu], text: &str) -> Result<Vec<Encoded>, EventError> {
    let parsed = parse(text)?;
    let mods = match parsed.mods {
        None => Modifiers::default(),
        Some(m) => Modifiers::parse_perf(text, m)?,
    };
    let selected = select(pmus, parsed.pmu);
    if selected.is_empty() {
        return Err(EventError::UnknownPmu {
            event: text.to_string(),
            pmu: parsed.pmu.to_string(),
            hint: pmu_hint(pmus, parsed.pmu),
        });
    }
    let alias_word = alias_word(text, &parsed, &selected)?;
    let user_terms: Vec<&str> = parsed
        .terms
        .iter()
        .copied()
        .filter(|t| Some(*t) != alias_word)
        .collect();
    let mut out = Vec::new();
    for pmu in selected {
        let alias = match alias_word {
            Some(w) => match find_alias(pmu, w) {
                Some(a) => Some(a),
                // An instance without the alias is not one this event can count on.
                None => continue,
            },
            None => None,
        };
        out.push(encode_on(text, pmu, alias, &user_terms, &mods)?);
    }
    Ok(out)
}

/// The one bare word of `parsed` that names an event alias on at least one `selected`
/// instance, if any; every other bare word must be a term name (a format field set to 1, as
/// perf reads `edge`).
fn alias_word<'a>(
    text: &str,
    parsed: &Parsed<'a>,
    selected: &[&Pmu],
) -> Result<Option<&'a str>, EventError> {
    let mut alias_word: Option<&str> = None;
    for w in parsed.terms.iter().copied().filter(|t| !t.contains('=')) {
        let is_alias = selected.iter().any(|p| find_alias(p, w).is_some());
        let is_term = selected.iter().any(|p| is_term_name(p, w));
        if is_alias && !is_term {
            if let Some(first) = alias_word {
                return Err(syntax(
                    text,
                    format!("two event aliases '{first}' and '{w}' (give one)"),
                ));
            }
            alias_word = Some(w);
        } else if !is_alias && !is_term {
            return Err(EventError::UnknownAlias {
                event: text.to_string(),
                pmu: parsed.pmu.to_string(),
                alias: w.to_string(),
                hint: unknown_word_hint(w, selected),
            });
        }
    }
    Ok(alias_word)
}

/// What to say of bare word `w` that is neither an alias nor a term of the `selected` PMUs:
/// the close aliases, else the terms to give, else the aliases there are.
fn unknown_word_hint(w: &str, selected: &[&Pmu]) -> String {
    let aliases = selected
        .iter()
        .flat_map(|p| p.events.keys().map(String::as_str));
    let close = close_matches(w, aliases);
    if !close.is_empty() {
        format!(" (did you mean {}?)", close.join(", "))
    } else if selected.iter().all(|p| p.events.is_empty()) {
        let formats: Vec<&str> = selected[0].formats.keys().map(String::as_str).collect();
        format!(
            " (it has no event aliases; give terms such as {}=VALUE)",
            if formats.is_empty() {
                "config".to_string()
            } else {
                formats.join("=VALUE, ")
            }
        )
    } else {
        let mut names: Vec<&str> = selected
            .iter()
            .flat_map(|p| p.events.keys().map(String::as_str))
            .collect();
        names.sort_unstable();
        names.dedup();
        let n = names.len();
        names.truncate(10);
        format!(
            " (events: {}{})",
            names.join(", "),
            if n > 10 { ", …" } else { "" }
        )
    }
}

/// `text` on one PMU instance: the alias's terms (if any) and the user's, encoded by the
/// instance's format fields.
fn encode_on(
    text: &str,
    pmu: &Pmu,
    alias: Option<&EventAlias>,
    user_terms: &[&str],
    mods: &Modifiers,
) -> Result<Encoded, EventError> {
    let mut all: Vec<&str> = Vec::new();
    if let Some(a) = alias
        && !a.terms.trim().is_empty()
    {
        all.push(a.terms.trim());
    }
    all.extend(user_terms.iter().copied());
    let words = encode_terms(pmu, &all.join(",")).map_err(|source| {
        // A filter this CPU's PMU lacks gets the reason, not only the list of terms.
        if let crate::discovery::FormatError::UnknownTerm { term, .. } = &source
            && let Some(why) = crate::discovery::non_bandwidth::missing_term_reason(&pmu.name, term)
        {
            return EventError::Modifier {
                event: text.to_string(),
                reason: why,
            };
        }
        EventError::Term {
            event: text.to_string(),
            source,
        }
    })?;
    if words.config3 != 0 {
        return Err(syntax(
            text,
            format!(
                "sets config3 ({:#x}), which imc does not pass to perf_event_open",
                words.config3
            ),
        ));
    }
    let scale = alias.and_then(|a| a.scale);
    let unit = alias.and_then(|a| a.unit.clone());
    Ok(Encoded {
        event: text.to_string(),
        pmu: pmu.name.clone(),
        pmu_type: pmu.pmu_type,
        config: words.config,
        config1: words.config1,
        config2: words.config2,
        exclude_user: mods.exclude_user,
        exclude_kernel: mods.exclude_kernel,
        bytes_per_count: bytes_per_count(scale, unit.as_deref()),
        scale,
        unit,
        cpus: pmu.cpumask.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        let p = parse("uncore_imc/cas_count_read/").unwrap();
        assert_eq!(p.pmu, "uncore_imc");
        assert_eq!(p.terms, vec!["cas_count_read"]);
        assert_eq!(p.mods, None);
        let p = parse("cpu/event=0x3c,umask=0x00,edge/u").unwrap();
        assert_eq!(p.terms, vec!["event=0x3c", "umask=0x00", "edge"]);
        assert_eq!(p.mods, Some("u"));
        assert_eq!(parse("cpu/event=1/:k").unwrap().mods, Some("k"));
        let e = parse("software/config=1,config=2/")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'config' given twice"), "{e}");
        // Different terms that share a prefix are not repeats.
        assert_eq!(parse("p/config=1,config1=2/").unwrap().terms.len(), 2);
        for bad in [
            "/x/",
            "pmu/",
            "pmu//",
            "pmu/x",
            "pmu/a,,b/",
            "pmu/a,/",
            "pmu/=1/",
            "pmu/a=/",
            "pmu/a= 1/",
            "pmu/a=1=2/",
            "pmu/a/b/",
            "pmu/a/,cycles/x/",
            "p mu/a/",
            "pmu/a b/",
            "/",
            "//",
            "software/config=1,config=2/",
            "pmu/edge,edge/",
            "pmu/event=1,umask=2,event=1/",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn instance_numbers() {
        assert_eq!(instance_number("uncore_imc_0", "uncore_imc"), Some(0));
        assert_eq!(instance_number("uncore_imc_12", "uncore_imc"), Some(12));
        assert_eq!(instance_number("uncore_imc_uclk_0", "uncore_imc"), None);
        assert_eq!(instance_number("uncore_imc_", "uncore_imc"), None);
        assert_eq!(instance_number("uncore_imc", "uncore_imc"), None);
        assert_eq!(instance_number("uncore_imcx_1", "uncore_imc"), None);
    }
}
