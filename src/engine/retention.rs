//! Retention and partition cleanup, run by exactly one queenwire per cycle.
//!
//! Every queenwire runs [`run`], which ticks four times per
//! [`RetentionSettings::interval`] and asks `queen.maintenance_try_lease_v1`
//! (029) for the lease of each task, `log_retention` and `log_cleanup`,
//! for one interval. The holder renews it at every tick and runs a pass
//! when its last one is an interval old; every other queenwire is refused
//! until the holder stops renewing, so after a crash another one takes over
//! at most an interval after the last renewal plus a quarter interval of
//! ticking (1.25 cycles). A pass also renews the lease before each
//! partition it trims, gives a partition at most half an interval, and
//! stops when the lease is lost, so two passes of one task never overlap, and passes are at least an interval apart whoever runs them (a
//! new holder's first pass comes an interval after the old holder's last
//! renewal, which followed its last pass).
//!
//! A retention pass pages through `queen.log_retention_work_v1` (the
//! partitions whose oldest segment is due) and runs
//! `queen.log_retention_step_v1` on each: one transaction per step, one
//! partition row lock taken with SKIP LOCKED, at most [`STEP_SEGMENTS`]
//! segments deleted, so a push to that partition waits at most one bounded
//! batch and a pop never waits. A step that finds the partition held by a
//! push returns `locked` and is retried after a short pause. A cleanup pass runs
//! `queen.log_partition_cleanup_step_v1` in batches of [`CLEANUP_BATCH`].
//! Each pass that ran writes one row of `queen.retention_history`, whether
//! it deleted anything or not: the record of who ran which cycle. Every
//! tenth cycle the holder of a third lease, `log_retained_bytes`, measures
//! what each queue retains into `queen.queue_retained_bytes` (028).

use super::leases::elected;
use crate::backend::call::{execute, query, ClientCallError};
use crate::backend::health::{connect_client, Health};
use crate::calls::retention::{CleanupStep, Record, RetainedBytesStep, Step, StepRow, Work};
use std::time::{Duration, Instant};

/// How retention and cleanup run; the queue's own options say what is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Time between two passes of each task: the maintenance cycle, and the
    /// lease's time to live.
    pub interval: Duration,
    /// An empty partition is deleted once its creation and its last write
    /// are both this old (and no DLQ row names it).
    pub cleanup_age: Duration,
}

