//! Attaching the program: to the kernel's tick and sched_switch, or to a cpu-clock timer per CPU.
use super::config::{KERNEL_TICK_TRACEPOINTS, SamplerConfig, TickAttached, TickSource};
use super::error::SamplerError;
use crate::text::error_line;
use aya::Ebpf;
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, RawTracePoint};
use imc_common::{EXEC_PROGRAM, SWITCH_PROGRAM, TICK_TP_PROGRAM};

pub(super) fn load_program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, SamplerError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| SamplerError::Load {
            message: format!("program {name} missing from the object"),
            source: None,
        })?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| SamplerError::load(e))
}

/// Attaches the tick (and sched_switch): the kernel's tick through the first tracepoint of
/// [`KERNEL_TICK_TRACEPOINTS`] that attaches, or the cpu-clock timer with `--freq`.
///
/// sched_switch goes first. A tick's run charges what its CPU counted since that CPU's last run
/// to the task it interrupts, which is right only when every change of task in between ran the
/// switch program: a tick attached first would, until sched_switch is attached (its program is
/// verified in between, tens of milliseconds on a loaded host), charge a whole tick period of
/// whatever ran (a page-fault churner's faults) to the task the next tick happens to find (a
/// spinner that never faults). With sched_switch first, each CPU's first run, a switch, sets the
/// baselines only, and every later slice is bounded by switches. Both programs are verified
/// before either is attached, so the switches alone run for microseconds, not the verifier's
/// time (aggregating, they write only when a CPU's accumulator fills, and a busy host filled the
/// rings before the loop's first drain).
pub(super) fn attach(
    ebpf: &mut Ebpf,
    cfg: &SamplerConfig,
) -> Result<(TickAttached, &'static str), SamplerError> {
    match cfg.tick {
        TickSource::Kernel => {
            let prog: &mut RawTracePoint = load_program(ebpf, TICK_TP_PROGRAM)?;
            prog.load().map_err(SamplerError::load)?;
        }
        TickSource::CpuClock { .. } => {
            let prog: &mut PerfEvent = load_program(ebpf, cfg.tick_program.name())?;
            prog.load().map_err(SamplerError::load)?;
        }
    }
    if cfg.switches() {
        attach_sched(ebpf, SWITCH_PROGRAM, "sched_switch")?;
    }
    attach_exec(ebpf);
    match cfg.tick {
        TickSource::Kernel => attach_kernel_tick(ebpf),
        TickSource::CpuClock { freq, .. } => attach_cpu_clock(ebpf, cfg, freq),
    }
}

/// The exec program: tasks are described afresh after an exec, so a command started by imc
/// (forked under imc's name) is named by what it executed. Where it does not attach, a
/// thread's comm is fetched again every 64th record of it, as before: said at -v, not fatal.
fn attach_exec(ebpf: &mut Ebpf) {
    if let Err(e) = attach_sched(ebpf, EXEC_PROGRAM, "sched_process_exec") {
        log::info!(
            "comm after exec: {}; a thread's name is fetched again every 64th record",
            error_line(&e)
        );
    }
}

/// Loads raw-tracepoint program `name` and attaches it to the scheduler's `tracepoint`.
fn attach_sched(ebpf: &mut Ebpf, name: &str, tracepoint: &str) -> Result<(), SamplerError> {
    let prog: &mut RawTracePoint = load_program(ebpf, name)?;
    prog.load().map_err(SamplerError::load)?;
    prog.attach(tracepoint)
        .map(|_| ())
        .map_err(|e| SamplerError::Attach {
            what: format!("sched/{tracepoint}"),
            message: String::new(),
            source: Some(e.into()),
        })
}

/// The tick program on the first of the kernel's tick tracepoints that attaches.
fn attach_kernel_tick(ebpf: &mut Ebpf) -> Result<(TickAttached, &'static str), SamplerError> {
    let prog: &mut RawTracePoint = load_program(ebpf, TICK_TP_PROGRAM)?;
    let mut tried = Vec::new();
    let mut chosen = None;
    for tp in KERNEL_TICK_TRACEPOINTS {
        match prog.attach(tp) {
            Ok(_) => {
                chosen = Some(tp);
                break;
            }
            Err(e) => tried.push(format!("{tp}: {}", error_line(&e))),
        }
    }
    let Some(tp) = chosen else {
        return Err(SamplerError::Attach {
            what: "the kernel's tick".into(),
            message: format!(
                "{} (use --freq HZ for a timer of imc's own)",
                tried.join("; ")
            ),
            source: None,
        });
    };
    let why = if tried.is_empty() {
        format!("{tp} fires at the kernel's own timer interrupt")
    } else {
        format!("{tp}, since {}", tried.join("; "))
    };
    Ok((
        TickAttached {
            source: format!("tracepoint:{tp}+sched_switch"),
            adds_interrupts: false,
            why,
        },
        TICK_TP_PROGRAM,
    ))
}

/// The tick program on a cpu-clock timer of `freq` Hz on every CPU of the run.
fn attach_cpu_clock(
    ebpf: &mut Ebpf,
    cfg: &SamplerConfig,
    freq: u32,
) -> Result<(TickAttached, &'static str), SamplerError> {
    // A period in ns (not a frequency) gives exactly `freq` ticks per busy second, with
    // no adaptive period for the kernel to tune.
    let period_ns = 1_000_000_000u64 / u64::from(freq.max(1));
    let name = cfg.tick_program.name();
    let prog: &mut PerfEvent = load_program(ebpf, name)?;
    for &cpu in &cfg.cpus {
        prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Period(period_ns),
            false,
        )
        .map_err(|e| SamplerError::Attach {
            what: format!("the cpu-clock timer of CPU {cpu}"),
            message: String::new(),
            source: Some(e.into()),
        })?;
    }
    Ok((
        TickAttached {
            source: format!("cpu-clock:{freq}Hz"),
            adds_interrupts: true,
            why: format!(
                "--freq {freq} asks for imc's own timer: one interrupt per CPU every {} us",
                period_ns / 1000
            ),
        },
        name,
    ))
}
