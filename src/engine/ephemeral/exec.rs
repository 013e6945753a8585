//! PUSH, POP, ACK and RENEW on an ephemeral queue: the same statements,
//! rows and receipts as for a durable queue, served from the owner's memory
//! (`store.rs`), here or forwarded to the owner (`forward.rs`). A receipt
//! of an ephemeral message carries the queue's ref as a negative partition
//! id (durable partition ids are positive), so ACK and RENEW find the queue
//! without its name, through any queenwire.

use super::ops::{self, Popped};
use super::store::{NewMessage, Pushed, Start};
use super::wire::{Item, Op, PopSpec, Reply};
use super::{Ephemeral, Owned, Pending};
use crate::backend::call::Calls;
use crate::calls::ephemeral::CommitMark;
use crate::calls::queues::{PopArgs, DEFAULT_PARTITION};
use crate::engine::lend::Lender;
use crate::engine::receipt::{partition_of, Receipt};
use crate::engine::values::{now_micros, Cell, Params};
use crate::engine::{Engine, ExecError, Outcome};
use crate::protocol::{SqlError, SqlState};
use crate::rewrite::build::pop::pop_args;
use crate::rewrite::dialect::ack::{Ack, AckOutcome, Renew};
use crate::rewrite::dialect::pop::{Pop, PopFrom};
use crate::rewrite::dialect::push::Push;
use crate::rewrite::dialect::{Statement, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use uuid::Uuid;

fn ephemeral_receipts(
    engine: &Engine,
    texts: &[Value<String>],
    params: &Params<'_>,
) -> Result<Option<Vec<(String, Receipt)>>, SqlError> {
    // An ephemeral receipt names a negative partition. Read without its
    // tag, the partition tells a durable ACK (nearly every ACK) apart
    // before any tag is checked: the durable path checks them, and a
    // second check of each was 8 % of queenwire's CPU in popack100.
    let mut any_ephemeral = false;
    for t in texts {
        let text = params.text_ref(t, "receipt")?;
        any_ephemeral |= partition_of(text).is_some_and(|p| p < 0);
    }
    if !any_ephemeral {
        return Ok(None);
    }
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

fn outcome(stmt: &Statement, rows: Vec<Vec<Cell>>, commit: Option<Uuid>) -> Outcome {
    Outcome {
        tag: stmt.command_tag(rows.len()),
        rows,
        pushed: None,
        ephemeral_commit: commit,
    }
}

impl Engine {
    /// A PUSH to an ephemeral queue; `None` when the queue is not one (or
    /// its name is bad: the durable path reports that).
    pub(in crate::engine) async fn ephemeral_push<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        push: &Push,
        params: &Params<'_>,
        tenant: Uuid,
    ) -> Result<Option<Outcome>, ExecError> {
        let Ok(queue) = params.name(&push.queue, "queue") else {
            return Ok(None);
        };
        let Some(ref_) = self.ephemeral.ref_of(tenant, &queue) else {
            return Ok(None);
        };
        self.serve_push(lender, stmt, push, params, ref_, queue, tenant)
            .await
            .map(Some)
    }

    /// A POP of one ephemeral queue; `None` for any other POP.
    pub(in crate::engine) async fn ephemeral_pop<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        pop: &Pop,
        params: &Params<'_>,
        tenant: Uuid,
    ) -> Result<Option<Outcome>, ExecError> {
        let PopFrom::Queue(q) = &pop.from else {
            return Ok(None);
        };
        let Ok(queue) = params.name(q, "queue") else {
            return Ok(None);
        };
        let Some(ref_) = self.ephemeral.ref_of(tenant, &queue) else {
            return Ok(None);
        };
        self.serve_pop(lender, stmt, pop, params, (tenant, ref_, &queue))
            .await
            .map(Some)
    }

    /// An ACK of ephemeral queues' receipts; `None` for durable ones.
    pub(in crate::engine) async fn ephemeral_ack(
        &self,
        stmt: &Statement,
        ack: &Ack,
        params: &Params<'_>,
        tenant: Uuid,
    ) -> Result<Option<Outcome>, ExecError> {
        let Some(receipts) = ephemeral_receipts(self, &ack.receipts, params)? else {
            return Ok(None);
        };
        let failed = matches!(ack.outcome, AckOutcome::Failed { .. });
        let statuses = by_queue(
            &self.ephemeral,
            tenant,
            &receipts,
            || Cell::Text("stale".into()),
            AtOwner {
                local: |o: &Owned, tenant, items: &[Item]| ops::ack(o, tenant, items, failed),
                op: |items| Op::Ack { failed, items },
                reply: |r| match r {
                    Reply::Statuses(s) => Some(s),
                    _ => None,
                },
            },
            Cell::Text,
        )
        .await?;
        Ok(Some(outcome(stmt, with_receipts(receipts, statuses), None)))
    }

    /// A RENEW of ephemeral queues' receipts; `None` for durable ones.
    pub(in crate::engine) async fn ephemeral_renew(
        &self,
        stmt: &Statement,
        renew: &Renew,
        params: &Params<'_>,
        tenant: Uuid,
    ) -> Result<Option<Outcome>, ExecError> {
        let Some(receipts) = ephemeral_receipts(self, &renew.receipts, params)? else {
            return Ok(None);
        };
        let extend = renew
            .duration
            .as_ref()
            .map(|d| params.duration(d, "RENEW FOR"))
            .transpose()?;
        let until = by_queue(
            &self.ephemeral,
            tenant,
            &receipts,
            || Cell::Null,
            AtOwner {
                local: |o: &Owned, tenant, items: &[Item]| ops::renew(o, tenant, items, extend),
                op: |items| Op::Renew { extend, items },
                reply: |r| match r {
                    Reply::Until(t) => Some(t),
                    _ => None,
                },
            },
            Cell::timestamp,
        )
        .await?;
        Ok(Some(outcome(stmt, with_receipts(receipts, until), None)))
    }

    #[allow(clippy::too_many_arguments)]
    async fn serve_push<L: Lender>(
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
        let rows_of = |pushed: Option<&[Pushed]>| -> Vec<Vec<Cell>> {
            messages
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    // A duplicate reports the message it repeats.
                    let (id, offset, status) = match pushed.and_then(|p| p.get(i)) {
                        None => (m.id, Cell::Null, "queued"),
                        Some(Pushed::Queued(seq)) => (m.id, Cell::Int8(*seq), "queued"),
                        Some(Pushed::Duplicate { seq, id }) => (*id, Cell::Int8(*seq), "duplicate"),
                    };
                    vec![
                        Cell::Uuid(id),
                        Cell::Text(queue.clone()),
                        Cell::Text(m.partition.clone()),
                        offset,
                        Cell::opt_text(m.transaction_id.clone()),
                        Cell::Text(status.into()),
                    ]
                })
                .collect()
        };
        let at = (tenant, ref_, queue.as_str());
        let view = lender.view();
        if !view.status.in_transaction() && !view.pipeline_open {
            let n = messages.len();
            let pushed = hub
                .at_owner(
                    at,
                    |o| ops::push(o, messages.clone()),
                    || Op::Push(messages.clone()),
                    |r| match r {
                        Reply::Pushed(p) if p.len() == n => Some(p),
                        _ => None,
                    },
                )
                .await?;
            return Ok(outcome(stmt, rows_of(Some(&pushed)), None));
        }
        // Inside a transaction block (or a pipeline's implicit one): the
        // messages wait here for COMMIT (then go to the owner, wherever it
        // is by then). The quota is checked now as well, by the owner.
        let (count, bytes) = (
            messages.len() as u64,
            messages.iter().map(|m| m.payload.len() as u64).sum(),
        );
        let mut local = false;
        hub.at_owner(
            at,
            |o| {
                local = true;
                ops::fit(o, count, bytes)
            },
            || Op::Fit { count, bytes },
            |r| matches!(r, Reply::Done).then_some(()),
        )
        .await?;
        let token = Uuid::now_v7();
        let end = lender.call_end();
        let conn = lender.connection().await.map_err(ExecError::Lost)?;
        Calls::new(conn, end)
            .run(&CommitMark { token, tenant })
            .await?;
        let rows = rows_of(None);
        let pending = Pending {
            ref_,
            messages,
            remote: !local,
        };
        super::lock(&hub.pending).insert(token, pending);
        Ok(outcome(stmt, rows, Some(token)))
    }

    async fn serve_pop<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        pop: &Pop,
        params: &Params<'_>,
        at: (Uuid, i64, &str),
    ) -> Result<Outcome, ExecError> {
        let args = pop_args(pop, params)?;
        let cancel = lender.cancel_signal();
        let _mark = cancel.waiting();
        let rows = self
            .ephemeral_pop_rows(at, &args, args.wait, &cancel.notify)
            .await?;
        Ok(outcome(stmt, rows, None))
    }

    /// One queue of a wildcard POP's namespace that is ephemeral: one look
    /// (the wildcard POP's own wait polls again), nothing if `queue` is no
    /// longer an ephemeral queue of `tenant`'s.
    pub(crate) async fn namespace_ephemeral_pop(
        &self,
        tenant: Uuid,
        queue: &str,
        args: &PopArgs,
    ) -> Result<Vec<Vec<Cell>>, ExecError> {
        let Some(ref_) = self.ephemeral.ref_of(tenant, queue) else {
            return Ok(Vec::new());
        };
        let never = tokio::sync::Notify::new();
        self.ephemeral_pop_rows((tenant, ref_, queue), args, None, &never)
            .await
    }

    /// The rows of a POP of the ephemeral queue `at`, POP's columns.
    async fn ephemeral_pop_rows(
        &self,
        at: (Uuid, i64, &str),
        args: &PopArgs,
        wait: Option<Duration>,
        cancel: &tokio::sync::Notify,
    ) -> Result<Vec<Vec<Cell>>, ExecError> {
        let spec = PopSpec {
            start: match args.subscribe == "now" {
                true => Start::Newest,
                false => Start::Oldest,
            },
            limit: u32::try_from(args.limit).unwrap_or(1),
            partitions: u32::try_from(args.max_partitions).unwrap_or(1),
            lease: args.lease_ms.map(|ms| Duration::from_millis(ms as u64)),
            auto_ack: args.auto_ack,
            group: args.group.clone(),
        };
        let delivered = match self
            .ephemeral
            .pop(at, &spec, wait, (cancel, None), true)
            .await?
        {
            Popped::Rows(rows) => rows,
            Popped::NotOwner => Vec::new(),
        };
        let (ref_, queue) = (at.1, at.2);
        let rows = delivered
            .into_iter()
            .map(|d| {
                let receipt = d.lease.map(|(token, _)| {
                    self.receipts
                        .encode_parts(-ref_, d.seq, token, &spec.group, false)
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
                    Cell::unix_micros(d.msg.created_at_micros),
                    Cell::timestamp(d.lease.map(|(_, at)| at)),
                ]
            })
            .collect();
        Ok(rows)
    }
}

