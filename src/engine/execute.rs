//! Where every dialect statement enters the engine: one `match` from the
//! statement to its arm, and each arm decides how it runs — the console
//! views at once, an ephemeral queue's PUSH, POP, ACK or RENEW from memory
//! or at the queue's owner (`ephemeral/exec.rs`), a PUSH or plain ACK with
//! nothing of the session's on a backend fused with other sessions'
//! (`fusion/`), POP through its waiting (`wait.rs`), and every other
//! statement on the session's connection ([`Engine::on_session`]: the
//! transaction rule, the lock order of seed 000). A refused statement is
//! failed in the backend too, so a client's transaction block aborts
//! exactly as for an error of PostgreSQL's own.

use super::lend::{CallEnd, Lender};
use super::values::{Cell, Params};
use super::{
    acks, browse, console, ephemeral, groups, kv, observe, purge, queues, replay, status, streams,
    timers, wake, Engine, ExecError, Outcome, RAISE_CALL,
};
use crate::backend::call::Calls;
use crate::backend::BackendError;
use crate::calls::admin::ConfigureMode;
use crate::metrics::{Metrics, Waiting};
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::build::admin;
use crate::rewrite::dialect::ack::{Ack, AckOutcome};
use crate::rewrite::dialect::console::Console;
use crate::rewrite::dialect::groups::GroupChange;
use crate::rewrite::dialect::pop::Pop;
use crate::rewrite::dialect::push::Push;
use crate::rewrite::dialect::Statement;
use uuid::Uuid;

/// Why a statement failed, as the session reports it.
#[derive(Debug)]
pub enum StatementError {
    /// The backend's transaction knows the statement failed (it answered
    /// with an error, was made to, or the session had no transaction on a
    /// backend): report it and skip to the next Sync.
    Failed(SqlError),
    /// No backend connection could be had for it: nothing was sent.
    Unavailable(BackendError),
    /// It was sent on a connection that is not the session's (a fused
    /// PUSH's writer) and the reply was lost: it may have taken effect.
    /// The session goes on.
    OutcomeUnknown(BackendError),
    /// The session's backend connection broke (the error says whether the
    /// statement was in flight: [`BackendError::outcome_unknown`]).
    Lost(BackendError),
}

/// Which transactions a statement may run in.
#[derive(Debug, Clone, Copy)]
enum Within {
    /// Whatever transaction the session is in.
    Any,
    /// Only a transaction of its own, never inside a block or a pipeline
    /// (named in the refusal).
    Own(&'static str),
}

/// What a statement run on the session's connection produced.
struct Ran {
    rows: Vec<Vec<Cell>>,
    /// A queue it pushed to ([`Outcome::pushed`]).
    pushed: Option<String>,
}

impl From<Vec<Vec<Cell>>> for Ran {
    fn from(rows: Vec<Vec<Cell>>) -> Ran {
        Ran { rows, pushed: None }
    }
}

impl Ran {
    /// Rows that, when there are any, were pushed to the queue of
    /// `queue_key` ([`wake::queue_key`]).
    fn pushed(rows: Vec<Vec<Cell>>, queue_key: String) -> Ran {
        let pushed = (!rows.is_empty()).then_some(queue_key);
        Ran { rows, pushed }
    }
}

impl Engine {
    /// Runs one dialect statement for a session, on the connection it lends
    /// (or none: a PUSH outside any transaction may be fused with other
    /// sessions' pushes).
    pub async fn execute<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Result<Outcome, StatementError> {
        let began = std::time::Instant::now();
        let result = match lender.view().refuse_if_failed() {
            Ok(()) => self.dispatch(lender, stmt, params, tenant).await,
            Err(refused) => Err(StatementError::Failed(refused)),
        };
        self.metrics
            .statement(stmt.kind(), began.elapsed(), result.is_ok());
        result
    }

