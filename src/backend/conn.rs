//! A raw message-level connection to PostgreSQL.
//!
//! Passthrough traffic is forwarded through it byte for byte; the proxy's own
//! statements use the small helpers at the bottom (parameter sync, cleanup)
//! and `super::call` (the engine's `queen.*` calls). tokio-postgres cannot
//! serve here: it re-encodes every message and always asks for binary
//! results.

use crate::protocol::tags::backend as tag;
use crate::protocol::{read_message, FrameError, Message, SqlError, TxStatus};
use bytes::BytesMut;
use postgres_protocol::message::frontend as pp;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Largest message accepted from the backend (PostgreSQL's own limit on a
/// field is 1 GB).
const MAX_BACKEND_MESSAGE: usize = 1 << 30;

pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Stream for T {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendKey {
    pub pid: i32,
    pub secret: i32,
    /// Which of the target's addresses the connection is on.
    pub host: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The backend ended the connection (end of stream).
    #[error("backend closed the connection")]
    Closed,
    /// The backend sent what the protocol does not allow here.
    #[error("backend protocol: {0}")]
    Protocol(String),
    #[error("backend configuration: {0}")]
    Config(String),
    /// A call's reply came whole but a row of it is not what the call
    /// declares (a procedure changed under the proxy): the connection is
    /// fine, the statement cannot be answered.
    #[error(transparent)]
    Decode(#[from] crate::calls::DecodeError),
    /// Authenticating with the backend failed on our side: a method or
    /// SASL mechanism we do not speak, or a SCRAM exchange that does not
    /// check out. (A refused password is the backend's `Server` error.)
    #[error("backend authentication: {0}")]
    Auth(String),
    /// The pool had no connection to give within its timeout.
    #[error("backend pool: timed out {}", pool_timeout_stage(.0))]
    PoolTimeout(TimeoutType),
    /// The pool was closed.
    #[error("backend pool is closed")]
    PoolClosed,
    /// PostgreSQL answered with an ErrorResponse.
    #[error("{}", .0.message)]
    Server(SqlError),
    /// The connection broke (the cause inside) after a request reached
    /// PostgreSQL and before its reply ended with ReadyForQuery: whatever
    /// the request asked may or may not have happened. Only `flush` and
    /// `recv` make it.
    #[error("the outcome is unknown: {0}")]
    OutcomeUnknown(Box<BackendError>),
}

impl BackendError {
    /// Whether a request may have taken effect although its reply is lost.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, BackendError::OutcomeUnknown(_))
    }

    /// Why the connection failed, without the outcome of what was on it.
    pub fn cause(&self) -> &BackendError {
        match self {
            BackendError::OutcomeUnknown(cause) => cause,
            other => other,
        }
    }

    /// The same failure for a caller whose own request was never sent on
    /// that connection (the proxy's housekeeping round trip broke first).
    pub fn into_cause(self) -> BackendError {
        match self {
            BackendError::OutcomeUnknown(cause) => *cause,
            other => other,
        }
    }
}

/// Which step of a pool checkout ran out of time (`super::pool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutType {
    /// Every connection stayed held by others.
    Wait,
    /// Opening a new connection.
    Create,
}

fn pool_timeout_stage(stage: &TimeoutType) -> &'static str {
    match stage {
        TimeoutType::Wait => "waiting for a free connection",
        TimeoutType::Create => "connecting",
    }
}

impl From<FrameError> for BackendError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Io(io) => BackendError::Io(io),
            FrameError::Closed => BackendError::Closed,
            other => BackendError::Protocol(other.to_string()),
        }
    }
}

/// Who last parsed the backend's unnamed statement: (session id, generation).
pub type UnnamedOwner = (u64, u64);

