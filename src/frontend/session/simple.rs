//! The simple query protocol. A message of plain SQL only is forwarded
//! whole (PostgreSQL's implicit transaction over a multi-statement message
//! holds); one with dialect statements runs statement by statement.

use super::lease::For;
use super::replies::Expect;
use super::{canned, End, Session};
use crate::engine::CallEnd;
use crate::frontend::encoding::ClientEncoding;
use crate::frontend::encoding::ClientText;
use crate::protocol::tags::backend as tag;
use crate::protocol::{self, frontend, Message, SqlError, SqlState, TxStatus};
use crate::rewrite::passthrough::Listening;
use crate::rewrite::statement_names::NamedBy;
use crate::rewrite::{self, Command, SessionEffect};
use crate::users::Passthrough;
use std::ops::Range;

/// One statement of a remembered text: where it is, what it does.
type Verdict = (Range<usize>, SessionEffect);

/// Simple-query texts a session remembers the verdicts of.
const VERDICTS_KEPT: usize = 4;

/// The verdicts of the last few plain simple queries a session sent:
/// clients send the same few texts again and again (`BEGIN`, `COMMIT`, a
/// poll, a health check), and a verdict depends on the text alone.
#[derive(Default)]
pub(super) struct Verdicts {
    kept: Vec<(Box<str>, Vec<Verdict>)>,
    /// The entry the next new text replaces, once all are taken.
    next: usize,
}

impl Verdicts {
    /// `rewrite::classify_script`, from memory when `sql` was seen lately.
    fn classify_script(&mut self, sql: &str) -> Vec<(Range<usize>, Command)> {
        if let Some((_, verdicts)) = self.kept.iter().find(|(text, _)| **text == *sql) {
            return verdicts
                .iter()
                .map(|(range, effect)| (range.clone(), Command::Passthrough(*effect)))
                .collect();
        }
        let commands = rewrite::classify_script(sql);
        // Only plain SQL is kept: dialect statements carry their parse.
        let plain: Option<Vec<_>> = commands
            .iter()
            .map(|(range, command)| match command {
                Command::Passthrough(effect) => Some((range.clone(), *effect)),
                _ => None,
            })
            .collect();
        if let Some(plain) = plain.filter(|_| sql.len() <= 4096) {
            let entry = (Box::from(sql), plain);
            if self.kept.len() < VERDICTS_KEPT {
                self.kept.push(entry);
            } else {
                self.kept[self.next] = entry;
                self.next = (self.next + 1) % VERDICTS_KEPT;
            }
        }
        commands
    }
}

