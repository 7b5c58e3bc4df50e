//! PMU `format/` files and the term syntax of sysfs event aliases.
//!
//! A format file maps a term name to bits of one `perf_event_attr` word: `config:0-7`,
//! `config:18`, `config1:0-63`, or split over several ranges, `config:8-15,32-55` (Sapphire
//! Rapids' uncore umask, whose extended bits live above bit 32). The kernel prints these with
//! `PMU_FORMAT_ATTR(name, "config:8-15,32-55")`; perf's own parser (tools/perf/util/pmu.y) reads
//! the same grammar, low part of the value into the first range listed.
use crate::model::{ConfigWord, FormatField, Pmu};
use crate::text::quote;
use serde::Serialize;
use std::ops::RangeInclusive;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    #[error(
        "format '{name}': '{}' is not a format (expected WORD:BITS such as config:0-7 or config:8-15,32-55)",
        quote(text)
    )]
    Syntax { name: String, text: String },
    #[error(
        "format '{name}': unknown word '{}' (expected config, config1, config2 or config3)",
        quote(word)
    )]
    UnknownWord { name: String, word: String },
    #[error(
        "format '{name}': bit range '{}' is invalid (expected bits 0-63, low-high)",
        quote(range)
    )]
    BadRange { name: String, range: String },
    #[error("format '{name}': bit {bit} appears in more than one range")]
    Overlap { name: String, bit: u8 },
    #[error("format '{name}': value {value:#x} does not fit in its {width} bit(s)")]
    ValueTooWide {
        name: String,
        value: u64,
        width: u32,
    },
    #[error(
        "PMU '{pmu}': empty term in '{}' (doubled or trailing comma)",
        quote(terms)
    )]
    EmptyTerm { pmu: String, terms: String },
    #[error("PMU '{pmu}': unknown term '{}' (known: {known})", quote(term))]
    UnknownTerm {
        pmu: String,
        term: String,
        known: String,
    },
    #[error(
        "PMU '{pmu}': term '{}' has value '{}' (expected a decimal or 0x-hex number)",
        quote(term),
        quote(value)
    )]
    BadValue {
        pmu: String,
        term: String,
        value: String,
    },
    #[error("PMU '{pmu}': term '{term}'")]
    Field {
        pmu: String,
        term: String,
        #[source]
        source: Box<FormatError>,
    },
}

/// The `perf_event_attr` words an event's terms fill in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AttrWords {
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    pub config3: u64,
}

impl AttrWords {
    pub fn get(&self, word: ConfigWord) -> u64 {
        match word {
            ConfigWord::Config => self.config,
            ConfigWord::Config1 => self.config1,
            ConfigWord::Config2 => self.config2,
            ConfigWord::Config3 => self.config3,
        }
    }

    pub fn word_mut(&mut self, word: ConfigWord) -> &mut u64 {
        match word {
            ConfigWord::Config => &mut self.config,
            ConfigWord::Config1 => &mut self.config1,
            ConfigWord::Config2 => &mut self.config2,
            ConfigWord::Config3 => &mut self.config3,
        }
    }
}

/// The word names of the format grammar, also accepted as raw terms (`config=0x1234`).
pub fn parse_word(word: &str) -> Option<ConfigWord> {
    match word {
        "config" => Some(ConfigWord::Config),
        "config1" => Some(ConfigWord::Config1),
        "config2" => Some(ConfigWord::Config2),
        "config3" => Some(ConfigWord::Config3),
        _ => None,
    }
}

/// Parses the text of `format/<name>`.
pub fn parse_format(name: &str, text: &str) -> Result<FormatField, FormatError> {
    let t = text.trim();
    let syntax = || FormatError::Syntax {
        name: name.to_string(),
        text: t.to_string(),
    };
    let (word, ranges) = t.split_once(':').ok_or_else(syntax)?;
    let word = word.trim();
    let word = parse_word(word).ok_or_else(|| {
        if word.is_empty() {
            syntax()
        } else {
            FormatError::UnknownWord {
                name: name.to_string(),
                word: word.to_string(),
            }
        }
    })?;
    let mut bits = Vec::new();
    let mut used = 0u64;
    for r in ranges.split(',') {
        let r = r.trim();
        let bad = || FormatError::BadRange {
            name: name.to_string(),
            range: r.to_string(),
        };
        let (lo, hi) = match r.split_once('-') {
            Some((a, b)) => (
                bit_number(a).ok_or_else(bad)?,
                bit_number(b).ok_or_else(bad)?,
            ),
            None => {
                let b = bit_number(r).ok_or_else(bad)?;
                (b, b)
            }
        };
        if lo > hi {
            return Err(bad());
        }
        let mask = range_mask(lo, hi);
        if used & mask != 0 {
            let bit = (used & mask).trailing_zeros() as u8;
            return Err(FormatError::Overlap {
                name: name.to_string(),
                bit,
            });
        }
        used |= mask;
        bits.push(lo..=hi);
    }
    Ok(FormatField {
        name: name.to_string(),
        word,
        bits,
    })
}

