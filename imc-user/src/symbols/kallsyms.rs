//! The kernel's symbols from `proc/kallsyms` (`ADDRESS TYPE NAME [MODULE]`), read once and
//! sorted, for kernel stack frames. Only text symbols are kept. Where every address reads as
//! zero (`kptr_restrict`, or a reader without `CAP_SYSLOG`), the kernel hides its symbols:
//! frames are then the bare addresses.
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::error::SymbolsError;
use crate::sys::file::open_regular;

/// An address further than this past the nearest symbol below it is not taken to be in that
/// symbol (kallsyms gives no sizes; no kernel function is this long, while the gaps between the
/// kernel's text and its modules' are).
pub const MAX_SYMBOL_SPAN: u64 = 1 << 20;

/// The module core kernel symbols belong to.
pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";

/// The kernel's text symbols, sorted by address.
#[derive(Debug, Default)]
pub struct Kallsyms {
    /// (address, name, index into `modules`, 0 for the core kernel).
    syms: Vec<(u64, Box<str>, u32)>,
    /// `[kernel.kallsyms]`, then `[MODULE]` for each module seen.
    modules: Vec<Box<str>>,
    /// Every address was zero: the kernel hides them.
    pub hidden: bool,
    /// The file went past the byte or symbol cap.
    pub truncated: bool,
}

impl Kallsyms {
    /// Reads `path` within `max_bytes` bytes and `max_symbols` symbols.
    pub fn read(path: &Path, max_bytes: u64, max_symbols: usize) -> Result<Kallsyms, SymbolsError> {
        let f = open_regular(path).map_err(|e| SymbolsError::read(path, e))?;
        Kallsyms::parse(BufReader::new(f.take(max_bytes)), max_bytes, max_symbols)
            .map_err(|e| SymbolsError::read(path, e))
    }

    /// Parses kallsyms text from `r`, which yields at most `max_bytes` bytes.
    pub fn parse(
        mut r: impl BufRead,
        max_bytes: u64,
        max_symbols: usize,
    ) -> std::io::Result<Kallsyms> {
        let mut k = Kallsyms {
            modules: vec![KERNEL_MODULE.into()],
            ..Kallsyms::default()
        };
        let (mut line, mut read, mut seen, mut zero) = (String::new(), 0u64, 0u64, 0u64);
        loop {
            line.clear();
            let n = read_line_lossy(&mut r, &mut line)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            if (read >= max_bytes && !line.ends_with('\n')) || k.syms.len() >= max_symbols {
                k.truncated = true;
                break;
            }
            let Some((addr, kind, name, module)) = split_line(&line) else {
                continue;
            };
            seen += 1;
            if addr == 0 {
                zero += 1;
                continue;
            }
            if matches!(kind, 't' | 'T' | 'w' | 'W') {
                let m = k.module_index(module);
                k.syms.push((addr, name.into(), m));
            }
        }
        k.truncated |= read >= max_bytes;
        k.hidden = seen > 0 && zero == seen;
        k.syms.sort_by_key(|s| s.0);
        Ok(k)
    }

    fn module_index(&mut self, module: Option<&str>) -> u32 {
        let Some(m) = module else { return 0 };
        let name = format!("[{m}]");
        // Modules' symbols come grouped, so the last module is nearly always the one.
        let found = self.modules.iter().rposition(|x| **x == *name);
        let i = found.unwrap_or_else(|| {
            self.modules.push(name.into_boxed_str());
            self.modules.len() - 1
        });
        u32::try_from(i).unwrap_or(0)
    }

    /// How many symbols are held.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The symbol covering `addr` and its module.
    pub fn find(&self, addr: u64) -> Option<(&str, &str)> {
        let i = self.syms.partition_point(|s| s.0 <= addr).checked_sub(1)?;
        let (start, name, module) = self.syms.get(i)?;
        if addr - start > MAX_SYMBOL_SPAN {
            return None;
        }
        let module = self
            .modules
            .get(*module as usize)
            .map_or(KERNEL_MODULE, |m| &**m);
        Some((name, module))
    }
}

/// Reads one line, replacing bytes that are not UTF-8.
fn read_line_lossy(r: &mut impl BufRead, line: &mut String) -> std::io::Result<usize> {
    let mut bytes = Vec::new();
    let n = r.read_until(b'\n', &mut bytes)?;
    line.push_str(&String::from_utf8_lossy(&bytes));
    Ok(n)
}

/// `ADDRESS TYPE NAME [MODULE]` → its parts (the module without brackets).
fn split_line(line: &str) -> Option<(u64, char, &str, Option<&str>)> {
    let mut parts = line.split_ascii_whitespace();
    let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
    let mut kind = parts.next()?.chars();
    let k = kind.next()?;
    if kind.next().is_some() {
        return None;
    }
    let name = parts.next()?;
    let module = parts
        .next()
        .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'));
    Some((addr, k, name, module))
}