impl Session {
    pub(super) async fn simple_query(&mut self, msg: &Message) -> Result<(), End> {
        let bytes = match frontend::query(msg) {
            Ok(s) => s,
            Err(e) => return Err(self.fatal(canned::protocol_violation(e.to_string())).await),
        };
        if frontend::query_has_trailing(msg) {
            // PostgreSQL's to refuse (in a block, failing it), whatever the
            // text before the NUL holds.
            return self.function_call(msg).await;
        }
        // A Query inside an extended pipeline is skipped, as any message,
        // after an error of the pipeline, up to Sync: the replies owed say
        // whether one came.
        if self.replies.owed() && !self.replies.answered_ahead() {
            self.relay_earlier_replies().await?;
            if self.replies.skipping() {
                return Ok(self.client.flush().await?);
            }
        }
        // Whatever the query is, PostgreSQL drops the unnamed statement
        // before it runs it; a later Bind of it fails with 26000 there.
        self.statements.remove("");
        // And its unnamed portal.
        self.portals.remove_local("");
        self.portals.close_backend("");
        let text = ClientText::read(bytes, &self.client_encoding, self.standard_strings);
        let sql: &str = &text.view;
        let commands = self.verdicts.classify_script(sql);
        let plain = |c: &Command| matches!(c, Command::Passthrough(_));
        let names_reserved = commands
            .iter()
            .any(|(r, c)| plain(c) && self.reserved_name_refusal(&sql[r.clone()]).is_some());
        // A BEGIN answered ahead goes with this message when it is one
        // plain statement forwarded as it is, or dialect statements only
        // (their calls go with it: `hand_over_begin`); anything else reads
        // it first.
        if self.replies.answered_ahead() {
            let dialect_only = commands
                .iter()
                .all(|(_, c)| matches!(c, Command::Dialect(_)));
            let goes_along = !names_reserved
                && !self.begin_connection_closed()
                && (forwarded_whole(sql, &commands) || (dialect_only && self.hand_over_begin()));
            if !goes_along && !self.settle_begin().await? {
                return self.finish_simple_query().await;
            }
        }
        if self.passthrough == Passthrough::None && commands.iter().any(|(_, c)| plain(c)) {
            self.local_error(canned::passthrough_refused());
            return self.finish_simple_query().await;
        }
        // The client's own statement name: the backend knows it under
        // another, so the proxy forgets it and answers.
        if let [(range, Command::Passthrough(_))] = commands.as_slice() {
            if let Some(name) = rewrite::passthrough::deallocated_name(&sql[range.clone()]) {
                if self.statements.remove(&name).is_some() {
                    self.reply_local(protocol::command_complete("DEALLOCATE"));
                    self.reply_local(protocol::ready_for_query(self.lease.status()));
                    return Ok(self.client.flush().await?);
                }
            }
        }
        if names_reserved {
            return self.run_refusing_script(&text, &commands).await;
        }
        if let [(range, Command::Passthrough(_))] = commands.as_slice() {
            let statement = &sql[range.clone()];
            if let Some(tag) = rewrite::passthrough::plain_begin(statement) {
                if self.may_answer_ahead() {
                    return self.begin_ahead(msg, statement, tag).await;
                }
            }
            if let Some(listening) = rewrite::passthrough::listening(statement) {
                if !self.lease.held() && self.client_encoding == ClientEncoding::Utf8 {
                    return self.listen_shared(listening, statement).await;
                }
                if self.block_can_listen()
                    && self
                        .listen_in_block(listening.clone(), statement, true)
                        .await?
                {
                    return Ok(());
                }
                // It goes to the session's own connection; the hub forgets
                // the session's channels too.
                if let Listening::Unlisten(channel) = listening {
                    if self.notifications.is_some() {
                        self.shared.listen.forget(self.id, channel);
                    }
                }
            } else if (self.txn.block.has_pending() || !self.txn.ephemeral.is_empty())
                && rewrite::passthrough::transaction_control(statement)
                    == Some(rewrite::passthrough::Control::Prepare)
            {
                if self.txn.ephemeral.is_empty() {
                    self.prepare_with_block_listens(statement).await?;
                } else {
                    self.refuse_prepare_of_ephemeral_pushes().await?;
                }
                return self.finish_simple_query().await;
            }
        }
        if commands.iter().all(|(_, c)| plain(c)) {
            if commands.len() > 1 {
                let statements = commands.iter().map(|(r, _)| &sql[r.clone()]);
                if let Some(plan) = self.script_plan(statements, false) {
                    self.run_listen_script(&text, &commands, plan).await?;
                    return self.finish_simple_query().await;
                }
            }
            if !self.ensure_backend(For::Client).await? {
                return self.finish_simple_query().await;
            }
            self.before_plain(commands.iter().map(|(r, _)| &sql[r.clone()]))
                .await?;
            for (range, command) in &commands {
                if let Command::Passthrough(effect) = command {
                    self.apply_effect(*effect, &sql[range.clone()]);
                }
            }
            if let Some(conn) = self.lease.conn_mut() {
                conn.unnamed_destroyed();
            }
            let (began, errors) = (std::time::Instant::now(), self.observed.backend_errors);
            self.forward(msg, Expect::Query);
            self.drain().await?;
            self.passthrough_done(commands.len(), began, errors);
        } else {
            // Several statements outside a block, queue statements among
            // them, run as PostgreSQL runs a multi-statement query: in one
            // transaction (a block of the proxy's own), rolled back at the
            // first error. PostgreSQL reads the whole message before it
            // runs any of it: a queue statement it would not read (a syntax
            // error, text not in the client's encoding) is answered alone.
            if let Some(unread) = commands.iter().position(|(range, c)| match c {
                Command::Invalid(e) => e.sqlstate == SqlState::SYNTAX_ERROR,
                Command::Dialect(_) => text
                    .readable(
                        self.readable_scope(&text, range),
                        range.clone(),
                        &self.client_encoding,
                    )
                    .is_err(),
                Command::Passthrough(_) => false,
            }) {
                self.run_script(&text, &commands[unread..=unread]).await?;
                return self.finish_simple_query().await;
            }
            let statements = commands.iter().map(|(r, _)| &sql[r.clone()]);
            match self.script_plan(statements, true) {
                Some(plan) if commands.len() > 1 && one_transaction_can_hold(&commands) => {
                    self.run_listen_script(&text, &commands, plan).await?
                }
                _ => self.run_script(&text, &commands).await?,
            }
        }
        self.finish_simple_query().await
    }

