//! The extended query protocol: Parse, Bind, Describe, Execute, Close,
//! Flush, Sync. Plain statements go to the backend under proxy-global
//! names (parsed again on a connection that lacks them); dialect
//! statements and their portals are served by the proxy.

use super::dispatch::{PipelineListen, Undo};
use super::lease::For;
use super::portals::LocalPortal;
use super::prepared::Prepared;
use super::replies::Expect;
use super::{canned, rows, End, Session};
use crate::engine::CallEnd;
use crate::frontend::encoding::ClientEncoding;
use crate::frontend::encoding::ClientText;
use crate::frontend::params::bind_params_as_text;
use crate::protocol::tags::Target;
use crate::protocol::{self, frontend, Message, SqlError, SqlState, TxStatus};
use crate::rewrite::passthrough::{Control, Listening};
use crate::rewrite::{self, Command, SessionEffect};
use crate::users::Passthrough;
use std::sync::Arc;

impl Session {
    pub(super) async fn parse(&mut self, msg: &Message) -> Result<(), End> {
        let p = match frontend::parse(msg) {
            Ok(p) => p,
            Err(e) => return Err(self.fatal(canned::protocol_violation(e.to_string())).await),
        };
        if p.trailing {
            return self.protocol_error(canned::invalid_message_format()).await;
        }
        let text = ClientText::read(p.query, &self.client_encoding, self.standard_strings);
        if let Err(e) = self.statements.admit(p.name, &text.view) {
            // PostgreSQL looks at a failed block's state before the name,
            // except for a statement that ends the block.
            use rewrite::passthrough::transaction_control;
            let ends_block = matches!(
                transaction_control(&text.view),
                Some(
                    Control::Commit { .. }
                        | Control::Rollback { .. }
                        | Control::RollbackTo(_)
                        | Control::Prepare
                )
            );
            if ends_block {
                return self.protocol_error(e).await;
            }
            return self.protocol_error_in_block(e).await;
        }
        // Sent again on other connections as the client sent it.
        let raw: Option<Arc<[u8]>> = text.is_transcoded().then(|| Arc::from(p.query));
        // A driver that parses the same text again unnamed (libpq's
        // PQexecParams, JDBC below its prepare threshold, psycopg,
        // node-postgres) gets the verdict the text had last time: it
        // depends on the text alone.
        let again = self
            .statements
            .get("")
            .filter(|prev| {
                prev.dialect.is_none()
                    && raw.is_none()
                    && prev.raw.is_none()
                    && *prev.query == *text.view
                    && *prev.param_types == *p.param_types
                    && self.passthrough != Passthrough::None
            })
            .map(|prev| (prev.query.clone(), prev.param_types.clone(), prev.effect));
        let fresh = again.is_none();
        let (query, param_types, classified) = match again {
            Some((query, param_types, effect)) => {
                (query, param_types, Command::Passthrough(effect))
            }
            None => (
                Arc::from(&*text.view),
                Arc::from(p.param_types.as_slice()),
                rewrite::classify(&text.view),
            ),
        };
        let effect = match classified {
            Command::Passthrough(_) if self.passthrough == Passthrough::None => {
                self.local_error(canned::passthrough_refused());
                return Ok(());
            }
            Command::Passthrough(effect) => {
                // Refused at Parse, where PostgreSQL fails it at Execute:
                // its text never reaches PostgreSQL.
                if let Some(refusal) = self.reserved_name_refusal(&text.view).filter(|_| fresh) {
                    self.relay_earlier_replies().await?;
                    if !self.replies.skipping() {
                        self.refuse(refusal, CallEnd::Flush).await?;
                    }
                    return Ok(());
                }
                effect
            }
            Command::Dialect(stmt) => {
                let whole = 0..text.view.len();
                if let Err(unreadable) = text.readable(whole.clone(), whole, &self.client_encoding)
                {
                    self.relay_earlier_replies().await?;
                    if !self.replies.skipping() {
                        self.refuse(unreadable, CallEnd::Flush).await?;
                    }
                    return Ok(());
                }
                let prepared = Prepared {
                    query,
                    raw: None,
                    param_types,
                    effect: SessionEffect::None,
                    global: None,
                    dialect: Some(stmt),
                };
                let previous = self.statements.insert(p.name, prepared);
                let undo = Undo::Statement {
                    name: p.name.to_string(),
                    previous,
                };
                self.reply_local_undoable(protocol::parse_complete(), undo);
                return Ok(());
            }
            Command::Invalid(e) => {
                self.relay_earlier_replies().await?;
                if !self.replies.skipping() {
                    let refusal = crate::engine::values::parse_error(e);
                    self.refuse(refusal, CallEnd::Flush).await?;
                }
                return Ok(());
            }
        };
        if !self.ensure_backend(For::Client).await? {
            return Ok(());
        }
        if p.name.is_empty() {
            let previous = self.statements.insert(
                "",
                Prepared {
                    query,
                    raw,
                    param_types,
                    effect,
                    global: None,
                    dialect: None,
                },
            );
            let owner = (self.id, self.statements.unnamed_generation());
            if let Some(conn) = self.lease.conn_mut() {
                conn.unnamed_parsed_by(owner);
            }
            self.forward(
                msg,
                Expect::Parse {
                    forward: true,
                    registers: None,
                    undo: Some(Undo::Statement {
                        name: String::new(),
                        previous,
                    }),
                },
            );
        } else {
            let global = self.shared.statement_names.fresh();
            let prepared = Prepared {
                query,
                raw,
                param_types,
                effect,
                global: Some(global.clone()),
                dialect: None,
            };
            let previous = self.statements.insert(p.name, prepared.clone());
            let undo = Undo::Statement {
                name: p.name.to_string(),
                previous,
            };
            // A new name: the Parse always reaches PostgreSQL, as the
            // client asked.
            self.send_parse(&prepared, Some(undo));
        }
        Ok(())
    }

