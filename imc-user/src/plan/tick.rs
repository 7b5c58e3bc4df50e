//! What runs the sampler (the kernel's tick and sched_switch, or imc's own cpu-clock timer) or
//! times stat's reads, and what the sampler's records are.
use super::kernel::Kernel;
use super::types::{Records, Request, Tick, TickSource};
use std::fmt;

impl TickSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TickSource::KernelTick => "kernel-tick",
            TickSource::CpuClock => "cpu-clock",
            TickSource::IntervalTimer => "interval-timer",
        }
    }
}

impl fmt::Display for TickSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Records {
    /// The records a sampling command gets from `--precise`: a finer timer (`--freq`) adds
    /// ticks to the switch boundaries, never takes them away, so a count is always charged to
    /// the task that ran when it was made, whatever the timer.
    pub(super) fn of(precise: bool) -> Records {
        if precise {
            Records::PerSwitch
        } else {
            Records::Aggregated
        }
    }

    /// What such records are, in a few words (`--dry-run`).
    pub fn meaning(self) -> &'static str {
        match self {
            Records::Aggregated => {
                "one per task that ran, at each tick; switches add up in the kernel (--precise: a \
                 record per switch)"
            }
            Records::PerSwitch => "one at every context switch and tick",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Records::Aggregated => "aggregated",
            Records::PerSwitch => "per-switch",
        }
    }
}

impl Tick {
    /// The tick as one label (`imc_info{tick}`): `kernel-tick:250Hz+sched_switch`,
    /// `cpu-clock:1000Hz`.
    pub fn label(&self) -> String {
        let mut t = self.source.as_str().to_string();
        if let Some(hz) = self.hz {
            t.push_str(&format!(":{}Hz", hz.round()));
        }
        if self.switches {
            t.push_str("+sched_switch");
        }
        t
    }
}

/// What runs the program: the kernel's tick unless `--freq` asks for a timer of imc's own.
pub(super) fn tick_of(kernel: &Kernel, req: &Request) -> Tick {
    if !req.command.samples() {
        return Tick {
            source: TickSource::IntervalTimer,
            hz: Some(1000.0 / req.interval_ms.max(1) as f64),
            adds_interrupts: true,
            switches: false,
            reason: format!(
                "imc stat reads every counter from userspace at each {} ms interval (a timer \
                 wake-up per interval; kernel-timed reads up to 100 ms)",
                req.interval_ms
            ),
        };
    }
    match req.freq {
        Some(f) => Tick {
            source: TickSource::CpuClock,
            hz: Some(f64::from(f)),
            adds_interrupts: true,
            switches: true,
            reason: format!(
                "--freq {f}: imc's own cpu-clock timer on every CPU, finer than the kernel's \
                 tick, and sched_switch; it adds a timer interrupt per CPU every {} us",
                1_000_000 / u64::from(f.max(1))
            ),
        },
        None => Tick {
            source: TickSource::KernelTick,
            hz: Some(f64::from(kernel.hz_or_default())),
            adds_interrupts: false,
            switches: true,
            reason: format!(
                "the kernel's own timer interrupt (tracepoint local_timer_entry, else \
                 hrtimer_expire_entry) and sched_switch: no interrupt of imc's own; busy CPUs \
                 tick at HZ={}{}, idle ones are described by their context switches",
                kernel.hz_or_default(),
                match (&kernel.hz, &kernel.hz_source) {
                    (Some(_), Some(src)) => format!(" (CONFIG_HZ in {src})"),
                    _ => " (assumed: no proc/config.gz or boot/config-RELEASE under --root)"
                        .to_string(),
                }
            ),
        },
    }
}