fn bit_number(s: &str) -> Option<u8> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 2 {
        return None;
    }
    s.parse::<u8>().ok().filter(|&b| b < 64)
}

/// Bits lo..=hi set (lo ≤ hi < 64).
fn range_mask(lo: u8, hi: u8) -> u64 {
    let width = u32::from(hi - lo) + 1;
    let ones = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    ones << lo
}

/// Total width of a field in bits.
pub fn field_width(field: &FormatField) -> u32 {
    field
        .bits
        .iter()
        .map(|r| u32::from(r.end().saturating_sub(*r.start())) + 1)
        .sum()
}

/// Mask of every bit the field covers in its word.
pub fn field_mask(field: &FormatField) -> u64 {
    field
        .bits
        .iter()
        .filter(|r| r.start() <= r.end() && *r.end() < 64)
        .fold(0, |m, r| m | range_mask(*r.start(), *r.end()))
}

/// Spreads `value` over the field's bit ranges, low bits into the first range listed, and
/// returns the word contribution (only the field's bits set). A value wider than the field is an
/// error rather than silently truncated, because the dropped bits would select another event.
pub fn place_value(field: &FormatField, value: u64) -> Result<u64, FormatError> {
    let mut out = 0u64;
    let mut rest = value;
    let mut consumed = 0u32;
    for r in &field.bits {
        check_range(field, r)?;
        let (lo, hi) = (*r.start(), *r.end());
        let width = u32::from(hi - lo) + 1;
        let part = if width == 64 {
            rest
        } else {
            rest & ((1u64 << width) - 1)
        };
        out |= part << lo;
        rest = rest.checked_shr(width).unwrap_or(0);
        consumed += width;
    }
    if rest != 0 {
        return Err(FormatError::ValueTooWide {
            name: field.name.clone(),
            value,
            width: consumed,
        });
    }
    Ok(out)
}

/// A `FormatField` built by hand (not by `parse_format`) could hold a range the grammar rejects.
fn check_range(field: &FormatField, r: &RangeInclusive<u8>) -> Result<(), FormatError> {
    if r.start() > r.end() || *r.end() >= 64 {
        return Err(FormatError::BadRange {
            name: field.name.clone(),
            range: format!("{}-{}", r.start(), r.end()),
        });
    }
    Ok(())
}

/// Parses a term value: decimal or `0x` hex, as the kernel prints and perf accepts.
pub fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()
    } else {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    }
}

