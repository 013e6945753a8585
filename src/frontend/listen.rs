//! LISTEN without a backend connection per listener: clients' `LISTEN` and
//! `UNLISTEN` (alone in a simple query or a portal, by a session that has
//! not pinned its connection; inside a transaction block carried out at
//! its COMMIT, see `session::block`) are served from one listening
//! connection of the proxy's own, and each notification is fanned out to
//! the sessions listening on its channel. A listener then costs no backend
//! connection, in transaction pooling as in session pooling.
//!
//! What a client sees is what PostgreSQL gives it: the reply comes once the
//! shared connection listens (a NOTIFY committed after the reply reaches
//! the client); a bad statement gets PostgreSQL's own error (the statement
//! is first run as the client sent it inside a transaction that is rolled
//! back); notifications arrive while the client is idle and wait while its
//! transaction block is open; the notification's pid is the proxy pid of
//! the session whose backend connection sent it (its own one for its own
//! NOTIFY), or PostgreSQL's pid for a sender outside queenwire. If the
//! shared connection breaks, it reconnects and listens again; notifications
//! sent meanwhile are lost, as they are for a PostgreSQL session whose
//! connection breaks.
//!
//! The hub knows nothing of sessions beyond their ids and a channel to each.

use crate::backend::health::Health;
use crate::protocol::{SqlError, SqlState};
use crate::shutdown::ShutdownSignal;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot};

/// One notification, for one listening session.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The pid the client should see (see the module comment).
    pub pid: i32,
    pub channel: Arc<str>,
    pub payload: Arc<str>,
}

/// Bytes of notifications held for one session that its client has not
/// taken (a client that LISTENs and does not read its socket). Past it the
/// hub stops delivering to the session, which is closed with 53200 when it
/// next looks for one (`overflowed`): memory stays bounded, where
/// PostgreSQL would hold them on disk.
pub const HELD_LIMIT: usize = 16 * 1024 * 1024;

impl Notification {
    /// What holding it costs, roughly: its texts and the message around.
    fn size(&self) -> usize {
        self.channel.len() + self.payload.len() + 64
    }
}

/// A session's notifications, with the bytes the hub holds for it.
pub struct Notifications {
    rx: mpsc::UnboundedReceiver<Notification>,
    held: Arc<AtomicUsize>,
}

impl Notifications {
    pub async fn recv(&mut self) -> Option<Notification> {
        let n = self.rx.recv().await?;
        self.held.fetch_sub(n.size(), Ordering::Relaxed);
        Some(n)
    }

    fn try_recv(&mut self) -> Option<Notification> {
        let n = self.rx.try_recv().ok()?;
        self.held.fetch_sub(n.size(), Ordering::Relaxed);
        Some(n)
    }
}

/// Where the hub delivers a session's notifications.
struct Sink {
    tx: mpsc::UnboundedSender<Notification>,
    held: Arc<AtomicUsize>,
}

impl Sink {
    /// Whether `n` was taken: not when the session holds `HELD_LIMIT`.
    fn offer(&self, n: Notification) -> bool {
        let size = n.size();
        if self.held.load(Ordering::Relaxed) + size > HELD_LIMIT {
            return false;
        }
        self.held.fetch_add(size, Ordering::Relaxed);
        let _ = self.tx.send(n);
        true
    }
}

/// What a session asks of the shared connection.
enum Request {
    /// Run `statement` (the client's own text) in a rolled-back transaction
    /// to get PostgreSQL's verdict, then listen on `channel` for `session`.
    Listen {
        session: u64,
        statement: String,
        channel: String,
        reply: oneshot::Sender<Result<(), SqlError>>,
    },
    /// The same check for an UNLISTEN; then stop listening for `session`
    /// (on one channel, or all with `None`).
    Unlisten {
        session: u64,
        statement: Option<String>,
        channel: Option<String>,
        reply: Option<oneshot::Sender<Result<(), SqlError>>>,
    },
    /// PostgreSQL's verdict on `statement` alone (a LISTEN of a transaction
    /// block, carried out at its COMMIT).
    Check {
        statement: String,
        reply: oneshot::Sender<Result<(), SqlError>>,
    },
    /// Whether PostgreSQL's parser takes `script`, a simple query of
    /// several statements, without running any of it.
    Syntax {
        script: String,
        reply: oneshot::Sender<Result<(), SqlError>>,
    },
}

#[derive(Default)]
struct State {
    /// Sessions by channel; a channel is listened on while it has any.
    channels: HashMap<String, HashSet<u64>>,
    sinks: HashMap<u64, Sink>,
    /// Sessions whose sink was dropped at `HELD_LIMIT`.
    overflowed: HashSet<u64>,
}

