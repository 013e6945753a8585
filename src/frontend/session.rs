//! One client session after startup: the simple and extended query
//! protocol, transaction pooling and prepared statements that survive a
//! change of backend connection.
//!
//! The backend connection's side of the conversation is tracked as a queue
//! of expected replies (`Expect`), one entry per message forwarded: replies
//! arrive in order, an ErrorResponse ends everything up to the next Sync,
//! and replies the proxy produces itself (`Expect::Local`) wait in the same
//! queue so the client sees every answer in the order it asked.

use super::params::{bind_params_as_text, result_format};
use super::{client::Client, SessionHandle, Shared};
use crate::backend::{pool, BackendError, PooledConn};
use crate::engine::values::Cell;
use crate::engine::{queues, ExecError, Outcome};
use crate::protocol::{self, frontend, ErrorFields, FieldDescription, FrameError, Message};
use crate::rewrite::dialect::{Column, Statement};
use crate::rewrite::{self, Command, SessionEffect};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// A reply the backend (or the proxy) still owes the client.
#[derive(Debug)]
enum Expect {
    /// ParseComplete. `forward: false` for a Parse the proxy injected;
    /// `registers` names the proxy-global statement it creates.
    Parse {
        forward: bool,
        registers: Option<Arc<str>>,
    },
    Bind,
    Close,
    /// ParameterDescription, then RowDescription or NoData.
    DescribeStatement,
    /// RowDescription or NoData.
    DescribePortal,
    /// Rows, then CommandComplete, EmptyQueryResponse or PortalSuspended.
    Execute,
    /// ReadyForQuery.
    Sync,
    /// A simple Query: everything up to ReadyForQuery.
    Query,
    /// A reply produced by the proxy, sent when its turn comes.
    Local(Message),
}

/// A statement prepared by the client.
#[derive(Debug, Clone)]
struct Prepared {
    query: Arc<str>,
    param_types: Arc<[u32]>,
    effect: SessionEffect,
    /// The proxy-global name it has on backend connections (named
    /// statements only; the unnamed statement stays unnamed).
    global: Option<Arc<str>>,
    /// A dialect statement: served by the engine, never parsed on a backend.
    dialect: Option<Arc<Statement>>,
}

/// A portal bound to a dialect statement: it lives in the proxy.
struct LocalPortal {
    statement: Arc<Statement>,
    params: Vec<Option<String>>,
    result_formats: Vec<i16>,
    /// Set once the statement ran (at the first Execute): the rows no
    /// Execute has returned yet.
    unreturned: Option<VecDeque<Vec<Cell>>>,
}

impl LocalPortal {
    fn bytes(&self) -> usize {
        self.params.iter().flatten().map(String::len).sum::<usize>() + 64
    }
}

/// The first wait between two polls of a waiting POP when no wake-up came,
/// and the longest (the safety net against a lost notification).
const WAIT_POLL_FIRST: Duration = Duration::from_millis(250);
const WAIT_POLL_MAX: Duration = Duration::from_secs(2);

pub struct Session {
    pub id: u64,
    /// The tenant every dialect statement acts in.
    tenant: uuid::Uuid,
    /// What plain SQL this user may pass through.
    passthrough: crate::users::Passthrough,
    /// Connections logged in as the user's tenant role, for plain SQL and
    /// everything inside the user's transactions; `None` (no users file):
    /// the engine's pool.
    role_pool: Option<crate::backend::Pool>,
    shared: Arc<Shared>,
    client: Client,
    handle: Arc<SessionHandle>,
    backend: Option<PooledConn>,
    /// Session state lives on the backend connection: keep it until the end.
    pinned: bool,
    /// Session parameters from the startup packet, as SQL value text.
    desired: BTreeMap<String, String>,
    statements: HashMap<String, Prepared>,
    /// Bytes of statement text in `statements` (bounded per session).
    statement_bytes: usize,
    unnamed: Option<Prepared>,
    unnamed_generation: u64,
    /// Session effects of the passthrough portals bound on the backend.
    portal_effects: HashMap<String, SessionEffect>,
    local_portals: HashMap<String, LocalPortal>,
    /// Parameter bytes held in `local_portals` (bounded per session).
    portal_bytes: usize,
    /// While a dialect portal's statement runs, `send_rows` keeps its rows
    /// in `portal_rows` instead of sending them.
    capture_rows: bool,
    portal_rows: Option<VecDeque<Vec<Cell>>>,
    /// Client messages went to the backend since the last Sync: the
    /// backend's implicit transaction holds them.
    forwarded_since_sync: bool,
    /// Queues pushed to in the current transaction, woken when it ends.
    pushed: Vec<String>,
    /// A queue statement ran in the current transaction block: it holds
    /// queue, partition or consumer locks, and the seeds' global lock order
    /// forbids taking KV or timer locks after those.
    queue_locks_held: bool,
    /// The statement being run is a whole simple query of its own: the
    /// engine's calls end with Sync, saving a round trip (see
    /// `BackendConn::call`).
    autosync: bool,
    pending: VecDeque<Expect>,
    /// After an error in the extended protocol, messages are discarded
    /// until Sync, as PostgreSQL does.
    skip_until_sync: bool,
    /// Transaction status for the next ReadyForQuery the proxy makes itself.
    status: u8,
}

/// Named prepared statements one session may hold, and their total text:
/// the proxy keeps them for the session's life, in memory all sessions
/// share.
const MAX_SESSION_STATEMENTS: usize = 10_000;
const MAX_SESSION_STATEMENT_BYTES: usize = 64 << 20;
/// Open dialect portals one session may hold (they live in the proxy until
/// Sync ends their transaction, or Close), and their parameters' size.
const MAX_SESSION_PORTALS: usize = 10_000;
const MAX_SESSION_PORTAL_BYTES: usize = 64 << 20;

/// Client output is flushed at protocol boundaries, or once this much is
/// buffered.
const CLIENT_FLUSH_THRESHOLD: usize = 64 * 1024;

