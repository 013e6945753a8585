//! The stream runner: a task in every queenwire that runs each stream that
//! is not paused. A stream reads its source as a consumer group, so the
//! group's partition lease (one holder per (partition, group), the
//! `queen.log_consumers` lease every POP takes) is what makes one queenwire at a time run a
//! source partition: a runner that dies stops acknowledging, its lease runs
//! out after [`LEASE`], and any queenwire's next POP of the group takes the
//! partition over.
//!
//! One cycle per (stream, source partition) and claimed batch:
//! 1. POP the batch (its own transaction: it only takes the lease);
//! 2. evaluate the user's expressions over it with `queen.stream_eval_v1`,
//!    on a connection of the tenant's own backend role (never the
//!    engine's: see [`super::Evaluators`]);
//! 3. in ONE transaction on an engine connection: lock the (stream,
//!    partition) progress row, load its open windows, assign the batch and
//!    close what is ripe ([`super::window`]), have PostgreSQL decide text
//!    min/max and fold reduce aggregates ([`super::resolve`]; the fold on
//!    the tenant's role), save the state, push the
//!    closed windows into the sink through the ordinary push path
//!    (`log_push_v1`, so `log_push_one_v1` assigns their offsets), and ACK
//!    the batch under the lease (locks in the global order: stream tables,
//!    then the sink's queue and partitions, then the source's consumer
//!    row). Any failure (a stale ACK included) rolls it all back: the
//!    batch is delivered again and no window is emitted twice.

use super::evaluate::{decode, evaluate, poisoned, Message};
use super::window::{Event, Kind, Partition, Spec};
use super::Evaluators;
use crate::backend::call::{CallEnd, Calls};
use crate::backend::health::Health;
use crate::backend::{pool, BackendError, Pool};
use crate::calls::acks::Ack;
use crate::calls::queues::{Pop, PopArgs};
use crate::calls::stream_cycle::{
    Active, ActiveRow, CycleBegin, CycleSave, IdlePartitions, NoteError, StateLoad,
};
use crate::calls::streams::EvalRow;
use crate::calls::transaction::{Raise, ROLLBACK};
use crate::engine::queues::{write_pushes, PreparedPush, DEFAULT_PARTITION};
use crate::engine::sealing::Sealing;
use crate::engine::wake::{queue_key, Announcer};
use crate::engine::ExecError;
use crate::protocol::{SqlError, SqlState, TxStatus};
use crate::rewrite::dialect::stream::AggFn;
use crate::rewrite::dialect::validate_name;
use crate::shutdown::ShutdownSignal;
use std::sync::Arc;
use std::time::Duration;

/// How often the runner looks for work when the last round found none.
pub const POLL: Duration = Duration::from_millis(200);
/// Messages per cycle.
pub const BATCH: i32 = 1000;
/// The lease a cycle's batch is taken under: a cycle must commit within it
/// (else its ACK is stale and it rolls back), and a dead runner's
/// partitions move to another queenwire after it.
pub const LEASE: Duration = Duration::from_secs(10);
/// Cycles per stream in one round, so one busy stream does not hold the
/// others back.
const CYCLES_PER_ROUND: usize = 8;

/// Connections of the runner: a cycle's, and one to note an error.
pub const POOL_SIZE: usize = 2;

/// The runner's own pool (no client is ever handed one of these).
/// Runs the streams until shutdown begins. An interrupted cycle rolls back
/// (its connection goes), and its batch comes back after the lease.
pub async fn run(pool: Pool, engine: Arc<crate::engine::Engine>, shutdown: ShutdownSignal) {
    let (evaluators, announcer) = (engine.streams.clone(), engine.announcer.clone());
    let sealing = engine.sealing.clone();
    tokio::select! {
        () = run_forever(pool, evaluators, announcer, sealing) => {}
        () = shutdown.begun() => {}
    }
}

