//! LISTEN / UNLISTEN inside a transaction block, served by the shared
//! listening connection (`frontend::listen`) so that they do not pin the
//! session either. PostgreSQL applies them at the block's COMMIT, not at
//! all when the block rolls back, and undoes those after a savepoint that
//! ROLLBACK TO undoes; `PREPARE TRANSACTION` of such a block fails. So the
//! proxy follows the block: each transaction control statement it sends
//! (`Control`) is matched, in order, with the CommandComplete that answers
//! it, and the block's LISTENs are carried out at the COMMIT's reply,
//! before the client sees it (a NOTIFY the client sends after its COMMIT
//! returned reaches it); the channels they leave listened on are listened
//! on just before the COMMIT is sent, so that a NOTIFY committed with them
//! reaches the session too, and given up if the block does not commit.
//! The same following tells when the block's locks are gone, so that the
//! lock order (`engine/lock_order.rs`) applies within one block only.

use super::{End, Session};
use crate::engine::lock_order::LockOrder;
use crate::frontend::encoding::ClientEncoding;
use crate::protocol::{self, TxStatus};
use crate::rewrite::passthrough::{transaction_control, Control, Listening};
use std::collections::VecDeque;

/// The transaction block as far as its LISTENs and its lock order need it.
#[derive(Default)]
pub(super) struct Block {
    /// A block is open: the last ReadyForQuery said so, or a BEGIN
    /// answered since.
    open: bool,
    /// Control statements sent whose reply has not come, in order.
    controls: VecDeque<Control>,
    /// The block's savepoints, the innermost last.
    savepoints: Vec<String>,
    /// What the block's LISTEN / UNLISTEN will do at COMMIT, in order.
    pending: Vec<Pending>,
    /// Channels the shared connection listens on for the session ahead of
    /// the COMMIT that carries the block's LISTENs out, so that a NOTIFY
    /// the block commits with them reaches the session, as in PostgreSQL.
    early: Vec<String>,
    /// Those a block that did not commit gave up: the session stops
    /// listening on them (`unlisten_abandoned`).
    abandoned: Vec<String>,
    /// What the block's dialect statements locked: released when the
    /// block ends. A ROLLBACK TO keeps it, since the proxy does not follow
    /// which statement ran after which savepoint.
    pub(super) locks: LockOrder,
}

pub(super) struct Pending {
    /// How many savepoints were set when it ran.
    depth: usize,
    listening: Listening,
    /// The client's statement (PostgreSQL's verdict on it at COMMIT).
    statement: String,
}

impl Block {
    fn sent(&mut self, control: Control) {
        self.controls.push_back(control);
    }

    /// A CommandComplete with `tag` came: what a COMMIT it answers carries
    /// out.
    fn completed(&mut self, tag: &[u8]) -> Vec<Pending> {
        if !Control::is_control_tag(tag) {
            return Vec::new();
        }
        let Some(control) = self.controls.pop_front() else {
            return Vec::new();
        };
        match control {
            Control::Begin => {
                // A BEGIN inside a block changes nothing (a warning).
                if !self.open {
                    self.open = true;
                    self.savepoints.clear();
                    self.pending.clear();
                    self.locks = LockOrder::default();
                }
            }
            Control::Commit { chain } | Control::Rollback { chain } => {
                let pending = std::mem::take(&mut self.pending);
                self.savepoints.clear();
                self.locks = LockOrder::default();
                self.open = chain;
                // A failed block's COMMIT answers ROLLBACK.
                if matches!(control, Control::Commit { .. }) && tag == b"COMMIT" {
                    self.early.clear();
                    return pending;
                }
                self.abandoned.append(&mut self.early);
            }
            Control::Savepoint(name) => self.savepoints.push(name),
            Control::Release(name) => {
                if let Some(i) = self.savepoints.iter().rposition(|s| *s == name) {
                    self.savepoints.truncate(i);
                    for p in &mut self.pending {
                        p.depth = p.depth.min(i);
                    }
                }
            }
            Control::RollbackTo(name) => {
                if let Some(i) = self.savepoints.iter().rposition(|s| *s == name) {
                    self.savepoints.truncate(i + 1);
                    self.pending.retain(|p| p.depth <= i);
                }
            }
            Control::Prepare => {
                self.open = false;
                self.savepoints.clear();
                self.pending.clear();
                self.abandoned.append(&mut self.early);
                self.locks = LockOrder::default();
            }
        }
        Vec::new()
    }