impl Session {
    pub fn new(
        id: u64,
        shared: Arc<Shared>,
        client: Client,
        handle: Arc<SessionHandle>,
        desired: BTreeMap<String, String>,
        identity: super::startup::Identity,
    ) -> Session {
        use crate::users::Passthrough;
        let role_pool = match identity.passthrough {
            Passthrough::None => None,
            Passthrough::ReadOnly => shared.role_pools.get(&(identity.tenant, true)).cloned(),
            Passthrough::Full => shared.role_pools.get(&(identity.tenant, false)).cloned(),
        };
        // A user from the users file never runs plain SQL as the engine's
        // own role: without a tenant role, no plain SQL at all.
        let passthrough = if shared.config.users.is_some() && role_pool.is_none() {
            Passthrough::None
        } else {
            identity.passthrough
        };
        Session {
            id,
            tenant: identity.tenant,
            passthrough,
            role_pool,
            shared,
            client,
            handle,
            backend: None,
            pinned: false,
            desired,
            statements: HashMap::new(),
            statement_bytes: 0,
            unnamed: None,
            unnamed_generation: 0,
            portal_effects: HashMap::new(),
            local_portals: HashMap::new(),
            portal_bytes: 0,
            capture_rows: false,
            portal_rows: None,
            forwarded_since_sync: false,
            pushed: Vec::new(),
            autosync: false,
            queue_locks_held: false,
            pending: VecDeque::new(),
            skip_until_sync: false,
            status: b'I',
        }
    }

    pub fn client_mut(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Acquires a backend connection (if the session holds none) with the
    /// session's parameters applied, and returns its parameter statuses.
    pub async fn backend_parameters(&mut self) -> Result<Vec<(String, String)>, BackendError> {
        self.acquire(false).await?;
        let conn = self.conn_mut()?;
        let mut params: Vec<(String, String)> = conn
            .reported
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        params.sort();
        Ok(params)
    }

    pub fn release_if_idle(&mut self) {
        if self.pinned || !self.pending.is_empty() {
            return;
        }
        if let Some(conn) = self.backend.take() {
            if conn.status == b'I' {
                self.handle.set_backend(None);
                pool::release(conn);
            } else {
                self.backend = Some(conn);
            }
        }
    }

    /// Serves the session until the client leaves; then leaves the backend
    /// connection clean or closes it.
    pub async fn run(mut self) -> End {
        let end = self.serve().await;
        self.finish().await;
        end.err().unwrap_or(End::ClientGone)
    }

    async fn serve(&mut self) -> Result<(), End> {
        loop {
            let idle_limit = self
                .shared
                .config
                .idle_in_transaction_timeout
                .filter(|_| self.backend.as_ref().is_some_and(|c| c.status != b'I'));
            let read = self.client.read(self.shared.config.max_message_size);
            let next = match idle_limit {
                None => read.await,
                Some(limit) => match tokio::time::timeout(limit, read).await {
                    Ok(r) => r,
                    Err(_) => {
                        let err = ErrorFields::fatal(
                            "25P03",
                            "terminating connection due to idle-in-transaction timeout",
                        );
                        self.client.send(&err.to_message());
                        let _ = self.client.flush().await;
                        return Err(End::Fatal(err.message));
                    }
                },
            };
            let msg = match next {
                Ok(m) => m,
                Err(FrameError::TooLarge(len, max)) => {
                    // The rest of the message cannot be skipped safely: say
                    // why, then close, as PostgreSQL does.
                    let err = ErrorFields::fatal(
                        "54000",
                        format!("message of {len} bytes exceeds the limit of {max} bytes"),
                    );
                    self.client.send(&err.to_message());
                    let _ = self.client.flush().await;
                    return Err(End::Fatal(err.message));
                }
                Err(e) => return Err(e.into()),
            };
            match msg.tag {
                b'X' => return Ok(()),
                b'S' => self.sync().await?,
                b'H' => self.flush_request().await?,
                b'Q' | b'P' | b'B' | b'D' | b'E' | b'C' if self.skip_until_sync => {}
                b'Q' => self.simple_query(&msg).await?,
                b'P' => self.parse(&msg).await?,
                b'B' => self.bind(&msg).await?,
                b'D' => self.describe(&msg).await?,
                b'E' => self.execute(&msg).await?,
                b'C' => self.close(&msg).await?,
                // Copy messages outside a COPY are ignored, as PostgreSQL does.
                b'd' | b'c' | b'f' => {}
                b'F' => {
                    self.local_error(ErrorFields::error(
                        "0A000",
                        "the fastpath function call protocol is not supported by queenwire",
                    ));
                    if self.pending.is_empty() && !self.skip_until_sync {
                        self.reply_local(protocol::ready_for_query(self.status));
                    }
                    self.client.flush().await?;
                }
                other => {
                    let err = ErrorFields::fatal(
                        "08P01",
                        format!("invalid frontend message type {}", other),
                    );
                    self.client.send(&err.to_message());
                    let _ = self.client.flush().await;
                    return Err(End::Fatal(err.message));
                }
            }
        }
    }

    /// The client is gone: a connection in a transaction, pinned, or busy is
    /// closed (PostgreSQL rolls back); an idle one goes back to the pool.
    async fn finish(&mut self) {
        self.handle.set_backend(None);
        if let Some(conn) = self.backend.take() {
            let busy = !self.pending.is_empty();
            if busy {
                let key = conn.key;
                let target = self.shared.target.clone();
                tokio::spawn(async move {
                    let _ = target.cancel(key).await;
                });
            }
            if busy || self.pinned || conn.status != b'I' {
                drop(deadpool::managed::Object::take(conn));
            } else {
                pool::release(conn);
            }
        }
    }

    // ----- backend connection -----

    /// Takes a connection for the next statement, unless one is held: for a
    /// dialect statement from the engine's pool (the tenant is a parameter
    /// queenwire vouches for), for plain SQL from the user's role pool.
    async fn acquire(&mut self, dialect: bool) -> Result<(), BackendError> {
        if self.backend.is_some() {
            return Ok(());
        }
        let pool = match &self.role_pool {
            Some(p) if !dialect => p,
            _ => &self.shared.pool,
        };
        let mut conn = pool.get().await.map_err(|e| match e {
            deadpool::managed::PoolError::Backend(b) => b,
            other => BackendError::Protocol(other.to_string()),
        })?;
        if let Err(e) = conn.sync_parameters(&self.desired).await {
            pool::release(conn);
            return Err(e);
        }
        self.handle.set_backend(Some(conn.key));
        self.backend = Some(conn);
        Ok(())
    }

    fn conn_mut(&mut self) -> Result<&mut PooledConn, BackendError> {
        self.backend
            .as_mut()
            .ok_or_else(|| BackendError::Protocol("no backend connection held".into()))
    }

    /// Acquires a backend connection, telling the client if none can be had.
    async fn ensure_backend(&mut self) -> Result<bool, End> {
        self.ensure_backend_for(false).await
    }

    async fn ensure_backend_for(&mut self, dialect: bool) -> Result<bool, End> {
        match self.acquire(dialect).await {
            Ok(()) => Ok(true),
            Err(e) => {
                self.local_error(backend_error_fields(&e));
                Ok(false)
            }
        }
    }

    fn forward(&mut self, msg: &Message, expect: Expect) {
        if let Some(conn) = self.backend.as_mut() {
            conn.send(msg);
            self.pending.push_back(expect);
            self.forwarded_since_sync = true;
        }
    }

    /// Relays backend replies until every expected one has arrived.
    async fn drain(&mut self) -> Result<(), End> {
        loop {
            while let Some(Expect::Local(_)) = self.pending.front() {
                if let Some(Expect::Local(m)) = self.pending.pop_front() {
                    self.client.send(&m);
                }
            }
            if self.pending.is_empty() {
                return Ok(());
            }
            let Some(conn) = self.backend.as_mut() else {
                self.pending.clear();
                return Ok(());
            };
            if let Err(e) = conn.flush().await {
                return Err(self.backend_lost(e).await);
            }
            let msg = match conn.recv().await {
                Ok(m) => m,
                Err(e) => return Err(self.backend_lost(e).await),
            };
            self.on_backend_message(msg).await?;
            if self.client.buffered() > CLIENT_FLUSH_THRESHOLD {
                self.client.flush().await?;
            }
        }
    }

    /// Relays the replies the backend still owes for earlier messages of
    /// this pipeline (asking it to flush them), so that what the proxy
    /// answers itself comes after them, in order.
    async fn relay_earlier_replies(&mut self) -> Result<(), End> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if let Some(conn) = self.backend.as_mut() {
            conn.send(&protocol::empty(b'H'));
        }
        self.drain().await
    }

