//! Waiting for the client: its next message, within the idle-in-transaction
//! limit, while what the backend sends unasked on a connection the session
//! keeps (notifications, notices, parameter statuses) reaches the client at
//! once.
//!
//! This is also where a session notices the shutdown drain: the wait for
//! the client has one more branch, on a watch of the session's own (a flag
//! and a waker: waiting on it takes no lock, so sessions never contend on
//! one), which costs nothing until it fires. Once the drain has begun, the session
//! closes with 57P01 at its first idle point between transactions (at once
//! if it is idle now); inside a transaction block it goes on until the
//! block ends or the drain timeout passes, whichever comes first.

use super::canned;
use super::{End, Session};
use crate::protocol::{self, FrameError, Message, SqlError, SqlState};
use crate::shutdown::Watch;

/// What came while the client was idle.
enum Idle {
    Client(Result<Message, FrameError>),
    Backend(Result<Message, crate::backend::BackendError>),
    /// From the shared listening connection (`None`: it let go).
    Notified(Option<crate::frontend::listen::Notification>),
    TimedOut,
    /// A BEGIN answered ahead waited `BEGIN_HELD_FOR` for the client's
    /// next message.
    SendBegin,
    /// The next step of the shutdown began.
    Stopping,
}

/// The longest a BEGIN answered ahead waits in the connection's buffer
/// for the client's next message to go with (`simple::begin_ahead`).
const BEGIN_HELD_FOR: std::time::Duration = std::time::Duration::from_millis(1);

/// The shutdown as one session watches it.
pub(super) struct Stopping {
    /// Fires when the drain begins.
    drain: Watch,
    /// Taken once the drain has begun; fires when its timeout passes.
    terminate: Option<Watch>,
}

impl Stopping {
    pub(super) fn new(shared: &crate::frontend::Shared) -> Stopping {
        Stopping {
            drain: shared.shutdown.watch(),
            terminate: None,
        }
    }

    /// The watch of the step still to come.
    fn next(&mut self) -> &mut Watch {
        self.terminate.as_mut().unwrap_or(&mut self.drain)
    }
}