    /// A named statement the client never prepared over the protocol
    /// may be one of SQL `PREPARE` (libpq's `PQexecPrepared` and
    /// `PQdescribePrepared` take those too): it lives on the session's own
    /// connection, which that `PREPARE` pinned, and PostgreSQL binds it or
    /// says it does not exist. Never a name the proxy reserves: there it
    /// may be another session's statement.
    fn backend_may_know(&self, name: &str) -> bool {
        !name.is_empty()
            && self.lease.pinned()
            && self.lease.held()
            && !self.shared.statement_names.reserves(name)
    }

    fn backend_has(&self, global: &str) -> bool {
        self.lease.conn().is_some_and(|c| c.has_statement(global))
    }

    /// Parses `prepared` under its global name on the held connection: for
    /// the client's own Parse (whose change `undo` reverts), or injected
    /// (`None`: its reply goes to nobody).
    fn send_parse(&mut self, prepared: &Prepared, client_parse: Option<Undo>) {
        let name: &str = prepared.global.as_deref().unwrap_or("");
        let msg = match &prepared.raw {
            Some(raw) => frontend::build_parse(name, raw, &prepared.param_types),
            None => frontend::build_parse(name, prepared.query.as_bytes(), &prepared.param_types),
        };
        if let (Some(conn), Some(global)) = (self.lease.conn_mut(), &prepared.global) {
            conn.statement_parsed(global.clone());
        }
        self.forward(
            &msg,
            Expect::Parse {
                forward: client_parse.is_some(),
                registers: prepared.global.clone(),
                undo: client_parse,
            },
        );
    }

    /// Makes sure the held connection knows the client's statement `name`,
    /// re-parsing it there if it was prepared on another connection; returns
    /// the name to use on the backend.
    fn ensure_statement(&mut self, name: &str) -> Option<(Arc<str>, SessionEffect)> {
        let prepared = self.statements.get(name)?.clone();
        if name.is_empty() {
            let owner = (self.id, self.statements.unnamed_generation());
            if self.lease.conn().and_then(|c| c.unnamed_owner()) != Some(owner) {
                self.send_parse(&prepared, None);
                if let Some(conn) = self.lease.conn_mut() {
                    conn.unnamed_parsed_by(owner);
                }
            }
            return Some((Arc::from(""), prepared.effect));
        }
        let global = prepared.global.clone()?;
        if !self.backend_has(&global) {
            self.send_parse(&prepared, None);
        }
        Some((global, prepared.effect))
    }

