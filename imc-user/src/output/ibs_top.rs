//! `imc top --ibs`: the interval object (its JSON) and its table.
use serde::Serialize;
use std::io::Write;

/// One process of an interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IbsTask {
    pub pid: u32,
    pub comm: String,
    pub samples: u64,
    pub loads: u64,
    pub dram_local: u64,
    pub dram_remote: u64,
}

/// One interval of `top --ibs --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IbsInterval {
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub source: &'static str,
    pub l3missonly: bool,
    pub sample_period: u64,
    pub samples: u64,
    pub lost_samples: u64,
    /// Processes with samples, most DRAM loads first.
    pub tasks: Vec<IbsTask>,
}

/// One interval of `top --ibs` as a table: a heading line, then a row per process; `t0`: the
/// run's start, which the heading's time counts from.
pub fn table(o: &mut Vec<u8>, i: &IbsInterval, t0: u64) {
    let time = i.t_end_ns.saturating_sub(t0) as f64 / 1e9;
    let _ = writeln!(
        o,
        "#{time:>11.3} s  {} IBS op samples ({} lost), period {}{}",
        i.samples,
        i.lost_samples,
        i.sample_period,
        if i.l3missonly { ", L3 misses only" } else { "" }
    );
    let _ = writeln!(
        o,
        "{:>8} {:<16} {:>10} {:>11} {:>9} {:>9}",
        "pid", "comm", "dram_local", "dram_remote", "loads", "samples"
    );
    for t in &i.tasks {
        let _ = writeln!(
            o,
            "{:>8} {:<16} {:>10} {:>11} {:>9} {:>9}",
            t.pid,
            // A process names itself: its control characters are written out, not obeyed.
            crate::text::escape(&t.comm),
            t.dram_local,
            t.dram_remote,
            t.loads,
            t.samples
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_name_with_control_characters_is_printed_escaped() {
        let i = IbsInterval {
            t_start_ns: 0,
            t_end_ns: 1_000_000_000,
            source: "ibs_op",
            l3missonly: false,
            sample_period: 1000,
            samples: 3,
            lost_samples: 0,
            tasks: vec![IbsTask {
                pid: 7,
                comm: "evil\u{1b}[2J\n".into(),
                samples: 3,
                loads: 2,
                dram_local: 1,
                dram_remote: 0,
            }],
        };
        let mut o = Vec::new();
        table(&mut o, &i, 0);
        let text = String::from_utf8(o).unwrap();
        assert!(text.contains("evil\\x1b[2J\\n"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert_eq!(text.lines().count(), 3, "{text:?}");
    }
}
