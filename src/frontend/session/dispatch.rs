//! The `Session` struct, its greeting and the message loop that hands each
//! client message to the file of its concern.

use super::canned;
use super::lease::{For, Lease};
use super::portals::{LocalPortal, Portals};
use super::prepared::{Prepared, Statements};
use super::replies::Replies;
use crate::frontend::client::Client;
use crate::frontend::encoding::ClientEncoding;
use crate::frontend::shared::{SessionHandle, Shared};
use crate::frontend::startup::{Identity, Started};
use crate::metrics::clients::{ClientEntry, NewClient, State as ClientState};
use crate::protocol::tags::frontend as tag;
use crate::protocol::{self, FrameError, Message, SqlError};
use crate::users::Passthrough;
use std::sync::Arc;

/// Why a session ends.
#[derive(Debug)]
pub enum End {
    /// The client said Terminate or closed its socket.
    ClientGone,
    /// An error that the client has been (or cannot be) told about.
    Fatal(String),
}

impl From<FrameError> for End {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Closed => End::ClientGone,
            other => End::Fatal(other.to_string()),
        }
    }
}

impl From<std::io::Error> for End {
    fn from(e: std::io::Error) -> Self {
        End::Fatal(e.to_string())
    }
}

/// The session's side of the transaction in progress.
#[derive(Default)]
pub(super) struct Txn {
    /// Client messages (or the engine's calls) went to the backend since
    /// the last Sync: the backend's implicit transaction holds them.
    pub(super) forwarded_since_sync: bool,
    /// Queues pushed to in the current transaction, woken when it ends.
    pub(super) pushed: Vec<String>,
    /// Ephemeral PUSHes of the current transaction, applied if it committed.
    pub(super) ephemeral: Vec<uuid::Uuid>,
    /// The current transaction declared or changed an ephemeral queue: the
    /// engine reads the ephemeral queues' names again when it ends (what a
    /// block declared is not visible before its commit).
    pub(super) ephemeral_declared: bool,
    /// Startup settings the client reset in the exchange in progress.
    pub(super) reset: super::settings::Reset,
    /// A plain statement was executed on the backend since the last Sync
    /// (it may have opened a transaction block the proxy has not seen).
    pub(super) executed_since_sync: bool,
    /// LISTEN / UNLISTEN of the pipeline in progress served by the hub,
    /// settled at its Sync (see `extended::listen_in_pipeline`).
    pub(super) pipeline_listens: Vec<PipelineListen>,
    /// The transaction block, followed for the LISTENs it holds back and
    /// the locks its dialect statements took.
    pub(super) block: super::block::Block,
    /// A BEGIN answered ahead waits in the connection's buffer for the
    /// client's next message (`simple::begin_ahead`).
    pub(super) begin_unsent: bool,
}

/// A LISTEN or UNLISTEN executed in a pipeline and served by the hub.
#[derive(Debug)]
pub(super) enum PipelineListen {
    /// Listened at once (so that a NOTIFY after the reply is seen); undone
    /// if the pipeline fails after it, since PostgreSQL rolls it back.
    /// `errors`: the backend errors seen when it ran.
    Listened { channel: String, errors: u64 },
    /// Carried out at Sync if the pipeline succeeded: PostgreSQL stops
    /// listening at commit, so notifications keep coming until then.
    Unlisten {
        channel: Option<String>,
        statement: String,
    },
}

/// What a message of a pipeline did to the session's bookkeeping, undone
/// when an earlier error makes the backend skip that message.
#[derive(Debug)]
pub(super) enum Undo {
    /// Statement `name` goes back to `previous` (`None`: absent).
    Statement {
        name: String,
        previous: Option<Prepared>,
    },
    /// Dialect portal `name` goes back to `previous` (`None`: absent).
    Portal {
        name: String,
        previous: Option<LocalPortal>,
    },
}

/// Client output is flushed at protocol boundaries, or once this much is
/// buffered.
pub(super) const CLIENT_FLUSH_THRESHOLD: usize = 64 * 1024;