    /// A ReadyForQuery said `status`.
    fn ready(&mut self, status: TxStatus) {
        self.controls.clear();
        self.open = status.in_transaction();
        if !self.open {
            self.savepoints.clear();
            self.pending.clear();
            // A COMMIT that failed (its error, then ReadyForQuery).
            self.abandoned.append(&mut self.early);
            self.locks = LockOrder::default();
        }
    }

    pub(super) fn open(&self) -> bool {
        self.open
    }

    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

impl Session {
    /// A control statement went to the backend: followed until its reply.
    pub(super) fn note_control_sent(&mut self, control: Control) {
        self.txn.block.sent(control);
    }

    /// Plain statements of a simple query go to the backend: control
    /// statements are followed until their replies; a PREPARE TRANSACTION
    /// takes the block's LISTENs to the backend first.
    pub(super) async fn before_plain<'a>(
        &mut self,
        statements: impl Iterator<Item = &'a str>,
    ) -> Result<(), End> {
        let (mut prepares, mut commits) = (false, false);
        for sql in statements {
            if let Some(control) = transaction_control(sql) {
                prepares |= control == Control::Prepare;
                commits |= matches!(control, Control::Commit { .. });
                self.txn.block.sent(control);
            }
        }
        if prepares && self.txn.block.has_pending() {
            self.hand_block_listens_over().await?;
        } else if commits {
            self.listen_before_commit().await;
        }
        Ok(())
    }

    /// A COMMIT is about to reach PostgreSQL: the channels the block's
    /// LISTENs leave the session listening on are listened on now, so
    /// that what the block itself NOTIFYs, and whatever is committed after
    /// it, reaches the session. (A notification committed between this
    /// and the COMMIT reaches it too, where PostgreSQL would not deliver
    /// it; one more is harmless to a listener, one lost is not.) A block
    /// that does not commit gives them up again.
    pub(super) async fn listen_before_commit(&mut self) {
        // A failed block's COMMIT rolls back.
        if self.txn.block.pending.is_empty() || self.lease.status() == TxStatus::Failed {
            return;
        }
        // Each channel the block leaves listened on, with its LISTEN.
        let mut net: Vec<(String, String)> = Vec::new();
        for p in &self.txn.block.pending {
            match &p.listening {
                Listening::Listen(channel) => {
                    net.retain(|(c, _)| c != channel);
                    net.push((channel.clone(), p.statement.clone()));
                }
                Listening::Unlisten(Some(channel)) => net.retain(|(c, _)| c != channel),
                Listening::Unlisten(None) => net.clear(),
            }
        }
        let hub = self.shared.listen.clone();
        for (channel, statement) in net {
            if hub.listens(self.id, &channel) {
                continue;
            }
            match hub.listen(self.id, &statement, channel.clone()).await {
                Ok(rx) => {
                    if let Some(rx) = rx {
                        self.notifications = Some(rx);
                    }
                    self.txn.block.early.push(channel);
                }
                Err(e) => {
                    tracing::warn!(session = self.id, "LISTEN before COMMIT: {}", e.message);
                }
            }
        }
    }

    /// The channels listened on ahead of a COMMIT that did not commit are
    /// given up, with the notifications held for them.
    pub(super) async fn unlisten_abandoned(&mut self) {
        if self.txn.block.abandoned.is_empty() {
            return;
        }
        let hub = self.shared.listen.clone();
        for channel in std::mem::take(&mut self.txn.block.abandoned) {
            hub.stop_listening(self.id, channel).await;
        }
        if let Some(rx) = self.notifications.as_mut() {
            hub.drop_unlistened(self.id, rx);
        }
    }