/// One request to a queue's owner about some of its messages: run here
/// when this process owns the queue (`local`), else sent (`op`) and its
/// reply read (`reply`), one value per message either way.
struct AtOwner<L, O, R> {
    local: L,
    op: O,
    reply: R,
}

/// Runs `request` once per queue the receipts are of (in one request to
/// its owner), and returns one cell per receipt in their order, made by
/// `cell`; a receipt of a queue that is gone or another tenant's gets
/// `stale()`.
async fn by_queue<T, L, O, R>(
    hub: &Ephemeral,
    tenant: Uuid,
    receipts: &[(String, Receipt)],
    stale: impl Fn() -> Cell,
    request: AtOwner<L, O, R>,
    cell: impl Fn(T) -> Cell,
) -> Result<Vec<Cell>, ExecError>
where
    L: Fn(&Owned, Uuid, &[Item]) -> Vec<T>,
    O: Fn(Vec<Item>) -> Op,
    R: Fn(Reply) -> Option<Vec<T>>,
{
    let mut cells: Vec<Option<Cell>> = vec![None; receipts.len()];
    let mut queues: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, (_, r)) in receipts.iter().enumerate() {
        queues.entry(-r.partition_id).or_default().push(i);
    }
    for (ref_, at) in queues {
        let of = hub.queue_of(ref_).filter(|(t, _)| *t == tenant);
        let got = match of {
            None => Err(SqlError::error(SqlState::UNDEFINED_OBJECT, "gone")),
            Some((_, queue)) => {
                let items: Vec<Item> = at
                    .iter()
                    .map(|i| {
                        let r = &receipts[*i].1;
                        Item {
                            group: r.group.clone(),
                            seq: r.offset,
                            token: r.lease_token,
                        }
                    })
                    .collect();
                let n = items.len();
                hub.at_owner(
                    (tenant, ref_, queue.as_str()),
                    |o| Ok((request.local)(o, tenant, &items)),
                    || (request.op)(items.clone()),
                    |r| (request.reply)(r).filter(|got| got.len() == n),
                )
                .await
                .map(|got| got.into_iter().map(&cell).collect::<Vec<Cell>>())
            }
        };
        // Another tenant's queue, or one that is gone (its messages with
        // it): stale, as for durable receipts.
        let got = match got {
            Ok(got) => got,
            Err(e) if e.code() == SqlState::UNDEFINED_OBJECT.code() => {
                at.iter().map(|_| stale()).collect()
            }
            Err(e) => return Err(e.into()),
        };
        for (i, cell) in at.into_iter().zip(got) {
            cells[i] = Some(cell);
        }
    }
    Ok(cells
        .into_iter()
        .map(|c| c.unwrap_or_else(&stale))
        .collect())
}

fn with_receipts(receipts: Vec<(String, Receipt)>, cells: Vec<Cell>) -> Vec<Vec<Cell>> {
    receipts
        .into_iter()
        .zip(cells)
        .map(|((text, _), cell)| vec![Cell::Text(text), cell])
        .collect()
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