    /// The one dispatch: each statement's arm.
    async fn dispatch<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Result<Outcome, StatementError> {
        let p = Params(params);
        match stmt {
            Statement::Console(view) => console_view(&self.metrics, *view, stmt, tenant),
            Statement::Push(push) => {
                let done = match self
                    .ephemeral_push(lender, stmt, push, &p, tenant)
                    .await
                    .transpose()
                {
                    Some(done) => self.settle(lender, done).await,
                    None if lender.view().detached() => {
                        self.fused_push(stmt, push, params, tenant).await
                    }
                    None => {
                        self.on_session(lender, stmt, Within::Any, async |conn| {
                            let limits = &self.limits;
                            let written =
                                queues::push(conn, push, &p, limits, tenant, &self.sealing).await?;
                            let queue = wake::queue_key(tenant, &written.queue);
                            Ok(Ran::pushed(written.rows(), queue))
                        })
                        .await
                    }
                };
                done.inspect(|o| observe::pushed(&self.metrics, tenant, &o.rows))
            }
            Statement::Pop(pop) => {
                let done = match self
                    .ephemeral_pop(lender, stmt, pop, &p, tenant)
                    .await
                    .transpose()
                {
                    Some(done) => self.settle(lender, done).await,
                    None => self.pop_on_session(lender, stmt, pop, params, tenant).await,
                };
                done.inspect(|o| observe::popped(&self.metrics, tenant, pop.auto_ack, &o.rows))
            }
            Statement::Ack(ack) => {
                let plain = matches!(ack.outcome, AckOutcome::Success);
                let done = match self.ephemeral_ack(stmt, ack, &p, tenant).await.transpose() {
                    Some(done) => self.settle(lender, done).await,
                    None if plain && lender.view().detached() => {
                        self.fused_ack(stmt, ack, &p, tenant).await
                    }
                    None => {
                        self.on_session(lender, stmt, Within::Any, async |conn| {
                            let hot = &self.announcer.waiters.hot;
                            let released = |p: &[(i64, &str)], plain: bool| hot.acked(p, plain);
                            acks::ack(conn, ack, &p, &self.receipts, tenant, released).await
                        })
                        .await
                    }
                };
                done.inspect(|o| observe::acked(&self.metrics, &o.rows))
            }
            Statement::Renew(renew) => {
                match self
                    .ephemeral_renew(stmt, renew, &p, tenant)
                    .await
                    .transpose()
                {
                    Some(done) => self.settle(lender, done).await,
                    None => {
                        self.on_session(lender, stmt, Within::Any, async |conn| {
                            acks::renew(conn, renew, &p, &self.receipts, tenant).await
                        })
                        .await
                    }
                }
            }
            Statement::CreateQueue(c) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let mode = if c.if_not_exists {
                        ConfigureMode::CreateIfNotExists
                    } else {
                        ConfigureMode::Create
                    };
                    let call = admin::configure(&c.queue, &c.settings, mode, &p, tenant)?;
                    self.configure(conn, &call, &c.settings).await?;
                    Ok(Vec::new())
                })
                .await
            }
            Statement::AlterQueue(a) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let mode = ConfigureMode::Alter;
                    let call = admin::configure(&a.queue, &a.settings, mode, &p, tenant)?;
                    let option = crate::rewrite::dialect::QueueOption::Ordered;
                    if a.settings.iter().any(|s| s.option == option) {
                        // A change of the groups' type: as for ALTER GROUP.
                        self.fuser.give_back_group(tenant, &call.queue, None).await;
                    }
                    self.configure(conn, &call, &a.settings).await?;
                    Ok(Vec::new())
                })
                .await
            }
            Statement::DropQueue(d) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let queue = p.name(&d.queue, "queue")?;
                    // Claims held for consumers' next POPs go first: none
                    // may answer a POP with a message of a dropped queue.
                    self.fuser.give_back_group(tenant, &queue, None).await;
                    let existed = queues::drop_queue(conn, &queue, tenant).await?;
                    if self.ephemeral.ref_of(tenant, &queue).is_some() {
                        self.ephemeral.refresh().await;
                    }
                    if !existed && !d.if_exists {
                        return Err(SqlError::error(
                            SqlState::UNDEFINED_OBJECT,
                            format!("queue \"{queue}\" does not exist"),
                        )
                        .into());
                    }
                    Ok(Vec::new())
                })
                .await
            }
            Statement::SeekGroup(s) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let call = admin::seek(s, &p, tenant)?;
                    // A claim held for a consumer's next POP predates the
                    // new position.
                    self.fuser
                        .give_back_group(tenant, &call.queue, Some(&call.group))
                        .await;
                    conn.run(&call).await?;
                    // And one an ACK made while it ran.
                    self.fuser
                        .give_back_group(tenant, &call.queue, Some(&call.group))
                        .await;
                    let hot = &self.announcer.waiters.hot;
                    hot.repaired(tenant, &call.queue, &call.group);
                    Ok(Vec::new())
                })
                .await
            }
            Statement::AlterGroup(a) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let (queue, group) = match &a.change {
                        GroupChange::Subscribe(from) => {
                            let call = admin::subscribe(&a.queue, &a.group, from, &p, tenant)?;
                            conn.run(&call).await?;
                            (call.queue, call.group)
                        }
                        GroupChange::Ordered(ordered) => {
                            let call =
                                admin::group_set_type(&a.queue, &a.group, ordered, &p, tenant)?;
                            self.fuser
                                .give_back_group(tenant, &call.queue, Some(&call.group))
                                .await;
                            conn.run(&call).await?;
                            self.fuser
                                .give_back_group(tenant, &call.queue, Some(&call.group))
                                .await;
                            (call.queue, call.group)
                        }
                    };
                    let hot = &self.announcer.waiters.hot;
                    hot.repaired(tenant, &queue, &group);
                    Ok(Vec::new())
                })
                .await
            }
            Statement::DropGroup(d) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let call = admin::drop_group(d, &p, tenant)?;
                    self.fuser
                        .give_back_group(tenant, &call.queue, Some(&call.group))
                        .await;
                    conn.run(&call).await?;
                    // And one an ACK made while it ran.
                    self.fuser
                        .give_back_group(tenant, &call.queue, Some(&call.group))
                        .await;
                    let hot = &self.announcer.waiters.hot;
                    hot.repaired(tenant, &call.queue, &call.group);
                    Ok(Vec::new())
                })
                .await
            }
            Statement::ShowQueues => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let rows = queues::show_queues(conn, tenant).await?;
                    ephemeral::show_queues(conn, &self.ephemeral, rows, tenant).await
                })
                .await
            }
            Statement::ShowPartitions { queue } => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let queue = p.name(queue, "queue")?;
                    queues::show_partitions(conn, &queue, tenant).await
                })
                .await
            }
            Statement::ShowGroups { queue } => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let queue = queue.as_ref().map(|q| p.name(q, "queue")).transpose()?;
                    queues::show_groups(conn, queue.as_deref(), tenant).await
                })
                .await
            }
            Statement::ShowDlq { queue, limit } => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let queue = p.name(queue, "queue")?;
                    let limit = p.count(limit, "LIMIT")? as i32;
                    let keys = self.sealing.keys();
                    queues::show_dlq(conn, &queue, limit, tenant, &keys).await
                })
                .await
            }
            Statement::Kv(statement) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let max_payload = self.limits.max_payload;
                    kv::execute(conn, statement, &p, &self.kv, max_payload, tenant).await
                })
                .await
            }
            Statement::Schedule(s) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    timers::schedule(conn, s, &p, self.limits.max_payload, tenant).await
                })
                .await
            }
            Statement::CancelSchedule(c) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    timers::cancel(conn, c, &p, tenant).await
                })
                .await
            }
            Statement::ShowSchedules { queue } => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let queue = queue.as_ref().map(|q| p.name(q, "queue")).transpose()?;
                    timers::list(conn, queue.as_deref(), tenant).await
                })
                .await
            }
            Statement::Browse(b) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    browse::execute(conn, b, &p, tenant, &self.sealing.keys()).await
                })
                .await
            }
            Statement::GroupDetail(g) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    groups::execute(conn, g, &p, tenant).await
                })
                .await
            }
            Statement::ShowStatus => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    status::show(conn, tenant).await
                })
                .await
            }
            Statement::ReplayDlq(r) => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let limits = &self.limits;
                    let (rows, queue) =
                        replay::replay(conn, r, &p, limits, tenant, &self.sealing).await?;
                    Ok(Ran::pushed(rows, wake::queue_key(tenant, &queue)))
                })
                .await
            }
            // Every step commits on its own.
            Statement::PurgeTenant(purge) => {
                self.on_session(lender, stmt, Within::Own("PURGE TENANT"), async |conn| {
                    let named = p.text(&purge.tenant, "tenant")?;
                    let target = crate::rewrite::dialect::purge::parse_tenant(&named)
                        .map_err(crate::rewrite::bind::parse_error)?;
                    purge::purge_tenant(conn, target).await
                })
                .await
            }
            // The stream statements take the stream tables' locks, which
            // the global lock order puts before every queue lock; CREATE
            // STREAM validates its expressions on another connection.
            Statement::CreateStream(c) => {
                self.on_session(lender, stmt, Within::Own("CREATE STREAM"), async |conn| {
                    streams::create(conn, c, &p, &self.streams, tenant).await
                })
                .await
            }
            Statement::DropStream { name, if_exists } => {
                self.on_session(lender, stmt, Within::Own("DROP STREAM"), async |conn| {
                    let name = p.name(name, "stream")?;
                    streams::drop(conn, &name, *if_exists, tenant).await
                })
                .await
            }
            Statement::AlterStream { name, paused } => {
                self.on_session(lender, stmt, Within::Own("ALTER STREAM"), async |conn| {
                    let name = p.name(name, "stream")?;
                    streams::set_paused(conn, &name, *paused, tenant).await
                })
                .await
            }
            Statement::ShowStreams => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    streams::list(conn, tenant).await
                })
                .await
            }
            Statement::ShowStream { name } => {
                self.on_session(lender, stmt, Within::Any, async |conn| {
                    let name = p.name(name, "stream")?;
                    streams::show(conn, &name, tenant).await
                })
                .await
            }
        }
    }

    /// Runs a statement on the session's connection, inside whatever
    /// transaction it is in: takes the connection, applies `within` and
    /// the lock order, runs `run`, and fails a refusal in the backend.
    async fn on_session<L, T>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        within: Within,
        run: impl AsyncFnOnce(&mut Calls<'_>) -> Result<T, ExecError>,
    ) -> Result<Outcome, StatementError>
    where
        L: Lender,
        T: Into<Ran>,
    {
        let end = lender.call_end();
        take_connection(lender).await?;
        let in_block = self.enter(lender, stmt, within, end).await?;
        let result = match lender.connection().await {
            Ok(conn) => run(&mut Calls::new(conn, end)).await.map(Into::into),
            Err(e) => Err(ExecError::Lost(e)),
        };
        // A statement that failed took no lock the block keeps: the block
        // is over, or rolled back to a savepoint from before it.
        if result.is_ok() {
            lender.lock_order().ran(stmt, in_block);
        }
        let ran = self.settle(lender, result).await?;
        Ok(Outcome {
            tag: stmt.command_tag(ran.rows.len()),
            rows: ran.rows,
            pushed: ran.pushed,
            ephemeral_commit: None,
        })
    }

    /// A durable POP: fused with other sessions' or on the session's
    /// connection, waiting as its WAIT says (`wait.rs`).
    async fn pop_on_session<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        pop: &Pop,
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Result<Outcome, StatementError> {
        let end = lender.call_end();
        // A POP with nothing of the session's on a backend takes a
        // connection only when it is not fused with other sessions' POPs
        // (`wait.rs`): holding one here would starve the fused call's.
        if !lender.view().detached() {
            take_connection(lender).await?;
        }
        let in_block = self.enter(lender, stmt, Within::Any, end).await?;
        let result = {
            let _waiting = pop.wait.is_some().then(|| Waiting::begin(&self.metrics));
            self.pop(lender, pop, params, tenant).await
        };
        if result.is_ok() {
            lender.lock_order().ran(stmt, in_block);
        }
        self.settle(lender, result).await
    }

    /// Before a statement runs in the session's transaction: refuses it
    /// when it must run alone and cannot, or when it breaks the lock
    /// order. Returns whether the session is in a transaction block.
    async fn enter<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        within: Within,
        end: CallEnd,
    ) -> Result<bool, StatementError> {
        let in_block = lender.view().status.in_transaction();
        if let Within::Own(what) = within {
            if in_block || end == CallEnd::Flush {
                let refusal = SqlError::error(
                    SqlState::ACTIVE_SQL_TRANSACTION,
                    format!("{what} cannot run inside a transaction block"),
                );
                return Err(self.refuse(lender, refusal).await);
            }
        }
        if let Err(refusal) = lender.lock_order().check(stmt, in_block) {
            return Err(self.refuse(lender, refusal).await);
        }
        Ok(in_block)
    }

    /// The session's view of an engine error: a refusal is failed in the
    /// backend first ([`Engine::refuse`]).
    async fn settle<L: Lender, T>(
        &self,
        lender: &mut L,
        result: Result<T, ExecError>,
    ) -> Result<T, StatementError> {
        match result {
            Ok(done) => Ok(done),
            Err(ExecError::Refused(refusal)) => Err(self.refuse(lender, refusal).await),
            Err(ExecError::Failed(fields)) => Err(StatementError::Failed(fields)),
            Err(ExecError::Lost(e)) => Err(StatementError::Lost(e)),
        }
    }

    /// Fails a statement the proxy refused in the backend as well, when
    /// the session holds a connection: its transaction then fails exactly
    /// as for an error of PostgreSQL's own. Without one there is no
    /// transaction to fail.
    pub async fn refuse<L: Lender>(&self, lender: &mut L, refusal: SqlError) -> StatementError {
        let end = lender.call_end();
        if let Some(conn) = lender.held() {
            if let Err(e) = raise(&mut Calls::new(conn, end), &refusal).await {
                return StatementError::Lost(e);
            }
        }
        StatementError::Failed(refusal)
    }

    /// A PUSH with nothing of the session's on a backend: written with the
    /// other sessions' pushes to the same queue, in one call and one commit.
    async fn fused_push(
        &self,
        stmt: &Statement,
        push: &Push,
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Result<Outcome, StatementError> {
        let mut prep = queues::prepare_push(push, &Params(params), &self.limits)
            .map_err(StatementError::Failed)?;
        // Large segments are compressed here, by each session, rather than
        // by the queue's one writer while the others wait for it.
        prep.pre_encode(tenant, &self.sealing);
        let prep = self.fuser.push(prep, tenant).await.map_err(fused_error)?;
        let rows = prep.rows();
        Ok(Outcome {
            tag: stmt.command_tag(rows.len()),
            rows,
            // The fused writer woke the queue's waiters itself.
            pushed: None,
            ephemeral_commit: None,
        })
    }

    /// A plain ACK with nothing of the session's on a backend: written
    /// with the other sessions' ACKs of the tenant, in one call and one
    /// commit.
    async fn fused_ack(
        &self,
        stmt: &Statement,
        ack: &Ack,
        params: &Params<'_>,
        tenant: Uuid,
    ) -> Result<Outcome, StatementError> {
        let (texts, receipts) = acks::decode_receipts(&ack.receipts, params, &self.receipts)
            .map_err(StatementError::Failed)?;
        let status = self
            .fuser
            .ack(receipts, tenant)
            .await
            .map_err(fused_error)?;
        let rows = acks::ack_rows(texts, status);
        Ok(Outcome {
            tag: stmt.command_tag(rows.len()),
            rows,
            pushed: None,
            ephemeral_commit: None,
        })
    }
}

