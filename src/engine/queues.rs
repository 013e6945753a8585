//! The queue statements: PUSH, POP, ACK, RENEW, queue administration and
//! inspection, each one call of a `queen.*` procedure on the session's
//! backend connection (so it joins the surrounding transaction).

use super::frame::{self, Frame};
use super::receipt::{InvalidReceipt, Receipt, ReceiptKey};
use super::values::{json_string, now_micros, parse_error, row_cells, Cell, Params};
use super::ExecError;
use crate::backend::conn::{Internal, RawRow};
use crate::backend::BackendConn;
use crate::protocol::ErrorFields;
use crate::rewrite::dialect::ack::{Ack, AckOutcome, Renew};
use crate::rewrite::dialect::options::{OptionValue, QueueSetting};
use crate::rewrite::dialect::pop::{Pop, SubscribeFrom};
use crate::rewrite::dialect::push::Push;
use crate::rewrite::dialect::queue_admin::SeekTarget;
use crate::rewrite::dialect::show;
use crate::rewrite::dialect::{QueueOption, Value};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};
use tokio_postgres::types::Type;
use uuid::Uuid;

pub const DEFAULT_PARTITION: &str = "Default";
pub const QUEUE_MODE_GROUP: &str = "__QUEUE_MODE__";

const PUSH_CALL: Internal = Internal {
    name: "qw_push_v1",
    sql: "SELECT msg_index, status, \"offset\", message_id FROM queen.log_push_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    param_types: &[
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::INT4_ARRAY,
        Type::BYTEA_ARRAY,
        Type::INT8_ARRAY,
        Type::UUID_ARRAY,
        Type::TIMESTAMPTZ_ARRAY,
        Type::TIMESTAMPTZ_ARRAY,
        Type::UUID,
    ],
};

const POP_CALL: Internal = Internal {
    name: "qw_pop_v1",
    sql: "SELECT partition_id, partition_name, lease_token, lease_expires_at, retry_count, from_offset, to_offset, base_offset, blob FROM queen.log_pop_v1($1, $2, $3, $4, $5, $6, $7, $8::timestamptz, $9, $10)",
    param_types: &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT4,
        Type::INT4,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::BOOL,
        Type::UUID,
    ],
};

const ACK_CALL: Internal = Internal {
    name: "qw_ack_v1",
    sql: "SELECT idx, status FROM queen.log_ack_v1($1, $2, $3, $4, $5, $6, $7)",
    param_types: &[
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::UUID_ARRAY,
        Type::BOOL,
        Type::TEXT,
        Type::UUID,
    ],
};

const RENEW_CALL: Internal = Internal {
    name: "qw_renew_v1",
    sql: "SELECT idx, lease_expires_at FROM queen.log_renew_v1($1, $2, $3, $4, $5)",
    param_types: &[
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::UUID_ARRAY,
        Type::INT8,
        Type::UUID,
    ],
};

const CONFIGURE_CALL: Internal = Internal {
    name: "qw_configure_v1",
    sql: "SELECT queen.configure_queue_v1($1, $2::jsonb, $3, $4)",
    param_types: &[Type::TEXT, Type::TEXT, Type::TEXT, Type::UUID],
};

const DELETE_CALL: Internal = Internal {
    name: "qw_delete_queue_v1",
    sql: "SELECT queen.delete_queue_v1($1, $2)",
    param_types: &[Type::TEXT, Type::UUID],
};

const SEEK_CALL: Internal = Internal {
    name: "qw_seek_v1",
    sql: "SELECT queen.log_seek_group_v1($1, $2, $3, $4, $5::timestamptz, $6)",
    param_types: &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::UUID,
    ],
};

const DROP_GROUP_CALL: Internal = Internal {
    name: "qw_drop_group_v1",
    sql: "SELECT queen.log_drop_group_v1($1, $2, $3)",
    param_types: &[Type::TEXT, Type::TEXT, Type::UUID],
};