pub struct Session {
    pub id: u64,
    /// The tenant every dialect statement acts in.
    pub(super) tenant: uuid::Uuid,
    /// May run `PURGE TENANT` (`startup::Identity::admin`).
    pub(super) admin: bool,
    /// What plain SQL this user may pass through.
    pub(super) passthrough: Passthrough,
    pub(super) shared: Arc<Shared>,
    pub(super) client: Client,
    pub(super) handle: Arc<SessionHandle>,
    pub(super) lease: Lease,
    pub(super) replies: Replies<Undo>,
    pub(super) statements: Statements,
    pub(super) portals: Portals,
    pub(super) txn: Txn,
    /// The client's `client_encoding`, as the backend last reported it.
    pub(super) client_encoding: ClientEncoding,
    /// The client's `standard_conforming_strings`, as the backend last
    /// reported it: off, a backslash escapes in `'…'` too.
    pub(super) standard_strings: bool,
    /// The client's `default_transaction_read_only`, as the backend last
    /// reported it: on, a queue statement that writes is refused outside
    /// a transaction block, as PostgreSQL refuses an INSERT.
    pub(super) read_only: bool,
    /// Notifications of the channels it listens on through the shared
    /// listening connection (`frontend::listen`), once it does.
    pub(super) notifications: Option<crate::frontend::listen::Notifications>,
    /// The server's shutdown as this session watches it (`idle.rs`).
    pub(super) stopping: super::idle::Stopping,
    /// The session in the admin view's list, while it lives.
    pub(super) observed: ClientEntry,
    /// Verdicts of the plain simple queries sent lately (`simple.rs`).
    pub(super) verdicts: super::simple::Verdicts,
    /// A copy message the client sent before the COPY FROM STDIN it is for
    /// had answered (`copy.rs`).
    pub(super) copy_ahead: Option<Message>,
    /// A FATAL or PANIC of the backend's reached the client: PostgreSQL
    /// closes the connection after it, and so does the session, adding
    /// nothing of its own.
    pub(super) backend_ended: bool,
}

impl Session {
    pub fn new(
        id: u64,
        shared: Arc<Shared>,
        started: Started,
        handle: Arc<SessionHandle>,
    ) -> Session {
        let Started {
            client,
            identity:
                Identity {
                    tenant,
                    passthrough,
                    admin,
                },
            settings,
            user,
        } = started;
        let observed = shared.engine.metrics.clients.register(NewClient {
            id,
            user,
            tenant,
            application_name: settings
                .get("application_name")
                .map(|v| v.trim_matches('\'').replace("''", "'"))
                .unwrap_or_default(),
            client_addr: client.peer().map(|p| p.to_string()).unwrap_or_default(),
        });
        let _ = handle.observed.set(observed.info.clone());
        let role_pool = match passthrough {
            _ if shared.config.users.is_none() => shared.client_pool.clone(),
            Passthrough::None => None,
            Passthrough::ReadOnly => shared.role_pool(tenant, true),
            Passthrough::Full => shared.role_pool(tenant, false),
        };
        // A user from the users file never runs plain SQL as the engine's
        // own role: without a tenant role, no plain SQL at all.
        let passthrough = if shared.config.users.is_some() && role_pool.is_none() {
            Passthrough::None
        } else {
            passthrough
        };
        let stopping = super::idle::Stopping::new(&shared);
        Session {
            id,
            tenant,
            admin,
            passthrough,
            lease: Lease::new(
                shared.pool.clone(),
                role_pool,
                settings,
                handle.clone(),
                shared.config.pool_mode == crate::frontend::PoolMode::Session,
                shared.config.pool_wait_timeout,
                shared.statement_names.shared_prefix(),
            ),
            shared,
            client,
            handle,
            replies: Replies::default(),
            statements: Statements::default(),
            portals: Portals::default(),
            txn: Txn::default(),
            client_encoding: ClientEncoding::Utf8,
            standard_strings: true,
            read_only: false,
            notifications: None,
            stopping,
            observed,
            verdicts: Default::default(),
            copy_ahead: None,
            backend_ended: false,
        }
    }

    /// Greets the client: the backend's parameter statuses (from a
    /// connection with the session's settings applied), the cancel key,
    /// ReadyForQuery. `Err` when no backend connection could be had (the
    /// client has been told) or the client is gone.
    pub async fn greet(&mut self, secret: i32) -> Result<(), End> {
        // A client that gives up while the pool is busy (a driver's
        // connect timeout) frees its slot at once.
        let acquired =
            super::gone::unless_gone(&mut self.client, self.lease.acquire(For::Client)).await?;
        match acquired {
            Ok(conn) => {
                let mut params: Vec<(String, String)> = conn
                    .reported_parameters()
                    .iter()
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect();
                params.sort();
                for (name, value) in &params {
                    self.note_reading(name, value);
                    self.client.send(&protocol::parameter_status(name, value));
                }
            }
            Err(e) => {
                let mut err = crate::frontend::errors::backend_unavailable(&e);
                err.severity = "FATAL";
                return Err(self.fatal(err).await);
            }
        }
        self.release_if_idle();
        self.client
            .send(&protocol::backend_key_data(self.id as i32, secret));
        self.client
            .send(&protocol::ready_for_query(self.lease.status()));
        self.client.flush().await?;
        Ok(())
    }

