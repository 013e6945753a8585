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

use accept::Listeners;
use client::Peer;
pub use shared::{CancelRegistry, FrontendConfig, PoolMode, SessionHandle, Shared, StatementNames};
use std::sync::Arc;

/// Accepts clients until the drain begins; the listeners are closed then
/// (the Unix socket's file removed), so a client connecting later is
/// refused by the kernel.
/// Sessions already in drain on their own (`session/idle.rs`); a client
/// whose startup was under way when the drain began gets 57P03 instead of
/// a session.
pub async fn serve(listeners: Listeners, shared: Arc<Shared>) {
    let shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            accepted = listeners.accept() => match accepted {
                Ok((mut stream, peer)) => {
                    if shared.config.users.is_none()
                        && matches!(peer, Peer::Tcp(addr) if !addr.ip().is_loopback())
                    {
                        errors::send_fatal(&mut stream, &crate::protocol::SqlError::fatal(crate::protocol::SqlState::INVALID_AUTHORIZATION_SPECIFICATION, "no users file: queenwire accepts loopback connections only")).await;
                        continue;
                    }
                    let Some(slot) = shared.slots.try_take() else {
                        errors::send_fatal(&mut stream, &crate::protocol::SqlError::fatal(crate::protocol::SqlState::TOO_MANY_CONNECTIONS, "sorry, too many clients already")).await;
                        continue;
                    };
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let _slot = slot;
                        // A silent or slow client cannot hold a slot forever.
                        // Nor hold up a drain: its startup is abandoned.
                        let started = tokio::select! {
                            started = tokio::time::timeout(
                                shared.config.startup_timeout,
                                startup::startup(&shared, stream),
                            ) => started,
                            () = shared.shutdown.begun() => return,
                        };
                        let Ok(Some(mut started)) = started else {
                            return;
                        };
                        if shared.shutdown.has_begun() {
                            let err = crate::protocol::SqlError::fatal(
                                crate::protocol::SqlState::CANNOT_CONNECT_NOW,
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
