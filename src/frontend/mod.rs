//! The client side: the accept loop (here) over the listeners (`accept`:
//! TCP and the optional Unix socket), startup and authentication
//! (`startup`, `scram`), one session per client (`session`), what sessions
//! share (`shared`), the connection cap (`slots`), the client's socket
//! (`client`), bound parameters (`params`) and the edge where every
//! layer's error becomes the client's (`errors`).
//!
//! Owns the wire towards clients. Knows nothing of queue semantics: a
//! dialect statement is handed to the engine, which borrows the session's
//! backend connection through `engine::Lender`.

pub mod accept;
pub mod client;
pub mod encoding;
pub mod errors;
pub mod listen;
pub mod params;
pub mod scram;
pub mod session;
pub mod shared;
pub mod slots;
pub mod startup;
pub mod tls;

use crate::protocol::{SqlError, SqlState};
use accept::Listeners;
use client::Peer;
pub use shared::{CancelRegistry, FrontendConfig, PoolMode, SessionHandle, Shared, StatementNames};
use std::sync::Arc;
use std::time::Duration;

/// Refused clients being told why at once; more are closed with the error
/// sent straight away.
const MAX_REFUSALS_AT_ONCE: usize = 64;
/// How long a refused client has to send its startup packet.
const REFUSAL_WITHIN: Duration = Duration::from_secs(2);
/// How long a client whose startup is under way when the drain begins has
/// to finish it (and be told 57P03).
const STARTUP_GRACE_AT_DRAIN: Duration = Duration::from_secs(1);

/// Accepts clients until the drain begins; the listeners are closed then
/// (the Unix socket's file removed), so a client connecting later is
/// refused by the kernel.
/// Sessions already in drain on their own (`session/idle.rs`); a client
/// whose startup was under way when the drain began gets 57P03 instead of
/// a session.
pub async fn serve(listeners: Listeners, shared: Arc<Shared>) {
    let shutdown = shared.shutdown.clone();
    let refusals = Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS_AT_ONCE));
    loop {
        tokio::select! {
            accepted = listeners.accept() => match accepted {
                Ok((stream, peer)) => {
                    let slot = match admit(&shared, &peer) {
                        Ok(slot) => slot,
                        Err(refusal) => {
                            refuse(&shared, &refusals, stream, refusal).await;
                            continue;
                        }
                    };
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let _slot = slot;
                        // A silent or slow client cannot hold a slot forever.
                        // Nor hold up a drain for long: one whose startup is
                        // under way when it begins gets a moment to finish
                        // it and hear 57P03, else its startup is abandoned.
                        let startup = tokio::time::timeout(
                            shared.config.startup_timeout,
                            startup::startup(&shared, stream),
                        );
                        tokio::pin!(startup);
                        let started = tokio::select! {
                            started = &mut startup => started,
                            () = shared.shutdown.begun() => {
                                match tokio::time::timeout(STARTUP_GRACE_AT_DRAIN, &mut startup).await {
                                    Ok(started) => started,
                                    Err(_) => return,
                                }
                            }
                        };
                        let Ok(Some(mut started)) = started else {
                            return;
                        };
                        if shared.shutdown.has_begun() {
                            let err = SqlError::fatal(
                                SqlState::CANNOT_CONNECT_NOW,
                                "the database system is shutting down",
                            );
                            started.client.send_fatal(&err).await;
                            return;
                        }
                        let id = shared.next_session_id();
                        let secret: i32 = rand::random();
                        let handle = Arc::new(SessionHandle::default());
                        shared.registry.register(id as i32, secret, handle.clone());
                        let mut session = session::Session::new(id, shared.clone(), started, handle);
                        let end = match session.greet(secret).await {
                            Ok(()) => session.run().await,
                            Err(end) => end,
                        };
                        shared.registry.unregister(id as i32, secret);
                        tracing::debug!(session = id, %peer, ?end, "session ended");
                    });
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            () = shutdown.begun() => return,
        }
    }
}

/// The slot a client's session takes, or why it may have none.
fn admit(shared: &Shared, peer: &Peer) -> Result<slots::SessionSlot, SqlError> {
    if shared.config.users.is_none() && matches!(peer, Peer::Tcp(addr) if !addr.ip().is_loopback())
    {
        return Err(SqlError::fatal(
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            "no users file: queenwire accepts loopback connections only",
        ));
    }
    shared.slots.try_take().ok_or_else(|| {
        SqlError::fatal(
            SqlState::TOO_MANY_CONNECTIONS,
            "sorry, too many clients already",
        )
    })
}

/// Tells a refused client why: after its startup packet, by a task of its
/// own, while fewer than [`MAX_REFUSALS_AT_ONCE`] are being told; past
/// that, at once (a flood of them costs no more).
async fn refuse(
    shared: &Arc<Shared>,
    refusals: &Arc<tokio::sync::Semaphore>,
    mut stream: client::ClientStream,
    refusal: SqlError,
) {
    match refusals.clone().try_acquire_owned() {
        Ok(permit) => {
            let shared = shared.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let _ =
                    tokio::time::timeout(REFUSAL_WITHIN, startup::refuse(&shared, stream, refusal))
                        .await;
            });
        }
        Err(_) => errors::send_fatal(&mut stream, &refusal).await,
    }
}