    async fn backend_lost(&mut self, e: BackendError) -> End {
        self.pending.clear();
        if let Some(conn) = self.backend.take() {
            drop(deadpool::managed::Object::take(conn));
        }
        let err = ErrorFields::fatal("08006", format!("lost the backend connection: {e}"));
        self.client.send(&err.to_message());
        let _ = self.client.flush().await;
        End::Fatal(err.message)
    }

    async fn on_backend_message(&mut self, msg: Message) -> Result<(), End> {
        match msg.tag {
            b'E' => {
                self.client.send(&msg);
                match self.pending.front() {
                    Some(Expect::Query) => {}
                    _ => {
                        // Everything up to the next Sync is skipped by the
                        // backend: those replies will never come.
                        while let Some(front) = self.pending.front() {
                            if matches!(front, Expect::Sync) {
                                break;
                            }
                            if let Some(Expect::Parse {
                                registers: Some(name),
                                ..
                            }) = self.pending.pop_front()
                            {
                                if let Some(conn) = self.backend.as_mut() {
                                    conn.prepared.remove(&name);
                                }
                            }
                        }
                        self.skip_until_sync = true;
                    }
                }
            }
            b'N' | b'A' => self.client.send(&msg),
            b'S' => {
                if let Some(conn) = self.backend.as_mut() {
                    conn.note_parameter_status(&msg);
                }
                self.client.send(&msg);
            }
            b'1' => {
                if let Some(Expect::Parse { forward, .. }) = self.pending.pop_front() {
                    if forward {
                        self.client.send(&msg);
                    }
                }
            }
            b'2' | b'3' => {
                self.pending.pop_front();
                self.client.send(&msg);
            }
            b't' => self.client.send(&msg),
            b'T' => {
                if matches!(
                    self.pending.front(),
                    Some(Expect::DescribeStatement | Expect::DescribePortal)
                ) {
                    self.pending.pop_front();
                }
                self.client.send(&msg);
            }
            b'n' => {
                self.pending.pop_front();
                self.client.send(&msg);
            }
            b'C' | b'I' | b's' => {
                if matches!(self.pending.front(), Some(Expect::Execute)) {
                    self.pending.pop_front();
                }
                self.client.send(&msg);
            }
            b'G' => {
                self.client.send(&msg);
                self.copy_in().await?;
            }
            b'Z' => {
                self.pending.pop_front();
                let status = msg.body.first().copied().unwrap_or(b'I');
                self.status = status;
                if let Some(conn) = self.backend.as_mut() {
                    conn.status = status;
                }
                if status == b'I' {
                    self.announce_pushes();
                }
                self.client.send(&msg);
            }
            // Rows, COPY OUT data and anything else: pass along.
            _ => self.client.send(&msg),
        }
        Ok(())
    }

    /// COPY FROM STDIN: the client's data goes to the backend until CopyDone
    /// or CopyFail.
    async fn copy_in(&mut self) -> Result<(), End> {
        self.client.flush().await?;
        // In the extended protocol the backend ignores a Sync that reaches
        // it during COPY, and the client sends another after CopyDone; the
        // replies queued behind this Execute will not come.
        if matches!(self.pending.front(), Some(Expect::Execute)) {
            self.pending.truncate(1);
        }
        loop {
            let msg = self
                .client
                .read(self.shared.config.max_message_size)
                .await?;
            let done = matches!(msg.tag, b'c' | b'f');
            match msg.tag {
                b'd' | b'c' | b'f' | b'H' | b'S' => {
                    let Some(conn) = self.backend.as_mut() else {
                        return Err(End::Fatal("COPY without a backend".into()));
                    };
                    conn.send(&msg);
                    if done || conn_buffer_full(conn) {
                        if let Err(e) = conn.flush().await {
                            return Err(self.backend_lost(e).await);
                        }
                    }
                }
                other => {
                    let err = ErrorFields::fatal(
                        "08P01",
                        format!("unexpected message type {} during COPY from stdin", other),
                    );
                    self.client.send(&err.to_message());
                    let _ = self.client.flush().await;
                    return Err(End::Fatal(err.message));
                }
            }
            if done {
                return Ok(());
            }
        }
    }

    // ----- replies the proxy makes itself -----

    fn reply_local(&mut self, msg: Message) {
        if self.pending.is_empty() {
            self.client.send(&msg);
        } else {
            self.pending.push_back(Expect::Local(msg));
        }
    }

    fn local_error(&mut self, err: ErrorFields) {
        self.reply_local(err.to_message());
        self.skip_until_sync = true;
    }

    // ----- simple query -----

