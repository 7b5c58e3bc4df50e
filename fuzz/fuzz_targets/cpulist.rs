//! `cpumask` / `online` / node `cpulist` text → CPU numbers. Beyond "no panic": an accepted list
//! is strictly increasing (sorted, no duplicates).
#![no_main]
use imc::discovery::cpulist::parse_cpulist;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cpus) = parse_cpulist(text) {
        assert!(cpus.windows(2).all(|w| w[0] < w[1]), "{text:?} → {cpus:?}");
    }
});
