//! The quiet-machine check run before each cell: a figure measured while
//! something else had the CPU is not a result. Two readings, taken while
//! the benchmark's own load is stopped:
//!
//! - how busy the machine's CPUs were over a short window (from
//!   `/proc/stat`; the 1-minute load average is printed too, but it still
//!   carries the previous cell's own load, so it is not judged);
//! - how long a fixed piece of arithmetic took, against the fastest time of
//!   the run: a VM whose host is busy runs it slower even when this
//!   machine's CPUs look idle.

use std::fs;
use std::time::{Duration, Instant};

/// The window over which CPU use is read.
const WINDOW: Duration = Duration::from_millis(300);
/// Busier than this (fraction of all CPUs) is a warning.
const BUSY_LIMIT: f64 = 0.25;
/// A probe slower than this multiple of the run's fastest is a warning.
const PROBE_LIMIT: f64 = 1.25;
/// Iterations of the probe (about 10 ms on the machines it was written on).
const PROBE_ITERATIONS: u64 = 4_000_000;

#[derive(Default)]
pub struct Quiet {
    /// The fastest probe of the run, in µs.
    best_probe_us: Option<f64>,
}

pub struct Reading {
    pub load1: f64,
    pub busy: f64,
    pub probe_us: f64,
    /// Why the machine was not quiet, when it was not.
    pub warning: Option<String>,
}

impl Quiet {
    pub async fn check(&mut self) -> Reading {
        let load1 = fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let before = cpu_ticks();
        tokio::time::sleep(WINDOW).await;
        let after = cpu_ticks();
        let busy = match (before, after) {
            (Some((b_busy, b_all)), Some((a_busy, a_all))) if a_all > b_all => {
                (a_busy - b_busy) as f64 / (a_all - b_all) as f64
            }
            _ => 0.0,
        };
        // The probe three times; its best is the machine's speed now.
        let probe_us = (0..3).map(|_| probe()).fold(f64::MAX, f64::min);
        let best = *self.best_probe_us.get_or_insert(probe_us);
        self.best_probe_us = Some(best.min(probe_us));
        let mut why = Vec::new();
        if busy > BUSY_LIMIT {
            why.push(format!(
                "CPUs {:.0}% busy with the benchmark idle",
                busy * 100.0
            ));
        }
        if probe_us > best * PROBE_LIMIT {
            why.push(format!(
                "the CPU probe took {:.1}× its fastest time of the run",
                probe_us / best
            ));
        }
        Reading {
            load1,
            busy,
            probe_us,
            warning: (!why.is_empty()).then(|| why.join("; ")),
        }
    }
}

/// (busy, all) jiffies summed over every CPU: the first line of /proc/stat.
fn cpu_ticks() -> Option<(u64, u64)> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<u64> = line
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let all: u64 = f.iter().take(8).sum();
    let idle = f.get(3)? + f.get(4).copied().unwrap_or(0);
    Some((all - idle, all))
}

/// A fixed amount of integer arithmetic; µs it took.
fn probe() -> f64 {
    let start = Instant::now();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..PROBE_ITERATIONS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_add(i);
    }
    std::hint::black_box(x);
    start.elapsed().as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_proc_stat() {
        let (busy, all) = super::cpu_ticks().expect("/proc/stat");
        assert!(busy <= all && all > 0);
    }
}