pub struct BackendConn {
    stream: Box<dyn Stream>,
    read_buf: BytesMut,
    write_buf: BytesMut,
    /// Where a cancel request for this connection goes (`connect.rs`).
    pub(super) key: BackendKey,
    /// Values the backend reported with ParameterStatus.
    pub(super) reported: HashMap<String, String>,
    /// Session parameters this connection was set to on behalf of clients
    /// (name → value).
    applied: BTreeMap<String, String>,
    /// Proxy-global prepared statement names present on this connection.
    prepared: HashSet<Arc<str>>,
    /// Who last parsed the unnamed statement here; `None` once a simple
    /// query or one of the proxy's own calls replaced it.
    pub(super) unnamed_owner: Option<UnnamedOwner>,
    /// The proxy's own statements already prepared on this connection
    /// (`super::call`).
    pub(super) internal_prepared: HashSet<&'static str>,
    /// A connection client SQL runs on, with the prefix its clients'
    /// protocol-level statements are named with: the proxy's own calls here
    /// (inside a client's transaction block) are prepared under that
    /// prefix, which no client's SQL can name (`StatementNames`), so a
    /// client's `PREPARE` never collides with them.
    pub(super) client_facing: Option<Arc<str>>,
    /// Transaction status from the last ReadyForQuery: written by `recv`,
    /// which reads every message of the connection, and by nothing else
    /// but [`BackendConn::begin_sent_ahead`].
    status: TxStatus,
    /// Set when the connection may hold state the pool cannot vouch for
    /// (protocol confusion, session state): it is then closed, not reused.
    pub(super) broken: bool,
    /// Bytes reached the socket since the last ReadyForQuery: if the
    /// connection breaks now, what they asked has an unknown outcome.
    awaiting_reply: bool,
    /// A client's BEGIN the session answered ahead and handed over
    /// ([`BackendConn::take_answered_begin`]): `recv` reads its replies
    /// before any other message.
    answered_begin: bool,
    /// Bytes of that BEGIN still at the front of `write_buf`.
    begin_bytes: usize,
    /// Something was sent behind it: once its replies are read, a reply is
    /// still owed.
    sent_behind_begin: bool,
}

impl BackendConn {
    /// A connection over `stream` before its startup exchange
    /// (`connect.rs`).
    pub(super) fn new(stream: Box<dyn Stream>) -> BackendConn {
        BackendConn {
            stream,
            read_buf: BytesMut::with_capacity(8192),
            write_buf: BytesMut::with_capacity(8192),
            key: BackendKey {
                pid: 0,
                secret: 0,
                host: 0,
            },
            reported: HashMap::new(),
            applied: BTreeMap::new(),
            prepared: HashSet::new(),
            unnamed_owner: None,
            internal_prepared: HashSet::new(),
            client_facing: None,
            status: TxStatus::Idle,
            broken: false,
            awaiting_reply: false,
            answered_begin: false,
            begin_bytes: 0,
            sent_behind_begin: false,
        }
    }

    /// Where a cancel request for this connection's running query goes.
    pub fn key(&self) -> BackendKey {
        self.key
    }

    /// The values the backend reported with ParameterStatus (for a client's
    /// greeting).
    pub fn reported_parameters(&self) -> &HashMap<String, String> {
        &self.reported
    }

    /// Client SQL runs on this connection: the proxy's own calls here are
    /// prepared under `prefix` (`call.rs`). Those prepared before under
    /// their own names are prepared again under it.
    pub fn mark_client_facing(&mut self, prefix: &Arc<str>) {
        if self.client_facing.is_none() {
            self.internal_prepared.clear();
            self.client_facing = Some(prefix.clone());
        }
    }

    /// The connection may hold state the pool cannot vouch for (a
    /// transaction that did not end as expected): it is closed when given
    /// back, not reused.
    pub fn do_not_reuse(&mut self) {
        self.broken = true;
    }

    /// Whether the proxy-global statement `name` is prepared here.
    pub fn has_statement(&self, name: &str) -> bool {
        self.prepared.contains(name)
    }

    /// The proxy-global statement `name` is being parsed here.
    pub fn statement_parsed(&mut self, name: Arc<str>) {
        self.prepared.insert(name);
    }

