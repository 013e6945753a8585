//! The seam between a session and the engine: the session lends the engine
//! a backend connection for a statement, and tells it where the session's
//! transaction stands. The engine never sees the client's wire, the pool or
//! the session's bookkeeping.

use super::lock_order::LockOrder;
use crate::backend::{BackendConn, BackendError};
use crate::protocol::{SqlError, SqlState, TxStatus};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// A session's cancel requests as the proxy's own waits (a POP … WAIT)
/// see them.
#[derive(Default)]
pub struct CancelSignal {
    /// Notified (`notify_waiters`) by each cancel request.
    pub notify: Notify,
    waits: AtomicUsize,
}

impl CancelSignal {
    /// Marks a wait of the proxy's own as in progress until the mark drops.
    pub fn waiting(&self) -> WaitMark<'_> {
        self.waits.fetch_add(1, Ordering::SeqCst);
        WaitMark(self)
    }

    /// Ends the proxy's waits; whether one was in progress, in which case
    /// the statement was waiting in the proxy and nothing of it runs on a
    /// backend (a cancel forwarded there could only land on the client's
    /// next statement).
    pub fn cancel(&self) -> bool {
        let waiting = self.waits.load(Ordering::SeqCst) > 0;
        self.notify.notify_waiters();
        waiting
    }
}

/// A wait of the proxy's own in progress ([`CancelSignal::waiting`]).
pub struct WaitMark<'a>(&'a CancelSignal);

impl Drop for WaitMark<'_> {
    fn drop(&mut self) {
        self.0.waits.fetch_sub(1, Ordering::SeqCst);
    }
}

pub use crate::backend::call::CallEnd;

/// Where the session's transaction stands when a statement starts.
#[derive(Debug, Clone, Copy)]
pub struct TxnView {
    /// The held connection's status (Idle when none is held).
    pub status: TxStatus,
    /// Earlier messages of this pipeline are on the backend (its implicit
    /// transaction holds them) or their replies are still owed.
    pub pipeline_open: bool,
    /// The session keeps its connection for good (session state).
    pub pinned: bool,
}

impl TxnView {
    /// Nothing of the session's is on a backend: the statement may run
    /// anywhere (fused with other sessions' pushes, or parked without a
    /// connection).
    pub fn detached(&self) -> bool {
        !self.pinned && !self.pipeline_open && !self.status.in_transaction()
    }

    /// In a failed transaction block every statement but the block's end
    /// is refused, as PostgreSQL refuses it: before its arguments are
    /// read, so a bad argument does not hide the block's state.
    pub fn refuse_if_failed(&self) -> Result<(), SqlError> {
        if self.status == TxStatus::Failed {
            return Err(SqlError::error(
                SqlState::IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        Ok(())
    }
}

/// What a session lends the engine for one statement.
pub trait Lender: Send {
    /// The connection the statement runs on, acquired if none is held.
    fn connection(&mut self)
        -> impl Future<Output = Result<&mut BackendConn, BackendError>> + Send;

    /// The connection the session holds, if any (never acquires one).
    fn held(&mut self) -> Option<&mut BackendConn>;

    /// The session's transaction as it stands now.
    fn view(&self) -> TxnView;

    /// How calls end on the lent connection.
    fn call_end(&self) -> CallEnd;

    /// The statement waits (a POP … WAIT found nothing): if nothing of the
    /// session's holds the connection, end the proxy's own implicit
    /// transaction and give the connection back for the wait.
    fn park(&mut self) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Woken when the client sends a cancel request.
    fn cancel_signal(&self) -> Arc<CancelSignal>;

    /// The lock order of the session's current transaction block.
    fn lock_order(&mut self) -> &mut LockOrder;
}
