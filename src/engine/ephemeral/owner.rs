//! The owner's side of the internal channel (`wire.rs`): accepts
//! connections of other queenwires, refuses any that does not prove it
//! knows this process's secret (published in `queen.ephemeral_peers`,
//! which no tenant role can read), and runs the requests they forward on
//! the queues this process owns, one at a time per connection. While a
//! request runs (a POP … WAIT), the connection still reads: a Cancel or
//! Stop for it ends the wait; the connection closing drops it.

use super::wire::{self, Inbound, Reply};
use super::Ephemeral;
use crate::shutdown::ShutdownSignal;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

/// An unauthenticated connection gets this long to finish the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts forwarding connections until `shutdown` begins.
pub(super) async fn serve(listener: TcpListener, hub: Arc<Ephemeral>, shutdown: ShutdownSignal) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = shutdown.begun() => return,
        };
        match accepted {
            Ok((stream, from)) => {
                let hub = hub.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        () = connection(stream, from, hub) => {}
                        () = shutdown.begun() => {}
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "the internal channel could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(mut stream: TcpStream, from: std::net::SocketAddr, hub: Arc<Ephemeral>) {
    let _ = stream.set_nodelay(true);
    let shaken = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        wire::accept(&mut stream, hub.internal.secret()),
    )
    .await;
    match shaken {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(%from, error = %e, "refused a connection to the internal channel");
            return;
        }
        Err(_) => {
            tracing::warn!(%from, "refused a connection to the internal channel: no handshake in time");
            return;
        }
    }
    let (mut rd, mut wr) = stream.into_split();
    // Frames are read by a task of their own, so reading for a Cancel
    // while a request runs never loses half a frame.
    let (tx, mut frames) = mpsc::channel::<Inbound>(4);
    let reader = tokio::spawn(async move {
        loop {
            let frame = match wire::read_frame(&mut rd, wire::MAX_FRAME).await {
                Ok(f) => f,
                Err(_) => return,
            };
            match Inbound::decode(&frame) {
                Ok(inbound) => {
                    if tx.send(inbound).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(%from, error = %e, "closing an internal connection: malformed frame");
                    return;
                }
            }
        }
    });
    while let Some(inbound) = frames.recv().await {
        // A Cancel or Stop that came after its request was answered.
        let Inbound::Request(req) = inbound else {
            continue;
        };
        let id = req.id;
        let (cancel, stop) = (Notify::new(), Notify::new());
        let reply: Reply = {
            let run = hub.serve_request(req, &cancel, &stop);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    reply = &mut run => break reply,
                    inbound = frames.recv() => match inbound {
                        Some(Inbound::Cancel(i)) if i == id => cancel.notify_one(),
                        Some(Inbound::Stop(i)) if i == id => stop.notify_one(),
                        Some(Inbound::Cancel(_) | Inbound::Stop(_)) => {}
                        Some(Inbound::Request(_)) => {
                            tracing::warn!(%from, "closing an internal connection: a second request before the first was answered");
                            reader.abort();
                            return;
                        }
                        // The forwarding side went away: what it asked is
                        // dropped with it.
                        None => return,
                    },
                }
            }
        };
        if wire::write_frame(&mut wr, &reply.encode()).await.is_err() {
            break;
        }
    }
    reader.abort();
}