const SHOW_QUEUES_CALL: Internal = Internal {
    name: "qw_show_queues_v1",
    sql: "SELECT queue, partitions, messages, pending, dead_lettered, created_at FROM queen.log_show_queues_v1($1)",
    param_types: &[Type::UUID],
};

const SHOW_PARTITIONS_CALL: Internal = Internal {
    name: "qw_show_partitions_v1",
    sql: "SELECT partition_name, messages, last_offset, last_write_at FROM queen.log_show_partitions_v1($1, $2)",
    param_types: &[Type::TEXT, Type::UUID],
};

const SHOW_GROUPS_CALL: Internal = Internal {
    name: "qw_show_groups_v1",
    sql: "SELECT queue, consumer_group, partitions, lag, oldest_pending_at, leased_partitions FROM queen.log_show_groups_v1($1, $2)",
    param_types: &[Type::TEXT, Type::UUID],
};

const SHOW_DLQ_CALL: Internal = Internal {
    name: "qw_show_dlq_v1",
    sql: "SELECT message_offset, partition_name, consumer_group, reason, retry_count, failed_at, base_offset, blob FROM queen.get_dlq_messages_v1($1, $2, $3)",
    param_types: &[Type::TEXT, Type::INT4, Type::UUID],
};

/// Limits applied before any SQL runs.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest payload, in bytes (default 1 MiB).
    pub max_payload: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_payload: 1024 * 1024,
        }
    }
}

/// A 64-bit FNV-1a hash of a transaction id: stored in `queen.log_txns`, so
/// it must never change between versions (std's hashers may).
pub fn txn_hash(txn: &str) -> i64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in txn.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h as i64
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a RawRow,
    idx: usize,
    ty: &Type,
) -> Result<T, ExecError> {
    row.get(idx, ty).map_err(ExecError::from)
}

struct PushItem {
    input_index: usize,
    frame: Frame,
    /// Input index of an earlier row of this statement with the same
    /// partition and transaction id.
    duplicate_of: Option<usize>,
    hash: Option<i64>,
}

#[derive(Clone, Copy)]
struct PushResult {
    status: &'static str,
    offset: i64,
    message_id: Uuid,
}

/// A PUSH statement checked and framed, ready to be written alone or fused
/// with other statements for the same queue.
pub struct PreparedPush {
    pub queue: String,
    /// Partitions in order of first appearance, each with its rows.
    partitions: Vec<(String, Vec<PushItem>)>,
    row_partition: Vec<String>,
    row_txn: Vec<Option<String>>,
    results: Vec<Option<PushResult>>,
}

/// Checks a PUSH's values and builds its frames; no I/O.
pub fn prepare_push(
    stmt: &Push,
    params: &Params<'_>,
    limits: &Limits,
) -> Result<PreparedPush, ErrorFields> {
    let queue = params.name(&stmt.queue, "queue")?;
    let now = now_micros();
    let mut partitions: Vec<(String, Vec<PushItem>)> = Vec::new();
    let mut index_of: HashMap<String, usize> = HashMap::new();
    let mut seen_txn: HashMap<(usize, String), usize> = HashMap::new();
    let mut row_partition = Vec::with_capacity(stmt.rows.len());
    let mut row_txn = Vec::with_capacity(stmt.rows.len());
    for (i, row) in stmt.rows.iter().enumerate() {
        let payload = params.json(&row.payload, "payload", limits.max_payload)?;
        let partition = match &row.partition {
            Some(p) => params.name(p, "partition")?,
            None => DEFAULT_PARTITION.to_string(),
        };
        let transaction_id = match &row.transaction_id {
            Some(v) => params.opt_text(v)?,
            None => None,
        };
        let trace_id = match &row.trace_id {
            Some(v) => params.opt_text(v)?,
            None => None,
        };
        for (what, v) in [("transaction_id", &transaction_id), ("trace_id", &trace_id)] {
            if v.as_ref().is_some_and(|s| s.len() > 255) {
                return Err(ErrorFields::error(
                    "54000",
                    format!("{what} longer than 255 bytes"),
                ));
            }
        }
        let p = *index_of.entry(partition.clone()).or_insert_with(|| {
            partitions.push((partition.clone(), Vec::new()));
            partitions.len() - 1
        });
        let duplicate_of = transaction_id
            .as_ref()
            .and_then(|t| seen_txn.get(&(p, t.clone())).copied());
        if let (Some(t), None) = (&transaction_id, duplicate_of) {
            seen_txn.insert((p, t.clone()), i);
        }
        row_partition.push(partition);
        row_txn.push(transaction_id.clone());
        partitions[p].1.push(PushItem {
            input_index: i,
            hash: transaction_id.as_deref().map(txn_hash),
            frame: Frame {
                message_id: Uuid::now_v7(),
                created_at_micros: now,
                transaction_id,
                trace_id,
                payload,
            },
            duplicate_of,
        });
    }
    Ok(PreparedPush {
        queue,
        partitions,
        row_partition,
        row_txn,
        results: vec![None; stmt.rows.len()],
    })
}