    /// A CommandComplete from the backend, before the client sees it.
    pub(super) async fn block_command_complete(&mut self, body: &[u8]) {
        if self.txn.block.controls.is_empty() {
            return;
        }
        let tag = body.strip_suffix(&[0]).unwrap_or(body);
        let pending = self.txn.block.completed(tag);
        if !pending.is_empty() {
            self.settle_block_listens(pending).await;
        }
        self.unlisten_abandoned().await;
    }

    /// A ReadyForQuery from the backend.
    pub(super) fn block_ready(&mut self, status: TxStatus) {
        self.txn.block.ready(status);
    }

    /// Whether a LISTEN / UNLISTEN now belongs to an open block the shared
    /// connection can serve: not failed, on a connection the session has
    /// not pinned, in UTF8 (the hub's channel names are UTF-8).
    pub(super) fn block_can_listen(&self) -> bool {
        self.txn.block.open()
            && self.lease.status() != TxStatus::Failed
            && !self.lease.pinned()
            && !self.replies.skipping()
            && self.client_encoding == ClientEncoding::Utf8
    }

    /// Serves a LISTEN / UNLISTEN of an open block: PostgreSQL's verdict on
    /// the statement now (from the shared connection), its effect at
    /// COMMIT. `simple`: it came alone in a simple query (ReadyForQuery
    /// follows). `false` when PostgreSQL refuses it: the caller sends it to
    /// the session's own connection, whose block it fails as PostgreSQL's.
    pub(super) async fn listen_in_block(
        &mut self,
        listening: Listening,
        statement: &str,
        simple: bool,
    ) -> Result<bool, End> {
        if self.shared.listen.check(statement).await.is_err() {
            return Ok(false);
        }
        let tag = match listening {
            Listening::Listen(_) => "LISTEN",
            Listening::Unlisten(_) => "UNLISTEN",
        };
        self.txn.block.pending.push(Pending {
            depth: self.txn.block.savepoints.len(),
            listening,
            statement: statement.to_string(),
        });
        self.client.send(&protocol::command_complete(tag));
        if simple {
            self.client
                .send(&protocol::ready_for_query(self.lease.status()));
            self.client.flush().await?;
        }
        Ok(true)
    }

    /// The block committed: its LISTEN / UNLISTEN take effect, in order.
    /// Notifications held while it was open for channels the session no
    /// longer listens on are dropped, as PostgreSQL drops them.
    async fn settle_block_listens(&mut self, pending: Vec<Pending>) {
        let hub = self.shared.listen.clone();
        let mut unlistened = false;
        for p in pending {
            let result = match p.listening {
                // Listened on just before the COMMIT went out.
                Listening::Listen(channel) if hub.listens(self.id, &channel) => Ok(()),
                Listening::Listen(channel) => {
                    hub.listen(self.id, &p.statement, channel).await.map(|rx| {
                        if let Some(rx) = rx {
                            self.notifications = Some(rx);
                        }
                    })
                }
                Listening::Unlisten(channel) => {
                    unlistened = true;
                    hub.unlisten(self.id, &p.statement, channel).await
                }
            };
            if let Err(e) = result {
                tracing::warn!(session = self.id, "LISTEN at COMMIT: {}", e.message);
            }
        }
        if unlistened {
            if let Some(rx) = self.notifications.as_mut() {
                hub.drop_unlistened(self.id, rx);
            }
        }
    }

    /// A simple query of several statements that prepares the block's
    /// transaction while the hub holds its LISTENs: they go to the
    /// session's own connection first (which PostgreSQL's PREPARE then
    /// refuses as it refuses them), and the session keeps that connection,
    /// as it did before the hub served LISTEN (what the statements before
    /// the PREPARE do to the block is PostgreSQL's to follow).
    pub(super) async fn hand_block_listens_over(&mut self) -> Result<(), End> {
        let pending = std::mem::take(&mut self.txn.block.pending);
        let statements: Vec<&str> = pending.iter().map(|p| p.statement.as_str()).collect();
        self.lease.pin();
        let Some(conn) = self.lease.conn_mut() else {
            return Ok(());
        };
        match conn.simple_query_quiet(&statements.join("; ")).await {
            Ok(()) | Err(crate::backend::BackendError::Server(_)) => Ok(()),
            Err(e) => Err(self.backend_lost(e).await),
        }
    }

