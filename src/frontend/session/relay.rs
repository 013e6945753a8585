//! Forwarding to the backend and relaying its replies to the client, in
//! the order `Replies` keeps.

use super::dispatch::Undo;
use super::dispatch::CLIENT_FLUSH_THRESHOLD;
use super::lease::For;
use super::replies::{Expect, Seen};
use super::{gone, End, Session};
use crate::backend::BackendError;
use crate::frontend::errors::{self, backend_unavailable};
use crate::protocol::{self, Message, TxStatus};

/// Pipeline bytes held for the backend past which they are sent and the
/// replies owed relayed (`relay_if_backlogged`): well within the smallest
/// socket buffers, a round trip per this much of a long pipeline.
const BACKEND_BACKLOG: usize = 64 * 1024;

impl Session {
    /// Takes a backend connection for `purpose` unless one is held, telling
    /// the client if none can be had. Whether the session has one now.
    /// `Err` when the client left while the session waited for one.
    pub(super) async fn ensure_backend(&mut self, purpose: For) -> Result<bool, End> {
        // Waiting for the pool drops nothing that matters when the client
        // leaves: a connection not yet handed over goes back.
        let acquired = gone::unless_gone(&mut self.client, self.lease.acquire(purpose)).await?;
        Ok(match acquired {
            Ok(conn) => {
                // A notification this connection sends is the session's.
                if self.shared.listen.active() {
                    let pid = conn.key().pid;
                    self.shared.listen.note_holder(pid, self.id);
                }
                true
            }
            Err(e) => {
                self.local_error(backend_unavailable(&e));
                false
            }
        })
    }

    /// Sends `msg` to the held connection; `expect` is its reply.
    pub(super) fn forward(&mut self, msg: &Message, expect: Expect<Undo>) {
        if let Some(conn) = self.lease.conn_mut() {
            conn.send(msg);
            self.replies.expect(expect);
            self.txn.forwarded_since_sync = true;
        }
    }

    /// The held connection's next message, after sending what is buffered
    /// for it; `None` without a connection (the replies owed will not
    /// come); `Err` when the client left meanwhile.
    async fn next_reply(&mut self) -> Result<Option<Result<Message, BackendError>>, End> {
        let Some(conn) = self.lease.conn_mut() else {
            self.replies.lost();
            return Ok(None);
        };
        if let Err(e) = conn.flush().await {
            return Ok(Some(Err(e)));
        }
        Ok(Some(
            gone::unless_gone(&mut self.client, conn.recv()).await?,
        ))
    }

    /// Relays backend replies until every expected one has arrived.
    pub(super) async fn drain(&mut self) -> Result<(), End> {
        loop {
            while let Some(local) = self.replies.next_local() {
                self.client.send(&local);
            }
            // After an extended-protocol COPY FROM STDIN the backend
            // answers once the client's next Sync or Flush reaches it.
            if !self.replies.owed() || self.replies.held_for_client() {
                return Ok(());
            }
            // Rows already read go across in one copy (an exchange
            // answered ahead is not the client's: its messages are read
            // one by one).
            if !self.replies.answered_ahead() {
                if let Some(conn) = self.lease.conn_mut() {
                    if conn.relay_rows(self.client.buffer()) > 0
                        && self.client.buffered() > CLIENT_FLUSH_THRESHOLD
                    {
                        self.client.flush().await?;
                    }
                }
            }
            let msg = match self.next_reply().await? {
                None => return Ok(()),
                Some(Ok(m)) => m,
                Some(Err(e)) => return Err(self.backend_lost(e).await),
            };
            self.on_backend_message(msg).await?;
            if self.client.buffered() > CLIENT_FLUSH_THRESHOLD {
                self.client.flush().await?;
            }
        }
    }

    /// Whether the connection of a BEGIN answered ahead and already sent
    /// was closed by the backend since (its end of stream is read without
    /// waiting). The next message then does not go behind the BEGIN: the
    /// BEGIN's replies are read first, so the message fails with 08006,
    /// nothing of it sent, as on a block's connection that broke between
    /// two statements, rather than with an unknown outcome.
    pub(super) fn begin_connection_closed(&mut self) -> bool {
        self.lease
            .conn_mut()
            .is_some_and(|conn| !conn.has_unflushed() && conn.peer_closed())
    }