/// A fused statement's error: a lost connection was the writer's, not
/// this session's.
fn fused_error(e: ExecError) -> StatementError {
    match e {
        ExecError::Refused(fields) | ExecError::Failed(fields) => StatementError::Failed(fields),
        ExecError::Lost(e) if e.outcome_unknown() => StatementError::OutcomeUnknown(e),
        ExecError::Lost(e) => StatementError::Unavailable(e),
    }
}

/// The admin view needs no backend.
fn console_view(
    metrics: &Metrics,
    view: Console,
    stmt: &Statement,
    tenant: Uuid,
) -> Result<Outcome, StatementError> {
    let rows = console::rows(metrics, view, tenant);
    Ok(Outcome {
        tag: stmt.command_tag(rows.len()),
        rows,
        pushed: None,
        ephemeral_commit: None,
    })
}

/// Takes the session's connection for a statement about to run on it.
async fn take_connection<L: Lender>(lender: &mut L) -> Result<(), StatementError> {
    match lender.connection().await {
        Ok(_) => Ok(()),
        // Only the lease's own housekeeping ran: the statement was not sent.
        Err(e) => Err(StatementError::Unavailable(e.into_cause())),
    }
}

/// `queen.raise_v1` on `conn`: the backend fails its current statement.
async fn raise(conn: &mut Calls<'_>, refusal: &SqlError) -> Result<(), BackendError> {
    match conn
        .call(&RAISE_CALL, &[&refusal.code(), &refusal.message])
        .await
    {
        Ok(_) | Err(BackendError::Server(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