    async fn simple_query(&mut self, msg: &Message) -> Result<(), End> {
        let sql = match frontend::query(msg) {
            Ok(s) => s,
            Err(e) => return Err(self.protocol_violation(e.to_string()).await),
        };
        let commands = rewrite::classify_script(sql);
        if self.passthrough == crate::users::Passthrough::None
            && commands
                .iter()
                .any(|(_, c)| matches!(c, Command::Passthrough(_)))
        {
            self.local_error(passthrough_refused());
            return self.finish_simple_query().await;
        }
        let all_plain = commands
            .iter()
            .all(|(_, c)| matches!(c, Command::Passthrough(_)));
        // The client's own statement name: the backend knows it under
        // another, so the proxy forgets it and answers.
        if let [(range, Command::Passthrough(_))] = commands.as_slice() {
            if let Some(name) = rewrite::passthrough::deallocated_name(&sql[range.clone()]) {
                if self.remove_statement(&name) {
                    self.reply_local(protocol::command_complete("DEALLOCATE"));
                    self.reply_local(protocol::ready_for_query(self.status));
                    return Ok(self.client.flush().await?);
                }
            }
        }
        if all_plain {
            // Forwarded whole, so PostgreSQL's implicit transaction over a
            // multi-statement message holds.
            let pins = commands
                .iter()
                .any(|(_, c)| matches!(c, Command::Passthrough(SessionEffect::Pins)));
            if !self.ensure_backend().await? {
                return self.finish_simple_query().await;
            }
            if pins {
                self.pinned = true;
            }
            if commands
                .iter()
                .any(|(_, c)| matches!(c, Command::Passthrough(SessionEffect::ForgetsPrepared)))
            {
                self.forget_prepared();
            }
            if let Some(conn) = self.backend.as_mut() {
                // A simple query destroys the unnamed statement.
                conn.unnamed_owner = None;
            }
            self.forward(msg, Expect::Query);
            self.drain().await?;
        } else {
            self.run_script(sql, &commands).await?;
        }
        self.finish_simple_query().await
    }

    async fn finish_simple_query(&mut self) -> Result<(), End> {
        if self.pending.is_empty() && self.skip_until_sync {
            // Nothing reached the backend: the proxy answers ReadyForQuery.
            self.client.send(&protocol::ready_for_query(self.status));
        }
        self.skip_until_sync = false;
        self.forwarded_since_sync = false;
        self.release_if_idle();
        Ok(self.client.flush().await?)
    }

    /// A simple-query message holding dialect statements: each statement
    /// runs in turn (plain ones as their own Query), up to the first error.
    async fn run_script(
        &mut self,
        sql: &str,
        commands: &[(std::ops::Range<usize>, Command)],
    ) -> Result<(), End> {
        for (range, command) in commands {
            let ok = match command {
                Command::Passthrough(effect) => {
                    if !self.ensure_backend().await? {
                        break;
                    }
                    match effect {
                        SessionEffect::Pins => self.pinned = true,
                        SessionEffect::ForgetsPrepared => self.forget_prepared(),
                        SessionEffect::None => {}
                    }
                    self.run_plain_statement(&sql[range.clone()]).await?
                }
                Command::Dialect(stmt) => {
                    self.autosync = true;
                    let ok = self.run_dialect(stmt, &[], &[], true).await;
                    self.autosync = false;
                    let ok = ok?;
                    self.after_autosync();
                    ok
                }
                Command::Invalid(e) => {
                    self.autosync = true;
                    let failed = self
                        .fail_statement(crate::engine::values::parse_error(e.clone()))
                        .await;
                    self.autosync = false;
                    failed?;
                    self.after_autosync();
                    false
                }
            };
            if !ok {
                break;
            }
        }
        self.skip_until_sync = false;
        self.client.send(&protocol::ready_for_query(self.status));
        Ok(())
    }

    /// One plain statement of a mixed script: its replies go to the client,
    /// except the ReadyForQuery. Returns whether it succeeded.
    async fn run_plain_statement(&mut self, sql: &str) -> Result<bool, End> {
        let Some(conn) = self.backend.as_mut() else {
            return Ok(false);
        };
        conn.unnamed_owner = None;
        conn.send(&frontend::build_query(sql));
        if let Err(e) = conn.flush().await {
            return Err(self.backend_lost(e).await);
        }
        let mut ok = true;
        loop {
            let Some(conn) = self.backend.as_mut() else {
                return Ok(false);
            };
            let msg = match conn.recv().await {
                Ok(m) => m,
                Err(e) => return Err(self.backend_lost(e).await),
            };
            match msg.tag {
                b'Z' => {
                    let status = msg.body.first().copied().unwrap_or(b'I');
                    conn.status = status;
                    self.status = status;
                    if status == b'I' {
                        self.announce_pushes();
                    }
                    return Ok(ok);
                }
                b'E' => {
                    ok = false;
                    self.client.send(&msg);
                }
                b'G' => {
                    self.client.send(&msg);
                    self.copy_in().await?;
                }
                b'S' => {
                    conn.note_parameter_status(&msg);
                    self.client.send(&msg);
                }
                _ => self.client.send(&msg),
            }
        }
    }

    /// After a statement whose calls ended with Sync (`autosync`): take the
    /// transaction status they left.
    fn after_autosync(&mut self) {
        self.forwarded_since_sync = false;
        if let Some(status) = self.backend.as_ref().map(|c| c.status) {
            self.status = status;
            if status == b'I' {
                self.announce_pushes();
            }
        }
    }

    /// Ends the backend's current extended-protocol exchange (the proxy's
    /// own), taking its transaction status.
    async fn sync_backend(&mut self) -> Result<(), End> {
        let Some(conn) = self.backend.as_mut() else {
            return Ok(());
        };
        match conn.sync().await {
            Ok(status) => {
                self.forwarded_since_sync = false;
                self.status = status;
                if status == b'I' {
                    self.announce_pushes();
                }
                Ok(())
            }
            Err(e) => Err(self.backend_lost(e).await),
        }
    }

    /// The client deallocates every statement: so does the proxy, on the
    /// connection and in the session.
    fn forget_prepared(&mut self) {
        self.statements.clear();
        self.statement_bytes = 0;
        if let Some(conn) = self.backend.as_mut() {
            conn.forget_prepared();
        }
    }

    fn announce_pushes(&mut self) {
        for key in self.pushed.drain(..) {
            self.shared.engine.announcer.pushed(&key);
        }
    }

    // ----- dialect statements -----

