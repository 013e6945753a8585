//! Runs one measurement slice: C connections doing one kind of request
//! until a deadline (or until a message budget is consumed), and what that
//! cost in CPU on each side.

use crate::ops::{Op, Worker};
use crate::payload::Payloads;
use crate::procfs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio_postgres::Config;

/// No single request may take longer than this.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);
/// At most this many latency samples per connection and slice.
const MAX_SAMPLES: usize = 1_000_000;
/// A consumer that found nothing waits this long before asking again
/// (every system alike).
const EMPTY_BACKOFF: Duration = Duration::from_millis(1);

/// CPU time used, in µs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    pub postgres: u64,
    pub proxy: u64,
    pub client: u64,
}

#[derive(Clone, Copy)]
pub struct Probes {
    pub postmaster: u32,
    pub proxy: u32,
}

impl Probes {
    pub fn sample(&self) -> Cpu {
        Cpu {
            postgres: procfs::cluster_cpu_us(self.postmaster),
            proxy: procfs::process_cpu_us(self.proxy),
            client: procfs::self_cpu_us(),
        }
    }
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu {
            postgres: self.postgres.saturating_sub(o.postgres),
            proxy: self.proxy.saturating_sub(o.proxy),
            client: self.client.saturating_sub(o.client),
        }
    }
}

#[derive(Debug, Default)]
pub struct Slice {
    pub msgs: u64,
    pub ops: u64,
    pub empty: u64,
    pub elapsed: Duration,
    pub lat_us: Vec<u32>,
    pub cpu: Cpu,
    pub error: Option<String>,
}

impl Slice {
    pub fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.msgs as f64 / s
        } else {
            0.0
        }
    }
}

pub struct SliceSpec<'a> {
    pub cfg: &'a Config,
    /// One op per connection.
    pub ops: Vec<Op>,
    pub duration: Duration,
    /// Stop once this many messages have moved.
    pub budget: Option<u64>,
    /// One untimed request per connection first (pushes, SELECT 1).
    pub warmup: bool,
    /// Announced on stderr when the timed part starts (empty: silent).
    pub label: String,
}

/// Opens the connections (untimed), then runs them all from one start.
pub async fn run_slice(spec: SliceSpec<'_>, payloads: &Arc<Payloads>, probes: Probes) -> Slice {
    let warmup = spec.warmup;
    let mut connecting = JoinSet::new();
    for (i, op) in spec.ops.iter().enumerate() {
        let cfg = spec.cfg.clone();
        let op = op.clone();
        let payloads = payloads.clone();
        connecting.spawn(async move {
            let mut w = tokio::time::timeout(OP_TIMEOUT, Worker::new(&cfg, op, payloads, i))
                .await
                .map_err(|_| "connect timed out".to_string())?
                .map_err(|e| format!("connect: {}", crate::setup::describe(&*e)))?;
            if warmup {
                tokio::time::timeout(OP_TIMEOUT, w.run_once(None))
                    .await
                    .map_err(|_| "warm-up timed out".to_string())?
                    .map_err(|e| format!("warm-up: {}", crate::setup::describe(&*e)))?;
            }
            Ok::<Worker, String>(w)
        });
    }
    let mut workers = Vec::new();
    while let Some(r) = connecting.join_next().await {
        match r {
            Ok(Ok(w)) => workers.push(w),
            Ok(Err(e)) => {
                return Slice {
                    error: Some(e),
                    ..Slice::default()
                }
            }
            Err(e) => {
                return Slice {
                    error: Some(e.to_string()),
                    ..Slice::default()
                }
            }
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    if !spec.label.is_empty() {
        eprintln!("bench: timing {}", spec.label);
    }
    let cpu0 = probes.sample();
    let start = Instant::now();
    let deadline = start + spec.duration;
    let mut running = JoinSet::new();
    for mut w in workers {
        let stop = stop.clone();
        let done = done.clone();
        let budget = spec.budget;
        running.spawn(async move {
            let mut lat = Vec::new();
            let (mut ops, mut empty) = (0u64, 0u64);
            let mut error = None;
            // When this connection last finished a request that moved
            // messages.
            let mut busy_until = start;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let t0 = Instant::now();
                match tokio::time::timeout(OP_TIMEOUT, w.run_once(None)).await {
                    Ok(Ok(0)) => {
                        empty += 1;
                        tokio::time::sleep(EMPTY_BACKOFF).await;
                    }
                    Ok(Ok(n)) => {
                        if lat.len() < MAX_SAMPLES {
                            lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        }
                        ops += 1;
                        busy_until = Instant::now();
                        let total = done.fetch_add(n, Ordering::Relaxed) + n;
                        if budget.is_some_and(|b| total >= b) {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    Ok(Err(e)) => {
                        error = Some(crate::setup::describe(&*e));
                        stop.store(true, Ordering::Relaxed);
                    }
                    Err(_) => {
                        error = Some(format!("a request took more than {OP_TIMEOUT:?}"));
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            (lat, ops, empty, Instant::now(), busy_until, error, w)
        });
    }
    let mut slice = Slice::default();
    let mut end = start;
    let mut busy_until = start;
    let mut finished = Vec::new();
    while let Some(r) = running.join_next().await {
        match r {
            Ok((lat, ops, empty, t, busy, error, w)) => {
                slice.lat_us.extend(lat);
                slice.ops += ops;
                slice.empty += empty;
                end = end.max(t);
                busy_until = busy_until.max(busy);
                if slice.error.is_none() {
                    slice.error = error;
                }
                finished.push(w);
            }
            Err(e) => slice.error = Some(e.to_string()),
        }
    }
    slice.cpu = probes.sample() - cpu0;
    // A request begun before the deadline that moved nothing (a POP that
    // waits, say) and ended after it is idle time, not part of the slice;
    // work finished after the deadline is.
    slice.elapsed = end.min(deadline.max(busy_until)) - start;
    slice.msgs = done.load(Ordering::Relaxed);
    drop(finished);
    slice
}

pub fn percentile(sorted: &[u32], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Some(sorted[i.min(sorted.len() - 1)] as f64)
}

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