    /// Whether a plain `BEGIN` now may be answered before PostgreSQL
    /// answers it: outside any block, transaction or pipeline, with
    /// nothing owed, so it cannot fail.
    fn may_answer_ahead(&self) -> bool {
        self.lease.status() == TxStatus::Idle
            && !self.replies.owed()
            && !self.replies.skipping()
            && !self.txn.forwarded_since_sync
            && !self.txn.executed_since_sync
    }

    /// A plain `BEGIN` (`tag`: its command tag) outside a block: answered
    /// at once, with the bytes PostgreSQL would send, and sent to
    /// PostgreSQL with the client's next statement, in one write, whose
    /// replies follow its own (swallowed): one exchange with the backend
    /// fewer a transaction. A client that waits longer than
    /// `BEGIN_HELD_FOR` before its next message has the BEGIN sent then
    /// (`idle::next_message`), so the block's start (`now()`) is that much
    /// later at most, as if the network were that much slower.
    async fn begin_ahead(&mut self, msg: &Message, statement: &str, tag: &str) -> Result<(), End> {
        if !self.ensure_backend(For::Client).await? {
            return self.finish_simple_query().await;
        }
        self.before_plain(std::iter::once(statement)).await?;
        let (began, errors) = (std::time::Instant::now(), self.observed.backend_errors);
        self.forward(msg, Expect::Answered);
        if let Some(conn) = self.lease.conn_mut() {
            conn.begin_sent_ahead();
            self.txn.begin_unsent = true;
        }
        self.client.send(&protocol::command_complete(tag));
        self.client
            .send(&protocol::ready_for_query(TxStatus::InBlock));
        self.passthrough_done(1, began, errors);
        self.finish_simple_query().await
    }

    /// `LISTEN` / `UNLISTEN` served from the shared listening connection
    /// (`frontend::listen`): answered once it listens, with PostgreSQL's
    /// own error for a statement PostgreSQL refuses.
    async fn listen_shared(&mut self, listening: Listening, statement: &str) -> Result<(), End> {
        match self.hub_listen(listening, statement).await {
            Ok(command_tag) => {
                self.reply_local(protocol::command_complete(command_tag));
                self.reply_local(protocol::ready_for_query(self.lease.status()));
                Ok(self.client.flush().await?)
            }
            Err(e) => {
                self.local_error(e);
                self.finish_simple_query().await
            }
        }
    }

    /// The refusal of a plain statement that names a prepared statement
    /// by a name the proxy reserves (`StatementNames::reserved_in`): as for
    /// a statement the session does not have, and without reaching
    /// PostgreSQL, where another session's statement has that name.
    pub(super) fn reserved_name_refusal(&self, sql: &str) -> Option<SqlError> {
        let (by, name) = self.shared.statement_names.reserved_in(sql)?;
        Some(match by {
            NamedBy::Prepare => canned::reserved_statement_name(&name),
            NamedBy::Execute | NamedBy::Deallocate => canned::missing_statement(&name),
        })
    }

    /// A simple query with a statement `reserved_name_refusal` refuses:
    /// statement by statement, that one failing as PostgreSQL's own error
    /// would. Several statements outside a block run in a block of the
    /// proxy's, as PostgreSQL's implicit transaction, rolled back at the
    /// refusal.
    async fn run_refusing_script(
        &mut self,
        text: &ClientText<'_>,
        commands: &[(Range<usize>, Command)],
    ) -> Result<(), End> {
        let statements = commands.iter().map(|(r, _)| &text.view[r.clone()]);
        match self.script_plan(statements, true) {
            Some(plan) if commands.len() > 1 => {
                self.run_listen_script(text, commands, plan).await?
            }
            _ => self.run_script(text, commands).await?,
        }
        self.finish_simple_query().await
    }