pub struct ListenHub {
    state: Mutex<State>,
    /// Backend pid → the session that last ran client SQL on it.
    holders: Mutex<HashMap<i32, u64>>,
    /// Whether any session listens through the hub (holders are only
    /// noted then).
    active: AtomicBool,
    requests: mpsc::UnboundedSender<Request>,
    pending: Mutex<Option<mpsc::UnboundedReceiver<Request>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Default for ListenHub {
    fn default() -> Self {
        let (requests, pending) = mpsc::unbounded_channel();
        ListenHub {
            state: Mutex::default(),
            holders: Mutex::default(),
            active: AtomicBool::new(false),
            requests,
            pending: Mutex::new(Some(pending)),
        }
    }
}

impl ListenHub {
    /// Listens on `channel` for `session`; the receiver of its
    /// notifications the first time the session listens through the hub.
    pub async fn listen(
        &self,
        session: u64,
        statement: &str,
        channel: String,
    ) -> Result<Option<Notifications>, SqlError> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Listen {
            session,
            statement: statement.to_string(),
            channel,
            reply,
        };
        if self.requests.send(request).is_err() {
            return Err(unavailable());
        }
        answer.await.unwrap_or_else(|_| Err(unavailable()))?;
        let mut state = lock(&self.state);
        if state.sinks.contains_key(&session) {
            return Ok(None);
        }
        state.overflowed.remove(&session);
        let (tx, rx) = mpsc::unbounded_channel();
        let held = Arc::new(AtomicUsize::new(0));
        let sink = Sink {
            tx,
            held: held.clone(),
        };
        state.sinks.insert(session, sink);
        self.active.store(true, Ordering::Relaxed);
        Ok(Some(Notifications { rx, held }))
    }

