//! Where every dialect statement enters the engine: the console views,
//! the ephemeral queues' statements (`ephemeral/exec.rs`), the fusion
//! decision, the lock order, POP's waiting, the run of every other
//! statement (`Engine::run_statement`), and the duty to fail a refused
//! statement in the backend, so a client's transaction block aborts exactly
//! as for an error of PostgreSQL's own.

use super::lend::{CallEnd, Lender};
use super::values::Params;
use super::{acks, console, observe, queues, Engine, ExecError, Outcome, RAISE_CALL};
use crate::backend::call::Calls;
use crate::backend::BackendError;
use crate::metrics::{Metrics, Waiting};
use crate::protocol::SqlError;
use crate::protocol::{SqlState, TxStatus};
use crate::rewrite::dialect::ack::{Ack, AckOutcome};
use crate::rewrite::dialect::console::Console;
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
        let result = self.dispatch(lender, stmt, params, tenant).await;
        self.metrics
            .statement(observe::kind(stmt), began.elapsed(), result.is_ok());
        if let Ok(outcome) = &result {
            observe::count_rows(&self.metrics, stmt, tenant, &outcome.rows);
        }
        result
    }

    async fn dispatch<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Statement,
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Result<Outcome, StatementError> {
        if let Statement::Console(view) = stmt {
            return console_view(lender, &self.metrics, *view, stmt, tenant);
        }
        if let Some(result) = self.ephemeral_statement(lender, stmt, params, tenant).await {
            return match result {
                Ok(outcome) => Ok(outcome),
                Err(ExecError::Refused(refusal)) => Err(self.refuse(lender, refusal).await),
                Err(ExecError::Failed(fields)) => Err(StatementError::Failed(fields)),
                Err(ExecError::Lost(e)) => Err(StatementError::Lost(e)),
            };
        }
        if let Statement::Push(push) = stmt {
            if lender.view().detached() {
                return self.fused_push(stmt, push, params, tenant).await;
            }
        }
        if let Statement::Ack(ack) = stmt {
            if matches!(ack.outcome, AckOutcome::Success) && lender.view().detached() {
                return self.fused_ack(stmt, ack, params, tenant).await;
            }
        }
        let end = lender.call_end();
        // A POP with nothing of the session's on a backend takes a
        // connection only when it is not fused with other sessions' POPs
        // (`wait.rs`): holding one here would starve the fused call's.
        let detached_pop = matches!(stmt, Statement::Pop(_)) && lender.view().detached();
        if !detached_pop {
            if let Err(e) = lender.connection().await {
                // Only the lease's own housekeeping ran: the statement was not sent.
                return Err(StatementError::Unavailable(e.into_cause()));
            }
        }
        let in_block = lender.view().status.in_transaction();
        if let Some(what) = own_transaction(stmt) {
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
        let result = match stmt {
            Statement::Pop(pop) => {
                let _waiting = pop.wait.is_some().then(|| Waiting::begin(&self.metrics));
                self.pop(lender, pop, params, tenant).await
            }
            _ => match lender.connection().await {
                Ok(conn) => {
                    self.run_statement(&mut Calls::new(conn, end), stmt, params, tenant)
                        .await
                }
                Err(e) => Err(ExecError::Lost(e)),
            },
        };
        lender.lock_order().ran(stmt, in_block);
        match result {
            Ok(outcome) => Ok(outcome),
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
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Result<Outcome, StatementError> {
        let (texts, receipts) =
            acks::decode_receipts(&ack.receipts, &Params(params), &self.receipts)
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

/// Statements that must be transactions of their own: PURGE TENANT's steps
/// each commit; the stream statements take the stream tables' locks, which
/// the global lock order puts before every queue lock (and CREATE STREAM
/// validates its expressions on another connection).
fn own_transaction(stmt: &Statement) -> Option<&'static str> {
    match stmt {
        Statement::PurgeTenant(_) => Some("PURGE TENANT"),
        Statement::CreateStream(_) => Some("CREATE STREAM"),
        Statement::DropStream { .. } => Some("DROP STREAM"),
        Statement::AlterStream { .. } => Some("ALTER STREAM"),
        _ => None,
    }
}

/// The admin view needs no backend; inside a failed transaction block it
/// is refused as PostgreSQL refuses any statement there.
fn console_view<L: Lender>(
    lender: &mut L,
    metrics: &Metrics,
    view: Console,
    stmt: &Statement,
    tenant: Uuid,
) -> Result<Outcome, StatementError> {
    if lender.view().status == TxStatus::Failed {
        return Err(StatementError::Failed(SqlError::error(
            SqlState::IN_FAILED_SQL_TRANSACTION,
            "current transaction is aborted, commands ignored until end of transaction block",
        )));
    }
    let rows = console::rows(metrics, view, tenant);
    Ok(Outcome {
        tag: stmt.command_tag(rows.len()),
        rows,
        pushed: None,
        ephemeral_commit: None,
    })
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
