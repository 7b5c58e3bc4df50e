//! The program's own size, held to a bound: the production object loaded for the configurations
//! imc runs with, and each program's instructions the verifier processed (every path it
//! explored: the program's branching) and the size of what the kernel runs (translated eBPF, 8
//! bytes an instruction) compared with [`BOUNDS`]. A change that makes the hot path longer fails
//! here, on any machine that loads the program, rather than in a benchmark someone has to run.
//!
//! Updating the bounds: run `cargo test -p imc-tests --test ebpf_cost -- --nocapture` as root
//! (with IMC_EBPF_OBJECT set as `cargo xtask test` sets it), and put the printed figures, plus
//! about 3%, into [`BOUNDS`], in the commit that changes them, saying why. The verifier's count
//! depends on the kernel too: the test prints the release it ran on.
use imc::model::{Encoded, SlotRole, SlotScope, SlotSpec};
use imc::sampler::{
    PackageCounter, ProgramCost, ReaderGroup, Sampler, SamplerConfig, SlotPlan, TickProgram,
    TickSource, counting_attr,
};
use imc_tests::*;

/// A program's bound in one configuration: verifier-processed instructions, translated bytes.
struct Bound {
    config: &'static str,
    program: &'static str,
    verified_insns: u32,
    translated_bytes: u32,
}

/// Measured on Linux 6.18 (x86_64): verified insns plus about 3%, translated bytes plus about
/// 1% (the size is exact for an object and a kernel: any added instruction on a path shows);
/// the tick's and the precise programs' sizes include the exec epoch check that names a task
/// afresh after an exec, and every program that charges slices the stack generation's map
/// read (compiled in, run only with stacks); with stacks, a new entry's count, the early wake
/// and the announcement of a process new to the program (a call; on the path that makes an
/// entry, not on one that finds it), and in the exec program the process made new again. The aggregating switch
/// and the aggregating tick each hold their common path inline (a switch that adds to a
/// hinted entry; a busy CPU's tick that writes its one thread's record straight to the ring)
/// and the general one as a function of its own: their sizes count both, and the server's tick
/// verifies its package read on both paths.
const BOUNDS: &[Bound] = &[
    Bound {
        config: "one-cpu-slot",
        program: "imc_switch",
        verified_insns: 84_100,
        translated_bytes: 11_040,
    },
    Bound {
        config: "one-cpu-slot",
        program: "imc_tick_tp",
        verified_insns: 59_900,
        translated_bytes: 12_430,
    },
    Bound {
        config: "server",
        program: "imc_switch",
        verified_insns: 138_400,
        translated_bytes: 13_490,
    },
    Bound {
        config: "server",
        program: "imc_tick_tp",
        verified_insns: 123_000,
        translated_bytes: 17_220,
    },
    Bound {
        config: "stacks",
        program: "imc_switch",
        verified_insns: 87_900,
        translated_bytes: 12_530,
    },
    Bound {
        config: "stacks",
        program: "imc_tick_tp",
        verified_insns: 63_000,
        translated_bytes: 16_970,
    },
    Bound {
        config: "precise",
        program: "imc_switch",
        verified_insns: 365,
        translated_bytes: 2_530,
    },
    Bound {
        config: "precise",
        program: "imc_tick_tp",
        verified_insns: 421,
        translated_bytes: 2_460,
    },
    // The exec program (a comm changed at exec) is the same in every configuration but stacks.
    Bound {
        config: "one-cpu-slot",
        program: "imc_exec",
        verified_insns: 310,
        translated_bytes: 1_430,
    },
    Bound {
        config: "server",
        program: "imc_exec",
        verified_insns: 310,
        translated_bytes: 1_430,
    },
    Bound {
        config: "stacks",
        program: "imc_exec",
        verified_insns: 320,
        translated_bytes: 1_510,
    },
    Bound {
        config: "precise",
        program: "imc_exec",
        verified_insns: 310,
        translated_bytes: 1_430,
    },
];

fn spec(event: &str, scope: SlotScope) -> SlotSpec {
    SlotSpec {
        event: event.into(),
        scope,
        role: SlotRole::Other,
        bytes_per_count: None,
        counter_bits: 64,
    }
}

/// The kernel's tick and sched_switch, aggregating, with `slots` (and `groups`).
fn on_kernel_tick(slots: Vec<SlotPlan>, groups: Vec<ReaderGroup>, cpus: &[u32]) -> SamplerConfig {
    SamplerConfig {
        tick: TickSource::Kernel,
        slots,
        groups,
        cpus: cpus.to_vec(),
        ring_bytes: None,
        drain_period_ms: 100,
        bpf_log: false,
        tick_program: TickProgram::Imc,
        aggregate: true,
        stacks: None,
    }
}