    /// Runs one dialect statement on the session's backend connection and
    /// sends its rows (with a RowDescription first when `describe`).
    /// Returns whether it succeeded; on failure the error has been sent and
    /// the backend has failed the statement too, so a transaction block
    /// around it is aborted exactly as for plain SQL.
    async fn run_dialect(
        &mut self,
        stmt: &Arc<Statement>,
        params: &[Option<String>],
        result_formats: &[i16],
        describe: bool,
    ) -> Result<bool, End> {
        // Earlier replies of this pipeline go first.
        self.relay_earlier_replies().await?;
        if self.skip_until_sync {
            return Ok(false);
        }
        if let Statement::Push(push) = stmt.as_ref() {
            if self.can_fuse() {
                return self
                    .fused_push(stmt, push, params, result_formats, describe)
                    .await;
            }
        }
        // A user of the users file: outside its transactions, a dialect
        // statement runs on a connection of the engine's pool, committed
        // before it is answered, and that connection goes back at once. So
        // no plain SQL of the user can ever run on an engine connection
        // (the two never share one), and a read-only role's pinned session
        // can still POP and ACK. Inside the user's transaction (a block, or
        // a pipeline's implicit one) it runs there, as the user's role,
        // through the guarded entry points.
        let own_transaction = self.forwarded_since_sync
            || !self.pending.is_empty()
            || self.backend.as_ref().is_some_and(|c| c.status != b'I');
        if self.role_pool.is_none() || own_transaction {
            return self
                .run_dialect_on_backend(stmt, params, result_formats, describe)
                .await;
        }
        let held = self.backend.take();
        let autosync = std::mem::replace(&mut self.autosync, true);
        // The pin belongs to the held connection; the engine one goes back
        // to the pool even while a POP … WAIT waits.
        let pinned = std::mem::replace(&mut self.pinned, false);
        let ran = self
            .run_dialect_on_backend(stmt, params, result_formats, describe)
            .await;
        self.autosync = autosync;
        self.pinned = pinned;
        if let Some(engine_conn) = self.backend.take() {
            // Committed (its call ended with Sync): clean, or closed.
            pool::release(engine_conn);
        }
        self.forwarded_since_sync = false;
        self.handle.set_backend(held.as_ref().map(|c| c.key));
        self.backend = held;
        if ran.is_ok() {
            self.announce_pushes();
        }
        ran
    }

    async fn run_dialect_on_backend(
        &mut self,
        stmt: &Arc<Statement>,
        params: &[Option<String>],
        result_formats: &[i16],
        describe: bool,
    ) -> Result<bool, End> {
        if !self.ensure_backend_for(true).await? {
            return Ok(false);
        }
        let in_block = self.backend.as_ref().is_some_and(|c| c.status != b'I');
        if !in_block {
            self.queue_locks_held = false;
        }
        if self.queue_locks_held && takes_kv_or_timer_locks(stmt) {
            let mut err = ErrorFields::error(
                "25000",
                "KV writes and timer statements must come before queue statements in a transaction block",
            );
            err.hint = Some(
                "queenwire takes locks in one global order (KV, timers, then queues) so that transactions never deadlock; move this statement up"
                    .into(),
            );
            self.fail_statement(err).await?;
            return Ok(false);
        }
        let result = match stmt.as_ref() {
            Statement::Pop(pop) => {
                match queues::plan_pop(pop, &crate::engine::values::Params(params)) {
                    Ok(plan) => self.pop(&plan).await?,
                    Err(e) => Err(ExecError::Statement(e)),
                }
            }
            _ => {
                let engine = self.shared.engine.clone();
                let autosync = self.autosync;
                let Some(conn) = self.backend.as_mut() else {
                    return Ok(false);
                };
                conn.autosync = autosync;
                engine.execute(conn, stmt, params, self.tenant).await
            }
        };
        // The statement's work is in the backend's current transaction: a
        // later POP of this pipeline must not end it early to park.
        self.forwarded_since_sync = true;
        if in_block && takes_queue_locks(stmt) {
            self.queue_locks_held = true;
        }
        match result {
            Ok(outcome) => {
                let Outcome { rows, tag, pushed } = outcome;
                self.send_rows(stmt.columns(), rows, &tag, result_formats, describe);
                if let Some(key) = pushed {
                    if !self.pushed.contains(&key) {
                        self.pushed.push(key);
                    }
                }
                Ok(true)
            }
            Err(ExecError::Statement(fields)) => {
                self.fail_statement(fields).await?;
                Ok(false)
            }
            Err(ExecError::Backend(BackendError::Server(fields))) => {
                self.client.send(&fields.to_message());
                self.skip_until_sync = true;
                Ok(false)
            }
            Err(ExecError::Backend(e)) => Err(self.backend_lost(e).await),
        }
    }

    /// Outside a transaction block, with nothing of this pipeline on a
    /// backend connection, a PUSH may be fused with other sessions' pushes.
    fn can_fuse(&self) -> bool {
        !self.pinned
            && self.pending.is_empty()
            && !self.forwarded_since_sync
            && self.backend.as_ref().is_none_or(|c| c.status == b'I')
    }

    async fn fused_push(
        &mut self,
        stmt: &Arc<Statement>,
        push: &crate::rewrite::dialect::push::Push,
        params: &[Option<String>],
        result_formats: &[i16],
        describe: bool,
    ) -> Result<bool, End> {
        let engine = self.shared.engine.clone();
        let prep = match queues::prepare_push(
            push,
            &crate::engine::values::Params(params),
            &engine.limits,
        ) {
            Ok(p) => p,
            Err(e) => {
                self.local_error(e);
                return Ok(false);
            }
        };
        match engine.fuser.push(prep, self.tenant).await {
            Ok(prep) => {
                let rows = prep.rows();
                let tag = stmt.command_tag(rows.len());
                self.send_rows(stmt.columns(), rows, &tag, result_formats, describe);
                Ok(true)
            }
            Err(ExecError::Statement(fields))
            | Err(ExecError::Backend(BackendError::Server(fields))) => {
                self.local_error(fields);
                Ok(false)
            }
            // The writer's connection failed, not this session's.
            Err(ExecError::Backend(e)) => {
                self.local_error(backend_error_fields(&e));
                Ok(false)
            }
        }
    }

