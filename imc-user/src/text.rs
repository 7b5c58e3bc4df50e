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

/// [`quote`] of an argument as the OS gave it (a program path, a file name): a byte that is not
/// UTF-8 is written `\xNN`, so the message names the very bytes given, not U+FFFD.
pub fn quote_os(s: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut text = String::new();
    for chunk in s.as_bytes().utf8_chunks() {
        text.push_str(&quote(chunk.valid()));
        for b in chunk.invalid() {
            text.push_str(&format!("\\x{b:02x}"));
        }
        if text.chars().count() > QUOTE_CHARS {
            break;
        }
    }
    text
}

/// An error and the causes in its chain on one line, joined by `: `, as imc says every error:
/// each error's text is its own part, its cause left to the chain (aya's errors and imc's own
/// are written so), so nothing is said twice. A cause of many lines (the kernel verifier's log)
/// keeps its first two and last three, joined by ` | `; one with no text is passed over.
pub fn error_line(e: &dyn std::error::Error) -> String {
    let mut line = String::new();
    let mut link = Some(e);
    while let Some(l) = link {
        let text = l.to_string();
        if !text.trim().is_empty() {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&one_line(&text));
        }
        link = l.source();
    }
    line
}

/// Lines the text of one error keeps whole on its line; past them, the first two and the last
/// three.
const ERROR_LINES: usize = 6;

fn one_line(text: &str) -> Cow<'_, str> {
    if !text.contains('\n') {
        return Cow::Borrowed(text);
    }
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() > ERROR_LINES {
        let (head, tail) = (&lines[..2], &lines[lines.len() - 3..]);
        Cow::Owned(format!("{} | … | {}", head.join(" | "), tail.join(" | ")))
    } else {
        Cow::Owned(lines.join(" | "))
    }
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