impl PreparedPush {
    /// Messages that are not a statement (fired timers): (partition,
    /// payload JSON text) in order.
    pub fn from_messages(queue: String, messages: Vec<(String, String)>) -> PreparedPush {
        let now = now_micros();
        let mut partitions: Vec<(String, Vec<PushItem>)> = Vec::new();
        let mut row_partition = Vec::with_capacity(messages.len());
        for (i, (partition, payload)) in messages.into_iter().enumerate() {
            let item = PushItem {
                input_index: i,
                frame: Frame {
                    message_id: Uuid::now_v7(),
                    created_at_micros: now,
                    transaction_id: None,
                    trace_id: None,
                    payload,
                },
                duplicate_of: None,
                hash: None,
            };
            match partitions.iter_mut().find(|(n, _)| *n == partition) {
                Some((_, items)) => items.push(item),
                None => partitions.push((partition.clone(), vec![item])),
            }
            row_partition.push(partition);
        }
        let n = row_partition.len();
        PreparedPush {
            queue,
            partitions,
            row_partition,
            row_txn: vec![None; n],
            results: vec![None; n],
        }
    }

    /// Forgets the outcome of a write that was rolled back.
    pub fn reset(&mut self) {
        self.results.iter_mut().for_each(|r| *r = None);
    }

    /// The statement's rows, in input order.
    pub fn rows(mut self) -> Vec<Vec<Cell>> {
        for (_, items) in &self.partitions {
            for it in items {
                if let Some(first) = it.duplicate_of {
                    let original = self.results[first];
                    self.results[it.input_index] = Some(PushResult {
                        status: "duplicate",
                        offset: original.map_or(-1, |r| r.offset),
                        message_id: original.map_or_else(Uuid::nil, |r| r.message_id),
                    });
                }
            }
        }
        let mut out = Vec::with_capacity(self.results.len());
        for (i, r) in self.results.iter().enumerate() {
            let r = r.unwrap_or(PushResult {
                status: "queued",
                offset: -1,
                message_id: Uuid::nil(),
            });
            out.push(vec![
                Cell::Uuid(r.message_id),
                Cell::Text(self.queue.clone()),
                Cell::Text(std::mem::take(&mut self.row_partition[i])),
                Cell::Int8(r.offset),
                Cell::opt_text(self.row_txn[i].take()),
                Cell::Text(r.status.to_string()),
            ]);
        }
        out
    }
}