impl Default for RetentionSettings {
    /// A pass every 30 s (chosen, not measured: small against any
    /// retention an operator would set, and cheap when nothing is due);
    /// empty partitions kept 7 days (SEMANTICS.md).
    fn default() -> RetentionSettings {
        RetentionSettings {
            interval: Duration::from_secs(30),
            cleanup_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Lease names in `queen.maintenance_leases`.
pub const RETENTION_TASK: &str = "log_retention";
pub const CLEANUP_TASK: &str = "log_cleanup";
pub const RETAINED_BYTES_TASK: &str = "log_retained_bytes";

/// The retained-bytes slow lane (028) runs every this many cycles: it
/// reads every retained segment row, where retention reads one per
/// partition.
const RETAINED_BYTES_EVERY: u32 = 10;
/// Queues measured per statement.
const RETAINED_BYTES_PAGE: i32 = 100;

/// Segments deleted per step (one transaction holding one partition row):
/// bounds how long a push to that partition can wait behind retention.
/// Measured 2026-12-01 on a quiet 2-core machine (`queenwire-bench
/// --figures retention_latency`, 100,000 segments, pushes at a fixed
/// 300/s): with [`Pace::GENTLE`] and the
/// purge read downwards from first_offset (006), PUSH/POP p99 during a pass
/// 1.37x / 1.31x and 1.27x / 1.39x of without, the pass 11 s, the longest
/// step 7.6 ms; docs/internals/storage.md has what each part is worth.
pub const STEP_SEGMENTS: i32 = 200;
/// Steps on one partition per pass before moving on, so one huge backlog
/// does not starve the others.
const STEPS_PER_PARTITION: usize = 20;
/// A step that found its partition held by a push is retried after this
/// pause, at most this many times per partition and pass (a busy partition
/// is locked only while a push transaction runs, which is short).
pub const LOCKED_PAUSE: Duration = Duration::from_millis(5);
pub const LOCKED_RETRIES: usize = 20;
/// The longest pause between two steps (a step slowed down by a busy
/// server should not stall the pass for as long).
const MAX_STEP_PAUSE: Duration = Duration::from_millis(100);
/// Partitions read from the work list per page.
const WORK_PAGE: i32 = 64;
/// Partitions deleted per cleanup step, and steps per pass.
const CLEANUP_BATCH: i32 = 100;
const CLEANUP_ROUNDS: usize = 10;

/// How hard retention works: after each step it pauses `factor` times as
/// long as the step took, so it spends 1/(factor+1) of its connection's
/// time in steps. On a machine whose cores the write path keeps busy, every
/// step's CPU is taken from pushes and pops, so retention is gentle (10 %)
/// while it keeps up, and hurries (25 %, then 50 %) only while passes run
/// out of time, i.e. while the backlog grows faster than a gentle pass
/// deletes it; each pass that finishes relaxes it a step again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    factor: u32,
}

impl Pace {
    /// The steady state: a pause of nine steps after each.
    pub const GENTLE: Pace = Pace { factor: 9 };
    /// The fastest: a pause as long as the step.
    pub const HURRIED: Pace = Pace { factor: 1 };

    fn hurry(self) -> Pace {
        Pace {
            factor: (self.factor / 3).max(Self::HURRIED.factor),
        }
    }

    fn relax(self) -> Pace {
        Pace {
            factor: (self.factor * 3).min(Self::GENTLE.factor),
        }
    }

    fn pause(self, step: Duration) -> Duration {
        (step * self.factor).min(MAX_STEP_PAUSE)
    }
}

/// What one pass deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PassTotals {
    partitions: i32,
    segments: i64,
    messages: i64,
    bytes: i64,
    expired: i64,
}

impl PassTotals {
    fn add(&mut self, trimmed: &Trimmed) {
        self.partitions += i32::from(trimmed.segments > 0);
        self.segments += trimmed.segments;
        self.messages += trimmed.messages;
        self.bytes += trimmed.bytes;
        self.expired += trimmed.expired;
    }
}

/// What retention took from one partition in one pass.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Trimmed {
    pub segments: i64,
    pub messages: i64,
    pub bytes: i64,
    /// Of `messages`, those deleted by age before every group had them.
    pub expired: i64,
    /// Steps that found the partition held by a push and were retried.
    pub locked_retries: usize,
    /// The longest step (one transaction of retention on the partition).
    pub longest_step: Duration,
}

impl Trimmed {
    fn add_step(&mut self, step: &StepRow) {
        self.segments += i64::from(step.segments);
        self.messages += step.messages;
        self.bytes += step.bytes;
        self.expired += step.expired;
    }
}

/// Runs up to `max_steps` retention steps on one partition, until one
/// marks nothing (which also purged the last batch marked), starting none
/// after `until` (a step is short: at most [`STEP_SEGMENTS`]). After each
/// step it pauses as `pace` says, leaving the rest of the database's time
/// to the write path (the measured cost of running flat out is in
/// docs/internals/storage.md). A step that found the partition held by a
/// push is retried after [`LOCKED_PAUSE`], at most [`LOCKED_RETRIES`]
/// times. Public for the latency measurement (`queenwire-bench --figures`),
/// which must run exactly what a pass runs.
pub async fn trim_partition(
    client: &tokio_postgres::Client,
    partition_id: i64,
    max_steps: usize,
    until: Instant,
    pace: Pace,
) -> Result<Trimmed, ClientCallError> {
    let mut trimmed = Trimmed::default();
    let mut steps = 0;
    while steps < max_steps && Instant::now() < until {
        let started = Instant::now();
        let step = query(
            client,
            &Step {
                partition_id,
                limit: STEP_SEGMENTS,
            },
        )
        .await?
        .into_iter()
        .next()
        .unwrap_or_default();
        let took = started.elapsed();
        trimmed.longest_step = trimmed.longest_step.max(took);
        if step.locked && trimmed.locked_retries < LOCKED_RETRIES {
            trimmed.locked_retries += 1;
            tokio::time::sleep(LOCKED_PAUSE).await;
            continue;
        }
        steps += 1;
        trimmed.add_step(&step);
        if !step.more {
            break;
        }
        tokio::time::sleep(pace.pause(took)).await;
    }
    Ok(trimmed)
}