    /// POP, waiting up to its WAIT for messages: parked without a backend
    /// connection when outside a transaction block, woken by a push to the
    /// queue (from this or another queenwire), by a slow poll as a safety
    /// net, or by a cancel request.
    async fn pop(&mut self, plan: &queues::PopPlan) -> Result<Result<Outcome, ExecError>, End> {
        let engine = self.shared.engine.clone();
        let deadline = plan.wait.map(|w| Instant::now() + w);
        let key = crate::engine::wake::queue_key(self.tenant, &plan.queue);
        let notify = engine.announcer.waiters.notify_for(&key);
        let mut poll = WAIT_POLL_FIRST;
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if !self.ensure_backend_for(true).await? {
                return Ok(Err(ExecError::Statement(ErrorFields::error(
                    "08006",
                    "no backend connection for POP",
                ))));
            }
            let autosync = self.autosync;
            let Some(conn) = self.backend.as_mut() else {
                return Ok(Err(ExecError::Statement(ErrorFields::error(
                    "08006",
                    "no backend",
                ))));
            };
            conn.autosync = autosync;
            let rows = match queues::pop_once(conn, plan, &engine.receipts, self.tenant).await {
                Ok(rows) => rows,
                Err(e) => return Ok(Err(e)),
            };
            let now = Instant::now();
            let remaining = deadline
                .map(|d| d.saturating_duration_since(now))
                .unwrap_or_default();
            if !rows.is_empty() || remaining.is_zero() {
                let tag = format!("SELECT {}", rows.len());
                return Ok(Ok(Outcome {
                    rows,
                    tag,
                    pushed: None,
                }));
            }
            // Park. Outside a transaction block, and when this pipeline has
            // nothing else on the backend, the connection goes back to the
            // pool for the wait.
            let in_block = self.backend.as_ref().is_some_and(|c| c.status != b'I');
            if !in_block && !self.pinned && !self.forwarded_since_sync {
                if !self.autosync {
                    self.sync_backend().await?;
                }
                self.release_if_idle();
            }
            let nap = poll.min(remaining);
            let cancelled = self.handle.cancel.notified();
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep(nap) => { poll = (poll * 2).min(WAIT_POLL_MAX); }
                _ = cancelled => {
                    return Ok(Err(ExecError::Statement(ErrorFields::error(
                        "57014",
                        "canceling statement due to user request",
                    ))));
                }
            }
        }
    }

    fn send_rows(
        &mut self,
        columns: &[Column],
        rows: Vec<Vec<Cell>>,
        tag: &str,
        formats: &[i16],
        describe: bool,
    ) {
        if describe && !columns.is_empty() {
            self.client.send(&row_description(columns, formats));
        }
        if self.capture_rows {
            // A portal's: its Executes send them (`send_portal_part`).
            self.portal_rows = Some(rows.into());
            return;
        }
        self.send_data_rows(rows.iter(), formats);
        self.client.send(&protocol::command_complete(tag));
    }

    /// One Execute of a dialect portal whose statement ran: at most `limit`
    /// rows (0 = all) of those not yet returned, then PortalSuspended while
    /// some are left, else CommandComplete counting this Execute's rows, as
    /// a PostgreSQL portal answers.
    async fn send_portal_part(&mut self, portal: &str, limit: usize) -> Result<(), End> {
        if self.skip_until_sync {
            return Ok(());
        }
        self.relay_earlier_replies().await?;
        let Some(local) = self.local_portals.get_mut(portal) else {
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
        let batch: Vec<Vec<Cell>> = rows.drain(..take).collect();
        let done = rows.is_empty();
        let tag = local.statement.command_tag(take);
        let formats = local.result_formats.clone();
        self.send_data_rows(batch.iter(), &formats);
        if done {
            self.client.send(&protocol::command_complete(&tag));
        } else {
            self.client.send(&protocol::empty(b's'));
        }
        Ok(())
    }

    fn send_data_rows<'r>(&mut self, rows: impl Iterator<Item = &'r Vec<Cell>>, formats: &[i16]) {
        for row in rows {
            let encoded: Vec<Option<Vec<u8>>> = row
                .iter()
                .enumerate()
                .map(|(i, cell)| encode_cell(cell, result_format(formats, i)))
                .collect();
            self.client
                .send(&protocol::data_row(encoded.iter().map(|v| v.as_deref())));
        }
    }

    /// Reports an error the proxy found, after making the backend fail the
    /// statement as well (so a surrounding transaction is aborted, as
    /// PostgreSQL would). Without a backend connection there is no
    /// transaction to abort.
    async fn fail_statement(&mut self, fields: ErrorFields) -> Result<(), End> {
        let autosync = self.autosync;
        if let Some(conn) = self.backend.as_mut() {
            conn.autosync = autosync;
            match conn
                .call(&crate::engine::RAISE_CALL, &[&fields.code, &fields.message])
                .await
            {
                Ok(_) | Err(BackendError::Server(_)) => {}
                Err(e) => return Err(self.backend_lost(e).await),
            }
        }
        self.local_error(fields);
        Ok(())
    }

    // ----- extended query -----

    async fn parse(&mut self, msg: &Message) -> Result<(), End> {
        let p = match frontend::parse(msg) {
            Ok(p) => p,
            Err(e) => return Err(self.protocol_violation(e.to_string()).await),
        };
        if !p.name.is_empty() && self.statements.contains_key(p.name) {
            self.local_error(ErrorFields::error(
                "42P05",
                format!("prepared statement \"{}\" already exists", p.name),
            ));
            return Ok(());
        }
        if !p.name.is_empty()
            && (self.statements.len() >= MAX_SESSION_STATEMENTS
                || self.statement_bytes + p.query.len() > MAX_SESSION_STATEMENT_BYTES)
        {
            self.local_error(session_limit(
                "prepared statements",
                MAX_SESSION_STATEMENTS,
                MAX_SESSION_STATEMENT_BYTES,
                "of text",
                "close statements no longer needed (Close, or DEALLOCATE)",
            ));
            return Ok(());
        }
        let query: Arc<str> = Arc::from(p.query);
        let param_types: Arc<[u32]> = Arc::from(p.param_types.as_slice());
        let effect = match rewrite::classify(p.query) {
            Command::Passthrough(_) if self.passthrough == crate::users::Passthrough::None => {
                self.local_error(passthrough_refused());
                return Ok(());
            }
            Command::Passthrough(effect) => effect,
            Command::Dialect(stmt) => {
                let prepared = Prepared {
                    query,
                    param_types,
                    effect: SessionEffect::None,
                    global: None,
                    dialect: Some(stmt),
                };
                if p.name.is_empty() {
                    self.unnamed = Some(prepared);
                    self.unnamed_generation += 1;
                } else {
                    self.insert_statement(p.name, prepared);
                }
                self.reply_local(protocol::empty(b'1'));
                return Ok(());
            }
            Command::Invalid(e) => {
                self.relay_earlier_replies().await?;
                if !self.skip_until_sync {
                    self.fail_statement(crate::engine::values::parse_error(e))
                        .await?;
                }
                return Ok(());
            }
        };
        if !self.ensure_backend().await? {
            return Ok(());
        }
        if p.name.is_empty() {
            self.unnamed_generation += 1;
            self.unnamed = Some(Prepared {
                query,
                param_types,
                effect,
                global: None,
                dialect: None,
            });
            let owner = (self.id, self.unnamed_generation);
            if let Some(conn) = self.backend.as_mut() {
                conn.unnamed_owner = Some(owner);
            }
            self.forward(
                msg,
                Expect::Parse {
                    forward: true,
                    registers: None,
                },
            );
        } else {
            let global = self.shared.statement_names.name_for(&query, &param_types);
            let prepared = Prepared {
                query,
                param_types,
                effect,
                global: Some(global.clone()),
                dialect: None,
            };
            self.insert_statement(p.name, prepared.clone());
            let present = self
                .backend
                .as_ref()
                .is_some_and(|c| c.prepared.contains(&global));
            if present {
                self.reply_local(protocol::empty(b'1'));
            } else {
                self.send_parse(&prepared, true);
            }
        }
        Ok(())
    }

    /// Parses `prepared` under its global name on the held connection.
    fn send_parse(&mut self, prepared: &Prepared, forward: bool) {
        let name: &str = prepared.global.as_deref().unwrap_or("");
        let msg = frontend::build_parse(name, &prepared.query, &prepared.param_types);
        if let Some(conn) = self.backend.as_mut() {
            if let Some(global) = &prepared.global {
                conn.prepared.insert(global.clone());
            }
        }
        self.forward(
            &msg,
            Expect::Parse {
                forward,
                registers: prepared.global.clone(),
            },
        );
    }

    /// Makes sure the held connection knows the client's statement `name`,
    /// re-parsing it there if it was prepared on another connection; returns
    /// the name to use on the backend.
    fn ensure_statement(&mut self, name: &str) -> Option<(Arc<str>, SessionEffect)> {
        if name.is_empty() {
            let prepared = self.unnamed.clone()?;
            let owner = (self.id, self.unnamed_generation);
            let current = self.backend.as_ref().and_then(|c| c.unnamed_owner);
            if current != Some(owner) {
                self.send_parse(&prepared, false);
                if let Some(conn) = self.backend.as_mut() {
                    conn.unnamed_owner = Some(owner);
                }
            }
            return Some((Arc::from(""), prepared.effect));
        }
        let prepared = self.statements.get(name)?.clone();
        let global = prepared.global.clone()?;
        let present = self
            .backend
            .as_ref()
            .is_some_and(|c| c.prepared.contains(&global));
        if !present {
            self.send_parse(&prepared, false);
        }
        Some((global, prepared.effect))
    }

    fn insert_statement(&mut self, name: &str, prepared: Prepared) {
        self.statement_bytes += prepared.query.len();
        if let Some(old) = self.statements.insert(name.to_string(), prepared) {
            self.statement_bytes -= old.query.len();
        }
    }

    /// Forgets the dialect portal `name`; whether it existed.
    fn remove_local_portal(&mut self, name: &str) -> bool {
        match self.local_portals.remove(name) {
            Some(old) => {
                self.portal_bytes -= old.bytes();
                true
            }
            None => false,
        }
    }

    /// Forgets the client's statement `name`; whether it existed.
    fn remove_statement(&mut self, name: &str) -> bool {
        match self.statements.remove(name) {
            Some(old) => {
                self.statement_bytes -= old.query.len();
                true
            }
            None => false,
        }
    }

    fn lookup(&self, name: &str) -> Option<&Prepared> {
        if name.is_empty() {
            self.unnamed.as_ref()
        } else {
            self.statements.get(name)
        }
    }

    fn missing_statement(&mut self, name: &str) {
        self.local_error(ErrorFields::error(
            "26000",
            format!("prepared statement \"{name}\" does not exist"),
        ));
    }

    async fn bind(&mut self, msg: &Message) -> Result<(), End> {
        let b = match frontend::bind(msg) {
            Ok(b) => b,
            Err(e) => return Err(self.protocol_violation(e.to_string()).await),
        };
        let Some(prepared) = self.lookup(b.statement).cloned() else {
            self.missing_statement(b.statement);
            return Ok(());
        };
        if let Some(stmt) = prepared.dialect {
            let described = stmt.param_types();
            let types: Vec<u32> = (0..b.params.len())
                .map(|i| match prepared.param_types.get(i) {
                    Some(&t) if t != 0 => t,
                    _ => described
                        .get(i)
                        .copied()
                        .unwrap_or(crate::rewrite::dialect::oid::TEXT),
                })
                .collect();
            match bind_params_as_text(&b.params, &b.param_formats, &types) {
                Ok(params) => {
                    let portal = LocalPortal {
                        statement: stmt,
                        params,
                        result_formats: b.result_formats.clone(),
                        unreturned: None,
                    };
                    self.remove_local_portal(b.portal);
                    if self.local_portals.len() >= MAX_SESSION_PORTALS
                        || self.portal_bytes + portal.bytes() > MAX_SESSION_PORTAL_BYTES
                    {
                        self.local_error(session_limit(
                            "open queenwire portals",
                            MAX_SESSION_PORTALS,
                            MAX_SESSION_PORTAL_BYTES,
                            "of parameters",
                            "send Sync, or Close portals no longer needed",
                        ));
                        return Ok(());
                    }
                    self.portal_bytes += portal.bytes();
                    self.local_portals.insert(b.portal.to_string(), portal);
                    self.reply_local(protocol::empty(b'2'));
                }
                Err(e) => self.local_error(e),
            }
            return Ok(());
        }
        self.remove_local_portal(b.portal);
        if !self.ensure_backend().await? {
            return Ok(());
        }
        let Some((backend_name, effect)) = self.ensure_statement(b.statement) else {
            self.missing_statement(b.statement);
            return Ok(());
        };
        self.portal_effects.insert(b.portal.to_string(), effect);
        if *backend_name == *b.statement {
            self.forward(msg, Expect::Bind);
        } else {
            let rewritten = frontend::rebind(msg, &b, &backend_name);
            self.forward(&rewritten, Expect::Bind);
        }
        Ok(())
    }

    async fn describe(&mut self, msg: &Message) -> Result<(), End> {
        let (kind, name) = match frontend::target(msg) {
            Ok(t) => t,
            Err(e) => return Err(self.protocol_violation(e.to_string()).await),
        };
        if kind == b'S' {
            let Some(prepared) = self.lookup(name).cloned() else {
                self.missing_statement(name);
                return Ok(());
            };
            if let Some(stmt) = &prepared.dialect {
                // Worked out once: a statement may name $65535.
                let described = stmt.param_types();
                let count = described.len().max(prepared.param_types.len());
                let types: Vec<u32> = (0..count)
                    .map(|i| match prepared.param_types.get(i) {
                        Some(&t) if t != 0 => t,
                        _ => described
                            .get(i)
                            .copied()
                            .unwrap_or(crate::rewrite::dialect::oid::TEXT),
                    })
                    .collect();
                self.reply_local(protocol::parameter_description(&types));
                self.reply_local(describe_columns(stmt.columns(), &[]));
                return Ok(());
            }
            if !self.ensure_backend().await? {
                return Ok(());
            }
            let Some((backend_name, _)) = self.ensure_statement(name) else {
                self.missing_statement(name);
                return Ok(());
            };
            let m = frontend::build_target(b'D', b'S', &backend_name);
            self.forward(&m, Expect::DescribeStatement);
        } else if let Some(portal) = self.local_portals.get(name) {
            let reply = describe_columns(portal.statement.columns(), &portal.result_formats);
            self.reply_local(reply);
        } else {
            if self.backend.is_none() {
                self.missing_portal(name);
                return Ok(());
            }
            self.forward(msg, Expect::DescribePortal);
        }
        Ok(())
    }

    fn missing_portal(&mut self, name: &str) {
        self.local_error(ErrorFields::error(
            "34000",
            format!("portal \"{name}\" does not exist"),
        ));
    }

    async fn execute(&mut self, msg: &Message) -> Result<(), End> {
        let (portal, max_rows) = match frontend::execute(msg) {
            Ok(e) => e,
            Err(e) => return Err(self.protocol_violation(e.to_string()).await),
        };
        let limit = usize::try_from(max_rows).unwrap_or(0);
        if let Some(local) = self.local_portals.get(portal) {
            if local.unreturned.is_none() {
                // The statement runs once, at the first Execute, as one call;
                // its rows go out `limit` at a time, and a completed portal
                // returns none (it never runs again).
                let stmt = local.statement.clone();
                let params = local.params.clone();
                let formats = local.result_formats.clone();
                self.capture_rows = true;
                let ran = self.run_dialect(&stmt, &params, &formats, false).await;
                self.capture_rows = false;
                let rows = self.portal_rows.take();
                if !ran? {
                    return Ok(());
                }
                if let (Some(rows), Some(local)) = (rows, self.local_portals.get_mut(portal)) {
                    local.unreturned = Some(rows);
                }
            }
            return self.send_portal_part(portal, limit).await;
        }
        if self.backend.is_none() {
            self.missing_portal(portal);
            return Ok(());
        }
        match self.portal_effects.get(portal) {
            Some(SessionEffect::Pins) => self.pinned = true,
            Some(SessionEffect::ForgetsPrepared) => self.forget_prepared(),
            _ => {}
        }
        self.forward(msg, Expect::Execute);
        Ok(())
    }

    async fn close(&mut self, msg: &Message) -> Result<(), End> {
        let (kind, name) = match frontend::target(msg) {
            Ok(t) => t,
            Err(e) => return Err(self.protocol_violation(e.to_string()).await),
        };
        if kind == b'S' {
            // The backend keeps the statement under its global name, for
            // whoever prepares the same text next.
            if name.is_empty() {
                self.unnamed = None;
            } else {
                self.remove_statement(name);
            }
            self.reply_local(protocol::empty(b'3'));
        } else if self.remove_local_portal(name) || self.backend.is_none() {
            self.reply_local(protocol::empty(b'3'));
        } else {
            self.portal_effects.remove(name);
            self.forward(msg, Expect::Close);
        }
        Ok(())
    }

    async fn flush_request(&mut self) -> Result<(), End> {
        self.relay_earlier_replies().await?;
        Ok(self.client.flush().await?)
    }

    async fn sync(&mut self) -> Result<(), End> {
        if self.backend.is_some() {
            self.forward(&protocol::empty(b'S'), Expect::Sync);
            self.drain().await?;
        } else {
            self.reply_local(protocol::ready_for_query(self.status));
        }
        self.skip_until_sync = false;
        self.forwarded_since_sync = false;
        // The unnamed portal does not outlive its transaction.
        // Nor do the backend's portals: forget their effects.
        if self.status == b'I' {
            self.local_portals.clear();
            self.portal_bytes = 0;
            self.portal_effects.clear();
        }
        self.release_if_idle();
        Ok(self.client.flush().await?)
    }

    async fn protocol_violation(&mut self, what: String) -> End {
        let err = ErrorFields::fatal("08P01", what);
        self.client.send(&err.to_message());
        let _ = self.client.flush().await;
        End::Fatal(err.message)
    }
}

