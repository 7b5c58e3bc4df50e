//! Text that came from outside (a process's `comm`, a cgroup path, a recording's header, a sysfs
//! file) on its way to a person's terminal. A process may name itself anything, and a file may
//! hold anything: printed raw, an escape sequence in it would clear the screen, retitle the
//! terminal or hide what follows. Every human output that carries such text passes it through
//! [`escape`]; every error that quotes input passes it through [`quote`]. JSON output needs
//! neither (its encoder escapes control characters itself).
use std::borrow::Cow;

/// Characters a terminal acts on rather than shows: C0 and C1 controls and DEL, and the
/// bidirectional overrides and isolates, which reorder what is shown after them.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every control character written out as an escape (`\n`, `\t`, `\x1b`, `\u{202e}`),
/// so that it prints as the text it is; borrowed when there is nothing to escape (the usual
/// case). A backslash is left as it is: the output is for reading, not for parsing back.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe(c) && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`escape`] of a text of several lines: its line ends kept, everything else escaped (a
/// listing whose names come from sysfs, printed as a whole).
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\n' && is_unsafe(c)) {
        return Cow::Borrowed(s);
    }
    let lines: Vec<Cow<'_, str>> = s.split('\n').map(escape).collect();
    Cow::Owned(lines.join("\n"))
}

/// Most characters of input an error message quotes: enough to recognise it, never a whole
/// file.
pub const QUOTE_CHARS: usize = 80;

/// Input as an error message quotes it: escaped (see [`escape`]) and clipped to
/// [`QUOTE_CHARS`] characters, with how much was left out.
pub fn quote(s: &str) -> String {
    let total = s.chars().count();
    if total <= QUOTE_CHARS {
        return escape(s).into_owned();
    }
    let head: String = s.chars().take(QUOTE_CHARS).collect();
    format!(
        "{}… ({} more characters)",
        escape(&head),
        total - QUOTE_CHARS
    )
}

/// [`quote`] of bytes that may not be UTF-8 (invalid sequences become U+FFFD).
pub fn quote_bytes(b: &[u8]) -> String {
    // Only the head is converted: a 2 GB input costs no more than a short one.
    let head = &b[..b.len().min(QUOTE_CHARS * 4)];
    let mut q = quote(&String::from_utf8_lossy(head));
    if head.len() < b.len() && !q.ends_with(')') {
        q.push_str(&format!("… ({} more bytes)", b.len() - head.len()));
    }
    q
}

/// `v` with `decimals` digits after the point, never `-0` or `-0.0`: a rate or count that
/// rounds to zero is zero (a tiny negative from floating-point rounding, or a negative zero,
/// must not print with a sign). Every human number with fixed decimals goes through here.
pub fn fixed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.bytes().all(|b| b == b'0' || b == b'.') => rest.to_string(),
        _ => s,
    }
}

/// `v` scaled to the largest binary prefix (none, Ki, Mi, Gi, Ti, Pi) that keeps it at least 1.
pub fn binary_prefix(v: f64) -> (f64, &'static str) {
    const P: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut i = 0;
    let mut x = v;
    while x.abs() >= 1024.0 && i + 1 < P.len() {
        x /= 1024.0;
        i += 1;
    }
    (x, P[i])
}

/// Bytes with binary units: `512 B`, `1.50 KiB`, `3.20 GiB`.
pub fn fmt_bytes(b: f64) -> String {
    match binary_prefix(b) {
        (v, "") => format!("{} B", fixed(v, 0)),
        (v, prefix) => format!("{} {prefix}B", fixed(v, 2)),
    }
}

/// Bytes per second with binary units: `512 B/s`, `1.50 GiB/s`. Every byte rate a person reads
/// (report tables, trace and plot titles) goes through here.
pub fn fmt_byte_rate(per_s: f64) -> String {
    format!("{}/s", fmt_bytes(per_s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_print_as_escapes() {
        assert!(matches!(escape("nginx"), Cow::Borrowed("nginx")));
        assert_eq!(
            escape("\x1b[2J\x1b]0;pwned\x07"),
            "\\x1b[2J\\x1b]0;pwned\\x07"
        );
        assert_eq!(escape("a\nb\tc\r\0"), "a\\nb\\tc\\r\\x00");
        assert_eq!(escape("\u{9b}31m\u{7f}"), "\\x9b31m\\x7f");
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(escape_lines("a\x1bb\nc\n"), "a\\x1bb\nc\n");
        assert!(matches!(escape_lines("a\nb\n"), Cow::Borrowed(_)));
        // Ordinary non-ASCII text is text.
        assert_eq!(escape("café/ünïcode ✓"), "café/ünïcode ✓");
    }

    #[test]
    fn quotes_are_escaped_and_clipped() {
        assert_eq!(quote("0-3,8"), "0-3,8");
        let long = "\0".repeat(65_677);
        let q = quote(&long);
        assert!(!q.contains('\0'));
        assert!(q.len() < 500, "{}", q.len());
        assert!(q.ends_with(&format!("({} more characters)", 65_677 - QUOTE_CHARS)));
        let b = vec![0u8; 1 << 20];
        let q = quote_bytes(&b);
        assert!(!q.contains('\0') && q.len() < 500, "{q}");
    }
}