    /// Hands a BEGIN answered ahead (`simple::begin_ahead`) over to its
    /// connection, which reads the BEGIN's replies itself before anything
    /// else it reads: a dialect statement's calls then go in the same
    /// write as the BEGIN, with no round trip of their own for it. Whether
    /// it was handed over (a connection held, nothing else owed).
    pub(super) fn hand_over_begin(&mut self) -> bool {
        let Some(conn) = self.lease.conn_mut() else {
            return false;
        };
        if !self.replies.hand_over_answered() {
            return false;
        }
        conn.take_answered_begin();
        true
    }

    /// Reads the replies of a BEGIN answered ahead (`simple::begin_ahead`)
    /// before a message that does not go behind it unread. Whether the
    /// session may go on with the message: on a connection that broke
    /// meanwhile the block is gone, and the message fails with 08006
    /// (nothing of it was sent), as when a block's connection breaks
    /// between two statements; ReadyForQuery then says Idle.
    pub(super) async fn settle_begin(&mut self) -> Result<bool, End> {
        while self.replies.answered_ahead() {
            match self.next_reply().await? {
                None => return Ok(true),
                Some(Ok(msg)) => self.on_backend_message(msg).await?,
                Some(Err(e)) => {
                    self.replies.lost();
                    self.lease.discard();
                    self.local_error(backend_unavailable(&e));
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Relays the replies the backend still owes for earlier messages of
    /// this pipeline (asking it to flush them), so that what the proxy
    /// answers itself comes after them, in order.
    pub(super) async fn relay_earlier_replies(&mut self) -> Result<(), End> {
        if !self.replies.owed() {
            return Ok(());
        }
        if let Some(conn) = self.lease.conn_mut() {
            conn.send(&protocol::frontend::flush());
            self.replies.flush_sent();
        }
        self.drain().await
    }

    /// A pipeline is held for the backend until a reply is needed (its
    /// Sync, a Flush) and then sent whole before any reply is read. But
    /// PostgreSQL stops reading while its replies wait to be read: past
    /// what the sockets between them buffer, the two would wait for each
    /// other for good. So once `BACKEND_BACKLOG` bytes are held, they go
    /// and the replies owed so far are relayed, as a client's Flush would
    /// have them (libpq, talking to PostgreSQL itself, reads while it
    /// writes).
    pub(super) async fn relay_if_backlogged(&mut self) -> Result<(), End> {
        if self
            .lease
            .conn()
            .is_some_and(|c| c.unflushed_len() > BACKEND_BACKLOG)
        {
            self.relay_earlier_replies().await?;
        }
        Ok(())
    }

    /// An error of PostgreSQL's about one of the session's statements (a
    /// Bind with the wrong number of parameters) names it by its backend
    /// name: the client gets it with its own name there.
    fn error_in_client_names(&self, msg: &Message) -> Option<Message> {
        if msg.tag != crate::protocol::tags::backend::ERROR_RESPONSE {
            return None;
        }
        let prefix = self.shared.statement_names.prefix().as_bytes();
        let body = self.statements.in_client_names(&msg.body, prefix)?;
        Some(Message::new(msg.tag, body))
    }

    /// The backend sent the client an error: counted by SQLSTATE class.
    pub(super) fn backend_error(&mut self, msg: &Message) {
        let err = crate::protocol::SqlError::parse(&msg.body);
        self.shared.engine.metrics.error(err.code());
        self.observed.backend_errors += 1;
    }

    /// One passthrough exchange of `statements` statements ended: a simple
    /// query, one statement of a mixed script, or an extended-protocol
    /// pipeline up to its Sync (its messages reach the backend then).
    pub(super) fn passthrough_done(
        &mut self,
        statements: usize,
        began: std::time::Instant,
        errors_before: u64,
    ) {
        let m = &self.shared.engine.metrics;
        m.passthrough_statements
            .fetch_add(statements as u64, std::sync::atomic::Ordering::Relaxed);
        m.statement(
            crate::metrics::Kind::Passthrough,
            began.elapsed(),
            self.observed.backend_errors == errors_before,
        );
    }

    /// The backend connection broke: it is closed and the session ends,
    /// with 08007 when a request was in flight on it (its outcome is
    /// unknown), else 08006.
    pub(super) async fn backend_lost(&mut self, e: BackendError) -> End {
        self.replies.lost();
        self.lease.discard();
        if self.backend_ended && !e.outcome_unknown() {
            // The client has PostgreSQL's own last word (a FATAL says
            // why the connection ends) and was not waiting for a reply: it
            // gets the same end of stream. With a request in flight the
            // 08007 still follows: PostgreSQL may end a connection after a
            // COMMIT took effect and before its reply.
            let _ = self.client.flush().await;
            return End::Fatal(format!("the backend ended the session: {e}"));
        }
        self.fatal(errors::lost_backend(&e)).await
    }

    async fn on_backend_message(&mut self, msg: Message) -> Result<(), End> {
        let seen = self.replies.on_backend(&msg);
        if let Seen::ParameterStatus = seen {
            if let Some(conn) = self.lease.conn_mut() {
                conn.note_parameter_status(&msg);
            }
            self.client_parameter_status(&msg);
            return Ok(());
        }
        if msg.tag == crate::protocol::tags::backend::NOTIFICATION_RESPONSE {
            let notification = self.notification_for_client(&msg);
            self.client.send(&notification);
            return Ok(());
        }
        if msg.tag == crate::protocol::tags::backend::COMMAND_COMPLETE {
            // What a statement did to the session is settled before the
            // client sees it complete.
            self.backend_command_complete(&msg.body).await;
        }
        if let Seen::Ready(status) = seen {
            // What the end of the exchange brings goes before its
            // ReadyForQuery.
            self.backend_ready(status).await?;
            self.client.send(&msg);
            return Ok(());
        }
        match seen {
            Seen::AnsweredReady(TxStatus::InBlock) => {
                return self.backend_ready(TxStatus::InBlock).await;
            }
            Seen::AnsweredReady(_) | Seen::AnsweredFailed => {
                // The client was told its block began and PostgreSQL did
                // not begin it: what its statements since did is not what
                // it believes.
                if let Seen::AnsweredFailed = seen {
                    self.backend_error(&msg);
                }
                self.replies.lost();
                self.lease.discard();
                return Err(self.fatal(errors::block_not_begun()).await);
            }
            _ => {}
        }
        // What the skipped messages did is undone first: the error names
        // statements as they were when PostgreSQL failed (one a skipped
        // Close closes is still the client's).
        let seen = match seen {
            Seen::Failed {
                never_created,
                undo,
                failing,
            } => {
                if let Some(conn) = self.lease.conn_mut() {
                    for name in never_created {
                        conn.statement_not_created(&name);
                    }
                }
                for u in undo {
                    self.undo(u);
                }
                if let Some(u) = failing {
                    self.undo_failed(u);
                }
                Seen::Relay
            }
            other => other,
        };
        if !matches!(seen, Seen::Swallow) {
            self.backend_ended |= crate::protocol::SqlError::ends_connection(&msg);
            match self.error_in_client_names(&msg) {
                Some(renamed) => self.client.send(&renamed),
                None => self.client.send(&msg),
            }
        }
        if msg.tag == crate::protocol::tags::backend::ERROR_RESPONSE {
            self.backend_error(&msg);
        }
        match seen {
            Seen::Failed { .. } => {}
            Seen::CopyIn => self.copy_in().await?,
            Seen::Relay | Seen::Swallow => {}
            // Returned from above.
            Seen::ParameterStatus
            | Seen::Ready(_)
            | Seen::AnsweredReady(_)
            | Seen::AnsweredFailed => {}
        }
        Ok(())
    }
}