/// `54000` for a per-session bound of the proxy's memory.
fn session_limit(what: &str, count: usize, bytes: usize, of: &str, hint: &str) -> ErrorFields {
    let mut err = ErrorFields::error(
        "54000",
        format!(
            "too many {what} in this session (at most {count}, {} MiB {of})",
            bytes >> 20
        ),
    );
    err.hint = Some(hint.into());
    err
}

/// A user whose policy is `none` may run dialect statements only.
fn passthrough_refused() -> ErrorFields {
    ErrorFields::error(
        "42501",
        "plain SQL is not allowed for this user (passthrough policy none): only queenwire statements",
    )
}

/// KV writes and timer statements lock `queen.kv` / `queen.log_timers` rows.
fn takes_kv_or_timer_locks(stmt: &Statement) -> bool {
    use crate::rewrite::dialect::kv::KvStatement;
    matches!(
        stmt,
        Statement::Kv(KvStatement::Put(_) | KvStatement::Incr(_) | KvStatement::Delete(_))
            | Statement::Schedule(_)
            | Statement::CancelSchedule(_)
    )
}

/// Statements that lock queue, partition or consumer rows.
fn takes_queue_locks(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::Push(_)
            | Statement::Pop(_)
            | Statement::Ack(_)
            | Statement::Renew(_)
            | Statement::CreateQueue(_)
            | Statement::AlterQueue(_)
            | Statement::DropQueue(_)
            | Statement::SeekGroup(_)
            | Statement::DropGroup(_)
    )
}