    /// A fast-path FunctionCall (libpq's large-object API uses it): plain
    /// SQL as far as the proxy is concerned, answered like a simple query
    /// with FunctionCallResponse (or ErrorResponse) and ReadyForQuery. Any
    /// function but the large-object ones pins the session: the proxy reads
    /// no SQL text here, and `set_config`, `pg_advisory_lock` and the like
    /// would otherwise leave their state on a connection the next session
    /// gets.
    pub(super) async fn function_call(&mut self, msg: &Message) -> Result<(), End> {
        if self.passthrough == Passthrough::None {
            self.local_error(canned::passthrough_refused());
        } else if self.ensure_backend(For::Client).await? {
            if !fast_path_keeps_no_state(&msg.body) {
                self.lease.pin();
            }
            self.forward(msg, Expect::Query);
            self.drain().await?;
        }
        self.finish_simple_query().await
    }

    /// What a passthrough statement (`sql`) does to the session beyond
    /// its transaction, as it is sent. A `ForgetsPrepared` statement
    /// forgets at its CommandComplete (`backend_command_complete`).
    pub(super) fn apply_effect(&mut self, effect: SessionEffect, sql: &str) {
        match effect {
            SessionEffect::Pins => self.lease.pin(),
            SessionEffect::ForgetsPrepared | SessionEffect::ResetsSettings => {}
            SessionEffect::None => return,
        }
        self.txn.reset.note(sql, self.observed.backend_errors);
    }

    /// A CommandComplete of the backend's, before the client gets it. A
    /// `DEALLOCATE ALL` or `DISCARD ALL` that ran took every prepared
    /// statement of the connection with it, so the proxy forgets them, on
    /// the connection and in the session (and `DISCARD ALL` every LISTEN);
    /// one PostgreSQL refused (in a failed block, in a transaction block)
    /// took nothing. A COMMIT carries out its block's LISTENs.
    pub(super) async fn backend_command_complete(&mut self, body: &[u8]) {
        let tag = body.strip_suffix(&[0]).unwrap_or(body);
        if tag == b"DEALLOCATE ALL" || tag == b"DISCARD ALL" {
            self.statements.clear_named();
            if let Some(conn) = self.lease.conn_mut() {
                conn.forget_prepared();
            }
        }
        if tag == b"DISCARD ALL" && self.notifications.is_some() {
            self.shared.listen.forget(self.id, None);
        }
        self.block_command_complete(body).await;
    }

    async fn finish_simple_query(&mut self) -> Result<(), End> {
        if !self.replies.owed() && self.replies.skipping() {
            // Nothing reached the backend: the proxy answers ReadyForQuery.
            self.client
                .send(&protocol::ready_for_query(self.lease.status()));
        }
        self.replies.end_skip();
        self.txn.forwarded_since_sync = false;
        self.txn.executed_since_sync = false;
        self.release_if_idle();
        Ok(self.client.flush().await?)
    }

    /// A simple-query message holding dialect statements: each statement
    /// runs in turn (plain ones as their own Query), up to the first error.
    pub(super) async fn run_script(
        &mut self,
        text: &ClientText<'_>,
        commands: &[(Range<usize>, Command)],
    ) -> Result<(), End> {
        self.run_statements(text, commands).await?;
        self.replies.end_skip();
        self.client
            .send(&protocol::ready_for_query(self.lease.status()));
        Ok(())
    }

    /// The statements of a script in turn, up to the first error.
    pub(super) async fn run_statements(
        &mut self,
        text: &ClientText<'_>,
        commands: &[(Range<usize>, Command)],
    ) -> Result<(), End> {
        let sql: &str = &text.view;
        for (range, command) in commands {
            let ok = match command {
                Command::Passthrough(_)
                    if self.reserved_name_refusal(&sql[range.clone()]).is_some() =>
                {
                    if let Some(refusal) = self.reserved_name_refusal(&sql[range.clone()]) {
                        self.refuse(refusal, CallEnd::Sync).await?;
                    }
                    self.after_own_transaction().await;
                    false
                }
                Command::Passthrough(effect) => {
                    if !self.ensure_backend(For::Client).await? {
                        break;
                    }
                    if let Some(ok) = self.script_listen(&sql[range.clone()]).await? {
                        if !ok {
                            break;
                        }
                        continue;
                    }
                    self.before_plain(std::iter::once(&sql[range.clone()]))
                        .await?;
                    self.apply_effect(*effect, &sql[range.clone()]);
                    let (began, errors) = (std::time::Instant::now(), self.observed.backend_errors);
                    let ok = self
                        .run_plain_statement(
                            text.original(range.clone()),
                            sql[..range.start].chars().count(),
                        )
                        .await?;
                    self.passthrough_done(1, began, errors);
                    ok
                }
                // Text that is not UTF-8 anywhere in the message (a comment
                // included) fails the whole message on PostgreSQL, before
                // any of it runs: a queue statement in it is refused too.
                Command::Dialect(_)
                    if text
                        .readable(
                            self.readable_scope(text, range),
                            range.clone(),
                            &self.client_encoding,
                        )
                        .is_err() =>
                {
                    let scope = self.readable_scope(text, range);
                    if let Err(unreadable) =
                        text.readable(scope, range.clone(), &self.client_encoding)
                    {
                        self.refuse(unreadable, CallEnd::Sync).await?;
                    }
                    self.after_own_transaction().await;
                    false
                }
                Command::Dialect(stmt) => {
                    let ran = self.run_dialect(stmt, &[], CallEnd::Sync).await?;
                    self.after_own_transaction().await;
                    match ran {
                        Some(outcome) => {
                            self.send_outcome(stmt, outcome, &[], true);
                            true
                        }
                        None => false,
                    }
                }
                Command::Invalid(e) => {
                    let refusal = crate::engine::values::parse_error(e.clone());
                    self.refuse(refusal, CallEnd::Sync).await?;
                    self.after_own_transaction().await;
                    false
                }
            };
            if !ok {
                break;
            }
        }
        Ok(())
    }

