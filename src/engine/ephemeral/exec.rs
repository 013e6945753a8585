//! PUSH, POP, ACK and RENEW on an ephemeral queue: the same statements,
//! rows and receipts as for a durable queue, served from the owner's memory
//! (`store.rs`). A receipt of an ephemeral message carries the queue's ref
//! as a negative partition id (durable partition ids are positive), so ACK
//! and RENEW find the queue without its name.

use super::store::{NewMessage, Start};
use super::{wall, Ephemeral, Pending};
use crate::backend::call::Calls;
use crate::engine::lend::Lender;
use crate::engine::receipt::Receipt;
use crate::engine::values::{now_micros, Cell, Params};
use crate::engine::{Engine, ExecError, Outcome};
use crate::protocol::{SqlError, SqlState, TxStatus};
use crate::rewrite::calls::ephemeral::CommitMark;
use crate::rewrite::calls::queues::{pop_args, DEFAULT_PARTITION};
use crate::rewrite::dialect::ack::{AckOutcome, Renew};
use crate::rewrite::dialect::pop::{Pop, PopFrom};
use crate::rewrite::dialect::push::Push;
use crate::rewrite::dialect::{Statement, Value};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The first wait between two looks of a POP … WAIT when no PUSH woke it.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// What kind of ephemeral statement this is, if it is one.
enum Target<'a> {
    Push(&'a Push, i64, String),
    Pop(&'a Pop, i64, String),
    Ack {
        receipts: Vec<(String, Receipt)>,
        outcome: &'a AckOutcome,
    },
    Renew {
        receipts: Vec<(String, Receipt)>,
        stmt: &'a Renew,
    },
}

fn ephemeral_receipts(
    engine: &Engine,
    texts: &[Value<String>],
    params: &Params<'_>,
) -> Result<Option<Vec<(String, Receipt)>>, SqlError> {
    let mut out = Vec::with_capacity(texts.len());
    for t in texts {
        let text = params.text(t, "receipt")?;
        // A bad receipt: the durable path reports it (22P02).
        let Ok(receipt) = engine.receipts.decode(&text) else {
            return Ok(None);
        };
        out.push((text, receipt));
    }
    let ephemeral = out.iter().filter(|(_, r)| r.partition_id < 0).count();
    if ephemeral == 0 {
        return Ok(None);
    }
    if ephemeral < out.len() {
        return Err(SqlError::error(
            SqlState::FEATURE_NOT_SUPPORTED,
            "receipts of ephemeral and durable queues cannot be acknowledged in one statement",
        ));
    }
    Ok(Some(out))
}

fn target<'a>(
    engine: &Engine,
    stmt: &'a Statement,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<Option<Target<'a>>, SqlError> {
    let hub = &engine.ephemeral;
    Ok(match stmt {
        Statement::Push(push) => {
            let Ok(queue) = params.name(&push.queue, "queue") else {
                return Ok(None);
            };
            hub.ref_of(tenant, &queue)
                .map(|r| Target::Push(push, r, queue))
        }
        Statement::Pop(pop) => {
            let PopFrom::Queue(q) = &pop.from else {
                return Ok(None);
            };
            let Ok(queue) = params.name(q, "queue") else {
                return Ok(None);
            };
            hub.ref_of(tenant, &queue)
                .map(|r| Target::Pop(pop, r, queue))
        }
        Statement::Ack(ack) => {
            ephemeral_receipts(engine, &ack.receipts, params)?.map(|receipts| Target::Ack {
                receipts,
                outcome: &ack.outcome,
            })
        }
        Statement::Renew(renew) => {
            ephemeral_receipts(engine, &renew.receipts, params)?.map(|receipts| Target::Renew {
                receipts,
                stmt: renew,
            })
        }
        _ => None,
    })
}

fn outcome(stmt: &Statement, rows: Vec<Vec<Cell>>, commit: Option<Uuid>) -> Outcome {
    Outcome {
        tag: stmt.command_tag(rows.len()),
        rows,
        pushed: None,
        ephemeral_commit: commit,
    }
}

impl Engine {
    /// Runs `stmt` if it is a PUSH, POP, ACK or RENEW of an ephemeral
    /// queue; `None` for every other statement.
    pub(in crate::engine) async fn ephemeral_statement<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Option<Result<Outcome, ExecError>> {
        let params = Params(params);
        let target = match target(self, stmt, &params, tenant) {
            Ok(Some(t)) => t,
            Ok(None) => return None,
            Err(e) => return Some(Err(e.into())),
        };
        if lender.view().status == TxStatus::Failed {
            return Some(Err(SqlError::error(
                SqlState::IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            )
            .into()));
        }
        Some(match target {
            Target::Push(push, ref_, queue) => {
                self.ephemeral_push(lender, stmt, push, &params, ref_, queue, tenant)
                    .await
            }
            Target::Pop(pop, ref_, queue) => {
                self.ephemeral_pop(lender, stmt, pop, &params, ref_, &queue)
                    .await
            }
            Target::Ack {
                receipts,
                outcome: how,
            } => {
                let failed = matches!(how, AckOutcome::Failed { .. });
                let mut rows = Vec::with_capacity(receipts.len());
                for (text, r) in receipts {
                    // Another tenant's queue, or one that is gone (its
                    // messages with it): stale, as for durable receipts.
                    let owned = match self.receipt_owner(&r, tenant).await {
                        Ok(Some(o)) => o,
                        Ok(None) => {
                            rows.push(vec![Cell::Text(text), Cell::Text("stale".into())]);
                            continue;
                        }
                        Err(e) => return Some(Err(e.into())),
                    };
                    let status = super::lock(&owned.store).ack(
                        &r.group,
                        r.offset,
                        r.lease_token,
                        failed,
                        Instant::now(),
                    );
                    rows.push(vec![Cell::Text(text), Cell::Text(status.to_string())]);
                }
                Ok(outcome(stmt, rows, None))
            }
            Target::Renew {
                receipts,
                stmt: renew,
            } => {
                let extend = match renew
                    .duration
                    .as_ref()
                    .map(|d| params.duration(d, "RENEW FOR"))
                    .transpose()
                {
                    Ok(e) => e,
                    Err(e) => return Some(Err(e.into())),
                };
                let mut rows = Vec::with_capacity(receipts.len());
                for (text, r) in receipts {
                    let owned = match self.receipt_owner(&r, tenant).await {
                        Ok(Some(o)) => o,
                        Ok(None) => {
                            rows.push(vec![Cell::Text(text), Cell::Null]);
                            continue;
                        }
                        Err(e) => return Some(Err(e.into())),
                    };
                    let until = super::lock(&owned.store).renew(
                        &r.group,
                        r.offset,
                        r.lease_token,
                        extend,
                        Instant::now(),
                        wall(),
                    );
                    rows.push(vec![Cell::Text(text), Cell::timestamp(until)]);
                }
                Ok(outcome(stmt, rows, None))
            }
        })
    }

    /// The owned queue of an ephemeral receipt of `tenant`'s; `None` when
    /// the queue is gone or another tenant's.
    async fn receipt_owner(
        &self,
        receipt: &Receipt,
        tenant: Uuid,
    ) -> Result<Option<std::sync::Arc<super::Owned>>, SqlError> {
        let ref_ = -receipt.partition_id;
        let Some((owner_tenant, queue)) = self.ephemeral.queue_of(ref_) else {
            return Ok(None);
        };
        if owner_tenant != tenant {
            return Ok(None);
        }
        match self.ephemeral.owner(ref_, &queue).await {
            Ok(o) if o.tenant == tenant => Ok(Some(o)),
            Ok(_) => Ok(None),
            Err(e) if e.code() == SqlState::UNDEFINED_OBJECT.code() => Ok(None),
            Err(e) => Err(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn ephemeral_push<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        push: &Push,
        params: &Params<'_>,
        ref_: i64,
        queue: String,
        tenant: Uuid,
    ) -> Result<Outcome, ExecError> {
        let hub: &Ephemeral = &self.ephemeral;
        let messages = new_messages(push, params, self.limits.max_payload)?;
        let owned = hub.owner(ref_, &queue).await?;
        let overflow = |reason: String| {
            ExecError::from(SqlError::error(SqlState::PROGRAM_LIMIT_EXCEEDED, reason))
        };
        let rows_of = |seqs: Option<&[i64]>| -> Vec<Vec<Cell>> {
            messages
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    vec![
                        Cell::Uuid(m.id),
                        Cell::Text(queue.clone()),
                        Cell::Text(m.partition.clone()),
                        seqs.map_or(Cell::Null, |s| Cell::Int8(s[i])),
                        Cell::opt_text(m.transaction_id.clone()),
                        Cell::Text("queued".into()),
                    ]
                })
                .collect()
        };
        let view = lender.view();
        if !view.status.in_transaction() && !view.pipeline_open {
            let result = super::lock(&owned.store).push(messages.clone(), Instant::now());
            let seqs = result.map_err(|o| overflow(o.reason))?;
            owned.pushed.notify_waiters();
            return Ok(outcome(stmt, rows_of(Some(&seqs)), None));
        }
        // Inside a transaction block (or a pipeline's implicit one): the
        // messages wait for COMMIT. The quota is checked now as well.
        let bytes = messages.iter().map(|m| m.payload.len() as u64).sum();
        super::lock(&owned.store)
            .check_fit(messages.len() as u64, bytes)
            .map_err(|o| overflow(o.reason))?;
        let token = Uuid::now_v7();
        let end = lender.call_end();
        let conn = lender.connection().await.map_err(ExecError::Lost)?;
        Calls::new(conn, end)
            .run(&CommitMark { token, tenant })
            .await?;
        let rows = rows_of(None);
        super::lock(&hub.pending).insert(token, Pending { ref_, messages });
        Ok(outcome(stmt, rows, Some(token)))
    }

    async fn ephemeral_pop<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        pop: &Pop,
        params: &Params<'_>,
        ref_: i64,
        queue: &str,
    ) -> Result<Outcome, ExecError> {
        let args = pop_args(pop, params)?;
        let start = if args.subscribe == "now" {
            Start::Newest
        } else {
            Start::Oldest
        };
        let lease = args.lease_ms.map(|ms| Duration::from_millis(ms as u64));
        let deadline = args.wait.map(|w| Instant::now() + w);
        loop {
            let owned = self.ephemeral.owner(ref_, queue).await?;
            self.ephemeral.settled_for(ref_).await;
            let woken = owned.pushed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let delivered = super::lock(&owned.store).pop(
                &args.group,
                start,
                usize::try_from(args.limit).unwrap_or(1),
                usize::try_from(args.max_partitions).unwrap_or(1),
                lease,
                args.auto_ack,
                Instant::now(),
                wall(),
            );
            let remaining = deadline
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or_default();
            if !delivered.is_empty() || remaining.is_zero() || self.draining.has_begun() {
                let rows = delivered
                    .into_iter()
                    .map(|d| {
                        let receipt = d.lease.map(|(token, _)| {
                            self.receipts.encode(&Receipt {
                                partition_id: -ref_,
                                offset: d.seq,
                                lease_token: token,
                                group: args.group.clone(),
                            })
                        });
                        vec![
                            Cell::opt_text(receipt),
                            Cell::Uuid(d.msg.id),
                            Cell::Text(queue.to_string()),
                            Cell::Text(d.msg.partition),
                            Cell::Int8(d.seq),
                            Cell::Jsonb(d.msg.payload),
                            Cell::opt_text(d.msg.transaction_id),
                            Cell::opt_text(d.msg.trace_id),
                            Cell::Int4(d.retry_count),
                            Cell::Timestamptz(d.msg.created_at_micros),
                            Cell::timestamp(d.lease.map(|(_, at)| at)),
                        ]
                    })
                    .collect();
                return Ok(outcome(stmt, rows, None));
            }
            let cancel = lender.cancel_signal();
            let cancelled = cancel.notified();
            tokio::select! {
                () = self.draining.begun() => return Ok(outcome(stmt, Vec::new(), None)),
                _ = &mut woken => {}
                _ = tokio::time::sleep(WAIT_POLL.min(remaining)) => {}
                _ = cancelled => {
                    return Err(ExecError::Refused(SqlError::error(
                        SqlState::QUERY_CANCELED,
                        "canceling statement due to user request",
                    )));
                }
            }
        }
    }
}

/// The PUSH's rows as messages, checked as a durable PUSH checks them.
fn new_messages(
    push: &Push,
    params: &Params<'_>,
    max_payload: usize,
) -> Result<Vec<NewMessage>, SqlError> {
    let now = now_micros();
    let mut out = Vec::with_capacity(push.rows.len());
    for row in &push.rows {
        let payload = params.json(&row.payload, "payload", max_payload)?;
        let partition = match &row.partition {
            Some(p) => params.name(p, "partition")?,
            None => DEFAULT_PARTITION.to_string(),
        };
        let text = |v: &Option<Value<String>>| -> Result<Option<String>, SqlError> {
            match v {
                Some(v) => params.opt_text(v),
                None => Ok(None),
            }
        };
        out.push(NewMessage {
            id: Uuid::now_v7(),
            partition,
            payload,
            transaction_id: text(&row.transaction_id)?,
            trace_id: text(&row.trace_id)?,
            created_at_micros: now,
        });
    }
    Ok(out)
}
