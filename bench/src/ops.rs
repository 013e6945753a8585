//! One client connection doing one kind of request, over and over: the
//! unit every workload is made of. Every system gets the same client and
//! the same payloads: the cells with a pgbench twin (the pushes, pgmq's
//! send, INSERT and SELECT 1) run on the raw client of `wire.rs`, as light
//! as pgbench; the others on tokio-postgres. Both use the extended
//! protocol, statements prepared once per connection, binary parameters.

// The call queenwire's engine makes for a PUSH, made here directly on
// PostgreSQL: the same spec, so the two never drift apart.
use crate::payload::{payload, seq_of, Payloads};
use crate::pgtypes::{Json, JsonText};
use crate::setup::{connect, BoxError};
use crate::wire::{RawConn, RawStmt};
use queenwire::calls::queues::PUSH;
use queenwire::engine::frame::{self, Frame};
use queenwire::engine::values::{now_micros, system_time};
use queenwire::engine::DEFAULT_TENANT;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, GenericClient, Row, Statement};
use uuid::Uuid;

/// pgmq's visibility timeout for read (seconds): longer than any slice.
const PGMQ_VT: i32 = 120;
/// pgmq's visibility timeout for a job worker's read (seconds), as a job
/// worker would set it: longer than any job.
const PGMQ_JOB_VT: i32 = 30;
/// A pgmq job worker whose read returned nothing sleeps this long before
/// reading again (pgmq has no blocking read but `read_with_poll`; a plain
/// worker loop polls).
pub const PGMQ_JOB_IDLE: Duration = Duration::from_millis(10);

#[derive(Clone, Debug)]
pub enum Op {
    /// `PUSH INTO q [PARTITION p] VALUES ($1), …` through queenwire.
    QwPush {
        queue: String,
        batch: usize,
        /// Partitions cycled through, one statement each (None: Default).
        partitions: Option<usize>,
        /// Pick the partition at random per statement instead of cycling.
        random: bool,
    },
    /// The same PUSH as text over the simple protocol (as psql sends it),
    /// into partition Default.
    QwPushText { queue: String, batch: usize },
    /// `pgmq.send` / `pgmq.send_batch` as text over the simple protocol.
    PgmqSendText { queue: String, batch: usize },
    /// The plain INSERT as text over the simple protocol.
    InsertText { batch: usize },
    /// `PUSH INTO q PARTITION p VALUES ($1)` into a new partition each time:
    /// partitions `first`, `first + step`, … (provisioning). With a batch
    /// of more than one, `PUSH INTO q (partition, payload) VALUES ($1, $2),
    /// …`: that many rows, each into the next new partition of the sequence.
    QwProvision {
        queue: String,
        first: usize,
        step: usize,
        batch: usize,
    },
    /// `pgmq.send` (batch 1) or `pgmq.send_batch`.
    PgmqSend { queue: String, batch: usize },
    /// `INSERT INTO bench_insert (part, payload) VALUES ($1, $2), …
    /// RETURNING id`; `part` random among `partitions` when given.
    Insert {
        batch: usize,
        partitions: Option<usize>,
    },
    /// `queen.log_push_v1` called directly, framed here as the engine does;
    /// into a random partition among `partitions` when given.
    DirectPush {
        queue: String,
        batch: usize,
        partitions: Option<usize>,
    },
    /// `POP FROM q [GROUP g] LIMIT n [WAIT w] [AUTO ACK]`, then `ACK` of
    /// every receipt unless auto ack.
    QwPop {
        queue: String,
        limit: usize,
        auto_ack: bool,
        group: Option<String>,
        wait: Option<&'static str>,
    },
    /// `BEGIN; pgmq.read(q, vt, n); pgmq.delete(q, ids); COMMIT`.
    PgmqReadDelete { queue: String, limit: usize },
    /// `pgmq.read_with_poll(q, vt, n, 1 s, 10 ms)`, then `pgmq.delete`.
    PgmqReadPoll { queue: String, limit: usize },
    /// `pgmq.pop(q, n)`.
    PgmqPop { queue: String, limit: usize },
    /// One turn of a job worker: `POP FROM q LIMIT 1 WAIT '…'`, `work` of
    /// sleep (the job), `ACK $1`; all inside `BEGIN … COMMIT` when `tx`.
    QwJob {
        queue: String,
        wait: &'static str,
        work: Duration,
        tx: bool,
    },
    /// pgmq's job worker: `pgmq.read(q, 30, 1)`, `work` of sleep,
    /// `pgmq.delete(q, id)`; inside `BEGIN … COMMIT` when `tx`. When read
    /// returns nothing it sleeps `PGMQ_JOB_IDLE`.
    PgmqJob {
        queue: String,
        work: Duration,
        tx: bool,
    },
    /// `SELECT 1`.
    Select1,
}

