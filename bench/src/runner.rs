//! Runs one measurement slice: C connections doing one kind of request
//! until a deadline (or until a message budget is consumed), and what that
//! cost in CPU on each side.

use crate::ops::{Op, Worker};
use crate::payload::Payloads;
use crate::procfs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
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
///
/// Connections on the raw client run as pgbench's `-j 2` runs them: on
/// [`CLIENT_THREADS`] threads of their own, each a single-threaded runtime
/// driving its share of the connections, so a reply wakes only the thread
/// whose connection waits for it. The others (tokio-postgres hands every
/// query to a connection task) run on the benchmark's runtime.
pub async fn run_slice(spec: SliceSpec<'_>, payloads: &Arc<Payloads>, probes: Probes) -> Slice {
    if !spec.ops.is_empty() && spec.ops.iter().all(Op::raw) {
        return run_slice_on_threads(spec, payloads, probes).await;
    }
    let ops = spec.ops.into_iter().enumerate().collect();
    let workers = match open_all(spec.cfg, ops, payloads, spec.warmup).await {
        Ok(workers) => workers,
        Err(e) => {
            return Slice {
                error: Some(e),
                ..Slice::default()
            }
        }
    };
    if !spec.label.is_empty() {
        eprintln!("bench: timing {}", spec.label);
    }
    let cpu0 = probes.sample();
    let start = Instant::now();
    let timing = Timing {
        start,
        deadline: start + spec.duration,
        budget: spec.budget,
        stop: Arc::new(AtomicBool::new(false)),
        done: Arc::new(AtomicU64::new(0)),
    };
    let (runs, error) = drive_all(workers, &timing).await;
    let cpu = probes.sample() - cpu0;
    let mut slice = tally(runs, &timing, cpu);
    if slice.error.is_none() {
        slice.error = error;
    }
    slice
}

/// Threads the raw-client connections of one slice are spread over, as
/// `pgbench -j 2` spreads its clients.
pub const CLIENT_THREADS: usize = 2;