    /// Serves the session until the client leaves; then leaves the backend
    /// connection clean or closes it.
    pub async fn run(mut self) -> End {
        let end = self.serve().await;
        if self.notifications.is_some() {
            self.shared.listen.leave(self.id);
        }
        self.lease.finish(self.replies.owed(), &self.shared.target);
        end.err().unwrap_or(End::ClientGone)
    }

    async fn serve(&mut self) -> Result<(), End> {
        loop {
            let msg = self.next_message().await?;
            self.observed.info.set_state(ClientState::Active);
            // A BEGIN answered ahead goes with this message (whatever the
            // message's path, it flushes the connection); only a plain
            // simple query is forwarded behind it unread (`simple.rs`).
            self.txn.begin_unsent = false;
            // The Parse and Bind of a dialect statement are answered by the
            // proxy and its Execute runs calls: they take the BEGIN along.
            if !matches!(msg.tag, tag::TERMINATE | tag::QUERY)
                && self.replies.answered_ahead()
                && (self.begin_connection_closed()
                    || !(self.dialect_message(&msg) && self.hand_over_begin()))
            {
                // On a broken connection the pipeline then skips to Sync.
                self.settle_begin().await?;
            }
            match msg.tag {
                tag::TERMINATE => return Ok(()),
                // PostgreSQL refuses a Sync or Flush with a body before
                // acting on it; a Sync still ends the pipeline, a Flush is
                // then skipped with the rest of it.
                tag::SYNC if !msg.body.is_empty() => {
                    self.relay_earlier_replies().await?;
                    if self.replies.skipping() {
                        self.local_error(canned::invalid_message_format());
                    } else {
                        self.protocol_error(canned::invalid_message_format())
                            .await?;
                    }
                    self.sync().await?
                }
                tag::FLUSH if !msg.body.is_empty() => {
                    self.protocol_error(canned::invalid_message_format())
                        .await?
                }
                tag::SYNC => self.sync().await?,
                tag::FLUSH => self.flush_request().await?,
                tag::QUERY | tag::PARSE | tag::BIND | tag::DESCRIBE | tag::EXECUTE | tag::CLOSE
                    if self.replies.skipping() => {}
                tag::DESCRIBE | tag::EXECUTE | tag::CLOSE
                    if protocol::frontend::has_trailing(&msg) =>
                {
                    self.protocol_error(canned::invalid_message_format())
                        .await?
                }
                tag::QUERY => self.simple_query(&msg).await?,
                tag::PARSE => self.parse(&msg).await?,
                tag::BIND => self.bind(&msg).await?,
                tag::DESCRIBE => self.describe(&msg).await?,
                tag::EXECUTE => self.execute(&msg).await?,
                tag::CLOSE => self.close(&msg).await?,
                tag::COPY_DATA | tag::COPY_DONE | tag::COPY_FAIL => self.copy_message(msg).await?,
                tag::FUNCTION_CALL => self.function_call(&msg).await?,
                other => {
                    let err = canned::protocol_violation(format!(
                        "invalid frontend message type {other}"
                    ));
                    return Err(self.fatal(err).await);
                }
            }
            self.relay_if_backlogged().await?;
            // A BEGIN handed over that nothing took along yet is sent if
            // the client waits (`idle::next_message`).
            if self.lease.conn().is_some_and(|c| c.answered_begin_unsent()) {
                self.txn.begin_unsent = true;
            }
            self.observed_between_messages();
        }
    }

    /// Whether `msg` parses or binds a dialect statement.
    fn dialect_message(&self, msg: &Message) -> bool {
        match msg.tag {
            tag::PARSE => self.parses_dialect(msg),
            tag::BIND => self.binds_dialect(msg),
            _ => false,
        }
    }

    /// What the admin view shows of the session while it waits for the
    /// client.
    fn observed_between_messages(&self) {
        let info = &self.observed.info;
        info.set_pinned(self.lease.pinned());
        info.set_state(match self.lease.status() {
            protocol::TxStatus::Idle => ClientState::Idle,
            protocol::TxStatus::InBlock => ClientState::IdleInTransaction,
            protocol::TxStatus::Failed => ClientState::IdleInFailedTransaction,
        });
    }