    /// Stops listening on `channel` (`None`: every channel) for `session`,
    /// after PostgreSQL's verdict on the client's `statement`.
    pub async fn unlisten(
        &self,
        session: u64,
        statement: &str,
        channel: Option<String>,
    ) -> Result<(), SqlError> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Unlisten {
            session,
            statement: Some(statement.to_string()),
            channel,
            reply: Some(reply),
        };
        if self.requests.send(request).is_err() {
            return Err(unavailable());
        }
        answer.await.unwrap_or_else(|_| Err(unavailable()))
    }

    /// Stops listening on `channel` for `session`, waiting until the hub
    /// has (a LISTEN the proxy made ahead of a COMMIT that then failed).
    pub async fn stop_listening(&self, session: u64, channel: String) {
        let (reply, answer) = oneshot::channel();
        let request = Request::Unlisten {
            session,
            statement: None,
            channel: Some(channel),
            reply: Some(reply),
        };
        if self.requests.send(request).is_ok() {
            let _ = answer.await;
        }
    }

    /// The syntax error PostgreSQL finds in `script` (a simple query of
    /// several statements) before it runs any of them, if any; `Ok` too
    /// when the shared connection cannot say.
    pub async fn syntax(&self, script: &str) -> Result<(), SqlError> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Syntax {
            script: script.to_string(),
            reply,
        };
        if self.requests.send(request).is_err() {
            return Ok(());
        }
        answer.await.unwrap_or(Ok(()))
    }

    /// PostgreSQL's verdict on a client's LISTEN / UNLISTEN `statement`,
    /// without its effect.
    pub async fn check(&self, statement: &str) -> Result<(), SqlError> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Check {
            statement: statement.to_string(),
            reply,
        };
        if self.requests.send(request).is_err() {
            return Err(unavailable());
        }
        answer.await.unwrap_or_else(|_| Err(unavailable()))
    }

    /// Drops the notifications `rx` holds for `session` of channels it no
    /// longer listens on (a transaction block that held them back until
    /// its COMMIT unlistened them). Under the lock `deliver` takes, so the
    /// order of those kept holds.
    pub fn drop_unlistened(&self, session: u64, rx: &mut Notifications) {
        let state = lock(&self.state);
        let mut kept = Vec::new();
        while let Some(n) = rx.try_recv() {
            let listens = state
                .channels
                .get(&*n.channel)
                .is_some_and(|sessions| sessions.contains(&session));
            if listens {
                kept.push(n);
            }
        }
        if let Some(sink) = state.sinks.get(&session) {
            for n in kept {
                sink.offer(n);
            }
        }
    }

    /// Stops listening on `channel` (`None`: every channel) for `session`
    /// without waiting (the client's UNLISTEN also went to its backend).
    pub fn forget(&self, session: u64, channel: Option<String>) {
        let _ = self.requests.send(Request::Unlisten {
            session,
            statement: None,
            channel,
            reply: None,
        });
    }

    /// Whether `session` listens on `channel` through the hub.
    pub fn listens(&self, session: u64, channel: &str) -> bool {
        lock(&self.state)
            .channels
            .get(channel)
            .is_some_and(|sessions| sessions.contains(&session))
    }

    /// The session ended.
    pub fn leave(&self, session: u64) {
        let mut state = lock(&self.state);
        let overflowed = state.overflowed.remove(&session);
        if state.sinks.remove(&session).is_some() || overflowed {
            drop(state);
            self.forget(session, None);
        }
    }

    /// Whether `session`'s notifications stopped at `HELD_LIMIT`.
    pub fn overflowed(&self, session: u64) -> bool {
        lock(&self.state).overflowed.contains(&session)
    }

    /// Whether any session listens through the hub.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// `session` runs client SQL on the backend connection `pid` now.
    pub fn note_holder(&self, pid: i32, session: u64) {
        lock(&self.holders).insert(pid, session);
    }

    fn deliver(&self, sender: i32, channel: &str, payload: &str) {
        let pid = lock(&self.holders)
            .get(&sender)
            .map_or(sender, |s| *s as i32);
        let mut state = lock(&self.state);
        let Some(sessions) = state.channels.get(channel) else {
            return;
        };
        let n = Notification {
            pid,
            channel: Arc::from(channel),
            payload: Arc::from(payload),
        };
        let mut full = Vec::new();
        for s in sessions {
            if let Some(sink) = state.sinks.get(s) {
                if !sink.offer(n.clone()) {
                    full.push(*s);
                }
            }
        }
        for s in full {
            // Its receiver ends once it has taken what it holds.
            state.sinks.remove(&s);
            state.overflowed.insert(s);
            tracing::warn!(
                session = s,
                limit = HELD_LIMIT,
                "a listening client does not read its notifications: its session is closed"
            );
        }
    }

    /// Adds `session` to `channel`; whether the channel is new.
    fn join(&self, session: u64, channel: &str) -> bool {
        let mut state = lock(&self.state);
        let new = !state.channels.contains_key(channel);
        state
            .channels
            .entry(channel.to_string())
            .or_default()
            .insert(session);
        new
    }

    /// Removes `session` from one channel or all; the channels nobody
    /// listens on any more.
    fn part(&self, session: u64, channel: Option<&str>) -> Vec<String> {
        let mut state = lock(&self.state);
        let names: Vec<String> = match channel {
            Some(c) => vec![c.to_string()],
            None => state
                .channels
                .iter()
                .filter(|(_, s)| s.contains(&session))
                .map(|(c, _)| c.clone())
                .collect(),
        };
        let mut emptied = Vec::new();
        for name in names {
            if let Some(set) = state.channels.get_mut(&name) {
                set.remove(&session);
                if set.is_empty() {
                    state.channels.remove(&name);
                    emptied.push(name);
                }
            }
        }
        emptied
    }

    fn channels(&self) -> Vec<String> {
        lock(&self.state).channels.keys().cloned().collect()
    }
}

fn unavailable() -> SqlError {
    SqlError::error(
        SqlState::CONNECTION_FAILURE,
        "the shared listening connection to the backend is unavailable",
    )
}

/// `LISTEN "name"` with the name quoted as an identifier.
fn quoted(verb: &str, channel: &str) -> String {
    format!("{verb} \"{}\"", channel.replace('"', "\"\""))
}

fn db_error(e: &tokio_postgres::Error) -> SqlError {
    match e.as_db_error() {
        Some(db) => {
            let mut err = SqlError::error(db.code().clone(), db.message());
            err.detail = db.detail().map(str::to_string);
            err.hint = db.hint().map(str::to_string);
            err
        }
        None => SqlError::error(
            SqlState::CONNECTION_FAILURE,
            format!("shared listening connection: {e}"),
        ),
    }
}

/// The shared listening connection: connects (and reconnects), listens on
/// every channel some session listens on, serves the sessions' requests
/// and fans notifications out.
pub async fn run(config: tokio_postgres::Config, hub: Arc<ListenHub>, shutdown: ShutdownSignal) {
    let Some(mut requests) = lock(&hub.pending).take() else {
        return;
    };
    tokio::select! {
        () = serve(&config, &hub, &mut requests) => {}
        () = shutdown.begun() => {}
    }
}