    /// A PREPARE TRANSACTION (`statement`, alone in a simple query or a
    /// portal's) of a block whose LISTENs the hub holds: the LISTENs and then the statement run
    /// on the session's own connection in one simple query (the portal's
    /// statement has no parameters), so that PostgreSQL gives its own
    /// verdict (it refuses a transaction that ran LISTEN, after its other
    /// checks) and rolls the block back as it does; its error is the
    /// Execute's. After an earlier error of the pipeline it is skipped, as
    /// PostgreSQL skips it: a query sent now would wait for the Sync the
    /// backend skips to, and the Sync waits behind it.
    pub(super) async fn prepare_with_block_listens(&mut self, statement: &str) -> Result<(), End> {
        self.relay_earlier_replies().await?;
        if self.replies.skipping() {
            return Ok(());
        }
        let mut sql: Vec<String> = std::mem::take(&mut self.txn.block.pending)
            .into_iter()
            .map(|p| p.statement)
            .collect();
        sql.push(statement.to_string());
        let Some(conn) = self.lease.conn_mut() else {
            return Ok(());
        };
        let result = conn.simple_query_quiet(&sql.join("; ")).await;
        let status = conn.status();
        match result {
            Ok(()) => self
                .client
                .send(&protocol::command_complete("PREPARE TRANSACTION")),
            Err(crate::backend::BackendError::Server(e)) => self.local_error(e),
            Err(e) => return Err(self.backend_lost(e).await),
        }
        self.backend_ready(status).await
    }
}

impl Session {
    /// A PREPARE TRANSACTION of a block that pushed to an ephemeral queue:
    /// refused with 0A000 and the block rolled back, as PostgreSQL refuses
    /// to prepare a block that ran NOTIFY. The messages live in queenwire's
    /// memory until the block's commit is seen, and a COMMIT PREPARED
    /// later, from any session, is not: prepared, they would be lost.
    pub(super) async fn refuse_prepare_of_ephemeral_pushes(&mut self) -> Result<(), End> {
        self.relay_earlier_replies().await?;
        if self.replies.skipping() {
            return Ok(());
        }
        let Some(conn) = self.lease.conn_mut() else {
            return Ok(());
        };
        let result = conn.simple_query_quiet("ROLLBACK").await;
        let status = conn.status();
        match result {
            Ok(()) | Err(crate::backend::BackendError::Server(_)) => {
                self.local_error(crate::protocol::SqlError::error(
                    crate::protocol::SqlState::FEATURE_NOT_SUPPORTED,
                    "cannot PREPARE a transaction that has pushed to an ephemeral queue",
                ))
            }
            Err(e) => return Err(self.backend_lost(e).await),
        }
        self.backend_ready(status).await
    }
}

/// How a simple query of several plain statements, LISTEN or UNLISTEN
/// among them, runs so that the shared connection can serve them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScriptPlan {
    /// Every statement runs inside a transaction block (open before it or
    /// opened by its first statement, up to a last COMMIT / ROLLBACK):
    /// statement by statement, as PostgreSQL runs them in that block.
    InBlock,
    /// No transaction control at all, outside a block: PostgreSQL runs
    /// them as one implicit transaction; the proxy runs them statement by
    /// statement in a block of its own, committed at the end (rolled back
    /// at the first error, where PostgreSQL stops too).
    Implicit,
}

