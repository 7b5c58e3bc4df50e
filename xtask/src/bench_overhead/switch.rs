//! The switch-heavy workload's own table: imc's program per context switch against the bare
//! program on the same hook, with one counter read and with the clock, in the same rounds.

use super::stats::{Check, MeanSe, check_line, mean_se};
use super::work::Work;
use super::{Arm, KindRuns, TARGET_NS_OVER_READS, TARGET_RECORDS_PER_TICK, TARGET_USERSPACE_PCT};

/// Switch-heavy: switches/s beside records/s drained, imc's CPU split into BPF and userspace,
/// its ns per program run against the bare sched_switch program's plus the `cpu_reads` counter
/// reads a switch makes (each costing what the bare program with one read costs more than the
/// bare one, in the same round) and the clock, for the default (aggregated) and `--precise`,
/// against the targets above.
pub(super) fn print_switch_split(r: &KindRuns, hz: f64, cpu_reads: usize) {
    let c = r.cpus as f64;
    let Some(bare) = r.runs(Arm::BareSwitch) else {
        return;
    };
    let each =
        |runs: &[Work], f: &dyn Fn(&Work) -> f64| mean_se(&runs.iter().map(f).collect::<Vec<_>>());
    let (Some(bare_read), Some(bare_clock)) =
        (r.runs(Arm::BareSwitchRead), r.runs(Arm::BareSwitchClock))
    else {
        return;
    };
    let switches = each(bare, &|w| w.bare_runs as f64 / w.elapsed_s);
    let pooled = |runs: &[Work]| {
        runs.iter().map(|w| w.bare_run_s).sum::<f64>() * 1e9
            / runs.iter().map(|w| w.bare_runs).sum::<u64>().max(1) as f64
    };
    let bare_ns = pooled(bare);
    // Per round: what one counter read and the clock add on the hook.
    let added = |with: &[Work]| -> Vec<f64> {
        bare.iter()
            .zip(with)
            .map(|(b, w)| w.bare_ns_per_run() - b.bare_ns_per_run())
            .collect()
    };
    let (read_costs, clock_costs) = (added(bare_read), added(bare_clock));
    let (read_cost, clock_cost) = (mean_se(&read_costs), mean_se(&clock_costs));
    println!(
        "\nswitch-heavy (the bare sched_switch program, measured in the same rounds: \
         {:.0} ± {:.0} switches/s, {bare_ns:.0} ns per run; with one counter read {:.0} ns, \
         with the clock {:.0} ns: a read costs {:.0} ± {:.0} ns, the clock {:.0} ± {:.0} ns; \
         imc's switch reads the clock and {cpu_reads} counter(s)):",
        switches.mean,
        switches.se,
        pooled(bare_read),
        pooled(bare_clock),
        read_cost.mean,
        read_cost.se,
        clock_cost.mean,
        clock_cost.se
    );
    println!(
        "  {:<28} {:>18} {:>18} {:>16} {:>18} {:>9} {:>10}",
        "arm",
        "program runs/s",
        "records drained/s",
        "BPF % machine",
        "userspace % mach.",
        "ns/run",
        "/ bare"
    );
    let mut checks = Vec::new();
    // `--freq` runs the switch program too: its row is the switch program's runs alone (its
    // timer's apart), and its records follow its own timer, not the kernel's tick.
    for arm in [Arm::ImcTick, Arm::ImcPrecise, Arm::ImcFreq] {
        let Some(runs) = r.runs(arm) else { continue };
        let rate = each(runs, &|w| w.switch_runs() as f64 / w.elapsed_s);
        let drained = each(runs, &|w| w.drained_per_s().unwrap_or(0.0));
        let bpf = each(runs, &|w| w.bpf_pct(r.cpus));
        let user = each(runs, &|w| w.user_pct(r.cpus));
        print_switch_row(arm, runs, [rate, drained, bpf, user], bare_ns);
        let mut arm_checks = switch_checks(
            arm,
            runs,
            bare,
            (&read_costs, &clock_costs),
            user,
            drained,
            (c, hz, cpu_reads),
        );
        if arm == Arm::ImcFreq {
            arm_checks.retain(|c| !c.what.contains("records drained"));
        }
        checks.extend(arm_checks);
    }
    if let Some(charge) = r.runs(Arm::BareSwitchCharge) {
        checks.push(charge_check(
            charge,
            bare,
            (&read_costs, &clock_costs),
            r.runs(Arm::ImcTick),
        ));
    }
    for c in &checks {
        println!("  {}", check_line(c));
    }
}

