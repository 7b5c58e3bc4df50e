//! The program's own counts (runs, package reads, read failures), per CPU.
use imc_common::MAX_SLOTS;

/// Per-CPU program statistics, from the STATS map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    pub cpu: u32,
    pub runs: u64,
    pub lost: u64,
    pub read_errors: [u64; MAX_SLOTS],
    /// Reads that found no counter in this CPU's entry (-ENOENT).
    pub absent: [u64; MAX_SLOTS],
    /// Times this CPU read its package's counters as their reader.
    pub pkg_reads: u64,
    /// Runs that found a task no switch program saw start (imc_common::STAT_UNSEEN_SWITCH):
    /// what the CPU counted before them was charged to no task.
    pub unseen_switches: u64,
    /// Charged slices whose stack entry did not fit the kernel's map (imc_common::
    /// STAT_STACK_DROPPED): charged to their task, in no stack.
    pub stacks_dropped: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SamplerStats {
    pub per_cpu: Vec<CpuStats>,
}

impl SamplerStats {
    pub fn runs(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.runs).sum()
    }
    pub fn lost(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.lost).sum()
    }
    pub fn unseen_switches(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.unseen_switches).sum()
    }
    pub fn stacks_dropped(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.stacks_dropped).sum()
    }
    pub fn read_errors(&self, slot: usize) -> u64 {
        self.per_cpu.iter().map(|c| c.read_errors[slot]).sum()
    }
}

/// What the kernel made of one loaded program: the instructions its verifier processed (every
/// path it explored, a measure of the program's branching) and the size of the program it
/// runs, before and after the JIT. None where the kernel does not say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramCost {
    pub name: String,
    pub verified_insns: Option<u32>,
    /// Bytes of translated (verifier-rewritten) eBPF instructions, 8 per instruction.
    pub translated_bytes: Option<u32>,
    pub jitted_bytes: Option<u32>,
}