    /// A Parse of `name` failed here: the statement was never created.
    pub fn statement_not_created(&mut self, name: &str) {
        self.prepared.remove(name);
    }

    /// Who last parsed the unnamed statement here.
    pub fn unnamed_owner(&self) -> Option<UnnamedOwner> {
        self.unnamed_owner
    }

    /// `owner` parsed the unnamed statement here.
    pub fn unnamed_parsed_by(&mut self, owner: UnnamedOwner) {
        self.unnamed_owner = Some(owner);
    }

    /// A simple query is going out: it destroys the unnamed statement.
    pub fn unnamed_destroyed(&mut self) {
        self.unnamed_owner = None;
    }

    /// After a client's `DEALLOCATE ALL` / `DISCARD ALL`: nothing the proxy
    /// prepared here survives, so it will be prepared again; and the
    /// connection goes out of the pool afterwards, its state unknown.
    pub fn forget_prepared(&mut self) {
        self.prepared.clear();
        self.internal_prepared.clear();
        self.unnamed_owner = None;
        self.broken = true;
    }

    /// Bounds what clients' statements cost a backend connection: past
    /// `max` prepared statements, an idle connection deallocates them all
    /// (one round trip); each is prepared again where it is next used.
    pub async fn trim_prepared(&mut self, max: usize) -> Result<(), BackendError> {
        if self.prepared.len() + self.internal_prepared.len() <= max {
            return Ok(());
        }
        self.simple_query_quiet("DEALLOCATE ALL").await?;
        self.prepared.clear();
        self.internal_prepared.clear();
        Ok(())
    }

    pub fn note_parameter_status(&mut self, msg: &Message) {
        let mut r = msg.reader();
        if let (Ok(name), Ok(value)) = (r.cstr(), r.cstr()) {
            self.reported.insert(name.to_string(), value.to_string());
        }
    }

    /// Queues a message; nothing is written until `flush`.
    pub fn send(&mut self, msg: &Message) {
        msg.encode(&mut self.write_buf);
    }

    /// Queues a message the proxy builds itself, written straight into the
    /// send buffer by one of postgres-protocol's frontend builders.
    pub fn write<E>(
        &mut self,
        build: impl FnOnce(&mut BytesMut) -> Result<(), E>,
    ) -> Result<(), E> {
        build(&mut self.write_buf)
    }

    /// The transaction status the backend gave in its last ReadyForQuery
    /// (or the block a BEGIN sent ahead opens).
    pub fn status(&self) -> TxStatus {
        self.status
    }

    /// A client's BEGIN is queued here, to be sent with its next statement,
    /// and the client was already told its block began: until the
    /// backend's own ReadyForQuery comes, the connection counts as in that
    /// block, so it stays with the session and the session's statements
    /// run as inside a block. A simple query ends the unnamed statement.
    pub fn begin_sent_ahead(&mut self) {
        self.status = TxStatus::InBlock;
        self.unnamed_owner = None;
    }

    pub fn unflushed_len(&self) -> usize {
        self.write_buf.len()
    }

    pub fn has_unflushed(&self) -> bool {
        !self.write_buf.is_empty()
    }

    /// Whether the next borrower may have this connection as it is: not
    /// broken, no transaction open, nothing unsent, no exchange unfinished
    /// (calls ended with Flush leave their implicit transaction open until
    /// a Sync, and awaiting a reply says so; the status would still read
    /// idle).
    pub fn is_clean(&self) -> bool {
        !(self.broken
            || self.status.in_transaction()
            || self.has_unflushed()
            || self.awaiting_reply
            || self.answered_begin)
    }

    /// Whether a request was sent since the last ReadyForQuery (its
    /// outcome would be unknown if the connection broke now).
    pub fn awaiting_reply(&self) -> bool {
        self.awaiting_reply
    }