/// Per task: when this process last ran a pass, and where the retention
/// work list resumes (a pass that ran out of time goes on from there).
struct Schedule {
    last_retention: Option<Instant>,
    last_cleanup: Option<Instant>,
    last_retained_bytes: Option<Instant>,
    resume_after: i64,
    pace: Pace,
}

/// Runs the tasks on a connection of its own until the caller drops the
/// future (the maintenance loop selects on shutdown).
pub async fn run(config: tokio_postgres::Config, settings: RetentionSettings, holder: String) {
    let tick = settings.interval / 4;
    let mut schedule = Schedule {
        last_retention: None,
        last_cleanup: None,
        last_retained_bytes: None,
        resume_after: 0,
        pace: Pace::GENTLE,
    };
    let mut health = Health::new("retention");
    loop {
        let client = connect_client(&config, &mut health).await;
        loop {
            match cycle(&client, &settings, &holder, &mut schedule).await {
                Ok(()) => health.ok(),
                // A lost connection is the outage's business.
                Err(e) if client.is_closed() => {
                    health.lost(&e);
                    break;
                }
                Err(e) => tracing::warn!("retention: {e}"),
            }
            tokio::time::sleep(tick).await;
        }
        tokio::time::sleep(tick).await;
    }
}

/// One tick: renew or take each lease, and run the passes that are due.
async fn cycle(
    client: &tokio_postgres::Client,
    settings: &RetentionSettings,
    holder: &str,
    schedule: &mut Schedule,
) -> Result<(), ClientCallError> {
    let due = |last: Option<Instant>| last.is_none_or(|t| t.elapsed() >= settings.interval);
    if elected(client, RETENTION_TASK, holder, settings.interval).await? {
        if due(schedule.last_retention) {
            schedule.last_retention = Some(Instant::now());
            crate::metrics::count_maintenance_run(RETENTION_TASK);
            let finished = retention_pass(
                client,
                settings,
                holder,
                &mut schedule.resume_after,
                schedule.pace,
            )
            .await?;
            schedule.pace = if finished {
                schedule.pace.relax()
            } else {
                schedule.pace.hurry()
            };
        }
    } else {
        // Another process runs it; ours starts afresh if it ever takes over.
        schedule.last_retention = None;
    }
    if elected(client, CLEANUP_TASK, holder, settings.interval).await? {
        if due(schedule.last_cleanup) {
            schedule.last_cleanup = Some(Instant::now());
            crate::metrics::count_maintenance_run(CLEANUP_TASK);
            cleanup_pass(client, settings, holder).await?;
        }
    } else {
        schedule.last_cleanup = None;
    }
    if elected(client, RETAINED_BYTES_TASK, holder, settings.interval).await? {
        let slow = settings.interval * RETAINED_BYTES_EVERY;
        if schedule
            .last_retained_bytes
            .is_none_or(|t| t.elapsed() >= slow)
        {
            schedule.last_retained_bytes = Some(Instant::now());
            crate::metrics::count_maintenance_run(RETAINED_BYTES_TASK);
            retained_bytes_lap(client, settings, holder).await?;
        }
    } else {
        schedule.last_retained_bytes = None;
    }
    Ok(())
}

