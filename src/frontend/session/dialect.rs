//! Running a dialect statement: the engine executes it on a connection the
//! session lends (`engine::Lender`); the session decides which connection
//! that is and sends the rows.

use super::dispatch::Txn;
use super::lease::{For, Lease};
use super::{gone, rows, End, Session};
use crate::backend::{BackendConn, BackendError};
use crate::engine::lend::CancelSignal;
use crate::engine::lock_order::LockOrder;
use crate::engine::values::Cell;
use crate::engine::{CallEnd, Lender, Outcome, StatementError, TxnView};
use crate::frontend::client::Client;
use crate::frontend::errors::statement_error;
use crate::frontend::SessionHandle;
use crate::protocol::{self, SqlError, SqlState, TxStatus};
use crate::rewrite::dialect::Statement;
use std::sync::Arc;

/// The session's connection, lent to the engine for one statement.
struct Lent<'s> {
    lease: &'s mut Lease,
    txn: &'s mut Txn,
    handle: &'s SessionHandle,
    /// Replies of this pipeline are still owed to the client.
    replies_owed: bool,
    /// The client's pipeline goes on past this statement before its Sync.
    continues: bool,
    end: CallEnd,
}

impl Lender for Lent<'_> {
    async fn connection(&mut self) -> Result<&mut BackendConn, BackendError> {
        self.lease.acquire(For::Dialect).await
    }

    fn held(&mut self) -> Option<&mut BackendConn> {
        self.lease.conn_mut()
    }

    fn view(&self) -> TxnView {
        TxnView {
            status: self.lease.status(),
            pipeline_open: self.txn.forwarded_since_sync || self.replies_owed || self.continues,
            pinned: self.lease.pinned(),
        }
    }

    fn call_end(&self) -> CallEnd {
        self.end
    }

    async fn park(&mut self) -> Result<(), BackendError> {
        if !self.view().detached() {
            return Ok(());
        }
        if self.end == CallEnd::Flush {
            // End the proxy's own implicit transaction first.
            if let Some(conn) = self.lease.conn_mut() {
                conn.sync().await?;
                self.txn.forwarded_since_sync = false;
            }
        }
        self.lease.release_if_idle(self.replies_owed);
        Ok(())
    }

    fn cancel_signal(&self) -> Arc<CancelSignal> {
        self.handle.cancel.clone()
    }

    fn lock_order(&mut self) -> &mut LockOrder {
        &mut self.txn.block.locks
    }
}

impl Session {
    /// The session's connection and transaction, lent to the engine; the
    /// client stays the session's, watched while the statement runs.
    fn lend(&mut self, end: CallEnd) -> (Lent<'_>, &mut Client) {
        let lent = Lent {
            replies_owed: self.replies.owed(),
            continues: self.pipeline_continues(end),
            lease: &mut self.lease,
            txn: &mut self.txn,
            handle: &self.handle,
            end,
        };
        (lent, &mut self.client)
    }

    /// Whether an extended-protocol statement (its calls end with Flush)
    /// is followed by more of its pipeline before the Sync: anything but a
    /// Sync already sent after it, or nothing yet. PostgreSQL runs what
    /// comes before a Sync in one implicit transaction, so the statement
    /// runs in it, on the session's connection, and commits or rolls back
    /// with the rest. Drivers send a statement's Execute and Sync in one
    /// write, so a statement of its own still runs anywhere (fused).
    fn pipeline_continues(&mut self, end: CallEnd) -> bool {
        end == CallEnd::Flush
            && self.client.next_tag() != Some(crate::protocol::tags::frontend::SYNC)
    }