/// Encodes `event=0x04,umask=0x03`-style terms (the syntax of sysfs `events/*` aliases and of
/// `PMU/term=value,.../` event strings) with the PMU's format fields.
///
/// A bare term means 1 (`edge` is `edge=1`), as in perf. `config=`, `config1=`, `config2=`,
/// `config3=` set the whole word. Terms apply left to right and a later term overrides the bits
/// an earlier one set, so `alias terms` followed by user terms lets the user win, as perf does.
pub fn encode_terms(pmu: &Pmu, terms: &str) -> Result<AttrWords, FormatError> {
    let mut words = AttrWords::default();
    let t = terms.trim();
    if t.is_empty() {
        return Ok(words);
    }
    for term in t.split(',') {
        let term = term.trim();
        if term.is_empty() {
            return Err(FormatError::EmptyTerm {
                pmu: pmu.name.clone(),
                terms: t.to_string(),
            });
        }
        let (key, value_text) = match term.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (term, None),
        };
        let value = match value_text {
            None => 1,
            Some(v) => parse_number(v).ok_or_else(|| FormatError::BadValue {
                pmu: pmu.name.clone(),
                term: key.to_string(),
                value: v.to_string(),
            })?,
        };
        // A PMU format named like a word (none exist today) would take precedence, as in perf,
        // where format terms are looked up before the built-in config terms.
        if let Some(field) = pmu.formats.get(key) {
            let placed = place_value(field, value).map_err(|e| FormatError::Field {
                pmu: pmu.name.clone(),
                term: key.to_string(),
                source: Box::new(e),
            })?;
            let w = words.word_mut(field.word);
            *w = (*w & !field_mask(field)) | placed;
        } else if let Some(word) = parse_word(key) {
            *words.word_mut(word) = value;
        } else {
            let mut known: Vec<&str> = pmu.formats.keys().map(String::as_str).collect();
            known.extend(["config", "config1", "config2", "config3"]);
            return Err(FormatError::UnknownTerm {
                pmu: pmu.name.clone(),
                term: key.to_string(),
                known: known.join(", "),
            });
        }
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn f(name: &str, text: &str) -> FormatField {
        parse_format(name, text).unwrap()
    }

    fn pmu(formats: &[(&str, &str)]) -> Pmu {
        Pmu {
            name: "uncore_imc_0".into(),
            pmu_type: 13,
            cpumask: None,
            formats: formats
                .iter()
                .map(|(n, t)| (n.to_string(), f(n, t)))
                .collect::<BTreeMap<_, _>>(),
            events: BTreeMap::new(),
            path: Default::default(),
        }
    }

    #[test]
    fn simple_formats() {
        let e = f("event", "config:0-7\n");
        assert_eq!(e.word, ConfigWord::Config);
        assert_eq!(e.bits, vec![0..=7]);
        assert_eq!(f("edge", "config:18").bits, vec![18..=18]);
        let c1 = f("filter", "config1:0-63");
        assert_eq!(c1.word, ConfigWord::Config1);
        assert_eq!(field_width(&c1), 64);
        assert_eq!(f("x", "config2:3").word, ConfigWord::Config2);
        assert_eq!(f("x", "config3:0-1").word, ConfigWord::Config3);
    }

    #[test]
    fn split_format() {
        let u = f("umask", "config:8-15,32-55");
        assert_eq!(u.bits, vec![8..=15, 32..=55]);
        assert_eq!(field_width(&u), 32);
        assert_eq!(field_mask(&u), 0x00ff_ffff_0000_ff00);
    }

    #[test]
    fn malformed_formats() {
        for (text, want) in [
            ("", "Syntax"),
            ("config", "Syntax"),
            (":0-7", "Syntax"),
            ("config4:0-7", "UnknownWord"),
            ("cfg:0", "UnknownWord"),
            ("config:", "BadRange"),
            ("config:7-0", "BadRange"),
            ("config:0-64", "BadRange"),
            ("config:64", "BadRange"),
            ("config:a-b", "BadRange"),
            ("config:0-7,", "BadRange"),
            ("config:-1", "BadRange"),
            ("config:0--7", "BadRange"),
            ("config:007", "BadRange"),
            ("config:0-7,4-9", "Overlap"),
            ("config:3,3", "Overlap"),
        ] {
            let got = parse_format("x", text);
            let kind = format!("{got:?}");
            assert!(kind.contains(want), "{text:?} → {kind}, want {want}");
        }
    }

    #[test]
    fn malformed_format_message_names_field_and_expectation() {
        let e = parse_format("umask", "config:zz").unwrap_err().to_string();
        assert!(e.contains("umask") && e.contains("expected"), "{e}");
    }

    #[test]
    fn place_contiguous() {
        assert_eq!(
            place_value(&f("umask", "config:8-15"), 0x03).unwrap(),
            0x300
        );
        assert_eq!(place_value(&f("e", "config:18"), 1).unwrap(), 1 << 18);
        assert_eq!(
            place_value(&f("all", "config1:0-63"), u64::MAX).unwrap(),
            u64::MAX
        );
    }

    #[test]
    fn place_split_low_bits_first() {
        let u = f("umask", "config:8-15,32-55");
        // low 8 bits → 8..15; the next 24 → 32..55
        assert_eq!(place_value(&u, 0xcf).unwrap(), 0xcf00);
        assert_eq!(place_value(&u, 0x1_00).unwrap(), 1 << 32);
        assert_eq!(
            place_value(&u, 0xabcd_ef12).unwrap(),
            (0xabcdef << 32) | (0x12 << 8)
        );
        // Order in the file matters, not the bit order.
        let rev = f("x", "config:32-35,0-3");
        assert_eq!(place_value(&rev, 0x21).unwrap(), (1 << 32) | 2);
    }

    #[test]
    fn place_too_wide() {
        let e = place_value(&f("umask", "config:8-15"), 0x100).unwrap_err();
        assert_eq!(
            e,
            FormatError::ValueTooWide {
                name: "umask".into(),
                value: 0x100,
                width: 8
            }
        );
        assert!(place_value(&f("umask", "config:8-15,32-55"), 1 << 32).is_err());
        assert!(place_value(&f("e", "config:18"), 2).is_err());
    }

    #[test]
    fn place_rejects_hand_built_bad_range() {
        let bad = FormatField {
            name: "x".into(),
            word: ConfigWord::Config,
            bits: vec![60..=70],
        };
        assert!(matches!(
            place_value(&bad, 1),
            Err(FormatError::BadRange { .. })
        ));
    }

    #[test]
    fn encode_intel_imc_alias() {
        let p = pmu(&[
            ("event", "config:0-7"),
            ("umask", "config:8-15"),
            ("edge", "config:18"),
            ("inv", "config:23"),
            ("thresh", "config:24-31"),
        ]);
        let w = encode_terms(&p, "event=0x04,umask=0x03").unwrap();
        assert_eq!(w.config, 772);
        assert_eq!(encode_terms(&p, "event=4,umask=12").unwrap().config, 0xc04);
        assert_eq!(
            encode_terms(&p, "event=0x04,edge").unwrap().config,
            0x04 | 1 << 18
        );
        assert_eq!(
            encode_terms(&p, " event=0x04 , umask=0x03 ")
                .unwrap()
                .config,
            772
        );
        assert_eq!(encode_terms(&p, "").unwrap(), AttrWords::default());
    }

    #[test]
    fn encode_later_term_overrides() {
        let p = pmu(&[("event", "config:0-7"), ("umask", "config:8-15")]);
        let w = encode_terms(&p, "event=0x04,umask=0x03,umask=0x0c").unwrap();
        assert_eq!(w.config, 0xc04);
    }

    #[test]
    fn encode_raw_words() {
        let p = pmu(&[("event", "config:0-7")]);
        let w = encode_terms(&p, "config=0x304,config1=5,config2=0x10,config3=7").unwrap();
        assert_eq!(
            w,
            AttrWords {
                config: 0x304,
                config1: 5,
                config2: 0x10,
                config3: 7
            }
        );
    }

    #[test]
    fn encode_split_umask_and_config1() {
        let p = pmu(&[
            ("event", "config:0-7"),
            ("umask", "config:8-15,32-55"),
            ("filter", "config1:0-31"),
        ]);
        let w = encode_terms(&p, "event=0x05,umask=0x1cf,filter=0x20").unwrap();
        assert_eq!(w.config, 0x05 | 0xcf << 8 | 1 << 32);
        assert_eq!(w.config1, 0x20);
    }

    #[test]
    fn encode_errors_name_pmu_term_and_expectation() {
        let p = pmu(&[("event", "config:0-7"), ("umask", "config:8-15")]);
        let e = encode_terms(&p, "evnt=4").unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("uncore_imc_0") && m.contains("evnt") && m.contains("event, umask"),
            "{m}"
        );
        let m = encode_terms(&p, "event=0xzz").unwrap_err().to_string();
        assert!(m.contains("event") && m.contains("0xzz") && m.contains("expected"));
        let m = crate::text::error_line(&encode_terms(&p, "event=0x100").unwrap_err());
        assert!(m.contains("uncore_imc_0") && m.contains("8 bit"), "{m}");
        for bad in [
            "event=",
            "event=-1",
            "event=0x",
            "event=1.5",
            "event=99999999999999999999",
        ] {
            assert!(
                matches!(encode_terms(&p, bad), Err(FormatError::BadValue { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            encode_terms(&p, "event=1,,umask=2"),
            Err(FormatError::EmptyTerm { .. })
        ));
        assert!(matches!(
            encode_terms(&p, "event=1,"),
            Err(FormatError::EmptyTerm { .. })
        ));
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_number("0x1F"), Some(31));
        assert_eq!(parse_number("0X10"), Some(16));
        assert_eq!(parse_number("42"), Some(42));
        assert_eq!(parse_number("0xffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_number("0x10000000000000000"), None);
        assert_eq!(parse_number(""), None);
        assert_eq!(parse_number("0x"), None);
        assert_eq!(parse_number("x1"), None);
    }
}