    /// Whether `msg`, a Parse, parses a dialect statement (which the proxy
    /// answers itself).
    pub(super) fn parses_dialect(&self, msg: &Message) -> bool {
        frontend::parse(msg).is_ok_and(|p| {
            let text = ClientText::read(p.query, &self.client_encoding, self.standard_strings);
            matches!(rewrite::classify(&text.view), Command::Dialect(_))
        })
    }

    /// Whether `msg`, a Bind, binds a dialect statement (which the proxy
    /// answers itself).
    pub(super) fn binds_dialect(&self, msg: &Message) -> bool {
        frontend::bind(msg).is_ok_and(|b| {
            self.statements
                .get(b.statement)
                .is_some_and(|p| p.dialect.is_some())
        })
    }

    pub(super) async fn bind(&mut self, msg: &Message) -> Result<(), End> {
        let b = match frontend::bind(msg) {
            Ok(b) => b,
            Err(e) => return Err(self.fatal(canned::protocol_violation(e.to_string())).await),
        };
        if b.trailing {
            return self.protocol_error(canned::invalid_message_format()).await;
        }
        let Some(prepared) = self.statements.get(b.statement).cloned() else {
            if self.backend_may_know(b.statement) {
                self.portals.remove_local(b.portal);
                self.portals
                    .bind_backend(b.portal, SessionEffect::None, Arc::from(""));
                self.forward(msg, Expect::Bind);
            } else {
                self.protocol_error(canned::missing_statement(b.statement))
                    .await?;
            }
            return Ok(());
        };
        if let Some(stmt) = &prepared.dialect {
            let required = stmt.param_count().max(prepared.param_types.len());
            if b.params.len() != required {
                let error = canned::bind_count(b.params.len(), b.statement, required);
                return self.protocol_error(error).await;
            }
            let types = prepared.dialect_param_types(stmt, required);
            let converted =
                bind_params_as_text(&b.params, &b.param_formats, &types).and_then(|params| {
                    check_result_formats(stmt.columns().len(), &b.result_formats)?;
                    Ok(params)
                });
            match converted {
                Ok(params) => {
                    let portal = LocalPortal {
                        statement: stmt.clone(),
                        params,
                        result_formats: b.result_formats.clone(),
                        unreturned: None,
                    };
                    match self.portals.bind_local(b.portal, portal) {
                        Ok(previous) => {
                            let undo = Undo::Portal {
                                name: b.portal.to_string(),
                                previous,
                            };
                            self.reply_local_undoable(protocol::bind_complete(), undo);
                        }
                        Err(e) => self.protocol_error_in_block(e).await?,
                    }
                }
                Err(e) => self.protocol_error_in_block(e).await?,
            }
            return Ok(());
        }
        self.portals.remove_local(b.portal);
        if !self.ensure_backend(For::Client).await? {
            return Ok(());
        }
        let Some((backend_name, effect)) = self.ensure_statement(b.statement) else {
            return self
                .protocol_error(canned::missing_statement(b.statement))
                .await;
        };
        self.portals
            .bind_backend(b.portal, effect, prepared.query.clone());
        if *backend_name == *b.statement {
            self.forward(msg, Expect::Bind);
        } else {
            let rewritten = frontend::rebind(msg, &b, &backend_name);
            self.forward(&rewritten, Expect::Bind);
        }
        Ok(())
    }

