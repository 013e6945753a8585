//! The seam between a session and the engine: the session lends the engine
//! a backend connection for a statement, and tells it where the session's
//! transaction stands. The engine never sees the client's wire, the pool or
//! the session's bookkeeping.

use super::lock_order::LockOrder;
use crate::backend::{BackendConn, BackendError};
use crate::protocol::TxStatus;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Notify;

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
    fn cancel_signal(&self) -> Arc<Notify>;

    /// The lock order of the session's current transaction block.
    fn lock_order(&mut self) -> &mut LockOrder;
}