pub struct Worker {
    /// The tokio-postgres connection, or (`raw`) the raw one with its one
    /// statement.
    client: Option<Client>,
    raw: Option<(RawConn, RawStmt)>,
    op: Op,
    stmts: Vec<Statement>,
    acks: HashMap<usize, Statement>,
    payloads: Arc<Payloads>,
    cursor: usize,
    partition_cursor: usize,
}

fn refs<T: ToSql + Sync>(v: &[T]) -> Vec<&(dyn ToSql + Sync)> {
    v.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

/// `($1, $2), ($3, $4), …`: `rows` rows of two parameters each.
fn param_pairs(rows: usize) -> String {
    (0..rows)
        .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statement of an op that runs on the raw client, with the parameter
/// types given at Parse (the rest the server infers).
impl Op {
    /// Whether this op runs on the raw client.
    pub fn raw(&self) -> bool {
        raw_statement(self).is_some()
    }
}

fn raw_statement(op: &Op) -> Option<(String, Vec<Type>)> {
    Some(match op {
        Op::QwPush {
            queue,
            batch,
            partitions,
            ..
        } => {
            let part = if partitions.is_some() {
                " PARTITION $1"
            } else {
                ""
            };
            let first = usize::from(partitions.is_some());
            let values = (1..=*batch)
                .map(|i| format!("(${})", i + first))
                .collect::<Vec<_>>()
                .join(", ");
            (
                format!("PUSH INTO {queue}{part} VALUES {values}"),
                Vec::new(),
            )
        }
        Op::PgmqSend { batch: 1, .. } => (
            "SELECT * FROM pgmq.send($1, $2)".to_string(),
            vec![Type::TEXT, Type::JSONB],
        ),
        Op::PgmqSend { .. } => (
            "SELECT * FROM pgmq.send_batch($1, $2)".to_string(),
            vec![Type::TEXT, Type::JSONB_ARRAY],
        ),
        Op::Insert { batch, .. } => (
            format!(
                "INSERT INTO bench_insert (part, payload) VALUES {} RETURNING id",
                param_pairs(*batch)
            ),
            Vec::new(),
        ),
        Op::Select1 => ("SELECT 1".to_string(), Vec::new()),
        _ => return None,
    })
}

pub fn partition_name(i: usize) -> String {
    format!("p{i:04}")
}

impl Worker {
    pub async fn new(
        cfg: &Config,
        op: Op,
        payloads: Arc<Payloads>,
        seed: usize,
    ) -> Result<Worker, BoxError> {
        let raw = match raw_statement(&op) {
            Some((sql, types)) => {
                let mut conn = RawConn::connect(cfg).await?;
                let stmt = conn.prepare(&sql, &types).await?;
                Some((conn, stmt))
            }
            None => None,
        };
        if raw.is_some() {
            return Ok(Worker {
                client: None,
                raw,
                op,
                stmts: Vec::new(),
                acks: HashMap::new(),
                payloads,
                cursor: seed.wrapping_mul(7919),
                partition_cursor: seed,
            });
        }
        let client = connect(cfg).await?;
        let mut stmts = Vec::new();
        match &op {
            // Prepared on the raw connection above.
            Op::QwPush { .. } | Op::PgmqSend { .. } | Op::Insert { .. } | Op::Select1 => {}
            Op::QwProvision { queue, batch, .. } if *batch > 1 => {
                let values = param_pairs(*batch);
                stmts.push(
                    client
                        .prepare(&format!(
                            "PUSH INTO {queue} (partition, payload) VALUES {values}"
                        ))
                        .await?,
                );
            }
            Op::QwProvision { queue, .. } => {
                stmts.push(
                    client
                        .prepare(&format!("PUSH INTO {queue} PARTITION $1 VALUES ($2)"))
                        .await?,
                );
            }
            Op::QwPushText { .. } | Op::PgmqSendText { .. } | Op::InsertText { .. } => {}
            Op::DirectPush { .. } => {
                stmts.push(client.prepare_typed(PUSH.sql, PUSH.params).await?);
            }
            Op::QwPop {
                queue,
                limit,
                auto_ack,
                group,
                wait,
            } => {
                let mut sql = format!("POP FROM {queue}");
                if let Some(g) = group {
                    sql.push_str(&format!(" GROUP {g}"));
                }
                sql.push_str(&format!(" LIMIT {limit}"));
                if let Some(w) = wait {
                    sql.push_str(&format!(" WAIT {w}"));
                }
                if *auto_ack {
                    sql.push_str(" AUTO ACK");
                }
                stmts.push(client.prepare(&sql).await?);
            }
            Op::PgmqReadDelete { .. } => {
                stmts.push(
                    client
                        .prepare_typed(
                            "SELECT * FROM pgmq.read($1, $2, $3)",
                            &[Type::TEXT, Type::INT4, Type::INT4],
                        )
                        .await?,
                );
                stmts.push(
                    client
                        .prepare_typed(
                            "SELECT * FROM pgmq.delete($1, $2)",
                            &[Type::TEXT, Type::INT8_ARRAY],
                        )
                        .await?,
                );
            }
            Op::PgmqReadPoll { .. } => {
                stmts.push(
                    client
                        .prepare_typed(
                            "SELECT * FROM pgmq.read_with_poll($1, $2, $3, $4, $5)",
                            &[Type::TEXT, Type::INT4, Type::INT4, Type::INT4, Type::INT4],
                        )
                        .await?,
                );
                stmts.push(
                    client
                        .prepare_typed(
                            "SELECT * FROM pgmq.delete($1, $2)",
                            &[Type::TEXT, Type::INT8_ARRAY],
                        )
                        .await?,
                );
            }
            Op::PgmqPop { .. } => {
                stmts.push(
                    client
                        .prepare_typed("SELECT * FROM pgmq.pop($1, $2)", &[Type::TEXT, Type::INT4])
                        .await?,
                );
            }
            Op::QwJob { queue, wait, .. } => {
                stmts.push(
                    client
                        .prepare(&format!("POP FROM {queue} LIMIT 1 WAIT '{wait}'"))
                        .await?,
                );
                stmts.push(client.prepare("ACK $1").await?);
            }
            Op::PgmqJob { .. } => {
                stmts.push(
                    client
                        .prepare_typed(
                            "SELECT * FROM pgmq.read($1, $2, $3)",
                            &[Type::TEXT, Type::INT4, Type::INT4],
                        )
                        .await?,
                );
                stmts.push(
                    client
                        .prepare_typed("SELECT pgmq.delete($1, $2)", &[Type::TEXT, Type::INT8])
                        .await?,
                );
            }
        }
        Ok(Worker {
            client: Some(client),
            raw: None,
            op,
            stmts,
            acks: HashMap::new(),
            payloads,
            cursor: seed.wrapping_mul(7919),
            partition_cursor: seed,
        })
    }

    /// A partition name, at random among `n` (xorshift on the cursor).
    fn random_partition(&mut self, n: usize) -> String {
        let mut x = (self.partition_cursor as u64) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.partition_cursor = x as usize;
        partition_name((x % n.max(1) as u64) as usize)
    }

    /// The positions of the next `n` payloads in the pool.
    fn advance(&mut self, n: usize) -> usize {
        let start = self.cursor;
        self.cursor = self.cursor.wrapping_add(n);
        start
    }

    /// One request (or transaction). Returns the messages it moved; 0 means
    /// there was nothing to consume. `seqs`, when given, receives the
    /// sequence numbers of consumed payloads.
    pub async fn run_once(&mut self, seqs: Option<&mut Vec<u64>>) -> Result<u64, BoxError> {
        let op = self.op.clone();
        match op {
            Op::QwPush {
                batch,
                partitions,
                random,
                ..
            } => {
                let part = partitions.map(|p| {
                    if random {
                        self.random_partition(p)
                    } else {
                        self.partition_cursor = (self.partition_cursor + 1) % p;
                        partition_name(self.partition_cursor)
                    }
                });
                let pool = self.payloads.clone();
                let start = self.advance(batch);
                let payloads: Vec<Json> = (0..batch)
                    .map(|i| Json(pool.get(start.wrapping_add(i))))
                    .collect();
                let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(batch + 1);
                if let Some(p) = &part {
                    params.push(p);
                }
                params.extend(payloads.iter().map(|p| p as &(dyn ToSql + Sync)));
                let n = self.raw_execute(&params).await?;
                check_count("PUSH", n, batch)
            }
            Op::PgmqSend { queue, batch } => {
                let pool = self.payloads.clone();
                let start = self.advance(batch);
                let payloads: Vec<Json> = (0..batch)
                    .map(|i| Json(pool.get(start.wrapping_add(i))))
                    .collect();
                let n = if batch == 1 {
                    self.raw_execute(&[&queue, &payloads[0]]).await?
                } else {
                    self.raw_execute(&[&queue, &payloads]).await?
                };
                check_count("pgmq send", n, batch)
            }
            Op::Insert { batch, partitions } => {
                let pool = self.payloads.clone();
                let start = self.advance(batch);
                let part: Option<String> = partitions.map(|p| self.random_partition(p));
                let payloads: Vec<Json> = (0..batch)
                    .map(|i| Json(pool.get(start.wrapping_add(i))))
                    .collect();
                let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(2 * batch);
                for p in &payloads {
                    params.push(&part);
                    params.push(p);
                }
                let n = self.raw_execute(&params).await?;
                check_count("INSERT", n, batch)
            }
            Op::QwProvision {
                first, step, batch, ..
            } => {
                let stmt = self.stmts[0].clone();
                let parts: Vec<String> = (0..batch)
                    .map(|i| partition_name(first + step * (self.partition_cursor + i)))
                    .collect();
                self.partition_cursor += batch;
                let pool = self.payloads.clone();
                let start = self.advance(batch);
                let bodies: Vec<Json> = (0..batch)
                    .map(|i| Json(pool.get(start.wrapping_add(i))))
                    .collect();
                let params: Vec<&(dyn ToSql + Sync)> = parts
                    .iter()
                    .zip(&bodies)
                    .flat_map(|(p, b)| [p as &(dyn ToSql + Sync), b as &(dyn ToSql + Sync)])
                    .collect();
                let n = self.pg()?.execute(&stmt, &params).await?;
                check_count("PUSH", n, batch)
            }
            Op::QwPushText { queue, batch } => {
                let sql = format!("PUSH INTO {queue} VALUES {}", self.text_values(batch, ""));
                let n = simple_count(self.pg()?, &sql).await?;
                check_count("PUSH", n, batch)
            }
            Op::PgmqSendText { queue, batch } => {
                let sql = if batch == 1 {
                    format!(
                        "SELECT * FROM pgmq.send('{queue}', {})",
                        self.text_values(1, "::jsonb")
                    )
                } else {
                    let list: Vec<String> =
                        (0..batch).map(|_| self.text_values(1, "::jsonb")).collect();
                    format!(
                        "SELECT * FROM pgmq.send_batch('{queue}', ARRAY[{}])",
                        list.join(", ")
                    )
                };
                let n = simple_count(self.pg()?, &sql).await?;
                check_count("pgmq send", n, batch)
            }
            Op::InsertText { batch } => {
                let values: Vec<String> = (0..batch)
                    .map(|_| format!("(NULL, {})", self.text_values(1, "")))
                    .collect();
                let sql = format!(
                    "INSERT INTO bench_insert (part, payload) VALUES {} RETURNING id",
                    values.join(", ")
                );
                let n = simple_count(self.pg()?, &sql).await?;
                check_count("INSERT", n, batch)
            }
            Op::DirectPush {
                queue,
                batch,
                partitions,
            } => {
                let stmt = self.stmts[0].clone();
                let now = now_micros();
                let start = self.advance(batch);
                let frames: Vec<Frame> = (0..batch)
                    .map(|i| Frame {
                        message_id: Uuid::now_v7(),
                        created_at_micros: now,
                        transaction_id: None,
                        trace_id: None,
                        payload: self.payloads.get(start.wrapping_add(i)).to_string(),
                    })
                    .collect();
                let blob = frame::encode(&frames, None)?;
                let part =
                    partitions.map_or_else(|| "Default".to_string(), |p| self.random_partition(p));
                let names = vec![part.as_str()];
                let counts = vec![batch as i32];
                let blobs = vec![blob];
                let hashes: Vec<Option<i64>> = vec![None; batch];
                let ids: Vec<Uuid> = frames.iter().map(|f| f.message_id).collect();
                let times = vec![system_time(now)];
                let no_traces: Option<Vec<Option<&str>>> = None;
                let n = self
                    .pg()?
                    .execute(
                        &stmt,
                        &[
                            &queue,
                            &names,
                            &counts,
                            &blobs,
                            &hashes,
                            &ids,
                            &times,
                            &times,
                            &no_traces,
                            &DEFAULT_TENANT,
                        ],
                    )
                    .await?;
                // One row per segment (the spec asks for p_per_segment),
                // standing for the batch's messages.
                check_count("log_push_v1", n, 1).map(|_| batch as u64)
            }
            Op::QwPop { auto_ack, .. } => {
                let stmt = self.stmts[0].clone();
                let rows = self.pg()?.query(&stmt, &[]).await?;
                if rows.is_empty() {
                    return Ok(0);
                }
                consume_payloads(&rows, "payload", seqs)?;
                if !auto_ack {
                    let receipts: Vec<&str> = rows
                        .iter()
                        .map(|r| r.try_get::<_, &str>("receipt"))
                        .collect::<Result<_, _>>()?;
                    let ack = self.ack_statement(receipts.len()).await?;
                    let acked = self.pg()?.query(&ack, &refs(&receipts)).await?;
                    let ok = acked
                        .iter()
                        .filter(|r| r.try_get::<_, &str>(1).ok() == Some("acked"))
                        .count();
                    if ok != rows.len() {
                        return Err(format!("ACK: {ok} of {} acked", rows.len()).into());
                    }
                }
                Ok(rows.len() as u64)
            }
            Op::PgmqReadDelete { queue, limit } => {
                let (read, delete) = (self.stmts[0].clone(), self.stmts[1].clone());
                let tx = self.pg_mut()?.transaction().await?;
                let rows = tx
                    .query(&read, &[&queue, &PGMQ_VT, &(limit as i32)])
                    .await?;
                if rows.is_empty() {
                    tx.commit().await?;
                    return Ok(0);
                }
                consume_payloads(&rows, "message", seqs)?;
                let ids: Vec<i64> = rows
                    .iter()
                    .map(|r| r.try_get::<_, i64>("msg_id"))
                    .collect::<Result<_, _>>()?;
                let deleted = tx.execute(&delete, &[&queue, &ids]).await?;
                tx.commit().await?;
                check_count("pgmq delete", deleted, ids.len())
            }
            Op::PgmqReadPoll { queue, limit } => {
                let (read, delete) = (self.stmts[0].clone(), self.stmts[1].clone());
                let rows = self
                    .pg()?
                    .query(&read, &[&queue, &PGMQ_VT, &(limit as i32), &1i32, &10i32])
                    .await?;
                if rows.is_empty() {
                    return Ok(0);
                }
                consume_payloads(&rows, "message", seqs)?;
                let ids: Vec<i64> = rows
                    .iter()
                    .map(|r| r.try_get::<_, i64>("msg_id"))
                    .collect::<Result<_, _>>()?;
                let deleted = self.pg()?.execute(&delete, &[&queue, &ids]).await?;
                check_count("pgmq delete", deleted, ids.len())
            }
            Op::PgmqPop { queue, limit } => {
                let stmt = self.stmts[0].clone();
                let rows = self.pg()?.query(&stmt, &[&queue, &(limit as i32)]).await?;
                consume_payloads(&rows, "message", seqs)?;
                Ok(rows.len() as u64)
            }
            Op::QwJob { work, tx, .. } => {
                let (pop, ack) = (self.stmts[0].clone(), self.stmts[1].clone());
                if tx {
                    let t = self.pg_mut()?.transaction().await?;
                    let n = qw_job(&t, &pop, &ack, work, seqs).await?;
                    t.commit().await?;
                    Ok(n)
                } else {
                    qw_job(self.pg()?, &pop, &ack, work, seqs).await
                }
            }
            Op::PgmqJob { queue, work, tx } => {
                let (read, delete) = (self.stmts[0].clone(), self.stmts[1].clone());
                let n = if tx {
                    let t = self.pg_mut()?.transaction().await?;
                    let n = pgmq_job(&t, &read, &delete, &queue, work, seqs).await?;
                    t.commit().await?;
                    n
                } else {
                    pgmq_job(self.pg()?, &read, &delete, &queue, work, seqs).await?
                };
                if n == 0 {
                    tokio::time::sleep(PGMQ_JOB_IDLE).await;
                }
                Ok(n)
            }
            Op::Select1 => {
                let rows = self.raw_execute(&[]).await?;
                check_count("SELECT 1", rows, 1)
            }
        }
    }

    /// `('payload')cast, ('payload')cast, …` for `n` payloads of the pool
    /// (with `n` = 1: `'payload'cast`, no parentheses), quoted for SQL text.
    fn text_values(&mut self, n: usize, cast: &str) -> String {
        let start = self.advance(n);
        let one = |p: &str| format!("'{}'{cast}", p.replace('\'', "''"));
        if n == 1 && !cast.is_empty() {
            return one(self.payloads.get(start));
        }
        (0..n)
            .map(|i| format!("({})", one(self.payloads.get(start.wrapping_add(i)))))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn pg(&self) -> Result<&Client, BoxError> {
        self.client
            .as_ref()
            .ok_or_else(|| "this op runs on the raw client".into())
    }

    fn pg_mut(&mut self) -> Result<&mut Client, BoxError> {
        self.client
            .as_mut()
            .ok_or_else(|| "this op runs on the raw client".into())
    }

    async fn raw_execute(&mut self, params: &[&(dyn ToSql + Sync)]) -> Result<u64, BoxError> {
        match &mut self.raw {
            Some((conn, stmt)) => conn.execute(stmt, params).await,
            None => Err("this op runs on tokio-postgres".into()),
        }
    }

    async fn ack_statement(&mut self, n: usize) -> Result<Statement, BoxError> {
        if let Some(s) = self.acks.get(&n) {
            return Ok(s.clone());
        }
        let list = (1..=n)
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let stmt = self.pg()?.prepare(&format!("ACK {list}")).await?;
        self.acks.insert(n, stmt.clone());
        Ok(stmt)
    }
}

/// A job's work: `work` of sleep, as long as asked. tokio's timer fires on
/// the millisecond after the deadline (20 ms of work took about 21), which
/// made every worker's cycle a millisecond longer than the cell says, for
/// every system alike; a thread of the blocking pool sleeps to within tens
/// of microseconds, as pgbench's `\sleep` does.
async fn do_work(work: Duration) -> Result<(), BoxError> {
    if !work.is_zero() {
        tokio::task::spawn_blocking(move || std::thread::sleep(work)).await?;
    }
    Ok(())
}

/// A queenwire job: POP one, work, ACK it (on a session or in its block).
async fn qw_job<C: GenericClient + Sync>(
    c: &C,
    pop: &Statement,
    ack: &Statement,
    work: Duration,
    seqs: Option<&mut Vec<u64>>,
) -> Result<u64, BoxError> {
    let rows = c.query(pop, &[]).await?;
    let Some(row) = rows.first() else {
        return Ok(0);
    };
    check_count("POP … LIMIT 1", rows.len() as u64, 1)?;
    consume_payloads(&rows, "payload", seqs)?;
    let receipt: &str = row.try_get("receipt")?;
    do_work(work).await?;
    let acked = c.query(ack, &[&receipt]).await?;
    match acked.first().map(|r| r.try_get::<_, &str>(1)) {
        Some(Ok("acked")) => Ok(1),
        Some(Ok(status)) => Err(format!("ACK: {status}").into()),
        _ => Err("ACK: no status".into()),
    }
}

/// A pgmq job: read one, work, delete it (on a session or in its block).
async fn pgmq_job<C: GenericClient + Sync>(
    c: &C,
    read: &Statement,
    delete: &Statement,
    queue: &str,
    work: Duration,
    seqs: Option<&mut Vec<u64>>,
) -> Result<u64, BoxError> {
    let rows = c.query(read, &[&queue, &PGMQ_JOB_VT, &1i32]).await?;
    let Some(row) = rows.first() else {
        return Ok(0);
    };
    check_count("pgmq read 1", rows.len() as u64, 1)?;
    consume_payloads(&rows, "message", seqs)?;
    let id: i64 = row.try_get("msg_id")?;
    do_work(work).await?;
    let deleted: bool = c.query_one(delete, &[&queue, &id]).await?.try_get(0)?;
    if deleted {
        Ok(1)
    } else {
        Err(format!("pgmq delete: message {id} was not there").into())
    }
}

/// Runs one statement as text over the simple protocol; its rows (or its
/// command tag's count when it returns none).
async fn simple_count(client: &Client, sql: &str) -> Result<u64, BoxError> {
    use tokio_postgres::SimpleQueryMessage;
    let mut rows = 0;
    let mut tagged = None;
    for m in client.simple_query(sql).await? {
        match m {
            SimpleQueryMessage::Row(_) => rows += 1,
            SimpleQueryMessage::CommandComplete(n) => tagged = Some(n),
            _ => {}
        }
    }
    Ok(if rows > 0 { rows } else { tagged.unwrap_or(0) })
}

fn check_count(what: &str, got: u64, want: usize) -> Result<u64, BoxError> {
    if got == want as u64 {
        Ok(got)
    } else {
        Err(format!("{what}: {got} rows, expected {want}").into())
    }
}

/// Reads every payload (as a consumer would) and notes its sequence number
/// when asked.
fn consume_payloads(
    rows: &[Row],
    column: &str,
    seqs: Option<&mut Vec<u64>>,
) -> Result<(), BoxError> {
    match seqs {
        Some(out) => {
            for r in rows {
                let p: JsonText = r.try_get(column)?;
                if let Some(s) = seq_of(p.0) {
                    out.push(s);
                }
            }
        }
        None => {
            for r in rows {
                let p: JsonText = r.try_get(column)?;
                if p.0.is_empty() {
                    return Err("empty payload".into());
                }
            }
        }
    }
    Ok(())
}

/// Pushes message `seq` (payload carrying it) for the end-to-end workload:
/// `PUSH INTO q PARTITION $1 VALUES ($2)` or `pgmq.send`.
pub struct SeqProducer {
    client: Client,
    stmt: Statement,
    queenwire: bool,
    queue: String,
    partitions: usize,
}

impl SeqProducer {
    pub async fn new(
        cfg: &Config,
        queenwire: bool,
        queue: &str,
        partitions: usize,
    ) -> Result<SeqProducer, BoxError> {
        let client = connect(cfg).await?;
        let stmt = if queenwire {
            client
                .prepare(&format!("PUSH INTO {queue} PARTITION $1 VALUES ($2)"))
                .await?
        } else {
            client
                .prepare_typed(
                    "SELECT * FROM pgmq.send($1, $2)",
                    &[Type::TEXT, Type::JSONB],
                )
                .await?
        };
        Ok(SeqProducer {
            client,
            stmt,
            queenwire,
            queue: queue.to_string(),
            partitions,
        })
    }

    pub async fn push(&mut self, seq: u64) -> Result<(), BoxError> {
        let body = payload(seq);
        let n = if self.queenwire {
            let part = partition_name(seq as usize % self.partitions);
            self.client
                .execute(&self.stmt, &[&part, &Json(&body)])
                .await?
        } else {
            self.client
                .execute(&self.stmt, &[&self.queue, &Json(&body)])
                .await?
        };
        check_count("push", n, 1).map(|_| ())
    }
}
