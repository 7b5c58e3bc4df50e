//! What the host says to the benchmarks: their environment settings, its online CPUs, its load.

use anyhow::{Context, Result, anyhow};

pub(crate) fn env_num<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|_| anyhow!("{name}={s:?} is not a valid number; unset it or fix it")),
        Err(_) => Ok(default),
    }
}

pub(crate) fn online_cpus() -> Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .context("/sys/devices/system/cpu/online")?;
    let mut n = 0;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>()? - a.parse::<usize>()? + 1,
            None => 1,
        };
    }
    Ok(n.max(1))
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}