    /// Writes what `send` and `write` queued. A failure after any byte
    /// reached the socket, or while an earlier request is unanswered, is
    /// [`BackendError::OutcomeUnknown`]; before that, the plain cause.
    pub async fn flush(&mut self) -> Result<(), BackendError> {
        if !self.awaiting_reply && !self.write_buf.is_empty() && self.peer_closed() {
            // PostgreSQL went away before this request: it was never sent.
            self.write_buf.clear();
            self.broken = true;
            return Err(BackendError::Closed);
        }
        let mut written = 0;
        let mut failure = None;
        while written < self.write_buf.len() {
            match self.stream.write(&self.write_buf[written..]).await {
                Ok(0) => {
                    failure = Some(std::io::Error::from(std::io::ErrorKind::WriteZero));
                    break;
                }
                Ok(n) => written += n,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        self.write_buf.clear();
        self.awaiting_reply |= written > 0;
        if self.answered_begin && written > self.begin_bytes {
            self.sent_behind_begin = true;
        }
        self.begin_bytes = 0;
        match failure {
            None => Ok(()),
            Some(e) => {
                self.broken = true;
                Err(self.lost(e.into()))
            }
        }
    }

    /// The next message of the connection, after the replies of a BEGIN
    /// answered ahead and handed over, which are read here and go no
    /// further: whoever reads next (the proxy's own call, the session's
    /// relay) sees the messages that follow as if it had sent the BEGIN
    /// itself and read them. Anything else that comes meanwhile (a notice,
    /// a notification) is returned as it comes.
    pub async fn recv(&mut self) -> Result<Message, BackendError> {
        loop {
            let m = self.read_one().await?;
            if !self.answered_begin {
                return Ok(m);
            }
            match m.tag {
                tag::COMMAND_COMPLETE => {}
                tag::READY_FOR_QUERY => {
                    self.answered_begin = false;
                    self.awaiting_reply = self.sent_behind_begin;
                    self.sent_behind_begin = false;
                }
                tag::ERROR_RESPONSE => return Err(self.block_not_begun(&m)),
                _ => return Ok(m),
            }
        }
    }

    async fn read_one(&mut self) -> Result<Message, BackendError> {
        match read_message(&mut self.stream, &mut self.read_buf, MAX_BACKEND_MESSAGE).await {
            Ok(m) => {
                if m.tag == tag::READY_FOR_QUERY {
                    self.status = TxStatus::from_ready_body(&m.body);
                    self.awaiting_reply = false;
                }
                Ok(m)
            }
            Err(e) => {
                self.broken = true;
                Err(self.lost(e.into()))
            }
        }
    }

    /// A client's BEGIN, answered ahead and queued here by the session
    /// (`begin_sent_ahead`), is to be read by this connection itself: it
    /// goes with whatever is sent next, in one write, and `recv` reads its
    /// replies first, so the statement that follows costs no round trip
    /// of its own for the BEGIN.
    pub fn take_answered_begin(&mut self) {
        self.answered_begin = true;
        self.begin_bytes = self.write_buf.len();
    }

    /// Whether a BEGIN handed over is still to be sent.
    pub fn answered_begin_unsent(&self) -> bool {
        self.answered_begin && self.has_unflushed()
    }

    /// PostgreSQL failed a BEGIN the client was told had begun its block
    /// (outside a block it cannot fail, so the backend is broken): what was
    /// sent with it ran outside the block, so its outcome is not what the
    /// client expects. The connection is not used again.
    fn block_not_begun(&mut self, error: &Message) -> BackendError {
        self.broken = true;
        self.answered_begin = false;
        self.sent_behind_begin = false;
        let cause = SqlError::parse(&error.body);
        BackendError::OutcomeUnknown(Box::new(BackendError::Protocol(format!(
            "the backend did not begin the transaction block whose BEGIN was answered: {}",
            cause.message
        ))))
    }

    /// Moves the complete DataRow messages at the front of what was read
    /// onto `out`, framed as they came, in one copy; how many bytes. Rows
    /// change nothing the proxy tracks, so a result's rows go to the
    /// client without being taken apart one by one; the first other
    /// message (or a row not yet whole, or a length `recv` would refuse)
    /// stays for `recv`.
    pub fn relay_rows(&mut self, out: &mut BytesMut) -> usize {
        let buf = &self.read_buf[..];
        let mut end = 0;
        while let Some(header) = buf.get(end..end + 5) {
            if header[0] != tag::DATA_ROW {
                break;
            }
            let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]);
            let Ok(len) = usize::try_from(len) else { break };
            if !(4..=MAX_BACKEND_MESSAGE).contains(&len) || buf.len() - end <= len {
                break;
            }
            end += 1 + len;
        }
        if end > 0 {
            out.extend_from_slice(&buf[..end]);
            bytes::Buf::advance(&mut self.read_buf, end);
        }
        end
    }