/// One lap of the slow lane over every queue, a page at a time, while the
/// lease holds.
async fn retained_bytes_lap(
    client: &tokio_postgres::Client,
    settings: &RetentionSettings,
    holder: &str,
) -> Result<(), ClientCallError> {
    let mut after = None;
    loop {
        let page = query(
            client,
            &RetainedBytesStep {
                after,
                limit: RETAINED_BYTES_PAGE,
            },
        )
        .await?;
        let Some(row) = page.into_iter().next() else {
            return Ok(());
        };
        if row.queues < RETAINED_BYTES_PAGE || row.last_queue_id.is_none() {
            return Ok(());
        }
        after = row.last_queue_id;
        if !elected(client, RETAINED_BYTES_TASK, holder, settings.interval).await? {
            return Ok(());
        }
    }
}

/// One pass; true when it went through the whole work list, false when it
/// ran out of time or lease (the next pass resumes where it stopped).
async fn retention_pass(
    client: &tokio_postgres::Client,
    settings: &RetentionSettings,
    holder: &str,
    resume_after: &mut i64,
    pace: Pace,
) -> Result<bool, ClientCallError> {
    let started = Instant::now();
    let mut totals = PassTotals::default();
    let mut finished = false;
    let mut after = *resume_after;
    let mut wrapped = after == 0;
    'pass: loop {
        let page = query(
            client,
            &Work {
                after,
                limit: WORK_PAGE,
            },
        )
        .await?;
        for partition in &page {
            // Out of time or out of lease: the next pass goes on from here.
            // The lease is renewed for an interval before each partition,
            // and a partition's steps stop after half of one, so the lease
            // outlives them: two passes never overlap.
            if started.elapsed() >= settings.interval
                || !elected(client, RETENTION_TASK, holder, settings.interval).await?
            {
                *resume_after = after;
                break 'pass;
            }
            let until = Instant::now() + settings.interval / 2;
            let trimmed = trim_partition(
                client,
                partition.partition_id,
                STEPS_PER_PARTITION,
                until,
                pace,
            )
            .await?;
            totals.add(&trimmed);
            after = partition.partition_id;
        }
        if page.len() < WORK_PAGE as usize {
            if wrapped {
                *resume_after = 0;
                finished = true;
                break;
            }
            // Resumed mid-list: finish with the partitions before it.
            wrapped = true;
            after = 0;
        }
    }
    record(client, "retention", holder, started, totals).await?;
    Ok(finished)
}

async fn cleanup_pass(
    client: &tokio_postgres::Client,
    settings: &RetentionSettings,
    holder: &str,
) -> Result<(), ClientCallError> {
    let started = Instant::now();
    let age_seconds = i32::try_from(settings.cleanup_age.as_secs()).unwrap_or(i32::MAX);
    let mut totals = PassTotals::default();
    for _ in 0..CLEANUP_ROUNDS {
        let deleted = query(
            client,
            &CleanupStep {
                age_seconds,
                limit: CLEANUP_BATCH,
            },
        )
        .await?
        .first()
        .map_or(0, |r| r.deleted);
        totals.partitions += deleted;
        if deleted < CLEANUP_BATCH {
            break;
        }
    }
    record(client, "cleanup", holder, started, totals).await
}

async fn record(
    client: &tokio_postgres::Client,
    task: &'static str,
    holder: &str,
    started: Instant,
    totals: PassTotals,
) -> Result<(), ClientCallError> {
    if totals.segments > 0 || totals.partitions > 0 {
        tracing::info!(
            task,
            partitions = totals.partitions,
            segments = totals.segments,
            messages = totals.messages,
            bytes = totals.bytes,
            expired = totals.expired,
            "retention pass"
        );
    }
    execute(
        client,
        &Record {
            task,
            holder,
            duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
            partitions: totals.partitions,
            segments: totals.segments,
            messages: totals.messages,
            bytes: totals.bytes,
            expired: totals.expired,
        },
    )
    .await?;
    Ok(())
}