    pub(super) async fn describe(&mut self, msg: &Message) -> Result<(), End> {
        let (kind, name) = match frontend::target(msg) {
            Ok(t) => t,
            Err(e) => return Err(self.fatal(canned::protocol_violation(e.to_string())).await),
        };
        match kind {
            Target::Statement => {
                let Some(prepared) = self.statements.get(name).cloned() else {
                    if self.backend_may_know(name) {
                        self.forward(msg, Expect::DescribeStatement);
                    } else {
                        self.protocol_error(canned::missing_statement(name)).await?;
                    }
                    return Ok(());
                };
                if let Some(stmt) = &prepared.dialect {
                    // Worked out once: a statement may name $65535.
                    let count = stmt.param_types().len().max(prepared.param_types.len());
                    let types = prepared.dialect_param_types(stmt, count);
                    self.reply_local(protocol::parameter_description(&types));
                    self.reply_local(rows::describe_columns(stmt.columns(), &[]));
                    return Ok(());
                }
                if !self.ensure_backend(For::Client).await? {
                    return Ok(());
                }
                let Some((backend_name, _)) = self.ensure_statement(name) else {
                    return self.protocol_error(canned::missing_statement(name)).await;
                };
                let m = frontend::build_describe(Target::Statement, &backend_name);
                self.forward(&m, Expect::DescribeStatement);
            }
            Target::Portal => {
                if let Some(portal) = self.portals.local(name) {
                    let reply =
                        rows::describe_columns(portal.statement.columns(), &portal.result_formats);
                    self.reply_local(reply);
                } else if !self.lease.held() || self.unnamed_portal_unbound(name) {
                    self.protocol_error(canned::missing_portal(name)).await?;
                } else {
                    self.forward(msg, Expect::DescribePortal);
                }
            }
        }
        Ok(())
    }

    pub(super) async fn execute(&mut self, msg: &Message) -> Result<(), End> {
        let (portal, max_rows) = match frontend::execute(msg) {
            Ok(e) => e,
            Err(e) => return Err(self.fatal(canned::protocol_violation(e.to_string())).await),
        };
        let limit = usize::try_from(max_rows).unwrap_or(0);
        if let Some(local) = self.portals.local(portal) {
            if local.unreturned.is_none() {
                // The statement runs once, at the first Execute; its rows go
                // out `limit` at a time, and a completed portal returns none
                // (it never runs again), so its parameters are taken, not
                // copied (a PUSH of 100 rows has 100).
                let stmt = local.statement.clone();
                let params = self.portals.take_params(portal);
                let Some(outcome) = self.run_dialect(&stmt, &params, CallEnd::Flush).await? else {
                    // Not run (skipped, or refused before it ran): the
                    // portal stays as it was bound.
                    self.portals.put_params(portal, params);
                    return Ok(());
                };
                if let Some(local) = self.portals.local_mut(portal) {
                    local.unreturned = Some(outcome.rows.into());
                }
            }
            return self.send_portal_part(portal, limit).await;
        }
        if !self.lease.held() || self.unnamed_portal_unbound(portal) {
            return self.protocol_error(canned::missing_portal(portal)).await;
        }
        let mut forgets_prepared = false;
        if let Some((effect, query)) = self.portals.backend_effect(portal) {
            forgets_prepared = effect == SessionEffect::ForgetsPrepared;
            let listening = self.shareable_listen(&query);
            if let Some(listening) = listening.clone() {
                // What came before it decides: an open block (a BEGIN
                // answered), or the pipeline's implicit transaction.
                self.relay_earlier_replies().await?;
                if self.replies.skipping() {
                    return Ok(());
                }
                if !self.portals.first_run(portal) {
                    return self
                        .protocol_error_in_block(canned::portal_cannot_run(portal))
                        .await;
                }
                if !self.txn.block.open() {
                    return self.listen_in_pipeline(listening, &query).await;
                }
                if self.block_can_listen() && self.listen_in_block(listening, &query, false).await?
                {
                    return Ok(());
                }
            }
            if let Some(control) = rewrite::passthrough::transaction_control(&query) {
                if control == Control::Prepare && !self.txn.ephemeral.is_empty() {
                    return self.refuse_prepare_of_ephemeral_pushes().await;
                }
                if control == Control::Prepare && self.txn.block.has_pending() {
                    return self.prepare_with_block_listens(&query).await;
                }
                if matches!(control, Control::Commit { .. }) && self.txn.block.has_pending() {
                    self.listen_before_commit().await;
                }
                self.note_control_sent(control);
            }
            // A LISTEN of a failed block fails: nothing to keep.
            if listening.is_none() || self.lease.status() != TxStatus::Failed {
                self.apply_effect(effect, &query);
            }
        }
        self.observed.passthrough_executes += 1;
        self.txn.executed_since_sync = true;
        self.forward(msg, Expect::Execute);
        if forgets_prepared {
            // Its CommandComplete forgets the statements there are now:
            // read before the pipeline's later Parses add any.
            self.relay_earlier_replies().await?;
        }
        Ok(())
    }