/// Writes PUSH statements for one queue with as few `log_push_v1` calls as
/// possible: all their rows for one partition become one segment. Rows
/// PostgreSQL reports as duplicates of committed messages are dropped and
/// the rest written again (the call that found them wrote nothing); each
/// round removes at least one row, so this ends. A transaction id repeated
/// across fused statements counts as a duplicate of its first appearance,
/// exactly as if the statements had run one after the other.
pub async fn write_pushes(
    conn: &mut BackendConn,
    batch: &mut [&mut PreparedPush],
    tenant: Uuid,
) -> Result<(), ExecError> {
    let Some(queue) = batch.first().map(|p| p.queue.clone()) else {
        return Ok(());
    };
    let now = super::values::system_time(now_micros());
    // (statement, input index) of a row whose result another row copies.
    let mut copies: Vec<((usize, usize), (usize, usize))> = Vec::new();
    loop {
        // Rows to write, grouped by partition across statements.
        let mut order: Vec<String> = Vec::new();
        let mut groups: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
        let mut first_txn: HashMap<(String, i64, String), (usize, usize)> = HashMap::new();
        copies.clear();
        for (s, prep) in batch.iter().enumerate() {
            for (name, items) in &prep.partitions {
                for (k, it) in items.iter().enumerate() {
                    if it.duplicate_of.is_some() || prep.results[it.input_index].is_some() {
                        continue;
                    }
                    if let (Some(h), Some(t)) = (it.hash, &it.frame.transaction_id) {
                        let key = (name.clone(), h, t.clone());
                        if let Some(&first) = first_txn.get(&key) {
                            copies.push(((s, it.input_index), first));
                            continue;
                        }
                        first_txn.insert(key, (s, it.input_index));
                    }
                    groups
                        .entry(name.clone())
                        .or_insert_with(|| {
                            order.push(name.clone());
                            Vec::new()
                        })
                        .push((s, k));
                }
            }
        }
        if order.is_empty() {
            break;
        }
        let mut names = Vec::with_capacity(order.len());
        let mut counts = Vec::with_capacity(order.len());
        let mut blobs = Vec::with_capacity(order.len());
        let mut hashes: Vec<Option<i64>> = Vec::new();
        let mut ids = Vec::new();
        let mut times = Vec::with_capacity(order.len());
        // Flattened position → (statement, input index).
        let mut flat: Vec<(usize, usize)> = Vec::new();
        for name in &order {
            let members = &groups[name];
            let mut frames = Vec::with_capacity(members.len());
            for &(s, k) in members {
                let prep = &batch[s];
                let Some((_, items)) = prep.partitions.iter().find(|(n, _)| n == name) else {
                    continue;
                };
                let it = &items[k];
                frames.push(&it.frame);
                hashes.push(it.hash);
                ids.push(it.frame.message_id);
                flat.push((s, it.input_index));
            }
            let blob = frame::encode(frames.iter().copied())
                .map_err(|e| ExecError::Refused(ErrorFields::error("54000", e.to_string())))?;
            names.push(name.clone());
            counts.push(frames.len() as i32);
            blobs.push(blob);
            times.push(now);
        }
        // No transaction id anywhere: NULL, so the procedure skips its
        // dedup probe altogether.
        let hashes = hashes.iter().any(Option::is_some).then_some(hashes);
        let rows = conn
            .call(
                &PUSH_CALL,
                &[
                    &queue, &names, &counts, &blobs, &hashes, &ids, &times, &times, &tenant,
                ],
            )
            .await?;
        let mut found_duplicates = false;
        let mut round: Vec<((usize, usize), PushResult)> = Vec::with_capacity(rows.len());
        for row in &rows {
            let msg_index: i32 = get(row, 0, &Type::INT4)?;
            let status: String = get(row, 1, &Type::TEXT)?;
            let offset: Option<i64> = get(row, 2, &Type::INT8)?;
            let message_id: Option<Uuid> = get(row, 3, &Type::UUID)?;
            let Some(&at) = usize::try_from(msg_index).ok().and_then(|i| flat.get(i)) else {
                return Err(ExecError::Lost(crate::backend::BackendError::Protocol(
                    format!("log_push_v1 returned an unknown index {msg_index}"),
                )));
            };
            let status = match status.as_str() {
                "queued" => "queued",
                "duplicate" => {
                    found_duplicates = true;
                    "duplicate"
                }
                _ => continue,
            };
            round.push((
                at,
                PushResult {
                    status,
                    offset: offset.unwrap_or(-1),
                    message_id: message_id.unwrap_or_else(Uuid::nil),
                },
            ));
        }
        for ((s, i), result) in round {
            if !found_duplicates || result.status == "duplicate" {
                batch[s].results[i] = Some(result);
            }
        }
        if !found_duplicates {
            break;
        }
    }
    for ((s, i), (fs, fi)) in copies {
        let original = batch[fs].results[fi];
        batch[s].results[i] = Some(PushResult {
            status: "duplicate",
            offset: original.map_or(-1, |r| r.offset),
            message_id: original.map_or_else(Uuid::nil, |r| r.message_id),
        });
    }
    Ok(())
}

