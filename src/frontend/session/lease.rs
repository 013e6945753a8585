//! The session's backend connection: which pool it comes from, when it is
//! held (a transaction, an unsynced pipeline, session state that pins it)
//! and when it goes back. The pool itself stays behind this type.

use crate::backend::{pool, BackendConn, BackendError, BackendTarget, Pool, PooledConn};
use crate::frontend::SessionHandle;
use crate::protocol::TxStatus;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The settings that change how PostgreSQL reads a timestamp or an
/// interval literal.
const READING_SETTINGS: [&str; 3] = ["TimeZone", "DateStyle", "IntervalStyle"];

/// Which pool a statement's connection comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum For {
    /// Plain SQL: the user's tenant role (the engine's pool without a users
    /// file).
    Client,
    /// A dialect statement: the engine's pool (the tenant is a parameter
    /// queenwire vouches for).
    Dialect,
}

pub struct Lease {
    conn: Option<PooledConn>,
    /// Session state lives on the backend connection: keep it until the end.
    pinned: bool,
    /// Connections logged in as the user's tenant role; `None` (no users
    /// file): the engine's pool serves plain SQL too.
    role_pool: Option<Pool>,
    engine_pool: Pool,
    /// Session parameters from the startup packet, as SQL value text.
    desired: BTreeMap<String, String>,
    /// The settings that decide how PostgreSQL reads a literal, as the
    /// session's connection reported them since the client changed them
    /// (`SET TimeZone …`): a dialect statement on an engine connection
    /// reads its timestamps as the client's own connection would.
    reading: BTreeMap<String, String>,
    handle: Arc<SessionHandle>,
    /// Session pool mode, or a startup `search_path` that makes plain
    /// `CREATE TABLE` make temp tables: the first connection is kept for
    /// good.
    session_mode: bool,
    /// Longest wait for a free connection (`None`: unbounded).
    wait: Option<std::time::Duration>,
    /// What the proxy's statement names on client connections start with
    /// (`StatementNames::prefix`).
    names_prefix: Arc<str>,
}

/// A connection of `pool`; a cancel request for the session while it
/// waits for one (every connection held by other sessions) ends the wait
/// with PostgreSQL's 57014, as a cancel ends a statement waiting on a lock.
async fn checkout_or_cancel(
    pool: &Pool,
    wait: Option<std::time::Duration>,
    handle: &SessionHandle,
) -> Result<PooledConn, BackendError> {
    if pool.has_free() {
        return pool::checkout_within(pool, wait).await;
    }
    let cancel = handle.cancel.clone();
    let mut cancelled = std::pin::pin!(cancel.notify.notified());
    cancelled.as_mut().enable();
    // Nothing of the statement is on a backend: the cancel is the wait's.
    let _waiting = cancel.waiting();
    tokio::select! {
        biased;
        conn = pool::checkout_within(pool, wait) => conn,
        () = cancelled => Err(BackendError::Server(crate::protocol::SqlError::error(
            crate::protocol::SqlState::QUERY_CANCELED,
            "canceling statement due to user request",
        ))),
    }
}

/// A connection set aside while a dialect statement runs on an engine
/// connection (see [`Lease::set_aside`]).
pub struct SetAside {
    conn: Option<PooledConn>,
    pinned: bool,
}

impl Lease {
    pub fn new(
        engine_pool: Pool,
        role_pool: Option<Pool>,
        desired: BTreeMap<String, String>,
        handle: Arc<SessionHandle>,
        session_mode: bool,
        wait: Option<std::time::Duration>,
        names_prefix: Arc<str>,
    ) -> Lease {
        let temp_first = desired
            .iter()
            .any(|(name, value)| name.eq_ignore_ascii_case("search_path") && names_pg_temp(value));
        Lease {
            conn: None,
            pinned: false,
            role_pool,
            engine_pool,
            desired,
            reading: BTreeMap::new(),
            handle,
            session_mode: session_mode || temp_first,
            wait,
            names_prefix,
        }
    }

    /// Takes a connection unless one is held, with the session's
    /// parameters applied.
    pub async fn acquire(&mut self, purpose: For) -> Result<&mut BackendConn, BackendError> {
        if self.conn.is_none() {
            let pool = match (&self.role_pool, purpose) {
                (Some(p), For::Client) => p,
                _ => &self.engine_pool,
            };
            // Every connection may be held by other sessions' transactions
            // (or by sessions, in session mode): past the bound the
            // statement fails rather than wait for good.
            let mut conn = checkout_or_cancel(pool, self.wait, &self.handle).await?;
            if purpose == For::Client {
                conn.mark_client_facing(&self.names_prefix);
            }
            if let Err(e) = conn.sync_parameters(&self.settings_for(purpose)).await {
                pool::release(conn);
                return Err(e);
            }
            self.handle.set_backend(Some(conn.key()));
            self.conn = Some(conn);
            // In session mode the session's own connection stays with it; a
            // connection of the engine's pool (a users-file user's dialect
            // statement outside its transactions) still goes back.
            if self.session_mode && (purpose == For::Client || self.role_pool.is_none()) {
                self.pinned = true;
            }
        }
        match self.conn.as_deref_mut() {
            Some(conn) => Ok(conn),
            None => Err(BackendError::Protocol("no backend connection held".into())),
        }
    }

    /// The session's connection reported `name = value`: remembered when
    /// it is a setting literals are read in.
    pub fn note_reported(&mut self, name: &str, value: &str) {
        if READING_SETTINGS
            .iter()
            .any(|s| s.eq_ignore_ascii_case(name))
        {
            self.reading.insert(name.to_string(), value.to_string());
        }
    }