async fn run_slice_on_threads(
    spec: SliceSpec<'_>,
    payloads: &Arc<Payloads>,
    probes: Probes,
) -> Slice {
    let threads = CLIENT_THREADS.min(spec.ops.len());
    let mut shares: Vec<Vec<(usize, Op)>> = vec![Vec::new(); threads];
    for (i, op) in spec.ops.into_iter().enumerate() {
        shares[i % threads].push((i, op));
    }
    // Every thread has connected (or failed to); then the clock starts.
    let connected = Arc::new(Barrier::new(threads + 1));
    let started = Arc::new(Barrier::new(threads + 1));
    let start_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let failed: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let (duration, budget, warmup) = (spec.duration, spec.budget, spec.warmup);
    let (results, ran) = mpsc::channel::<Vec<Run>>();
    // A thread keeps its connections open until its sender here is
    // dropped: after the CPU is sampled, as on the runtime.
    let mut releases = Vec::new();
    let mut handles = Vec::new();
    for share in shares {
        let (connected, started) = (connected.clone(), started.clone());
        let (start_at, failed) = (start_at.clone(), failed.clone());
        let (stop, done) = (stop.clone(), done.clone());
        let (cfg, payloads, results) = (spec.cfg.clone(), payloads.clone(), results.clone());
        let (release, released) = mpsc::channel::<()>();
        releases.push(release);
        handles.push(std::thread::spawn(move || {
            let fail = |e: String| {
                lock(&failed).get_or_insert(e);
            };
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    fail(format!("client runtime: {e}"));
                    connected.wait();
                    started.wait();
                    let _ = results.send(Vec::new());
                    return;
                }
            };
            runtime.block_on(async move {
                let workers = open_all(&cfg, share, &payloads, warmup)
                    .await
                    .unwrap_or_else(|e| {
                        fail(e);
                        Vec::new()
                    });
                connected.wait();
                started.wait();
                let Some(start) = *lock(&start_at) else {
                    let _ = results.send(Vec::new());
                    return;
                };
                let timing = Timing {
                    start,
                    deadline: start + duration,
                    budget,
                    stop,
                    done,
                };
                let (mut runs, error) = drive_all(workers, &timing).await;
                if let Some(e) = error {
                    fail(e);
                }
                let keep: Vec<Worker> = runs.iter_mut().filter_map(|r| r.worker.take()).collect();
                let _ = results.send(runs);
                let _ = released.recv();
                drop(keep);
            });
        }));
    }
    drop(results);
    let label = spec.label;
    let failed_at_end = failed.clone();
    let coordinated = tokio::task::spawn_blocking(move || {
        connected.wait();
        let ok = lock(&failed).is_none();
        if ok && !label.is_empty() {
            eprintln!("bench: timing {label}");
        }
        let cpu0 = probes.sample();
        let start = Instant::now();
        if ok {
            *lock(&start_at) = Some(start);
        }
        started.wait();
        let mut runs = Vec::new();
        // One send a thread, whatever became of it.
        for _ in 0..threads {
            match ran.recv() {
                Ok(r) => runs.extend(r),
                Err(_) => break,
            }
        }
        let cpu = probes.sample() - cpu0;
        drop(releases);
        for h in handles {
            if h.join().is_err() {
                lock(&failed).get_or_insert_with(|| "a client thread panicked".into());
            }
        }
        (start, runs, cpu)
    })
    .await;
    let error = lock(&failed_at_end).take();
    match coordinated {
        Ok((start, runs, cpu)) if error.is_none() || !runs.is_empty() => {
            let timing = Timing {
                start,
                deadline: start + duration,
                budget,
                stop,
                done,
            };
            let mut slice = tally(runs, &timing, cpu);
            if slice.error.is_none() {
                slice.error = error;
            }
            slice
        }
        Ok(_) => Slice {
            error,
            ..Slice::default()
        },
        Err(e) => Slice {
            error: Some(e.to_string()),
            ..Slice::default()
        },
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens the connections of `ops` (each with its number) at once; the
/// first failure if any failed.
async fn open_all(
    cfg: &Config,
    ops: Vec<(usize, Op)>,
    payloads: &Arc<Payloads>,
    warmup: bool,
) -> Result<Vec<Worker>, String> {
    let mut connecting = JoinSet::new();
    for (i, op) in ops {
        connecting.spawn(open(cfg.clone(), op, payloads.clone(), i, warmup));
    }
    let mut workers = Vec::new();
    while let Some(r) = connecting.join_next().await {
        workers.push(r.map_err(|e| e.to_string()).and_then(|w| w)?);
    }
    Ok(workers)
}

/// Every worker driven to the end of the slice at once; a worker task that
/// failed outright is the error.
async fn drive_all(workers: Vec<Worker>, timing: &Timing) -> (Vec<Run>, Option<String>) {
    let mut running = JoinSet::new();
    for w in workers {
        running.spawn(drive(w, timing.clone()));
    }
    let (mut runs, mut error) = (Vec::new(), None);
    while let Some(r) = running.join_next().await {
        match r {
            Ok(run) => runs.push(run),
            Err(e) => error = Some(e.to_string()),
        }
    }
    (runs, error)
}

/// One connection, opened and (if asked) warmed with one untimed request.
async fn open(
    cfg: Config,
    op: Op,
    payloads: Arc<Payloads>,
    seed: usize,
    warmup: bool,
) -> Result<Worker, String> {
    let mut w = tokio::time::timeout(OP_TIMEOUT, Worker::new(&cfg, op, payloads, seed))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {}", crate::setup::describe(&*e)))?;
    if warmup {
        tokio::time::timeout(OP_TIMEOUT, w.run_once(None))
            .await
            .map_err(|_| "warm-up timed out".to_string())?
            .map_err(|e| format!("warm-up: {}", crate::setup::describe(&*e)))?;
    }
    Ok(w)
}

/// The clock and the budget every connection of a slice shares.
#[derive(Clone)]
struct Timing {
    start: Instant,
    deadline: Instant,
    budget: Option<u64>,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
}

/// What one connection did in a slice.
struct Run {
    lat: Vec<u32>,
    ops: u64,
    empty: u64,
    /// When it stopped, and when it last finished a request that moved
    /// messages.
    end: Instant,
    busy_until: Instant,
    error: Option<String>,
    /// Kept until the slice's CPU is sampled, so that no connection's close
    /// is counted in it.
    worker: Option<Worker>,
}

/// Requests on one connection until the deadline, the budget or an error.
async fn drive(mut w: Worker, t: Timing) -> Run {
    let mut lat = Vec::new();
    let (mut ops, mut empty) = (0u64, 0u64);
    let mut error = None;
    let mut busy_until = t.start;
    while !t.stop.load(Ordering::Relaxed) && Instant::now() < t.deadline {
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
                let total = t.done.fetch_add(n, Ordering::Relaxed) + n;
                if t.budget.is_some_and(|b| total >= b) {
                    t.stop.store(true, Ordering::Relaxed);
                }
            }
            Ok(Err(e)) => {
                error = Some(crate::setup::describe(&*e));
                t.stop.store(true, Ordering::Relaxed);
            }
            Err(_) => {
                error = Some(format!("a request took more than {OP_TIMEOUT:?}"));
                t.stop.store(true, Ordering::Relaxed);
            }
        }
    }
    Run {
        lat,
        ops,
        empty,
        end: Instant::now(),
        busy_until,
        error,
        worker: Some(w),
    }
}

/// The slice from its connections' runs.
fn tally(runs: Vec<Run>, t: &Timing, cpu: Cpu) -> Slice {
    let mut slice = Slice {
        cpu,
        ..Slice::default()
    };
    let (mut end, mut busy_until) = (t.start, t.start);
    for run in runs {
        slice.lat_us.extend(run.lat);
        slice.ops += run.ops;
        slice.empty += run.empty;
        end = end.max(run.end);
        busy_until = busy_until.max(run.busy_until);
        if slice.error.is_none() {
            slice.error = run.error;
        }
    }
    // A request begun before the deadline that moved nothing (a POP that
    // waits, say) and ended after it is idle time, not part of the slice;
    // work finished after the deadline is.
    slice.elapsed = end.min(t.deadline.max(busy_until)) - t.start;
    slice.msgs = t.done.load(Ordering::Relaxed);
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