impl Session {
    /// Whether (and how) a script of plain `statements` with LISTEN or
    /// UNLISTEN among them (or any, when `refusing`: one the proxy refuses)
    /// runs statement by statement; `None`: forwarded whole, on the
    /// session's own connection, which its LISTEN pins (or, `refusing`,
    /// statement by statement outside any block).
    pub(super) fn script_plan<'a>(
        &self,
        statements: impl Iterator<Item = &'a str>,
        refusing: bool,
    ) -> Option<ScriptPlan> {
        if self.lease.pinned()
            || self.lease.status() == TxStatus::Failed
            || self.client_encoding != ClientEncoding::Utf8
        {
            return None;
        }
        let (mut listens, mut controls, mut in_block) = (false, false, true);
        let mut open = self.txn.block.open();
        for sql in statements {
            listens |= crate::rewrite::passthrough::listening(sql).is_some();
            let control = transaction_control(sql);
            controls |= control.is_some();
            match control {
                Some(Control::Begin) => open = true,
                Some(Control::Commit { chain }) | Some(Control::Rollback { chain }) => {
                    in_block &= open;
                    open = chain;
                }
                Some(Control::Prepare) => return None,
                _ => in_block &= open,
            }
        }
        if !listens && !refusing {
            None
        } else if in_block {
            Some(ScriptPlan::InBlock)
        } else if !controls && !self.txn.block.open() {
            Some(ScriptPlan::Implicit)
        } else {
            None
        }
    }

    /// Runs such a script (its ReadyForQuery included).
    pub(super) async fn run_listen_script(
        &mut self,
        text: &crate::frontend::encoding::ClientText<'_>,
        commands: &[(std::ops::Range<usize>, crate::rewrite::Command)],
        plan: ScriptPlan,
    ) -> Result<(), End> {
        if !self.ensure_backend(super::lease::For::Client).await? {
            return Ok(());
        }
        // PostgreSQL parses the whole text before it runs any of it: a
        // syntax error anywhere fails the script before its first
        // statement, as run one by one it would not. (Not a script with
        // queue statements, which PostgreSQL's parser does not know.)
        let plain = commands
            .iter()
            .all(|(_, c)| matches!(c, crate::rewrite::Command::Passthrough(_)));
        if plain && self.standard_strings {
            if let Err(e) = self.shared.listen.syntax(&text.view).await {
                self.refuse(e, crate::engine::CallEnd::Sync).await?;
                self.replies.end_skip();
                let status = self.lease.status();
                self.backend_ready(status).await?;
                self.client.send(&protocol::ready_for_query(status));
                return Ok(());
            }
        }
        if plan == ScriptPlan::Implicit {
            if !self.quietly("BEGIN").await? {
                return Ok(());
            }
            self.txn.block.ready(TxStatus::InBlock);
        }
        self.run_statements(text, commands).await?;
        if plan == ScriptPlan::Implicit {
            let commit = self.lease.status() == TxStatus::InBlock;
            if commit {
                self.listen_before_commit().await;
            }
            let pending = std::mem::take(&mut self.txn.block.pending);
            let done = self
                .quietly(if commit { "COMMIT" } else { "ROLLBACK" })
                .await?;
            let early = std::mem::take(&mut self.txn.block.early);
            if commit && done {
                self.settle_block_listens(pending).await;
            } else {
                self.txn.block.abandoned.extend(early);
                self.unlisten_abandoned().await;
            }
            let status = self.lease.status();
            self.backend_ready(status).await?;
        }
        self.replies.end_skip();
        self.client
            .send(&protocol::ready_for_query(self.lease.status()));
        Ok(())
    }

    /// Runs the proxy's own `sql` on the session's connection; PostgreSQL's
    /// error goes to the client (`false`).
    async fn quietly(&mut self, sql: &str) -> Result<bool, End> {
        let Some(conn) = self.lease.conn_mut() else {
            return Ok(false);
        };
        match conn.simple_query_quiet(sql).await {
            Ok(()) => Ok(true),
            Err(crate::backend::BackendError::Server(e)) => {
                self.local_error(e);
                Ok(false)
            }
            Err(e) => Err(self.backend_lost(e).await),
        }
    }

    /// A LISTEN / UNLISTEN among the statements of a script run one by
    /// one, served by the shared connection where it can be: `None` if not
    /// (it goes to the session's connection), else whether it succeeded.
    pub(super) async fn script_listen(&mut self, statement: &str) -> Result<Option<bool>, End> {
        let Some(listening) = crate::rewrite::passthrough::listening(statement) else {
            return Ok(None);
        };
        if self.lease.pinned() || self.client_encoding != ClientEncoding::Utf8 {
            return Ok(None);
        }
        if self.txn.block.open() {
            if !self.block_can_listen() {
                return Ok(None);
            }
            let served = self.listen_in_block(listening, statement, false).await?;
            return Ok(served.then_some(true));
        }
        if self.lease.status() != TxStatus::Idle {
            return Ok(None);
        }
        // A transaction of its own: it listens at once.
        match self.hub_listen(listening, statement).await {
            Ok(tag) => {
                self.client.send(&protocol::command_complete(tag));
                Ok(Some(true))
            }
            Err(e) => {
                self.local_error(e);
                Ok(Some(false))
            }
        }
    }

    /// LISTEN / UNLISTEN through the shared connection now; its command
    /// tag.
    pub(super) async fn hub_listen(
        &mut self,
        listening: Listening,
        statement: &str,
    ) -> Result<&'static str, crate::protocol::SqlError> {
        let hub = self.shared.listen.clone();
        match listening {
            Listening::Listen(channel) => {
                if let Some(rx) = hub.listen(self.id, statement, channel).await? {
                    self.notifications = Some(rx);
                }
                Ok("LISTEN")
            }
            Listening::Unlisten(channel) => {
                hub.unlisten(self.id, statement, channel).await?;
                Ok("UNLISTEN")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen(block: &mut Block, channel: &str) {
        block.pending.push(Pending {
            depth: block.savepoints.len(),
            listening: Listening::Listen(channel.into()),
            statement: format!("LISTEN {channel}"),
        });
    }

    fn run(block: &mut Block, control: Control, tag: &str) -> Vec<String> {
        block.sent(control);
        block
            .completed(tag.as_bytes())
            .into_iter()
            .map(|p| p.statement)
            .collect()
    }

    #[test]
    fn commit_carries_out_what_savepoints_kept() {
        let mut b = Block::default();
        run(&mut b, Control::Begin, "BEGIN");
        assert!(b.open());
        listen(&mut b, "a");
        run(&mut b, Control::Savepoint("s".into()), "SAVEPOINT");
        listen(&mut b, "b");
        run(&mut b, Control::RollbackTo("s".into()), "ROLLBACK");
        listen(&mut b, "c");
        run(&mut b, Control::Savepoint("t".into()), "SAVEPOINT");
        listen(&mut b, "d");
        run(&mut b, Control::Release("t".into()), "RELEASE");
        // Released into s: undone by a ROLLBACK TO s.
        run(&mut b, Control::RollbackTo("s".into()), "ROLLBACK");
        listen(&mut b, "e");
        let done = run(&mut b, Control::Commit { chain: false }, "COMMIT");
        assert_eq!(done, vec!["LISTEN a", "LISTEN e"]);
        assert!(!b.open());
    }

    #[test]
    fn rollback_and_a_failed_commit_carry_out_nothing() {
        let mut b = Block::default();
        run(&mut b, Control::Begin, "BEGIN");
        listen(&mut b, "a");
        assert!(run(&mut b, Control::Rollback { chain: true }, "ROLLBACK").is_empty());
        assert!(b.open(), "AND CHAIN opens the next block");
        listen(&mut b, "b");
        assert!(run(&mut b, Control::Commit { chain: false }, "ROLLBACK").is_empty());
        listen(&mut b, "c");
        b.ready(TxStatus::Idle);
        assert!(!b.has_pending());
    }

    #[test]
    fn other_replies_do_not_consume_a_control() {
        let mut b = Block::default();
        b.ready(TxStatus::InBlock);
        listen(&mut b, "a");
        b.sent(Control::Commit { chain: false });
        assert!(b.completed(b"SELECT 1").is_empty());
        assert!(b.completed(b"INSERT 0 1").is_empty());
        assert_eq!(b.completed(b"COMMIT").len(), 1);
    }
}
