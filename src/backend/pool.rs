//! The backend pool: deadpool managing raw connections.
//!
//! A connection is handed out for one transaction (or one pinned session)
//! and comes back only when it is idle and clean; anything else is closed
//! instead of recycled.

use super::conn::{BackendConn, BackendError, BackendTarget};
use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub struct Manager {
    target: Arc<BackendTarget>,
    next_id: AtomicU64,
}

impl managed::Manager for Manager {
    type Type = BackendConn;
    type Error = BackendError;

    async fn create(&self) -> Result<BackendConn, BackendError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        BackendConn::connect(&self.target, id).await
    }

    async fn recycle(&self, conn: &mut BackendConn, _: &Metrics) -> RecycleResult<BackendError> {
        if conn.broken || conn.status.in_transaction() || conn.has_unflushed() {
            return Err(RecycleError::message("connection not clean"));
        }
        // Each borrower chooses how its calls end.
        conn.autosync = false;
        conn.trim_prepared(MAX_PREPARED_PER_CONNECTION)
            .await
            .map_err(RecycleError::Backend)?;
        Ok(())
    }
}

/// Prepared statements a pooled connection keeps before it deallocates
/// them all (clients' statements with proxy-global names accumulate on
/// every connection their sessions land on).
pub const MAX_PREPARED_PER_CONNECTION: usize = 1000;

pub type Pool = managed::Pool<Manager>;
pub type PooledConn = managed::Object<Manager>;

pub fn build_pool(target: Arc<BackendTarget>, size: usize) -> Result<Pool, BackendError> {
    managed::Pool::builder(Manager {
        target,
        next_id: AtomicU64::new(1),
    })
    .max_size(size)
    .runtime(deadpool::Runtime::Tokio1)
    .create_timeout(Some(std::time::Duration::from_secs(30)))
    .build()
    .map_err(|e| BackendError::Config(e.to_string()))
}

/// Returns a connection to the pool if it is clean, else closes it.
pub fn release(conn: PooledConn) {
    if conn.broken || conn.status.in_transaction() || conn.has_unflushed() {
        drop(managed::Object::take(conn));
    } else {
        drop(conn);
    }
}

/// Closes a connection whose state the pool cannot vouch for.
pub fn discard(conn: PooledConn) {
    drop(managed::Object::take(conn));
}

/// A connection from `pool`.
pub async fn checkout(pool: &Pool) -> Result<PooledConn, BackendError> {
    pool.get().await.map_err(|e| match e {
        managed::PoolError::Backend(b) => b,
        other => BackendError::Protocol(other.to_string()),
    })
}