    /// Sends a FATAL error and ends the session.
    pub(super) async fn fatal(&mut self, err: SqlError) -> End {
        self.shared.engine.metrics.error(err.code());
        self.client.send_fatal(&err).await;
        End::Fatal(err.message)
    }

    /// A ParameterStatus for the client, whose encoding and reading
    /// settings (`Lease::note_reported`) the proxy follows.
    pub(super) fn client_parameter_status(&mut self, msg: &Message) {
        let mut r = msg.reader();
        if let (Ok(name), Ok(value)) = (r.cstr(), r.cstr()) {
            self.note_reading(name, value);
            self.lease.note_reported(name, value);
        }
        self.client.send(msg);
    }

    /// A reported setting the proxy reads the client's text, or its
    /// transactions, by.
    fn note_reading(&mut self, name: &str, value: &str) {
        if name.eq_ignore_ascii_case("client_encoding") {
            self.client_encoding = ClientEncoding::from_name(value);
        } else if name.eq_ignore_ascii_case("standard_conforming_strings") {
            self.standard_strings = !value.eq_ignore_ascii_case("off");
        } else if name.eq_ignore_ascii_case("default_transaction_read_only") {
            self.read_only = value.eq_ignore_ascii_case("on");
        }
    }

    /// A reply the proxy makes itself, sent when its turn comes.
    pub(super) fn reply_local(&mut self, msg: Message) {
        if let Some(now) = self.replies.local(msg, None) {
            self.client.send(&now);
        }
    }

    /// A reply the proxy makes itself to a message that changed the
    /// session's bookkeeping: `undo` reverts the change if an earlier
    /// error makes the backend skip the message.
    pub(super) fn reply_local_undoable(&mut self, msg: Message, undo: Undo) {
        if let Some(now) = self.replies.local(msg, Some(undo)) {
            self.client.send(&now);
        }
    }

    /// Reverts what a message that failed did: a failed Parse creates no
    /// statement, and a failed Parse of the unnamed statement has dropped
    /// the one it was to replace, as in PostgreSQL (a later Bind of it is
    /// `26000`).
    pub(super) fn undo_failed(&mut self, undo: Undo) {
        match undo {
            Undo::Statement { name, .. } if name.is_empty() => self.statements.restore(&name, None),
            other => self.undo(other),
        }
    }

    /// Reverts what a skipped message did.
    pub(super) fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Statement { name, previous } => self.statements.restore(&name, previous),
            Undo::Portal { name, previous } => self.portals.restore_local(&name, previous),
        }
    }

    /// An error the proxy reports itself; the pipeline skips to Sync.
    pub(super) fn local_error(&mut self, err: SqlError) {
        self.shared.engine.metrics.error(err.code());
        if let Some(now) = self.replies.local_error(err.to_message()) {
            self.client.send(&now);
        }
    }

    pub(super) fn release_if_idle(&mut self) {
        self.lease.release_if_idle(self.replies.owed());
    }

    /// The transaction ended (ReadyForQuery said Idle): wake the waiters of
    /// the queues it pushed to.
    pub(super) async fn transaction_ended(&mut self) {
        for key in self.txn.pushed.drain(..) {
            self.shared.engine.announcer.pushed(&key);
        }
        let ephemeral = std::mem::take(&mut self.txn.ephemeral);
        let hub = &self.shared.engine.ephemeral;
        if std::mem::take(&mut self.txn.ephemeral_declared) {
            hub.refresh().await;
        }
        hub.transaction_ended(ephemeral).await;
    }

    /// The backend reported `status` at the end of an exchange: startup
    /// settings the exchange reset are set again (their ParameterStatus
    /// goes to the client before its ReadyForQuery), and waiters of the
    /// queues a finished transaction pushed to are woken.
    pub(super) async fn backend_ready(&mut self, status: protocol::TxStatus) -> Result<(), End> {
        self.block_ready(status);
        self.unlisten_abandoned().await;
        let reset = std::mem::take(&mut self.txn.reset);
        // A failed block rolls the RESET back with everything else.
        if reset.pending(self.observed.backend_errors) && status != protocol::TxStatus::Failed {
            match self.lease.reapply_settings(|name| reset.covers(name)).await {
                Ok(statuses) => {
                    for msg in statuses {
                        self.client_parameter_status(&msg);
                    }
                }
                Err(e) => return Err(self.backend_lost(e).await),
            }
        }
        if status == protocol::TxStatus::Idle {
            self.transaction_ended().await;
        }
        Ok(())
    }
}