    /// Runs one dialect statement; `end` says how its calls end when it is
    /// a transaction of its own. `None` when it failed: the error has been
    /// sent and the backend has failed the statement too, so a transaction
    /// block around it is aborted exactly as for plain SQL.
    pub(super) async fn run_dialect(
        &mut self,
        stmt: &Arc<Statement>,
        params: &[Option<String>],
        end: CallEnd,
    ) -> Result<Option<Outcome>, End> {
        // Earlier replies of this pipeline go first.
        self.relay_earlier_replies().await?;
        if self.replies.skipping() {
            return Ok(None);
        }
        // Outside a block the statement commits on its own, often on another
        // connection: the session's read-only default is checked here (in
        // a block PostgreSQL checks the block's own mode). A `read_only`
        // user's role starts read-only for its plain SQL, and its queue
        // statements are meant to work: that default is the policy's.
        if self.read_only
            && self.passthrough != crate::users::Passthrough::ReadOnly
            && stmt.writes()
            && !self.lease.status().in_transaction()
        {
            let refusal = SqlError::error(
                SqlState::READ_ONLY_SQL_TRANSACTION,
                format!("cannot execute {} in a read-only transaction", stmt.verb()),
            );
            self.refuse(refusal, end).await?;
            return Ok(None);
        }
        // Outside the client's transactions, a dialect statement runs on a
        // connection of the engine's pool, committed before it is
        // answered, and that connection goes back at once. So no plain SQL
        // of a client ever runs on an engine connection (the two never
        // share one), the engine's prepared statements stay off the
        // connections clients are handed, and a read-only role's pinned
        // session can still POP and ACK. Inside the client's transaction (a
        // block, or a pipeline's implicit one) it runs there — as the
        // user's tenant role with a users file, through the guarded entry
        // points.
        let own_transaction = self.txn.forwarded_since_sync
            || self.replies.owed()
            || self.pipeline_continues(end)
            || self.lease.status().in_transaction();
        if !self.lease.has_role_pool() || own_transaction {
            return self.run_on_session_connection(stmt, params, end).await;
        }
        let aside = self.lease.set_aside();
        let ran = self
            .run_on_session_connection(stmt, params, CallEnd::Sync)
            .await;
        self.lease.restore(aside);
        self.txn.forwarded_since_sync = false;
        if ran.is_ok() {
            self.transaction_ended().await;
        }
        ran
    }

    async fn run_on_session_connection(
        &mut self,
        stmt: &Arc<Statement>,
        params: &[Option<String>],
        end: CallEnd,
    ) -> Result<Option<Outcome>, End> {
        if matches!(stmt.as_ref(), Statement::PurgeTenant(_)) && !self.admin {
            let refusal = SqlError::error(
                SqlState::INSUFFICIENT_PRIVILEGE,
                "PURGE TENANT is for administrators (admin = true in the users file)",
            );
            self.refuse(refusal, end).await?;
            return Ok(None);
        }
        let shared = self.shared.clone();
        let tenant = self.tenant;
        let (mut lent, client) = self.lend(end);
        let fused = matches!(stmt.as_ref(), Statement::Push(_)) && lent.view().detached();
        let handle = lent.handle;
        let statement = shared.engine.execute(&mut lent, stmt, params, tenant);
        let result = match gone::cancelled_if_gone(client, handle, &shared.target, statement).await
        {
            Ok(result) => result,
            Err(end) => {
                // A cancel sent for the statement may still be on its way
                // to the connection: it serves nobody again.
                self.lease.discard();
                return Err(end);
            }
        };
        // The statement's work is in the backend's current transaction: a
        // later POP of this pipeline must not end it early to park.
        if !fused {
            self.txn.forwarded_since_sync = true;
        }
        match result {
            Ok(outcome) => {
                if let Some(key) = &outcome.pushed {
                    if !self.txn.pushed.contains(key) {
                        self.txn.pushed.push(key.clone());
                    }
                }
                self.txn.ephemeral.extend(outcome.ephemeral_commit);
                if stmt.declares_ephemeral() {
                    self.txn.ephemeral_declared = true;
                }
                Ok(Some(outcome))
            }
            Err(StatementError::Lost(e)) => Err(self.backend_lost(e).await),
            Err(e) => {
                if let Some(fields) = statement_error(&e) {
                    self.local_error(fields);
                }
                Ok(None)
            }
        }
    }