    /// One plain statement of a mixed script: its replies go to the client,
    /// except the ReadyForQuery. Returns whether it succeeded.
    async fn run_plain_statement(&mut self, sql: &[u8], offset: usize) -> Result<bool, End> {
        let Some(conn) = self.lease.conn_mut() else {
            return Ok(false);
        };
        conn.unnamed_destroyed();
        conn.send(&frontend::build_query(sql));
        if let Err(e) = conn.flush().await {
            return Err(self.backend_lost(e).await);
        }
        let mut ok = true;
        loop {
            let Some(conn) = self.lease.conn_mut() else {
                return Ok(false);
            };
            let msg = match super::gone::unless_gone(&mut self.client, conn.recv()).await? {
                Ok(m) => m,
                Err(e) => return Err(self.backend_lost(e).await),
            };
            match msg.tag {
                tag::READY_FOR_QUERY => {
                    self.backend_ready(TxStatus::from_ready_body(&msg.body))
                        .await?;
                    return Ok(ok);
                }
                tag::ERROR_RESPONSE => {
                    ok = false;
                    // Its position counts from the start of the client's
                    // whole text, as PostgreSQL counts it.
                    let shifted = (offset > 0)
                        .then(|| SqlError::shift_position(&msg.body, offset))
                        .flatten();
                    match shifted {
                        Some(body) => self.client.send(&Message::new(msg.tag, body)),
                        None => self.client.send(&msg),
                    }
                    self.backend_error(&msg);
                }
                tag::COPY_IN_RESPONSE => {
                    self.client.send(&msg);
                    self.copy_in().await?;
                }
                tag::PARAMETER_STATUS => {
                    conn.note_parameter_status(&msg);
                    self.client_parameter_status(&msg);
                }
                tag::COMMAND_COMPLETE => {
                    self.backend_command_complete(&msg.body).await;
                    self.client.send(&msg);
                }
                tag::NOTIFICATION_RESPONSE => {
                    let notification = self.notification_for_client(&msg);
                    self.client.send(&notification);
                }
                _ => self.client.send(&msg),
            }
        }
    }

    /// After a statement whose calls ended with Sync: its transaction is
    /// over unless a block goes on.
    /// What of a script's text must be readable for its statement at
    /// `range` to run: in UTF8 the whole message, as PostgreSQL checks it
    /// whole; in other encodings the statement's own text.
    fn readable_scope(&self, text: &ClientText<'_>, range: &Range<usize>) -> Range<usize> {
        if self.client_encoding == ClientEncoding::Utf8 {
            0..text.view.len()
        } else {
            range.clone()
        }
    }

    async fn after_own_transaction(&mut self) {
        self.txn.forwarded_since_sync = false;
        if self.lease.held() && self.lease.status() == TxStatus::Idle {
            self.transaction_ended().await;
        }
    }
}

