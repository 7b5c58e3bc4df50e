//! Intel client DRAM counters read straight from the memory controller's MMIO window (MCHBAR)
//! through a read-only mapping of /dev/mem.
//!
//! The counters are 32 bits of 64-byte lines: 2^32 × 64 B = 256 GiB, about 5 s at 50 GB/s. The
//! backend keeps 64-bit totals and asks the interval loop to `poll` every `POLL_PERIOD` whatever
//! the interval, so a long `-I` never misses a wrap.
use super::from_plan::MchbarCounter;
use super::{Backend, BackendError, CounterFailure, CounterSpec, RawReading};
use crate::sys::devmem::{self, DevMem, DevMemError, Region};
use std::path::Path;
use std::time::Duration;

/// Poll period for 32-bit counters: a wrap takes 2^32 counts; at 100 ms this is safe up to
/// 2.7 TB/s of 64-byte lines, far above any client memory controller, for 10 reads a second.
pub const POLL_PERIOD: Duration = Duration::from_millis(100);

struct Hw {
    region: usize,
    address: u64,
    width: u8,
    last: u64,
    total: u64,
    ok: bool,
}

pub struct MchbarBackend {
    regions: Vec<Box<dyn Region>>,
    counters: Vec<CounterSpec>,
    hw: Vec<Hw>,
    failures: Vec<CounterFailure>,
}

impl MchbarBackend {
    /// Maps only the page(s) holding `counters` from `path` (normally /dev/mem), read-only.
    pub fn open(
        devmem: &dyn DevMem,
        path: &Path,
        counters: Vec<MchbarCounter>,
    ) -> Result<MchbarBackend, BackendError> {
        let page = devmem::page_size();
        let addrs: Vec<(u64, u8)> = counters.iter().map(|c| (c.address, c.width)).collect();
        // Reject bad widths/alignment before mapping anything.
        for &(a, w) in &addrs {
            let base = a - a % page;
            devmem::offset_in_window(a, w, base, 2 * page as usize)?;
        }
        let mut regions = Vec::new();
        for (base, len) in devmem::windows(&addrs, page) {
            regions.push(devmem.map_readonly(path, base, len)?);
        }
        let mut hw = Vec::new();
        for c in &counters {
            let region = regions
                .iter()
                .position(|r| {
                    devmem::offset_in_window(c.address, c.width, r.base(), r.len()).is_ok()
                })
                .ok_or(DevMemError::OutsideWindow {
                    addr: c.address,
                    width: c.width,
                    base: 0,
                    end: 0,
                })?;
            let last = regions[region].read(c.address, c.width)?;
            hw.push(Hw {
                region,
                address: c.address,
                width: c.width,
                last,
                total: 0,
                ok: true,
            });
        }
        Ok(MchbarBackend {
            regions,
            counters: counters.into_iter().map(|c| c.spec).collect(),
            hw,
            failures: Vec::new(),
        })
    }

    /// Reads the word at `address` through the backend's mappings: refused when the address is
    /// outside every mapped window.
    pub fn read_address(&self, address: u64, width: u8) -> Result<u64, DevMemError> {
        let mut last_err = None;
        for r in &self.regions {
            match r.read(address, width) {
                Ok(v) => return Ok(v),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or(DevMemError::OutsideWindow {
            addr: address,
            width,
            base: 0,
            end: 0,
        }))
    }

    /// The mapped windows as (physical base, length).
    pub fn windows(&self) -> Vec<(u64, usize)> {
        self.regions.iter().map(|r| (r.base(), r.len())).collect()
    }
}

impl Backend for MchbarBackend {
    fn source(&self) -> &str {
        "intel-client-mchbar"
    }

    fn counters(&self) -> &[CounterSpec] {
        &self.counters
    }

    fn read(&mut self, out: &mut [RawReading]) {
        self.poll();
        for (r, h) in out.iter_mut().zip(&self.hw) {
            *r = RawReading {
                value: h.total,
                enabled: 0,
                running: 0,
                ok: h.ok,
            };
        }
    }

    fn poll_period(&self) -> Option<Duration> {
        self.hw.iter().any(|h| h.width < 64).then_some(POLL_PERIOD)
    }

    fn poll(&mut self) {
        for (i, h) in self.hw.iter_mut().enumerate() {
            if !h.ok {
                continue;
            }
            match self.regions[h.region].read(h.address, h.width) {
                Ok(v) => {
                    h.total = h
                        .total
                        .wrapping_add(super::counter::wrapping_delta(h.last, v, h.width));
                    h.last = v;
                }
                Err(e) => {
                    h.ok = false;
                    self.failures.push(CounterFailure {
                        counter: Some(i),
                        message: format!(
                            "{}: {}",
                            self.counters[i].describe(),
                            crate::text::error_line(&e)
                        ),
                    });
                }
            }
        }
    }

    fn take_failures(&mut self) -> Vec<CounterFailure> {
        std::mem::take(&mut self.failures)
    }
}