    /// A LISTEN / UNLISTEN the shared listening connection can serve in
    /// place of the session's own: on a connection the session has not
    /// pinned, in UTF8 (the hub's channel names are UTF-8). Outside a
    /// transaction block in the pipeline's implicit transaction
    /// (`listen_in_pipeline`), inside one at its COMMIT (`block`).
    fn shareable_listen(&self, query: &str) -> Option<Listening> {
        if self.lease.pinned() || self.client_encoding != ClientEncoding::Utf8 {
            return None;
        }
        rewrite::passthrough::listening(query)
    }

    /// Executes a LISTEN / UNLISTEN portal through the hub (its Parse and
    /// Bind went to the backend, which never runs it): answered with
    /// CommandComplete in its place among the backend's replies. PostgreSQL
    /// applies both at the commit of the pipeline's implicit transaction:
    /// a LISTEN here listens at once (a NOTIFY sent after the reply must
    /// be seen) and is undone at Sync if the pipeline failed after it; an
    /// UNLISTEN waits for the Sync.
    async fn listen_in_pipeline(
        &mut self,
        listening: Listening,
        statement: &str,
    ) -> Result<(), End> {
        self.relay_earlier_replies().await?;
        if self.replies.skipping() {
            return Ok(());
        }
        let hub = self.shared.listen.clone();
        match listening {
            Listening::Listen(channel) => {
                let was_listening = hub.listens(self.id, &channel);
                match hub.listen(self.id, statement, channel.clone()).await {
                    Ok(rx) => {
                        if let Some(rx) = rx {
                            self.notifications = Some(rx);
                        }
                        if !was_listening {
                            self.txn.pipeline_listens.push(PipelineListen::Listened {
                                channel,
                                errors: self.observed.backend_errors,
                            });
                        }
                        self.client.send(&protocol::command_complete("LISTEN"));
                    }
                    Err(e) => self.local_error(e),
                }
            }
            Listening::Unlisten(channel) => {
                self.txn.pipeline_listens.push(PipelineListen::Unlisten {
                    channel,
                    statement: statement.to_string(),
                });
                self.client.send(&protocol::command_complete("UNLISTEN"));
            }
        }
        Ok(())
    }

    /// At Sync: the pipeline's LISTEN / UNLISTEN served by the hub take
    /// effect as its implicit transaction did.
    async fn settle_pipeline_listens(&mut self, failed: bool) {
        let hub = self.shared.listen.clone();
        for listen in std::mem::take(&mut self.txn.pipeline_listens) {
            match listen {
                PipelineListen::Listened { channel, errors } => {
                    if failed || self.observed.backend_errors != errors {
                        hub.forget(self.id, Some(channel));
                    }
                }
                PipelineListen::Unlisten { channel, statement } => {
                    if !failed {
                        if let Err(e) = hub.unlisten(self.id, &statement, channel).await {
                            tracing::warn!(session = self.id, "UNLISTEN after Sync: {}", e.message);
                        }
                    }
                }
            }
        }
    }

    /// One Execute of a dialect portal whose statement ran: at most `limit`
    /// rows (0 = all) of those not yet returned, then PortalSuspended while
    /// some are left, else CommandComplete counting this Execute's rows, as
    /// a PostgreSQL portal answers. Skipped after an earlier error of the
    /// pipeline, which the earlier replies may bring.
    async fn send_portal_part(&mut self, portal: &str, limit: usize) -> Result<(), End> {
        self.relay_earlier_replies().await?;
        if self.replies.skipping() {
            return Ok(());
        }
        let Some(local) = self.portals.local_mut(portal) else {
            return Ok(());
        };
        let Some(rows) = local.unreturned.as_mut() else {
            return Ok(());
        };
        let take = if limit == 0 {
            rows.len()
        } else {
            limit.min(rows.len())
        };
        let batch: Vec<_> = rows.drain(..take).collect();
        let done = rows.is_empty();
        let tag = local.statement.command_tag(take);
        let formats = local.result_formats.clone();
        if !self.send_rows(&batch, &formats) {
            return Ok(());
        }
        if done {
            self.client.send(&protocol::command_complete(&tag));
        } else {
            self.client.send(&protocol::portal_suspended());
        }
        Ok(())
    }