/// What naming the task leaving and adding its delta cost at the least, per round: the charging
/// bare program less the bare one, a read and the clock, against the allowance the switch target
/// gives imc over its reads. Over it, no program that charges a switch to its task meets the
/// target here; the detail says how far imc's switch is above that floor.
pub(super) fn charge_check(
    charge: &[Work],
    bare: &[Work],
    (read_costs, clock_costs): (&[f64], &[f64]),
    imc: Option<&[Work]>,
) -> Check {
    let own: Vec<f64> = charge
        .iter()
        .zip(bare)
        .zip(read_costs.iter().zip(clock_costs))
        .map(|((c, b), (read, clock_ns))| {
            c.bare_ns_per_run() - b.bare_ns_per_run() - read - clock_ns
        })
        .collect();
    let above = imc.map(|imc| {
        mean_se(
            &imc.iter()
                .zip(charge)
                .map(|(i, c)| i.ns_per_switch_run() - c.bare_ns_per_run())
                .collect::<Vec<_>>(),
        )
    });
    Check {
        what: "switch: naming the task and adding its delta, ns a run at the least (the bare \
               program that charges, less the bare one, a read and the clock): at most the \
               allowance, or no program that charges a switch meets the target"
            .into(),
        figure: mean_se(&own),
        target: TARGET_NS_OVER_READS,
        detail: match above {
            Some(a) => format!(
                "imc's switch is {:+.0} ± {:.0} ns a run above the charging program's, per round",
                a.mean, a.se
            ),
            None => "imc's switch was not run".into(),
        },
    }
}

/// One imc arm's row of the switch-heavy table: program runs/s, records drained/s, BPF and
/// userspace % of the machine, ns per run and its ratio to the bare program's.
fn print_switch_row(
    arm: Arm,
    runs: &[Work],
    [rate, drained, bpf, user]: [MeanSe; 4],
    bare_ns: f64,
) {
    let ns = runs
        .iter()
        .map(|w| (w.bpf_run_s - w.timer_run_s).max(0.0))
        .sum::<f64>()
        * 1e9
        / runs.iter().map(Work::switch_runs).sum::<u64>().max(1) as f64;
    println!(
        "  {:<28} {:>18} {:>18} {:>16} {:>18} {ns:>9.0} {:>10.2}",
        arm.label(),
        format!("{:.0} ± {:.0}", rate.mean, rate.se),
        if runs.iter().all(|w| w.drained.is_some()) {
            format!("{:.0} ± {:.0}", drained.mean, drained.se)
        } else {
            "? (no summary)".into()
        },
        format!("{:.3} ± {:.3}", bpf.mean, bpf.se),
        format!("{:.3} ± {:.3}", user.mean, user.se),
        ns / bare_ns
    );
}

/// The checks of one imc arm of the switch-heavy kind: its userspace CPU, its records drained
/// per second, and its ns per run against the bare program's (per round, with and without the
/// clock read counted as one it must make).
fn switch_checks(
    arm: Arm,
    runs: &[Work],
    bare: &[Work],
    (read_costs, clock_costs): (&[f64], &[f64]),
    user: MeanSe,
    drained: MeanSe,
    (c, hz, cpu_reads): (f64, f64, usize),
) -> Vec<Check> {
    let records_target = TARGET_RECORDS_PER_TICK * c * hz;
    let mut checks = Vec::new();
    checks.push(Check {
        what: format!("switch, {}: userspace CPU, % of the machine", arm.label()),
        figure: user,
        target: TARGET_USERSPACE_PCT,
        detail: "imc's process CPU over wall × CPUs".into(),
    });
    checks.push(Check {
        what: format!("switch, {}: records drained/s", arm.label()),
        figure: drained,
        target: records_target,
        detail: format!("{TARGET_RECORDS_PER_TICK} × {c} CPUs × HZ {hz}"),
    });
    // Per round, not pooled: each round's ns per run minus that round's bare one, its reads
    // (the counters and the clock) and the allowance.
    let excess: Vec<f64> = runs
        .iter()
        .zip(bare)
        .zip(read_costs.iter().zip(clock_costs))
        .map(|((w, b), (read, clock_ns))| {
            w.ns_per_switch_run()
                - b.bare_ns_per_run()
                - cpu_reads as f64 * read
                - clock_ns
                - TARGET_NS_OVER_READS
        })
        .collect();
    checks.push(Check {
        what: format!(
            "switch, {}: ns per run minus (bare's + {cpu_reads} counter read(s) + the clock \
             + {TARGET_NS_OVER_READS} ns)",
            arm.label()
        ),
        figure: mean_se(&excess),
        target: 0.0,
        detail: "a read's cost is the bare program with one read less the bare one, the \
                 clock's the bare program reading the time less the bare one, per round"
            .into(),
    });
    checks
}
