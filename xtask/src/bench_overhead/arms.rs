//! The workload kinds and the arms each is run under, in an order rotated every round.

/// --freq: ticks counted over the window against FREQ × CPUs × seconds. Below this imc was not
/// sampling the run (or not on every CPU); above, the count is not what it claims to be.
pub(super) const TICKS_MIN_RATIO: f64 = 0.8;
/// The same lower bound where the CPUs go idle between context switches: there a VM's cpu-clock
/// timer fires late and skips periods (0.74 to 0.98 of FREQ measured on a 2-vCPU VM), while 0.5
/// still tells a firing timer from none or from the kernel's tick (HZ / FREQ).
pub(super) const TICKS_MIN_RATIO_IDLE: f64 = 0.5;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    Cpu,
    Mem,
    Switch,
}

impl Kind {
    pub(super) fn arg(self) -> &'static str {
        match self {
            Kind::Cpu => "cpu",
            Kind::Mem => "mem",
            Kind::Switch => "switch",
        }
    }
    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::Cpu => "compute-bound (register-only integer/FP chain, a thread per CPU)",
            Kind::Mem => "memory-bound (256 MiB read-modify-write passes, a thread per CPU)",
            Kind::Switch => "context-switch-heavy (two threads passing a byte through pipes)",
        }
    }
    /// The least share of FREQ × CPUs × seconds a cpu-clock timer is expected to tick: its CPUs
    /// are busy throughout, or (switch) idle between wake-ups.
    pub(super) fn freq_min_ratio(self) -> f64 {
        match self {
            Kind::Cpu | Kind::Mem => TICKS_MIN_RATIO,
            Kind::Switch => TICKS_MIN_RATIO_IDLE,
        }
    }
    /// Work for the calibration run, scaled afterwards to the target duration.
    pub(super) fn probe_units(self) -> u64 {
        match self {
            Kind::Cpu => 100,
            Kind::Mem => 8,
            Kind::Switch => 20,
        }
    }
    pub(super) fn arms(self, perf: bool) -> Vec<Arm> {
        let mut v = vec![Arm::Alone, Arm::ImcTick, Arm::ImcStacks, Arm::ImcFreq];
        if self != Kind::Switch {
            v.push(Arm::BareHooks);
        }
        if self == Kind::Switch {
            v.extend([
                Arm::ImcPrecise,
                Arm::BareSwitch,
                Arm::BareSwitchRead,
                Arm::BareSwitchClock,
                Arm::BareSwitchCharge,
            ]);
        }
        if perf {
            v.push(Arm::PerfClock);
            if self == Kind::Switch {
                v.push(Arm::PerfSwitch);
            }
        }
        v
    }
}

/// The sides of a round; the order rotates every round so drift on a shared machine hits each
/// side in each position alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Arm {
    Alone,
    ImcTick,
    /// `imc record --stacks`: the default tick, taking each charged slice's call stack.
    ImcStacks,
    ImcFreq,
    /// `imc record --precise`: a record per context switch.
    ImcPrecise,
    /// The workload alone with a bare program on sched_switch (the floor of imc's).
    BareSwitch,
    /// The same program reading one counter of its CPU: the floor plus one read.
    BareSwitchRead,
    /// The same program reading the clock: the floor plus the timestamp.
    BareSwitchClock,
    /// The same program reading a counter and the clock, naming the task leaving and adding the
    /// counter's delta into one per-CPU accumulator: the least a charge to a task can be.
    BareSwitchCharge,
    /// A bare program on imc's hooks (sched_switch and the kernel's tick) reading one counter
    /// of its CPU and the clock: the floor of imc's default collector on the workload.
    BareHooks,
    PerfClock,
    PerfSwitch,
}

impl Arm {
    pub(super) fn label(self) -> &'static str {
        match self {
            Arm::Alone => "alone",
            Arm::ImcTick => "imc record (default tick)",
            Arm::ImcStacks => "imc record --stacks",
            Arm::ImcFreq => "imc record --freq 1000",
            Arm::ImcPrecise => "imc record --precise",
            Arm::BareSwitch => "bare sched_switch program",
            Arm::BareSwitchRead => "bare program + 1 counter read",
            Arm::BareSwitchClock => "bare program + the clock",
            Arm::BareSwitchCharge => "bare + read + clock + charge",
            Arm::BareHooks => "floor: imc's reads alone",
            Arm::PerfClock => "perf record -F 1000 -a",
            Arm::PerfSwitch => "perf record -e sched_switch -a",
        }
    }
    /// The workload's flag that loads this arm's bare program, for the bare arms (`--bare-hooks`
    /// takes the kernel's HZ after it).
    pub(super) fn bare_flag(self) -> Option<&'static str> {
        match self {
            Arm::BareSwitch => Some("--bare-switch"),
            Arm::BareSwitchRead => Some("--bare-switch-read"),
            Arm::BareSwitchClock => Some("--bare-switch-clock"),
            Arm::BareSwitchCharge => Some("--bare-switch-charge"),
            Arm::BareHooks => Some("--bare-hooks"),
            _ => None,
        }
    }
    pub(super) fn short(self) -> &'static str {
        match self {
            Arm::Alone => "alone",
            Arm::ImcTick => "imc",
            Arm::ImcStacks => "imc-S",
            Arm::ImcFreq => "imc-F",
            Arm::ImcPrecise => "imc-P",
            Arm::BareSwitch => "bare",
            Arm::BareSwitchRead => "bare+read",
            Arm::BareSwitchClock => "bare+clock",
            Arm::BareSwitchCharge => "bare+charge",
            Arm::BareHooks => "floor",
            Arm::PerfClock => "perf-F",
            Arm::PerfSwitch => "perf-sw",
        }
    }
}

pub(super) fn round_order(arms: &[Arm], round: usize) -> Vec<Arm> {
    let mut v = arms.to_vec();
    v.rotate_left(round % arms.len());
    v
}