impl Session {
    /// The client's next message, within the idle-in-transaction limit.
    /// While the client is idle on a connection the session keeps, what
    /// the backend sends unasked (notifications, notices, parameter
    /// statuses) reaches the client at once, as from PostgreSQL itself.
    pub(super) async fn next_message(&mut self) -> Result<Message, End> {
        let deadline = self
            .shared
            .config
            .idle_in_transaction_timeout
            .filter(|_| self.lease.status().in_transaction())
            .map(|limit| tokio::time::Instant::now() + limit);
        let max = self.shared.config.max_message_size;
        loop {
            if let Some(terminate) = &self.stopping.terminate {
                if terminate.has_begun() || self.at_idle_point() {
                    return Err(self.fatal(canned::admin_shutdown()).await);
                }
            }
            // A connection the session keeps: pinned, or holding its
            // transaction block (where what comes is PostgreSQL ending it).
            let watch_backend = (self.lease.pinned() || self.lease.status().in_transaction())
                && !self.replies.owed();
            // Held while a transaction block is open, as PostgreSQL holds
            // them until it ends.
            let deliver = !self.replies.owed() && !self.lease.status().in_transaction();
            let event = {
                let read = self.client.read(max);
                let notified = async {
                    match self.notifications.as_mut() {
                        Some(rx) if deliver => rx.recv().await,
                        _ => std::future::pending().await,
                    }
                };
                let unsolicited = async {
                    match self.lease.conn_mut() {
                        Some(conn) if watch_backend => conn.recv().await,
                        _ => std::future::pending().await,
                    }
                };
                let limit = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                let begin_unsent = self.txn.begin_unsent;
                let send_begin = async {
                    if begin_unsent {
                        tokio::time::sleep(BEGIN_HELD_FOR).await
                    } else {
                        std::future::pending().await
                    }
                };
                // In a fixed order (no random draw per wait): the client's
                // message first, so a flood of notifications never holds
                // back its queries (what the backend sends unasked stays
                // in order: the relay meets it before the replies); the
                // timers last, which a message makes moot.
                let waiting = async {
                    tokio::select! {
                        biased;
                        next = read => Idle::Client(next),
                        msg = unsolicited => Idle::Backend(msg),
                        n = notified => Idle::Notified(n),
                        _ = limit => Idle::TimedOut,
                        _ = send_begin => Idle::SendBegin,
                    }
                };
                // The shutdown first: a statement that is already waiting
                // when the drain begins is not started at an idle point.
                let stopping = self.stopping.next().begun();
                tokio::select! {
                    biased;
                    () = stopping => Idle::Stopping,
                    event = waiting => event,
                }
            };
            match event {
                Idle::Client(Ok(m)) => return Ok(m),
                Idle::Client(Err(FrameError::TooLarge(len, max))) => {
                    return Err(self.fatal(canned::message_too_large(len, max)).await)
                }
                Idle::Client(Err(e)) => return Err(e.into()),
                Idle::TimedOut => {
                    return Err(self.fatal(canned::idle_in_transaction_timeout()).await)
                }
                Idle::Backend(Ok(msg)) => {
                    self.unsolicited(&msg);
                    self.client.flush().await?;
                }
                Idle::Backend(Err(e)) => return Err(self.backend_lost(e).await),
                Idle::SendBegin => {
                    self.txn.begin_unsent = false;
                    // A connection that broke is found by the client's
                    // next message, which it fails (`relay::settle_begin`).
                    if let Some(conn) = self.lease.conn_mut() {
                        let _ = conn.flush().await;
                    }
                }
                Idle::Notified(Some(n)) => {
                    let mut rest = Vec::with_capacity(n.channel.len() + n.payload.len() + 2);
                    rest.extend_from_slice(n.channel.as_bytes());
                    rest.push(0);
                    rest.extend_from_slice(n.payload.as_bytes());
                    rest.push(0);
                    self.client
                        .send(&protocol::notification_response(n.pid, &rest));
                    self.client.flush().await?;
                }
                Idle::Notified(None) => {
                    self.notifications = None;
                    if self.shared.listen.overflowed(self.id) {
                        let err = SqlError::fatal(
                            SqlState::OUT_OF_MEMORY,
                            format!(
                                "more than {} bytes of notifications wait for this session: its client does not read them",
                                crate::frontend::listen::HELD_LIMIT
                            ),
                        );
                        return Err(self.fatal(err).await);
                    }
                }
                Idle::Stopping => {
                    if self.stopping.terminate.is_none() {
                        self.stopping.terminate = Some(self.shared.terminate.watch());
                    }
                }
            }
        }
    }

    /// Between transactions, with nothing of an exchange under way: the
    /// drain may close the session here without losing anything the client
    /// was told.
    fn at_idle_point(&self) -> bool {
        !self.lease.status().in_transaction()
            && !self.replies.owed()
            && !self.replies.skipping()
            && !self.txn.forwarded_since_sync
    }

    /// A backend message nobody asked for: passed on at once.
    fn unsolicited(&mut self, msg: &Message) {
        use crate::protocol::tags::backend as tag;
        match msg.tag {
            tag::PARAMETER_STATUS => {
                if let Some(conn) = self.lease.conn_mut() {
                    conn.note_parameter_status(msg);
                }
                self.client_parameter_status(msg);
            }
            tag::NOTIFICATION_RESPONSE => {
                let notification = self.notification_for_client(msg);
                self.client.send(&notification);
            }
            _ => {
                self.backend_ended |= SqlError::ends_connection(msg);
                self.client.send(msg);
            }
        }
    }

    /// A NotificationResponse as the client must see it: a notification
    /// from this session's own backend carries the pid the client was given
    /// in BackendKeyData (clients compare it to skip their own).
    pub(super) fn notification_for_client(&self, msg: &Message) -> Message {
        let own = self.lease.conn().map(|c| c.key().pid);
        let mut r = msg.reader();
        match (r.i32(), own) {
            (Ok(pid), Some(own)) if pid == own => {
                protocol::notification_response(self.id as i32, r.remaining())
            }
            _ => msg.clone(),
        }
    }
}