async fn serve(
    config: &tokio_postgres::Config,
    hub: &Arc<ListenHub>,
    requests: &mut mpsc::UnboundedReceiver<Request>,
) {
    use futures::StreamExt;
    let mut health = Health::new("shared LISTEN");
    loop {
        let (client, mut connection) = match config.connect(tokio_postgres::NoTls).await {
            Ok(c) => c,
            Err(e) => {
                health.lost(&e);
                // Requests meanwhile fail at once rather than wait.
                while let Ok(r) = requests.try_recv() {
                    refuse(r);
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        let (broken_tx, mut broken) = oneshot::channel::<()>();
        let pump_hub = hub.clone();
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(msg) = messages.next().await {
                match msg {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                        pump_hub.deliver(n.process_id(), n.channel(), n.payload())
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            let _ = broken_tx.send(());
        });
        let again: Vec<String> = hub.channels().iter().map(|c| quoted("LISTEN", c)).collect();
        if !again.is_empty() {
            if let Err(e) = client.batch_execute(&again.join("; ")).await {
                health.lost(&e);
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        }
        health.ok();
        loop {
            tokio::select! {
                request = requests.recv() => {
                    let Some(request) = request else { return };
                    if let Err(e) = handle(&client, hub, request).await {
                        health.lost(&e);
                        break;
                    }
                }
                _ = &mut broken => {
                    health.lost(&"the connection closed");
                    break;
                }
            }
        }
    }
}

fn refuse(request: Request) {
    match request {
        Request::Listen { reply, .. } => {
            let _ = reply.send(Err(unavailable()));
        }
        Request::Unlisten {
            reply: Some(reply), ..
        } => {
            let _ = reply.send(Err(unavailable()));
        }
        Request::Unlisten { .. } => {}
        Request::Check { reply, .. } => {
            let _ = reply.send(Err(unavailable()));
        }
        // Nothing said against it: the script runs and PostgreSQL judges.
        Request::Syntax { reply, .. } => {
            let _ = reply.send(Ok(()));
        }
    }
}

/// PostgreSQL's verdict on a client's statement, without its effect.
async fn check(client: &tokio_postgres::Client, statement: &str) -> Result<(), SqlError> {
    let result = client
        .batch_execute(&format!("BEGIN; {statement}; ROLLBACK"))
        .await;
    if let Err(e) = &result {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(db_error(e));
    }
    Ok(())
}

/// Serves one request; `Err` when the connection broke.
async fn handle(
    client: &tokio_postgres::Client,
    hub: &ListenHub,
    request: Request,
) -> Result<(), tokio_postgres::Error> {
    match request {
        Request::Check { statement, reply } => {
            let _ = reply.send(check(client, &statement).await);
        }
        Request::Syntax { script, reply } => {
            // A Parse of several statements is refused after the parser
            // has read them all: a syntax error anywhere comes first, with
            // its position in the whole text, as a simple query gets it.
            let result = client.prepare(&script).await;
            let verdict = match &result {
                Err(e) => match e.as_db_error() {
                    Some(db) if db.code().code().starts_with("42") && db.position().is_some() => {
                        let mut err = db_error(e);
                        if let Some(tokio_postgres::error::ErrorPosition::Original(at)) =
                            db.position()
                        {
                            err.position = usize::try_from(*at).ok();
                        }
                        Err(err)
                    }
                    _ => Ok(()),
                },
                Ok(_) => Ok(()),
            };
            let _ = reply.send(verdict);
            if let Err(e) = result {
                if e.is_closed() {
                    return Err(e);
                }
            }
        }
        Request::Listen {
            session,
            statement,
            channel,
            reply,
        } => {
            if let Err(e) = check(client, &statement).await {
                let _ = reply.send(Err(e));
                return Ok(());
            }
            if hub.join(session, &channel) {
                if let Err(e) = client.batch_execute(&quoted("LISTEN", &channel)).await {
                    hub.part(session, Some(&channel));
                    let _ = reply.send(Err(db_error(&e)));
                    return if e.is_closed() { Err(e) } else { Ok(()) };
                }
            }
            let _ = reply.send(Ok(()));
        }
        Request::Unlisten {
            session,
            statement,
            channel,
            reply,
        } => {
            if let Some(statement) = statement {
                if let Err(e) = check(client, &statement).await {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(e));
                    }
                    return Ok(());
                }
            }
            let emptied = hub.part(session, channel.as_deref());
            let stop: Vec<String> = emptied.iter().map(|c| quoted("UNLISTEN", c)).collect();
            let result = if stop.is_empty() {
                Ok(())
            } else {
                client.batch_execute(&stop.join("; ")).await
            };
            if let Some(reply) = reply {
                let _ = reply.send(result.as_ref().map(drop).map_err(db_error));
            }
            if let Err(e) = result {
                if e.is_closed() {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}