/// Whether a script's queue statements can all run in one transaction
/// block: none runs only alone (`PURGE TENANT`, the stream statements), none
/// declares or changes an ephemeral queue (its PUSHes find the queue only
/// once that commits), and no KV write or timer statement follows a queue
/// statement (the lock order refuses that in a block). A script that cannot
/// runs statement by statement, each statement committing on its own.
fn one_transaction_can_hold(commands: &[(Range<usize>, Command)]) -> bool {
    use crate::rewrite::dialect::Statement;
    let mut order = crate::engine::lock_order::LockOrder::default();
    commands.iter().all(|(_, command)| {
        let Command::Dialect(stmt) = command else {
            return true;
        };
        let alone = matches!(
            stmt.as_ref(),
            Statement::PurgeTenant(_)
                | Statement::CreateStream(_)
                | Statement::DropStream { .. }
                | Statement::AlterStream { .. }
        );
        if alone || stmt.declares_ephemeral() || order.check(stmt, true).is_err() {
            return false;
        }
        order.ran(stmt, true);
        true
    })
}

/// Whether a simple query is one plain statement the session forwards as
/// it is (not a LISTEN, a DEALLOCATE or a PREPARE TRANSACTION, which the
/// proxy may serve or follow itself).
fn forwarded_whole(sql: &str, commands: &[(Range<usize>, Command)]) -> bool {
    let [(range, Command::Passthrough(_))] = commands else {
        return false;
    };
    let statement = &sql[range.clone()];
    rewrite::passthrough::listening(statement).is_none()
        && rewrite::passthrough::deallocated_name(statement).is_none()
        && rewrite::passthrough::transaction_control(statement)
            != Some(rewrite::passthrough::Control::Prepare)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(commands: &[(Range<usize>, Command)]) -> Vec<(Range<usize>, String)> {
        commands
            .iter()
            .map(|(r, c)| {
                let kind = match c {
                    Command::Passthrough(e) => format!("{e:?}"),
                    Command::Dialect(_) => "dialect".to_string(),
                    Command::Invalid(_) => "invalid".to_string(),
                };
                (r.clone(), kind)
            })
            .collect()
    }

    #[test]
    fn remembered_verdicts_are_the_classifier_s() {
        let mut verdicts = Verdicts::default();
        let texts = [
            "SELECT 1",
            "BEGIN; SELECT 2; COMMIT",
            "SET search_path = x",
            "PUSH INTO q VALUES ('1')",
            "POP FROM",
            "LISTEN a; SELECT 3",
            "DISCARD ALL",
            "SELECT 1",
        ];
        // Every text several times over, more texts than are kept.
        for _ in 0..3 {
            for text in texts {
                assert_eq!(
                    shape(&verdicts.classify_script(text)),
                    shape(&rewrite::classify_script(text)),
                    "{text}"
                );
            }
        }
        assert!(verdicts.kept.len() <= VERDICTS_KEPT);
        // Dialect statements are never kept.
        assert!(verdicts
            .kept
            .iter()
            .all(|(t, _)| !t.starts_with("PUSH") && !t.starts_with("POP")));
    }
}

/// Whether a FunctionCall's function (its first field, the function's oid)
/// is one of the large-object functions libpq calls over the fast path:
/// their descriptors end with the transaction, so they leave nothing on
/// the connection.
fn fast_path_keeps_no_state(body: &[u8]) -> bool {
    /// lo_create, lo_open, lo_close, loread, lowrite, lo_lseek, lo_creat,
    /// lo_tell, lo_unlink, lo_truncate, lo_lseek64, lo_tell64, lo_truncate64
    /// (fixed oids of pg_proc.dat, which libpq's lo_initialize looks up).
    const LARGE_OBJECT_FUNCTIONS: [u32; 13] = [
        715, 952, 953, 954, 955, 956, 957, 958, 964, 1004, 3170, 3171, 3172,
    ];
    body.get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes)
        .is_some_and(|oid| LARGE_OBJECT_FUNCTIONS.contains(&oid))
}

#[cfg(test)]
mod fast_path_tests {
    use super::fast_path_keeps_no_state;

    #[test]
    fn only_large_object_functions_leave_the_session_unpinned() {
        assert!(fast_path_keeps_no_state(&952u32.to_be_bytes()));
        assert!(fast_path_keeps_no_state(&[0, 0, 0x0c, 0x64, 0, 0]));
        // set_config, pg_advisory_lock(int8), a truncated message.
        assert!(!fast_path_keeps_no_state(&2078u32.to_be_bytes()));
        assert!(!fast_path_keeps_no_state(&2880u32.to_be_bytes()));
        assert!(!fast_path_keeps_no_state(&[0, 0, 3]));
    }
}
