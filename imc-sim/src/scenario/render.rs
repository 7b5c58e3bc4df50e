//! A scenario's outcome as text: per task its truth, attributed bytes and error, then the
//! summary lines, victims and latency.

use super::*;

impl Outcome {
    /// The text table: per task its truth, attributed bytes and error; then summary lines.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "scenario {}: weighting {}{}",
            self.name,
            self.weighting.method,
            if self.weights.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.weights.join(", "))
            }
        );
        let _ = writeln!(s, "  {}", self.weighting.reason);
        let _ = writeln!(
            s,
            "  {:>8} {:<16} {:>14} {:>14} {:>8} {:>8}",
            "pid", "comm", "truth", "attributed", "share", "error"
        );
        self.render_tasks(&mut s);
        let _ = writeln!(
            s,
            "  total {} (controllers, tasks and DMA); counted {}, unattributed {}",
            imc::text::fmt_bytes(self.total_bytes),
            imc::text::fmt_bytes(self.package_bytes),
            imc::text::fmt_bytes(self.unattributed_bytes)
        );
        let _ = writeln!(
            s,
            "  device/unseen (no core counter saw it) {}, devices' truth {}: error {:.4}",
            imc::text::fmt_bytes(self.device_bytes),
            imc::text::fmt_bytes(self.truth_device_bytes),
            self.device_error
        );
        let _ = writeln!(
            s,
            "  max_error {:.4}{}",
            self.max_error,
            if self.aggregated {
                " (per-task aggregates at each tick, the kernel's default)"
            } else {
                " (a record per context switch)"
            }
        );
        if let Some(p) = self.precise_max_error {
            let _ = writeln!(
                s,
                "  max_error {p:.4} from a record per context switch (--precise): difference {:.4}",
                (self.max_error - p).abs()
            );
        }
        self.render_victims(&mut s);
        s
    }

    /// The 20 tasks with the most true bytes: truth, attributed, share, error; a line for the
    /// rest.
    fn render_tasks(&self, s: &mut String) {
        use std::fmt::Write;
        let mut rows: Vec<&TaskResult> = self.tasks.iter().collect();
        rows.sort_by(|a, b| {
            b.truth_bytes
                .total_cmp(&a.truth_bytes)
                .then(a.pid.cmp(&b.pid))
        });
        let limit = 20;
        for t in rows.iter().take(limit) {
            let share = if self.package_bytes > 0.0 {
                t.attributed_bytes / self.package_bytes
            } else {
                0.0
            };
            let _ = writeln!(
                s,
                "  {:>8} {:<16} {:>14} {:>14} {:>7.2}% {:>8.4}",
                t.pid,
                t.comm,
                imc::text::fmt_bytes(t.truth_bytes),
                imc::text::fmt_bytes(t.attributed_bytes),
                share * 100.0,
                t.error
            );
        }
        if rows.len() > limit {
            let worst = rows[limit..].iter().map(|t| t.error).fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "  … {} more task(s), largest error among them {:.4}",
                rows.len() - limit,
                worst
            );
        }
    }

    /// Victims (each task's stall share, true and charged, the most stalled first) and the
    /// packages' loaded latency.
    fn render_victims(&self, s: &mut String) {
        use std::fmt::Write;
        let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
        match self.victims_ranked_right {
            None => {
                let _ = writeln!(s, "  victims: the plan counts no stalls");
            }
            Some(right) => {
                let mut rows: Vec<&TaskResult> = self.tasks.iter().collect();
                rows.sort_by(|a, b| {
                    b.truth_stall_share
                        .unwrap_or(-1.0)
                        .total_cmp(&a.truth_stall_share.unwrap_or(-1.0))
                        .then(a.pid.cmp(&b.pid))
                });
                let _ = writeln!(
                    s,
                    "  victims (stalled share of cycles, truth / charged), ranked {}:",
                    if right { "right" } else { "WRONG" }
                );
                for t in rows.iter().take(5) {
                    let _ = writeln!(
                        s,
                        "  {:>8} {:<16} {:>7} {:>7}",
                        t.pid,
                        t.comm,
                        pct(t.truth_stall_share),
                        pct(t.attributed_stall_share)
                    );
                }
            }
        }
        for l in &self.latency {
            let ns = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ns"));
            let _ = writeln!(
                s,
                "  package {} read latency: truth {}, from its queue's counts {}, error {}",
                l.package,
                ns(l.truth_ns),
                ns(l.measured_ns),
                l.error.map_or("-".to_string(), |e| format!("{e:.5}"))
            );
        }
    }
}