    /// The settings a connection taken for `purpose` gets: a dialect
    /// statement's reads literals in the session's current settings (a
    /// client's connection has them itself: a SET pins it).
    fn settings_for(&self, purpose: For) -> Cow<'_, BTreeMap<String, String>> {
        if purpose == For::Client || self.reading.is_empty() {
            return Cow::Borrowed(&self.desired);
        }
        let mut settings: BTreeMap<String, String> = self
            .desired
            .iter()
            .filter(|(name, _)| !self.reading.keys().any(|r| r.eq_ignore_ascii_case(name)))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        settings.extend(self.reading.clone());
        Cow::Owned(settings)
    }

    pub fn conn(&self) -> Option<&BackendConn> {
        self.conn.as_deref()
    }

    pub fn conn_mut(&mut self) -> Option<&mut BackendConn> {
        self.conn.as_deref_mut()
    }

    pub fn held(&self) -> bool {
        self.conn.is_some()
    }

    /// The held connection's transaction status; Idle without one (a
    /// connection goes back to the pool only when idle).
    pub fn status(&self) -> TxStatus {
        self.conn.as_ref().map_or(TxStatus::Idle, |c| c.status())
    }

    pub fn pin(&mut self) {
        self.pinned = true;
    }

    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// Plain SQL runs on a tenant role's pool, apart from the engine's.
    pub fn has_role_pool(&self) -> bool {
        self.role_pool.is_some()
    }

    /// Gives the connection back when nothing holds it: not pinned, no
    /// replies owed, not in a transaction.
    pub fn release_if_idle(&mut self, replies_owed: bool) {
        if self.pinned || replies_owed || self.status().in_transaction() {
            return;
        }
        if let Some(conn) = self.conn.take() {
            self.give_back(conn);
        }
    }

    /// A connection back to the pool, no longer the session's: at once, or
    /// once the session's cancel requests under way have reached
    /// PostgreSQL (closed when that takes too long), so a cancel sent for
    /// this session never lands on the next session's statement.
    fn give_back(&self, conn: PooledConn) {
        self.handle.set_backend(None);
        match self.handle.cancels_under_way() {
            None => pool::release(conn),
            Some(cancels) => {
                tokio::spawn(async move {
                    let within = crate::backend::target::CANCEL_TAKEN_WITHIN;
                    match tokio::time::timeout(within, cancels.settled()).await {
                        Ok(()) => pool::release(conn),
                        Err(_) => pool::discard(conn),
                    }
                });
            }
        }
    }

    /// Sets the session's startup settings that `reset` names again on the
    /// held connection (after a client's RESET of them); returns the
    /// ParameterStatus messages the client must see.
    pub async fn reapply_settings(
        &mut self,
        reset: impl Fn(&str) -> bool,
    ) -> Result<Vec<crate::protocol::Message>, BackendError> {
        match self.conn.as_deref_mut() {
            Some(conn) => conn.reapply_parameters(&self.desired, reset).await,
            None => Ok(Vec::new()),
        }
    }

    /// The connection broke or its state is unknown: close it.
    pub fn discard(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.handle.set_backend(None);
            pool::discard(conn);
        }
    }

    /// Sets the held connection (and its pin) aside, so that a statement
    /// can run on a connection of the engine's pool.
    pub fn set_aside(&mut self) -> SetAside {
        SetAside {
            conn: self.conn.take(),
            pinned: std::mem::replace(&mut self.pinned, false),
        }
    }

    /// Gives the engine connection back (its statement committed: it is
    /// clean, or closed) and takes the set-aside connection again.
    pub fn restore(&mut self, aside: SetAside) {
        if let Some(engine_conn) = self.conn.take() {
            self.give_back(engine_conn);
        }
        self.handle
            .set_backend(aside.conn.as_ref().map(|c| c.key()));
        self.conn = aside.conn;
        self.pinned = aside.pinned;
    }

    /// The client is gone: a connection in a transaction, pinned, or busy
    /// (replies owed to the client, or a request of the proxy's own
    /// unanswered: its query is cancelled) is closed, and PostgreSQL rolls
    /// back; an idle one goes back to the pool.
    pub fn finish(&mut self, replies_owed: bool, target: &Arc<BackendTarget>) {
        self.handle.set_backend(None);
        let Some(conn) = self.conn.take() else { return };
        let busy = replies_owed || conn.awaiting_reply();
        if busy {
            let key = conn.key();
            let target = target.clone();
            tokio::spawn(async move {
                let _ = target.cancel(key).await;
            });
        }
        if busy || self.pinned || conn.status().in_transaction() {
            pool::discard(conn);
        } else {
            self.give_back(conn);
        }
    }
}

/// Whether a `search_path` value names the session's temporary schema
/// (`pg_temp`, in any case or quoting): listed, it decides where an
/// unqualified `CREATE TABLE` goes (first: a temp table) and which objects
/// unqualified names find, so the session's temp objects can be made and
/// used by statements whose text never says `TEMP`.
fn names_pg_temp(search_path: &str) -> bool {
    search_path
        .to_ascii_lowercase()
        .replace('"', "")
        .contains("pg_temp")
}

#[cfg(test)]
mod tests {
    use super::names_pg_temp;

    #[test]
    fn a_search_path_naming_pg_temp_is_recognised_in_any_spelling() {
        for path in [
            "pg_temp, public",
            "'public, PG_TEMP'",
            "\"pg_temp\"",
            "pg_temp_3",
        ] {
            assert!(names_pg_temp(path), "{path}");
        }
        for path in ["public", "'$user', public", "pgtemp"] {
            assert!(!names_pg_temp(path), "{path}");
        }
    }
}