    /// The unnamed portal, with no Bind of it since the transaction or
    /// the last simple Query began (either drops it): answered here, as
    /// PostgreSQL would answer it, without reaching PostgreSQL (15.18
    /// crashes on one such Execute in a failed block). No cursor is named
    /// `""`.
    fn unnamed_portal_unbound(&self, portal: &str) -> bool {
        portal.is_empty()
            && self.portals.local("").is_none()
            && self.portals.backend_effect("").is_none()
    }

    pub(super) async fn close(&mut self, msg: &Message) -> Result<(), End> {
        let (kind, name) = match frontend::target(msg) {
            Ok(t) => t,
            Err(e) => return Err(self.fatal(canned::protocol_violation(e.to_string())).await),
        };
        match kind {
            Target::Statement => {
                // The backend keeps the statement under its global name, for
                // whoever prepares the same text next.
                let previous = self.statements.remove(name);
                let undo = Undo::Statement {
                    name: name.to_string(),
                    previous,
                };
                self.reply_local_undoable(protocol::close_complete(), undo);
            }
            Target::Portal => {
                if let Some(previous) = self.portals.remove_local(name) {
                    let undo = Undo::Portal {
                        name: name.to_string(),
                        previous: Some(previous),
                    };
                    self.reply_local_undoable(protocol::close_complete(), undo);
                } else if !self.lease.held() {
                    self.reply_local(protocol::close_complete());
                } else {
                    self.portals.close_backend(name);
                    self.forward(msg, Expect::Close);
                }
            }
        }
        Ok(())
    }

    pub(super) async fn flush_request(&mut self) -> Result<(), End> {
        self.relay_earlier_replies().await?;
        Ok(self.client.flush().await?)
    }

    pub(super) async fn sync(&mut self) -> Result<(), End> {
        let errors_before = self.observed.backend_errors;
        let failed_locally = self.replies.skipping();
        if self.lease.held() {
            let executes = std::mem::take(&mut self.observed.passthrough_executes);
            let (began, errors) = (std::time::Instant::now(), self.observed.backend_errors);
            self.forward(&frontend::sync(), Expect::Sync);
            self.drain().await?;
            if self.replies.held_for_client() {
                // A COPY FROM STDIN took the Sync: the exchange goes on
                // up to the client's next one.
                self.observed.passthrough_executes += executes;
                return Ok(self.client.flush().await?);
            }
            if executes > 0 {
                self.passthrough_done(executes as usize, began, errors);
            }
        } else {
            self.reply_local(protocol::ready_for_query(self.lease.status()));
        }
        if !self.txn.pipeline_listens.is_empty() {
            let failed = failed_locally || self.observed.backend_errors != errors_before;
            self.settle_pipeline_listens(failed).await;
        }
        self.replies.end_skip();
        self.txn.forwarded_since_sync = false;
        self.txn.executed_since_sync = false;
        // No portal outlives its transaction, the proxy's or the backend's.
        if self.lease.status() == TxStatus::Idle {
            self.portals.transaction_ended();
        }
        self.release_if_idle();
        Ok(self.client.flush().await?)
    }
}

/// A Bind's result formats for a statement with `columns` columns, checked
/// as PostgreSQL checks them: none, one for all, or one per column, each
/// text (0) or binary (1). A statement without columns takes any. Checked
/// at Bind, before a queue statement runs, so a POP never takes leases for
/// rows it cannot send.
fn check_result_formats(columns: usize, formats: &[i16]) -> Result<(), SqlError> {
    if columns == 0 {
        return Ok(());
    }
    if formats.len() > 1 && formats.len() != columns {
        return Err(SqlError::error(
            SqlState::PROTOCOL_VIOLATION,
            format!(
                "bind message has {} result formats but query has {columns} columns",
                formats.len()
            ),
        ));
    }
    match formats.iter().find(|&&f| f != 0 && f != 1) {
        Some(f) => Err(SqlError::error(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("unsupported format code: {f}"),
        )),
        None => Ok(()),
    }
}