    /// A broken connection's error, marked when a request was in flight.
    fn lost(&self, cause: BackendError) -> BackendError {
        if self.awaiting_reply {
            BackendError::OutcomeUnknown(Box::new(cause))
        } else {
            cause
        }
    }

    /// Whether an idle connection's socket is still quiet: no message
    /// arrived since its last ReadyForQuery and PostgreSQL has not closed
    /// it. A backend that was terminated or restarted leaves an error or an
    /// end of stream behind, which this sees without waiting, so the pool
    /// drops the connection before a client's request is sent on it (and
    /// that request's outcome would be unknown).
    pub fn is_quiet(&mut self) -> bool {
        !self.peer_closed() && self.read_buf.is_empty()
    }

    /// Reads whatever the backend already sent, without waiting (it stays
    /// in the read buffer for `recv`); whether the stream has ended.
    pub fn peer_closed(&mut self) -> bool {
        use futures::FutureExt;
        use tokio::io::AsyncReadExt;
        loop {
            match self.stream.read_buf(&mut self.read_buf).now_or_never() {
                None => return false,
                Some(Ok(0)) | Some(Err(_)) => {
                    self.broken = true;
                    return true;
                }
                Some(Ok(_)) => continue,
            }
        }
    }

    /// Runs SQL over the simple protocol and discards its rows; the first
    /// error is returned after ReadyForQuery. Used for the proxy's own
    /// housekeeping statements only.
    pub async fn simple_query_quiet(&mut self, sql: &str) -> Result<(), BackendError> {
        self.simple_query_statuses(sql).await.map(drop)
    }

    /// Like `simple_query_quiet`, returning the ParameterStatus messages the
    /// backend sent on the way (for a client that must see them).
    pub async fn simple_query_statuses(&mut self, sql: &str) -> Result<Vec<Message>, BackendError> {
        // A simple query destroys the unnamed statement.
        self.unnamed_owner = None;
        pp::query(sql, &mut self.write_buf)?;
        self.flush().await?;
        let mut first_error = None;
        let mut statuses = Vec::new();
        loop {
            let msg = self.recv().await?;
            match msg.tag {
                tag::ERROR_RESPONSE if first_error.is_none() => {
                    first_error = Some(SqlError::parse(&msg.body))
                }
                tag::PARAMETER_STATUS => {
                    self.note_parameter_status(&msg);
                    statuses.push(msg);
                }
                tag::READY_FOR_QUERY => {
                    return match first_error {
                        Some(e) => Err(BackendError::Server(e)),
                        None => Ok(statuses),
                    };
                }
                _ => {}
            }
        }
    }