/// PUSH on the session's own connection (inside its transaction).
pub async fn push(
    conn: &mut BackendConn,
    stmt: &Push,
    params: &Params<'_>,
    limits: &Limits,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let mut prep = prepare_push(stmt, params, limits)?;
    write_pushes(conn, &mut [&mut prep], tenant).await?;
    Ok(prep.rows())
}

/// The parts of a POP that do not change between attempts of a WAIT.
pub struct PopPlan {
    pub queue: String,
    partition: Option<String>,
    group: String,
    limit: i32,
    partitions: i32,
    lease_ms: Option<i64>,
    subscribe: &'static str,
    subscribe_at: Option<String>,
    auto_ack: bool,
    pub wait: Option<Duration>,
}

pub fn plan_pop(stmt: &Pop, params: &Params<'_>) -> Result<PopPlan, ErrorFields> {
    let (subscribe, subscribe_at) = match &stmt.subscribe_from {
        None | Some(SubscribeFrom::Beginning) => ("beginning", None),
        Some(SubscribeFrom::Now) => ("now", None),
        Some(SubscribeFrom::Timestamp(ts)) => {
            ("timestamp", Some(params.text(ts, "SUBSCRIBE FROM")?))
        }
    };
    Ok(PopPlan {
        queue: params.name(&stmt.queue, "queue")?,
        partition: stmt
            .partition
            .as_ref()
            .map(|p| params.name(p, "partition"))
            .transpose()?,
        group: match &stmt.group {
            Some(g) => params.name(g, "group")?,
            None => QUEUE_MODE_GROUP.to_string(),
        },
        limit: params.count(&stmt.limit, "LIMIT")? as i32,
        partitions: params.count(&stmt.partitions, "PARTITIONS")? as i32,
        lease_ms: stmt
            .lease
            .as_ref()
            .map(|l| params.duration(l, "LEASE"))
            .transpose()?
            .map(|d| d.as_millis().clamp(1, i64::MAX as u128) as i64),
        subscribe,
        subscribe_at,
        auto_ack: stmt.auto_ack,
        wait: stmt
            .wait
            .as_ref()
            .map(|w| params.duration(w, "WAIT"))
            .transpose()?,
    })
}