fn row_description(columns: &[Column], formats: &[i16]) -> Message {
    let fields: Vec<FieldDescription<'_>> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| FieldDescription {
            name: c.name,
            type_oid: c.type_oid,
            type_size: type_size(c.type_oid),
            format: result_format(formats, i),
        })
        .collect();
    protocol::row_description(&fields)
}

/// RowDescription, or NoData for a statement without columns.
fn describe_columns(columns: &[Column], formats: &[i16]) -> Message {
    if columns.is_empty() {
        protocol::empty(b'n')
    } else {
        row_description(columns, formats)
    }
}

fn type_size(oid: u32) -> i16 {
    match oid {
        16 => 1,
        23 => 4,
        20 | 1184 => 8,
        2950 => 16,
        _ => -1,
    }
}

fn encode_cell(cell: &Cell, format: i16) -> Option<Vec<u8>> {
    if format == 1 {
        cell.to_binary()
    } else {
        cell.to_text().map(String::into_bytes)
    }
}

fn conn_buffer_full(conn: &PooledConn) -> bool {
    conn.unflushed_len() > CLIENT_FLUSH_THRESHOLD
}

/// The error a client sees when the backend could not serve it.
pub fn backend_error_fields(e: &BackendError) -> ErrorFields {
    match e {
        BackendError::Server(fields) => fields.clone(),
        other => ErrorFields::error("08006", format!("backend unavailable: {other}")),
    }
}