    /// After a client's RESET (or `SET … TO DEFAULT`, `DISCARD ALL`) of
    /// settings it gave at startup: those are its session's defaults, as
    /// PostgreSQL keeps them, so they are set again (one round trip).
    /// `reset(name)` says which of `desired` were reset. Returns the
    /// ParameterStatus messages the client must see.
    pub async fn reapply_parameters(
        &mut self,
        desired: &BTreeMap<String, String>,
        reset: impl Fn(&str) -> bool,
    ) -> Result<Vec<Message>, BackendError> {
        let again: Vec<(&String, &String)> = desired.iter().filter(|(n, _)| reset(n)).collect();
        if again.is_empty() {
            return Ok(Vec::new());
        }
        let sets: Vec<String> = again
            .iter()
            .map(|(name, value)| {
                format!(
                    "pg_catalog.set_config({}, {}, false)",
                    quote_literal(name),
                    quote_literal(value)
                )
            })
            .collect();
        let result = self
            .simple_query_statuses(&format!("SELECT {}", sets.join(", ")))
            .await;
        match result {
            Ok(statuses) => {
                for (name, value) in again {
                    self.applied.insert(name.clone(), value.clone());
                }
                Ok(statuses)
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// Brings the connection's session parameters to `desired` (name →
    /// value) with one round trip, or none when they already match.
    pub async fn sync_parameters(
        &mut self,
        desired: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        if &self.applied == desired {
            return Ok(());
        }
        // set_config parses the value as a configuration file would, so a
        // list such as search_path = 'queen,public' stays a list (a quoted
        // SET would make it one schema named "queen,public").
        let mut sets = Vec::new();
        for (name, value) in desired {
            if self.applied.get(name) != Some(value) {
                sets.push(format!(
                    "pg_catalog.set_config({}, {}, false)",
                    quote_literal(name),
                    quote_literal(value)
                ));
            }
        }
        let mut sql = String::new();
        if !sets.is_empty() {
            sql.push_str(&format!("SELECT {};", sets.join(", ")));
        }
        for name in self.applied.keys() {
            if !desired.contains_key(name) {
                sql.push_str(&format!("RESET {};", quote_ident(name)));
            }
        }
        let result = self.simple_query_quiet(&sql).await;
        match result {
            Ok(()) => {
                self.applied = desired.clone();
                Ok(())
            }
            Err(e) => {
                // Some of the SETs may have applied: the connection's state is
                // unknown, so it must not be reused.
                self.broken = true;
                Err(e)
            }
        }
    }
}

pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A string literal that means the same whatever the session's
/// standard_conforming_strings (a client may have turned it off): an
/// E'' literal, with backslashes and quotes escaped.
pub fn quote_literal(value: &str) -> String {
    format!("E'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Message;

    fn framed(msgs: &[(u8, &[u8])]) -> BytesMut {
        let mut out = BytesMut::new();
        for (t, body) in msgs {
            Message::new(*t, body.to_vec()).encode(&mut out);
        }
        out
    }

    #[test]
    fn rows_go_across_whole_and_the_rest_stays_for_recv() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let mut conn = BackendConn::new(Box::new(ours));
        let rows = framed(&[(tag::DATA_ROW, b"\0\x01\0\0\0\x011"), (tag::DATA_ROW, b"")]);
        let mut read = rows.clone();
        // A third row not yet whole.
        let third = framed(&[(tag::DATA_ROW, b"\0\x01\0\0\0\x012")]);
        read.extend_from_slice(&third[..7]);
        conn.read_buf = read;
        let mut out = BytesMut::new();
        assert_eq!(conn.relay_rows(&mut out), rows.len());
        assert_eq!(out, rows);
        assert_eq!(conn.read_buf[..], third[..7]);
        // Whole now, with the CommandComplete behind it.
        conn.read_buf.extend_from_slice(&third[7..]);
        conn.read_buf
            .extend_from_slice(&framed(&[(tag::COMMAND_COMPLETE, b"SELECT 3\0")]));
        out.clear();
        assert_eq!(conn.relay_rows(&mut out), third.len());
        assert_eq!(out, third);
        assert_eq!(conn.read_buf[0], tag::COMMAND_COMPLETE);
        assert_eq!(conn.relay_rows(&mut out), 0);
        // A length recv would refuse is left to recv.
        conn.read_buf = BytesMut::from(&[tag::DATA_ROW, 0, 0, 0, 2, 0][..]);
        assert_eq!(conn.relay_rows(&mut out), 0);
        conn.read_buf = BytesMut::from(&[tag::DATA_ROW, 0xff, 0xff, 0xff, 0xff, 0][..]);
        assert_eq!(conn.relay_rows(&mut out), 0);
        assert_eq!(conn.read_buf.len(), 6);
    }
}
