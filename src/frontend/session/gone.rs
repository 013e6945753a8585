//! A client that leaves while its statement runs. Whatever the session
//! waits on for a statement (the backend's replies, a connection of the
//! pool, the engine) it also watches the client's socket: once the client
//! has closed it, the session ends at once. Its statement is cancelled —
//! on PostgreSQL by a CancelRequest, or a POP … WAIT in the proxy — and
//! the connection it held is closed (`Lease::finish`), so PostgreSQL rolls
//! back and the pool has the slot again without waiting for the statement.
//! PostgreSQL itself would run the statement to its end (unless
//! `client_connection_check_interval` is set) and hold the connection that
//! long; through a pool, that connection is one other clients wait for.

use super::End;
use crate::backend::BackendTarget;
use crate::frontend::client::Client;
use crate::frontend::SessionHandle;
use std::future::Future;
use std::time::Duration;

/// How much of what a client pipelines behind a running statement is read
/// ahead while its socket is watched.
const READ_AHEAD: usize = 256 * 1024;

/// A cancel that reaches a statement between two of its steps (between a
/// POP's attempts, or two calls) finds nothing to cancel, so it is sent
/// again this often until the statement ends.
const CANCEL_AGAIN: Duration = Duration::from_millis(100);

/// `reply`, unless the client leaves first (`End::ClientGone`); whatever
/// `reply` was doing is dropped with it (the session ends and closes its
/// backend connection). `reply` must be cancel-safe.
pub(super) async fn unless_gone<T>(
    client: &mut Client,
    reply: impl Future<Output = T>,
) -> Result<T, End> {
    tokio::select! {
        biased;
        r = reply => Ok(r),
        () = client.gone(READ_AHEAD) => Err(End::ClientGone),
    }
}

/// Runs `statement` to its end; if the client leaves meanwhile, the
/// statement is cancelled (as by the client's own cancel request) and,
/// once it has ended, `End::ClientGone` stands for its outcome. Used where
/// the statement must not be dropped half-way (the engine's bookkeeping:
/// a lease, a parked wait).
pub(super) async fn cancelled_if_gone<T>(
    client: &mut Client,
    handle: &SessionHandle,
    target: &BackendTarget,
    statement: impl Future<Output = T>,
) -> Result<T, End> {
    let mut statement = std::pin::pin!(statement);
    tokio::select! {
        biased;
        r = &mut statement => return Ok(r),
        () = client.gone(READ_AHEAD) => {}
    }
    loop {
        if let Err(e) = handle.cancel_statement(target).await {
            tracing::debug!("cancelling the statement of a client that left failed: {e}");
        }
        if tokio::time::timeout(CANCEL_AGAIN, &mut statement)
            .await
            .is_ok()
        {
            return Err(End::ClientGone);
        }
    }
}