async fn run_forever(
    pool: Pool,
    evaluators: Arc<Evaluators>,
    announcer: Announcer,
    sealing: Arc<Sealing>,
) {
    let mut health = Health::new("streams");
    loop {
        match round(&pool, &evaluators, &announcer, &sealing).await {
            Ok(true) => {
                health.ok();
                continue;
            }
            Ok(false) => health.ok(),
            Err(ExecError::Lost(e)) => health.lost(&e),
            Err(e) => tracing::warn!("streams: {e}"),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One pass over every active stream; whether any cycle found messages.
async fn round(
    pool: &Pool,
    evaluators: &Evaluators,
    announcer: &Announcer,
    sealing: &Sealing,
) -> Result<bool, ExecError> {
    let streams = {
        let mut conn = pool::checkout(pool).await.map_err(ExecError::Lost)?;
        let rows = conn.run(&Active, CallEnd::Sync).await;
        pool::release(conn);
        rows?
    };
    let mut busy = false;
    // A lost connection (the engine's, or one tenant's role pool) ends
    // that stream's turn, not the round: the other streams still run.
    let mut lost = None;
    for stream in streams {
        let Some(spec) = spec_of(&stream) else {
            continue;
        };
        for _ in 0..CYCLES_PER_ROUND {
            match cycle(pool, evaluators, announcer, sealing, &stream, &spec).await {
                Ok(true) => busy = true,
                Ok(false) => break,
                Err(ExecError::Lost(e)) => {
                    lost = Some(e);
                    break;
                }
                Err(e) => {
                    note_error(pool, &stream, &e).await;
                    break;
                }
            }
        }
        if let Some(idle_ms) = stream.idle_ms {
            match idle_flush(
                pool, evaluators, announcer, sealing, &stream, &spec, idle_ms,
            )
            .await
            {
                Ok(()) => {}
                Err(ExecError::Lost(e)) => lost = Some(e),
                Err(e) => note_error(pool, &stream, &e).await,
            }
        }
    }
    match lost {
        Some(e) if !busy => Err(ExecError::Lost(e)),
        _ => Ok(busy),
    }
}

async fn note_error(pool: &Pool, stream: &ActiveRow, e: &ExecError) {
    tracing::warn!("stream {} ({}): {e}", stream.name, stream.tenant);
    if let Ok(mut conn) = pool::checkout(pool).await {
        let error = e.to_string();
        let _ = conn
            .run(
                &NoteError {
                    stream_id: stream.id,
                    error: &error,
                },
                CallEnd::Sync,
            )
            .await;
        pool::release(conn);
    }
}

/// The window rules of a registry row (`None`: a row this build cannot run).
pub fn spec_of(s: &ActiveRow) -> Option<Spec> {
    let us = |ms: Option<i64>| ms.filter(|m| *m > 0).map(|m| m.saturating_mul(1000));
    let kind = match s.kind.as_str() {
        "tumbling" => Kind::Tumbling {
            size: us(s.size_ms)?,
        },
        "sliding" => Kind::Sliding {
            size: us(s.size_ms)?,
            every: us(s.every_ms)?,
        },
        "session" => Kind::Session { gap: us(s.gap_ms)? },
        _ => return None,
    };
    Some(Spec {
        kind,
        event_time: s.event_time,
        lateness: s.lateness_ms.saturating_mul(1000),
        include_late: s.on_late == "include",
        grace: s.grace_ms.saturating_mul(1000),
        aggs: s
            .agg_fns
            .iter()
            .map(|f| AggFn::from_name(f))
            .collect::<Option<Vec<_>>>()?,
        names: s.agg_names.clone(),
    })
}

/// One cycle of one stream: whether a batch was claimed.
async fn cycle(
    pool: &Pool,
    evaluators: &Evaluators,
    announcer: &Announcer,
    sealing: &Sealing,
    stream: &ActiveRow,
    spec: &Spec,
) -> Result<bool, ExecError> {
    if evaluators.pool(stream.tenant).is_none() {
        // This queenwire cannot evaluate the tenant's expressions (its users
        // file has no user of that tenant with plain SQL): it takes none of
        // its batches, which would only come back (and count as failures).
        return Ok(false);
    }
    let args = PopArgs {
        queue: stream.source.clone(),
        partition: None,
        group: stream.group.clone(),
        limit: BATCH,
        max_partitions: 1,
        lease_ms: Some(LEASE.as_millis() as i64),
        subscribe: match stream.subscribe.as_str() {
            "now" => "now",
            "timestamp" => "timestamp",
            _ => "beginning",
        },
        subscribe_at: stream.subscribe_at.clone(),
        auto_ack: false,
        wait: None,
    };
    let mut conn = pool::checkout(pool).await.map_err(ExecError::Lost)?;
    let claimed = conn
        .run(
            &Pop {
                args: &args,
                tenant: stream.tenant,
            },
            CallEnd::Sync,
        )
        .await;
    let claimed = match claimed {
        Ok(rows) => rows,
        Err(e) => {
            pool::release(conn);
            return Err(e.into());
        }
    };
    let Some(first) = claimed.first() else {
        pool::release(conn);
        return Ok(false);
    };
    let (partition_id, partition_name) = (first.partition_id, first.partition_name.clone());
    let lease_token = first.lease_token;
    let messages = match decode(&claimed, &sealing.keys()) {
        Ok(m) => m,
        Err(e) => {
            pool::release(conn);
            return Err(e);
        }
    };
    if messages.is_empty() {
        pool::release(conn);
        return Ok(false);
    }
    let mut messages = messages;
    let (evaluated, poison) = match evaluate(evaluators, stream, &messages, &partition_name).await {
        Ok(rows) => (rows, None),
        Err(ExecError::Failed(e)) => {
            match poisoned(evaluators, stream, &mut messages, &partition_name).await {
                Ok(Some((rows, offset))) => (rows, Some((offset, e))),
                Ok(None) => {
                    pool::release(conn);
                    return Err(ExecError::Failed(e));
                }
                Err(other) => {
                    pool::release(conn);
                    return Err(other);
                }
            }
        }
        Err(e) => {
            pool::release(conn);
            return Err(e);
        }
    };
    let mut pushed = false;
    if !messages.is_empty() {
        let work = Work {
            stream,
            evaluators,
            sealing,
            spec,
            partition_id,
            partition_name: &partition_name,
            batch: Some(Batch {
                messages: &messages,
                evaluated,
                lease_token,
            }),
            now_us: 0,
        };
        match in_one_transaction(&mut conn, &work).await {
            Ok(p) => pushed = p,
            Err(e) => {
                pool::release(conn);
                return Err(e);
            }
        }
    }
    if pushed {
        announcer.pushed(&queue_key(stream.tenant, &stream.sink));
    }
    let Some((offset, error)) = poison else {
        pool::release(conn);
        return Ok(true);
    };
    // The message the expressions fail on: ACK … FAILED, so the source's
    // retry rules apply to it alone (delivered again after retry_delay,
    // dead-lettered past retry_limit) and the messages before it went on.
    let failed = conn
        .run(
            &Ack {
                partition_ids: vec![partition_id],
                offsets: vec![offset],
                groups: vec![stream.group.as_str()],
                lease_tokens: lease_token.into_iter().collect(),
                failed: true,
                reason: Some(format!("stream {}: {}", stream.name, error.message)),
                tenant: stream.tenant,
            },
            CallEnd::Sync,
        )
        .await;
    pool::release(conn);
    failed?;
    Err(ExecError::Failed(error))
}

struct Batch<'a> {
    messages: &'a [Message],
    evaluated: Vec<EvalRow>,
    lease_token: Option<uuid::Uuid>,
}

/// What one transaction does: a batch (a cycle), or none (an idle flush).
struct Work<'a> {
    stream: &'a ActiveRow,
    /// The tenant's role, for a reduce's fold.
    evaluators: &'a Evaluators,
    /// The sink push seals its segments if the sink is encrypted.
    sealing: &'a Sealing,
    spec: &'a Spec,
    partition_id: i64,
    partition_name: &'a str,
    batch: Option<Batch<'a>>,
    /// An idle flush's wall clock (microseconds since the epoch).
    now_us: i64,
}

/// Runs `work` in one transaction (the implicit one the final Sync ends):
/// whether it pushed into the sink. Any error rolls all of it back.
async fn in_one_transaction(
    conn: &mut pool::PooledConn,
    work: &Work<'_>,
) -> Result<bool, ExecError> {
    let result = steps(&mut Calls::new(conn, CallEnd::Flush), work).await;
    if let Err(e) = &result {
        if !matches!(e, ExecError::Failed(_)) {
            // The backend saw no error: fail its transaction, so the Sync
            // rolls it back rather than committing half a cycle.
            let _ = conn
                .run(
                    &Raise {
                        code: "40001",
                        message: "stream cycle abandoned",
                    },
                    CallEnd::Flush,
                )
                .await;
        }
    }
    let mut status = conn.sync().await;
    if result.is_err() && matches!(status, Ok(s) if s.in_transaction()) {
        status = conn
            .simple_query_quiet(ROLLBACK)
            .await
            .map(|()| conn.status());
    }
    match (result, status) {
        (Ok(pushed), Ok(TxStatus::Idle)) => Ok(pushed),
        (Ok(_), Ok(_)) => Err(ExecError::Lost(BackendError::Protocol(
            "stream cycle did not commit".into(),
        ))),
        (Err(e), _) => Err(e),
        (_, Err(e)) => Err(ExecError::from(e)),
    }
}

async fn steps(conn: &mut Calls<'_>, work: &Work<'_>) -> Result<bool, ExecError> {
    let stream = work.stream;
    let progress = conn
        .run(&CycleBegin {
            stream_id: stream.id,
            generation: stream.generation,
            partition_id: work.partition_id,
            partition_name: work.partition_name,
            skip_locked: work.batch.is_none(),
        })
        .await?;
    let Some(progress) = progress.into_iter().next() else {
        // The stream changed (dropped, paused, reset) or, for an idle
        // flush, a cycle holds the row: nothing to do. An unacknowledged
        // batch comes back after its lease (to the new definition).
        return Ok(false);
    };
    let mut part = Partition::new(work.spec, progress.stream_time_us, progress.max_event_us);
    let bad_state = |e: super::aggregate::AggError| {
        ExecError::Refused(SqlError::error(SqlState::DATA_EXCEPTION, e.0))
    };
    for row in conn
        .run(&StateLoad {
            stream_id: stream.id,
            partition_id: work.partition_id,
        })
        .await?
    {
        part.load(row.key, row.start_us, row.end_us, &row.vals, row.late)
            .map_err(bad_state)?;
    }
    let mut late_dropped = 0;
    let mut offsets = Vec::new();
    if let Some(batch) = &work.batch {
        let mut rows: Vec<&EvalRow> = batch.evaluated.iter().collect();
        rows.sort_by_key(|r| r.ord);
        for r in rows {
            let Some(m) = usize::try_from(r.ord)
                .ok()
                .and_then(|i| batch.messages.get(i))
            else {
                continue;
            };
            if r.keep != Some(true) {
                continue;
            }
            let ts = if work.spec.event_time {
                match r.event_us {
                    Some(t) => t,
                    // No event time: nothing to place it by.
                    None => {
                        late_dropped += 1;
                        continue;
                    }
                }
            } else {
                m.created_us
            };
            let mut vals = r.vals.clone();
            for (i, f) in work.spec.aggs.iter().enumerate() {
                // A reduce folds the message's payload itself.
                if *f == AggFn::Reduce {
                    if let Some(v) = vals.get_mut(i) {
                        *v = Some(m.payload.clone());
                    }
                }
            }
            part.event(Event {
                ts,
                key: r.key.clone().unwrap_or_default(),
                vals,
            })
            .map_err(bad_state)?;
        }
        offsets = batch.messages.iter().map(|m| m.offset).collect();
    } else {
        part.idle(work.now_us);
    }
    super::resolve::pending(conn, work.evaluators, stream, &mut part).await?;
    let (deletes, upserts) = part.changes();
    let mut save = CycleSave {
        stream_id: stream.id,
        partition_id: work.partition_id,
        stream_time_us: part.stream_time,
        max_event_us: part.max_seen,
        saw_messages: work.batch.is_some(),
        messages: offsets.len() as i64,
        late_dropped: part.late_dropped + late_dropped,
        emitted: part.emitted.len() as i64,
        ..CycleSave::default()
    };
    for (key, start) in deletes {
        save.del_keys.push(key);
        save.del_starts.push(start);
    }
    for u in upserts {
        save.up_keys.push(u.key);
        save.up_starts.push(u.start);
        save.up_ends.push(u.end);
        save.up_states.push(u.state);
        save.up_late.push(u.late);
    }
    // The state first: stream tables come before every queue lock in the
    // global order (002), and the sink push takes queue and partition locks.
    conn.run(&save).await?;
    let pushed = !part.emitted.is_empty();
    if pushed {
        let messages = part
            .emitted
            .iter()
            .map(|e| {
                (
                    sink_partition(stream, work.partition_name, &e.key),
                    part.payload(e),
                )
            })
            .collect();
        let mut prep = PreparedPush::from_messages(stream.sink.clone(), messages);
        write_pushes(conn, &mut [&mut prep], stream.tenant, work.sealing).await?;
    }
    if let Some(batch) = &work.batch {
        let token = batch.lease_token.ok_or_else(|| {
            ExecError::Refused(SqlError::error(
                SqlState::INTERNAL_ERROR,
                "a stream batch without a lease",
            ))
        })?;
        let acks = conn
            .run(&Ack {
                partition_ids: vec![work.partition_id; offsets.len()],
                groups: vec![stream.group.as_str(); offsets.len()],
                lease_tokens: vec![token; offsets.len()],
                offsets,
                failed: false,
                reason: None,
                tenant: stream.tenant,
            })
            .await?;
        if let Some(bad) = acks.iter().find(|a| a.status != "acked") {
            // The lease was lost (it expired and another runner took the
            // batch): this cycle must leave no trace.
            return Err(ExecError::Refused(SqlError::error(
                SqlState::T_R_SERIALIZATION_FAILURE,
                format!("stream batch acknowledgement was {}", bad.status),
            )));
        }
    }
    Ok(pushed)
}

/// PARTITION BY KEY: the window's key (when it is a valid partition name);
/// otherwise the source partition's name, so a sink partition keeps the
/// order of its source partition.
fn sink_partition(stream: &ActiveRow, source_partition: &str, key: &str) -> String {
    if stream.partition_by_key {
        if validate_name("partition", key).is_ok() {
            return key.to_string();
        }
        return DEFAULT_PARTITION.to_string();
    }
    source_partition.to_string()
}

/// IDLE FLUSH: the partitions quiet for longer than the idle time get a
/// cycle without a batch (no lease: the progress row's lock, taken with
/// SKIP LOCKED, keeps it apart from a running cycle).
async fn idle_flush(
    pool: &Pool,
    evaluators: &Evaluators,
    announcer: &Announcer,
    sealing: &Sealing,
    stream: &ActiveRow,
    spec: &Spec,
    idle_ms: i64,
) -> Result<(), ExecError> {
    let mut conn = pool::checkout(pool).await.map_err(ExecError::Lost)?;
    let quiet = conn
        .run(
            &IdlePartitions {
                stream_id: stream.id,
                idle_ms,
            },
            CallEnd::Sync,
        )
        .await;
    let quiet = match quiet {
        Ok(q) => q,
        Err(e) => {
            pool::release(conn);
            return Err(e.into());
        }
    };
    let mut result = Ok(());
    for p in quiet {
        let work = Work {
            stream,
            evaluators,
            sealing,
            spec,
            partition_id: p.partition_id,
            partition_name: &p.partition_name,
            batch: None,
            now_us: p.now_us,
        };
        match in_one_transaction(&mut conn, &work).await {
            Ok(true) => announcer.pushed(&queue_key(stream.tenant, &stream.sink)),
            Ok(false) => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    pool::release(conn);
    result
}