    /// Reports an error the proxy found (a statement it cannot parse),
    /// after making the backend fail the statement as well. In a failed
    /// block only a statement's syntax or encoding is reported as it is:
    /// PostgreSQL checks the block's state right after its grammar, so
    /// any other fault is the block's `25P02`.
    pub(super) async fn refuse(&mut self, refusal: SqlError, end: CallEnd) -> Result<(), End> {
        self.fail_backend_with(refusal, end, true).await
    }

    /// An error of the proxy's about a protocol message of the pipeline (a
    /// statement or portal it does not have, a malformed message, a Bind
    /// that does not fit its statement), found before PostgreSQL would look
    /// at the block's state: reported as it is, and, as PostgreSQL fails
    /// the transaction with it, the backend's transaction (a block, or the
    /// pipeline's implicit one) fails too. After an earlier error of the
    /// pipeline nothing is reported: PostgreSQL skips the message.
    pub(super) async fn protocol_error(&mut self, error: SqlError) -> Result<(), End> {
        self.relay_earlier_replies().await?;
        if self.replies.skipping() {
            return Ok(());
        }
        if self.lease.status() == TxStatus::Failed {
            self.local_error(error);
            return Ok(());
        }
        self.fail_backend_with(error, CallEnd::Flush, false).await
    }

    /// [`Session::protocol_error`] for an error PostgreSQL finds after the
    /// block's state: in a failed block it is the block's `25P02`.
    pub(super) async fn protocol_error_in_block(&mut self, error: SqlError) -> Result<(), End> {
        self.relay_earlier_replies().await?;
        if self.replies.skipping() {
            return Ok(());
        }
        self.fail_backend_with(error, CallEnd::Flush, true).await
    }

    async fn fail_backend_with(
        &mut self,
        refusal: SqlError,
        end: CallEnd,
        block_first: bool,
    ) -> Result<(), End> {
        let engine = self.shared.engine.clone();
        let (mut lent, _) = self.lend(end);
        let refusal = match lent.view().refuse_if_failed() {
            Err(failed) if block_first && !before_the_block_is_checked(&refusal) => failed,
            _ => refusal,
        };
        match engine.refuse(&mut lent, refusal).await {
            StatementError::Lost(e) => Err(self.backend_lost(e).await),
            other => {
                if let Some(fields) = statement_error(&other) {
                    self.local_error(fields);
                }
                Ok(())
            }
        }
    }

    /// Sends a statement's rows (with a RowDescription first when
    /// `describe`) and its CommandComplete.
    pub(super) fn send_outcome(
        &mut self,
        stmt: &Statement,
        outcome: Outcome,
        formats: &[i16],
        describe: bool,
    ) {
        if describe && !stmt.columns().is_empty() {
            self.client
                .send(&rows::row_description(stmt.columns(), formats));
        }
        if self.send_rows(&outcome.rows, formats) {
            self.client.send(&protocol::command_complete(&outcome.tag));
        }
    }

    /// Sends the rows; `false` when a row could not be sent (the error has
    /// been, as PostgreSQL sends one mid-result).
    pub(super) fn send_rows(&mut self, rows: &[Vec<Cell>], formats: &[i16]) -> bool {
        let written =
            rows::write_data_rows(rows, formats, &self.client_encoding, self.client.buffer());
        match written {
            Ok(()) => true,
            Err(e) => {
                self.local_error(e);
                false
            }
        }
    }
}

/// Faults PostgreSQL reports even in a failed block: of a statement's
/// text, found before the block's state is looked at.
fn before_the_block_is_checked(refusal: &SqlError) -> bool {
    let code = refusal.code();
    code == SqlState::SYNTAX_ERROR.code() || code == SqlState::CHARACTER_NOT_IN_REPERTOIRE.code()
}