/// A package counter of `slot`: a software counter of CPU 0 that CPU 0 reads, standing in for
/// a memory channel's (the program's path is the same).
fn package_counter(slot: usize, channel: &str) -> PackageCounter {
    PackageCounter {
        slot,
        open_cpu: 0,
        attr: counting_attr(&page_faults()),
        name: format!("page-faults@{channel}"),
        channel: channel.into(),
    }
}

/// The configurations imc runs with, by name: `one-cpu-slot`, the default where there are no
/// memory-controller counters (one software counter per CPU, aggregating); `server`, the
/// default on a server (a multiplexed core counter per CPU beside two package slots, read and
/// write, of two channels each); `stacks`, the first taking stacks (`--stacks`); `precise`, a
/// record per switch and tick (`--precise`).
fn configurations(cpus: &[u32]) -> Vec<(&'static str, SamplerConfig)> {
    let pf = page_faults();
    let per_cpu = |pf: &Encoded| SlotPlan::per_cpu(spec("page-faults", SlotScope::Cpu), pf, cpus);
    let one = on_kernel_tick(vec![per_cpu(&pf)], Vec::new(), cpus);
    let mut weight = per_cpu(&pf);
    weight.may_multiplex = true;
    let server = on_kernel_tick(
        vec![
            weight,
            SlotPlan::package(spec("reads", SlotScope::Package)),
            SlotPlan::package(spec("writes", SlotScope::Package)),
        ],
        vec![ReaderGroup {
            package: 0,
            readers: vec![0],
            counters: vec![
                package_counter(1, "A"),
                package_counter(1, "B"),
                package_counter(2, "A"),
                package_counter(2, "B"),
            ],
        }],
        cpus,
    );
    let mut precise = one.clone();
    precise.aggregate = false;
    // `--stacks`: one-cpu-slot taking the user stack of each slice its slot counted in.
    let mut stacks = one.clone();
    stacks.stacks = Some(imc::sampler::StackConfig {
        user: true,
        kernel: false,
        slots_mask: 1,
        map_entries: 1024,
        stack_entries: 1024,
        spare_entries: 128,
        wake_after: 64,
        overflow: None,
    });
    vec![
        ("one-cpu-slot", one),
        ("stacks", stacks),
        ("server", server),
        ("precise", precise),
    ]
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Every bound of [`BOUNDS`] that a measured cost exceeds, said in a line each; every
/// configuration's programs printed.
fn over_bounds(config: &str, costs: &[ProgramCost]) -> Vec<String> {
    let mut over = Vec::new();
    for c in costs {
        let (insns, bytes) = (
            c.verified_insns.expect("the kernel reports verified insns"),
            c.translated_bytes.expect("the kernel reports the size"),
        );
        println!(
            "{config:>12} {:>12}: {insns:>6} verified insns, {bytes:>6} translated bytes ({} \
             insns), {} jitted bytes",
            c.name,
            bytes / 8,
            c.jitted_bytes.unwrap_or(0)
        );
        let Some(b) = BOUNDS
            .iter()
            .find(|b| b.config == config && b.program == c.name)
        else {
            over.push(format!("{config} {}: no bound in BOUNDS", c.name));
            continue;
        };
        if insns > b.verified_insns {
            over.push(format!(
                "{config} {}: {insns} verified insns > bound {}",
                c.name, b.verified_insns
            ));
        }
        if bytes > b.translated_bytes {
            over.push(format!(
                "{config} {}: {bytes} translated bytes > bound {}",
                c.name, b.translated_bytes
            ));
        }
    }
    over
}

#[test]
fn every_program_stays_within_its_instruction_bound() {
    if !sampler_prerequisites() {
        return;
    }
    let cpus = online_cpus();
    println!("Linux {}", kernel_release());
    let mut over = Vec::new();
    let mut loaded = 0;
    for (name, cfg) in configurations(&cpus) {
        let s = Sampler::start(&cfg).unwrap_or_else(|e| panic!("{name}: sampler starts: {e}"));
        let costs = s.program_costs().expect("program info");
        assert_eq!(
            costs.len(),
            3,
            "{name}: the tick, switch and exec programs: {costs:?}"
        );
        loaded += costs.len();
        over.extend(over_bounds(name, &costs));
    }
    assert_eq!(loaded, BOUNDS.len(), "every bound is checked");
    assert!(
        over.is_empty(),
        "over the bounds (tests/ebpf_cost.rs says how to update them):\n{}",
        over.join("\n")
    );
}