/// One attempt of a POP: claims and decodes what is available now.
pub async fn pop_once(
    conn: &mut BackendConn,
    plan: &PopPlan,
    key: &ReceiptKey,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn
        .call(
            &POP_CALL,
            &[
                &plan.queue,
                &plan.partition,
                &plan.group,
                &plan.limit,
                &plan.partitions,
                &plan.lease_ms,
                &plan.subscribe,
                &plan.subscribe_at,
                &plan.auto_ack,
                &tenant,
            ],
        )
        .await?;
    let mut out = Vec::new();
    for row in &rows {
        let partition_id: i64 = get(row, 0, &Type::INT8)?;
        let partition_name: String = get(row, 1, &Type::TEXT)?;
        let lease_token: Option<Uuid> = get(row, 2, &Type::UUID)?;
        let lease_expires_at: Option<SystemTime> = get(row, 3, &Type::TIMESTAMPTZ)?;
        let retry_count: i32 = get(row, 4, &Type::INT4)?;
        let from: i64 = get(row, 5, &Type::INT8)?;
        let to: i64 = get(row, 6, &Type::INT8)?;
        let base: i64 = get(row, 7, &Type::INT8)?;
        let blob: &[u8] = get(row, 8, &Type::BYTEA)?;
        let first = from.max(base);
        if to < first {
            continue;
        }
        let frames = frame::decode_range(blob, (first - base) as usize, (to - first + 1) as usize)
            .map_err(|e| ExecError::Refused(ErrorFields::error("XX001", e.to_string())))?;
        for (i, f) in frames.into_iter().enumerate() {
            let offset = first + i as i64;
            let receipt = lease_token.map(|token| {
                key.encode(&Receipt {
                    partition_id,
                    offset,
                    lease_token: token,
                    group: plan.group.clone(),
                })
            });
            out.push(vec![
                Cell::opt_text(receipt),
                Cell::Uuid(f.message_id),
                Cell::Text(plan.queue.clone()),
                Cell::Text(partition_name.clone()),
                Cell::Int8(offset),
                Cell::Jsonb(f.payload),
                Cell::opt_text(f.transaction_id),
                Cell::opt_text(f.trace_id),
                Cell::Int4(retry_count),
                Cell::Timestamptz(f.created_at_micros),
                Cell::timestamp(lease_expires_at),
            ]);
        }
    }
    Ok(out)
}

fn decode_receipts(
    receipts: &[Value<String>],
    params: &Params<'_>,
    key: &ReceiptKey,
) -> Result<(Vec<String>, Vec<Receipt>), ErrorFields> {
    let mut texts = Vec::with_capacity(receipts.len());
    let mut decoded = Vec::with_capacity(receipts.len());
    for r in receipts {
        let text = params.text(r, "receipt")?;
        let receipt = key.decode(&text).map_err(|InvalidReceipt| {
            ErrorFields::error(
                "22P02",
                "invalid receipt: not one this queue issued, or altered",
            )
        })?;
        texts.push(text);
        decoded.push(receipt);
    }
    Ok((texts, decoded))
}

pub async fn ack(
    conn: &mut BackendConn,
    stmt: &Ack,
    params: &Params<'_>,
    key: &ReceiptKey,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let (texts, receipts) = decode_receipts(&stmt.receipts, params, key)?;
    let (failed, reason) = match &stmt.outcome {
        AckOutcome::Success => (false, None),
        AckOutcome::Failed { reason } => (
            true,
            reason
                .as_ref()
                .map(|r| params.opt_text(r))
                .transpose()?
                .flatten(),
        ),
    };
    let partition_ids: Vec<i64> = receipts.iter().map(|r| r.partition_id).collect();
    let offsets: Vec<i64> = receipts.iter().map(|r| r.offset).collect();
    let groups: Vec<&str> = receipts.iter().map(|r| r.group.as_str()).collect();
    let tokens: Vec<Uuid> = receipts.iter().map(|r| r.lease_token).collect();
    let rows = conn
        .call(
            &ACK_CALL,
            &[
                &partition_ids,
                &offsets,
                &groups,
                &tokens,
                &failed,
                &reason,
                &tenant,
            ],
        )
        .await?;
    let mut status = vec![String::from("stale"); texts.len()];
    for row in &rows {
        let idx: i32 = get(row, 0, &Type::INT4)?;
        let s: String = get(row, 1, &Type::TEXT)?;
        if let Some(slot) = usize::try_from(idx).ok().and_then(|i| status.get_mut(i)) {
            *slot = s;
        }
    }
    Ok(texts
        .into_iter()
        .zip(status)
        .map(|(t, s)| vec![Cell::Text(t), Cell::Text(s)])
        .collect())
}