/// A time in nanoseconds in the unit that keeps it below 1,000 (`85.3 ns`, `12.4 µs`,
/// `3.2 ms`), seconds above (`4.1 s`), in scientific notation from a million seconds on (the
/// largest figure a recording can hold, 2^64−1 ps, is `1.8e7 s`).
pub fn fmt_ns(ns: f64) -> String {
    const UNITS: [(&str, f64); 3] = [("ns", 1.0), ("µs", 1e3), ("ms", 1e6)];
    for (unit, scale) in UNITS {
        let v = ns / scale;
        // Rounded as printed: 999.96 ns is `1.0 µs`, not `1000.0 ns`.
        if (v * 10.0).round().abs() < 10_000.0 {
            return format!("{} {unit}", fixed(v, 1));
        }
    }
    let s = ns / 1e9;
    if s.abs() < 1e6 {
        format!("{} s", fixed(s, 1))
    } else {
        format!("{s:.1e} s")
    }
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

/// `s` broken into lines of at most `width` characters, at spaces where it can be (a word
/// longer than the line is cut), so a sentence is shown whole on a narrow screen.
pub fn wrap(s: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    for word in s.split(' ').filter(|w| !w.is_empty()) {
        let mut word: Vec<char> = word.chars().collect();
        if len > 0 && len + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
            len = 0;
        }
        while word.len() > width {
            let rest = word.split_off(width);
            if len > 0 {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.into_iter().collect());
            len = 0;
            word = rest;
        }
        if len > 0 {
            line.push(' ');
            len += 1;
        }
        len += word.len();
        line.extend(word);
    }
    if len > 0 || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// The log (`-v`) while a full-screen view owns the terminal: a line written to stderr then
/// would land on the view and be drawn over. While held, lines are kept here (the view shows the
/// last few) and printed on stderr, in order, once the terminal is given back.
pub mod held_log {
    use std::io::Write;
    use std::sync::Mutex;

    /// Bytes kept while held; past it the oldest lines go, and their number is said.
    const LIMIT: usize = 4 << 20;

    struct Held {
        text: std::collections::VecDeque<String>,
        bytes: usize,
        dropped: usize,
        partial: String,
    }

    static HELD: Mutex<Option<Held>> = Mutex::new(None);

    fn held() -> std::sync::MutexGuard<'static, Option<Held>> {
        HELD.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The log's writer (env_logger's target): standard error, or the held lines.
    pub struct Writer;

    impl Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut g = held();
            let Some(h) = g.as_mut() else {
                drop(g);
                return std::io::stderr().write(buf);
            };
            h.partial.push_str(&String::from_utf8_lossy(buf));
            while let Some(i) = h.partial.find('\n') {
                let line: String = h.partial.drain(..=i).collect();
                h.bytes += line.len();
                h.text.push_back(line);
                while h.bytes > LIMIT {
                    let Some(old) = h.text.pop_front() else { break };
                    h.bytes -= old.len();
                    h.dropped += 1;
                }
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            if held().is_none() {
                std::io::stderr().flush()?;
            }
            Ok(())
        }
    }

    /// From now on log lines are kept, not printed.
    pub fn hold() {
        let mut g = held();
        if g.is_none() {
            *g = Some(Held {
                text: Default::default(),
                bytes: 0,
                dropped: 0,
                partial: String::new(),
            });
        }
    }

    /// The last `n` lines kept (without their line ends), oldest first.
    pub fn tail(n: usize) -> Vec<String> {
        held().as_ref().map_or_else(Vec::new, |h| {
            let skip = h.text.len().saturating_sub(n);
            h.text
                .iter()
                .skip(skip)
                .map(|l| l.trim_end().to_string())
                .collect()
        })
    }

    /// Prints every kept line on stderr and goes back to printing them as they come.
    pub fn release() {
        let Some(h) = held().take() else { return };
        let mut err = std::io::stderr().lock();
        if h.dropped > 0 {
            let _ = writeln!(
                err,
                "imc: {} earlier log lines were dropped while the view was up (more than {} MiB)",
                h.dropped,
                LIMIT >> 20
            );
        }
        for line in &h.text {
            let _ = err.write_all(line.as_bytes());
        }
        if !h.partial.is_empty() {
            let _ = writeln!(err, "{}", h.partial);
        }
        let _ = err.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that says its own part and keeps its cause.
    #[derive(Debug, thiserror::Error)]
    #[error("{what}")]
    struct Part {
        what: String,
        #[source]
        source: Option<std::io::Error>,
    }

    #[test]
    fn an_error_line_says_each_part_of_the_chain_once_in_order() {
        let cause = std::io::Error::other("no such file");
        let e = Part {
            what: "reading /x".into(),
            source: Some(cause),
        };
        assert_eq!(error_line(&e), "reading /x: no such file");
        // A part that repeats words of another is still said: each is its own.
        let e = Part {
            what: "no such file".into(),
            source: Some(std::io::Error::other("no such file")),
        };
        assert_eq!(error_line(&e), "no such file: no such file");
        // A verifier log of many lines keeps its first two and last three, on one line.
        let log: Vec<String> = (1..=9).map(|i| format!("line {i}")).collect();
        let e = Part {
            what: "loading".into(),
            source: Some(std::io::Error::other(log.join("\n"))),
        };
        assert_eq!(
            error_line(&e),
            "loading: line 1 | line 2 | … | line 7 | line 8 | line 9"
        );
        let e = Part {
            what: "two\nlines".into(),
            source: None,
        };
        assert_eq!(error_line(&e), "two | lines");
    }

    #[test]
    fn times_take_the_unit_that_keeps_them_short() {
        assert_eq!(fmt_ns(85.34), "85.3 ns");
        assert_eq!(fmt_ns(999.96), "1.0 µs");
        assert_eq!(fmt_ns(12_400.0), "12.4 µs");
        assert_eq!(fmt_ns(3.2e6), "3.2 ms");
        assert_eq!(fmt_ns(4.1e9), "4.1 s");
        assert_eq!(fmt_ns(0.0), "0.0 ns");
        // The largest figure a recording holds (2^64 - 1 ps).
        assert_eq!(fmt_ns(u64::MAX as f64 / 1000.0), "1.8e7 s");
    }

    #[test]
    fn wrap_breaks_at_spaces_and_cuts_only_long_words() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("abcdefgh ij", 3), ["abc", "def", "gh", "ij"]);
        assert_eq!(wrap("", 10), [""]);
        let long = "no memory-controller counters (running under a hypervisor); counting page-faults per process as a stand-in";
        for w in [20, 80] {
            let lines = wrap(long, w);
            assert!(lines.iter().all(|l| l.chars().count() <= w), "{lines:?}");
            assert_eq!(lines.join(" "), long);
        }
    }

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

    #[test]
    fn os_arguments_are_quoted_with_their_own_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let q = quote_os(std::ffi::OsStr::from_bytes(b"/x\xff\x1b[2J"));
        assert_eq!(q, "/x\\xff\\x1b[2J");
        let long = vec![0xffu8; 1 << 20];
        assert!(quote_os(std::ffi::OsStr::from_bytes(&long)).len() < 1000);
    }
}