pub async fn renew(
    conn: &mut BackendConn,
    stmt: &Renew,
    params: &Params<'_>,
    key: &ReceiptKey,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let (texts, receipts) = decode_receipts(&stmt.receipts, params, key)?;
    let extend_ms: Option<i64> = stmt
        .duration
        .as_ref()
        .map(|d| params.duration(d, "RENEW FOR"))
        .transpose()?
        .map(|d| d.as_millis().min(i64::MAX as u128) as i64);
    let partition_ids: Vec<i64> = receipts.iter().map(|r| r.partition_id).collect();
    let groups: Vec<&str> = receipts.iter().map(|r| r.group.as_str()).collect();
    let tokens: Vec<Uuid> = receipts.iter().map(|r| r.lease_token).collect();
    let rows = conn
        .call(
            &RENEW_CALL,
            &[&partition_ids, &groups, &tokens, &extend_ms, &tenant],
        )
        .await?;
    let mut expiry: Vec<Option<SystemTime>> = vec![None; texts.len()];
    for row in &rows {
        let idx: i32 = get(row, 0, &Type::INT4)?;
        let at: Option<SystemTime> = get(row, 1, &Type::TIMESTAMPTZ)?;
        if let Some(slot) = usize::try_from(idx).ok().and_then(|i| expiry.get_mut(i)) {
            *slot = at;
        }
    }
    Ok(texts
        .into_iter()
        .zip(expiry)
        .map(|(t, e)| vec![Cell::Text(t), Cell::timestamp(e)])
        .collect())
}

/// The JSON object `configure_queue_v1` takes: durations in each column's
/// unit (milliseconds for retry_delay, whole seconds rounded up otherwise).
fn options_json(settings: &[QueueSetting], params: &Params<'_>) -> Result<String, ErrorFields> {
    let mut out = String::from("{");
    for (i, s) in settings.iter().enumerate() {
        let value = match &s.value {
            Value::Literal(v) => v.clone(),
            Value::Param(n) => {
                let text = params.text(&Value::Param(*n), s.option.name())?;
                s.option.parse_value(&text).map_err(parse_error)?
            }
        };
        let json = match value {
            // The two millisecond columns.
            OptionValue::Duration(d)
                if matches!(
                    s.option,
                    QueueOption::RetryDelay | QueueOption::MinPopWaitTime
                ) =>
            {
                d.as_millis().to_string()
            }
            OptionValue::Duration(d) => {
                let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
                secs.to_string()
            }
            OptionValue::Integer(v) => v.to_string(),
            OptionValue::Boolean(b) => b.to_string(),
            OptionValue::Text(t) => json_string(&t),
        };
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json_string(s.option.name()));
        out.push(':');
        out.push_str(&json);
    }
    out.push('}');
    Ok(out)
}

pub async fn configure(
    conn: &mut BackendConn,
    queue: &Value<String>,
    settings: &[QueueSetting],
    mode: &str,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<(), ExecError> {
    let queue = params.name(queue, "queue")?;
    let options = options_json(settings, params)?;
    conn.call(&CONFIGURE_CALL, &[&queue, &options, &mode, &tenant])
        .await?;
    Ok(())
}

/// Returns whether the queue existed.
pub async fn drop_queue(
    conn: &mut BackendConn,
    queue: &str,
    tenant: Uuid,
) -> Result<bool, ExecError> {
    let rows = conn.call(&DELETE_CALL, &[&queue, &tenant]).await?;
    match rows.first() {
        Some(row) => Ok(get::<Option<bool>>(row, 0, &Type::BOOL)?.unwrap_or(false)),
        None => Ok(false),
    }
}

pub async fn seek(
    conn: &mut BackendConn,
    queue: &str,
    group: &str,
    partition: Option<&str>,
    target: &SeekTarget,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<(), ExecError> {
    let (target, at) = match target {
        SeekTarget::Beginning => ("beginning", None),
        SeekTarget::End => ("end", None),
        SeekTarget::Timestamp(ts) => ("timestamp", Some(params.text(ts, "TIMESTAMP")?)),
    };
    conn.call(
        &SEEK_CALL,
        &[&queue, &group, &partition, &target, &at, &tenant],
    )
    .await?;
    Ok(())
}

pub async fn drop_group(
    conn: &mut BackendConn,
    queue: &str,
    group: &str,
    tenant: Uuid,
) -> Result<(), ExecError> {
    conn.call(&DROP_GROUP_CALL, &[&queue, &group, &tenant])
        .await?;
    Ok(())
}

pub async fn show_queues(
    conn: &mut BackendConn,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.call(&SHOW_QUEUES_CALL, &[&tenant]).await?;
    rows.iter()
        .map(|r| row_cells(r, show::QUEUES_COLUMNS).map_err(ExecError::from))
        .collect()
}

pub async fn show_partitions(
    conn: &mut BackendConn,
    queue: &str,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.call(&SHOW_PARTITIONS_CALL, &[&queue, &tenant]).await?;
    rows.iter()
        .map(|r| row_cells(r, show::PARTITIONS_COLUMNS).map_err(ExecError::from))
        .collect()
}

pub async fn show_groups(
    conn: &mut BackendConn,
    queue: Option<&str>,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.call(&SHOW_GROUPS_CALL, &[&queue, &tenant]).await?;
    rows.iter()
        .map(|r| row_cells(r, show::GROUPS_COLUMNS).map_err(ExecError::from))
        .collect()
}

pub async fn show_dlq(
    conn: &mut BackendConn,
    queue: &str,
    limit: i32,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn
        .call(&SHOW_DLQ_CALL, &[&queue, &limit, &tenant])
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let offset: i64 = get(r, 0, &Type::INT8)?;
        let base: i64 = get(r, 6, &Type::INT8)?;
        let blob: &[u8] = get(r, 7, &Type::BYTEA)?;
        let frame = usize::try_from(offset - base)
            .ok()
            .and_then(|skip| frame::decode_range(blob, skip, 1).ok())
            .and_then(|mut v| v.pop());
        out.push(vec![
            frame
                .as_ref()
                .map_or(Cell::Null, |f| Cell::Uuid(f.message_id)),
            Cell::Text(get(r, 1, &Type::TEXT)?),
            Cell::Int8(offset),
            Cell::Text(get(r, 2, &Type::TEXT)?),
            Cell::opt_text(get(r, 3, &Type::TEXT)?),
            Cell::Int4(get(r, 4, &Type::INT4)?),
            Cell::timestamp(get(r, 5, &Type::TIMESTAMPTZ)?),
            frame.map_or(Cell::Null, |f| Cell::Jsonb(f.payload)),
        ]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txn_hash_is_stable() {
        // Stored in the database: these values must never change.
        assert_eq!(txn_hash(""), 0xcbf29ce484222325u64 as i64);
        assert_eq!(txn_hash("a"), 0xaf63dc4c8601ec8cu64 as i64);
    }

    #[test]
    fn options_become_column_units() {
        use crate::rewrite::dialect::{self, Statement};
        let Some(Ok(Statement::CreateQueue(c))) = dialect::parse(
            "CREATE QUEUE q WITH (lease_time = '250ms', retry_delay = '2s', retry_limit = 5, dead_letter_queue = off, namespace = 'a\"b')",
        ) else {
            panic!("parse");
        };
        let json = options_json(&c.settings, &Params(&[])).unwrap();
        assert_eq!(
            json,
            r#"{"lease_time":1,"retry_delay":2000,"retry_limit":5,"dead_letter_queue":false,"namespace":"a\"b"}"#
        );
    }
}
