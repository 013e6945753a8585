//! The backend pool: deadpool managing raw connections.
//!
//! A connection is handed out for one transaction (or one pinned session)
//! and comes back only when it is idle and clean; anything else is closed
//! instead of recycled.

use super::conn::{BackendConn, BackendError};
use super::target::BackendTarget;
use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use std::sync::Arc;

pub struct Manager {
    target: Arc<BackendTarget>,
}

impl managed::Manager for Manager {
    type Type = BackendConn;
    type Error = BackendError;

    async fn create(&self) -> Result<BackendConn, BackendError> {
        BackendConn::connect(&self.target).await
    }

    async fn recycle(&self, conn: &mut BackendConn, _: &Metrics) -> RecycleResult<BackendError> {
        if !conn.is_clean() {
            return Err(RecycleError::message("connection not clean"));
        }
        if !conn.is_quiet() {
            return Err(RecycleError::message("the backend closed the connection"));
        }
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
    managed::Pool::builder(Manager { target })
        .max_size(size)
        .runtime(deadpool::Runtime::Tokio1)
        .create_timeout(Some(std::time::Duration::from_secs(30)))
        .build()
        .map_err(|e| BackendError::Config(e.to_string()))
}

/// A pool's refusal in the backend's own terms: a connection that could
/// not be made keeps its cause; a timeout or a closed pool are cases of
/// their own.
impl From<managed::PoolError<BackendError>> for BackendError {
    fn from(e: managed::PoolError<BackendError>) -> BackendError {
        use managed::{HookError, PoolError};
        match e {
            PoolError::Backend(e) | PoolError::PostCreateHook(HookError::Backend(e)) => e,
            PoolError::Timeout(stage) => BackendError::PoolTimeout(stage),
            PoolError::Closed => BackendError::PoolClosed,
            PoolError::NoRuntimeSpecified => {
                BackendError::Config("the pool has no runtime to time out with".into())
            }
            PoolError::PostCreateHook(HookError::Message(m)) => BackendError::Config(m.into()),
        }
    }
}

/// Returns a connection to the pool if it is clean, else closes it.
pub fn release(conn: PooledConn) {
    if !conn.is_clean() {
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
    pool.get().await.map_err(BackendError::from)
}

/// A connection from `pool` within `wait` (`None`: however long it
/// takes); past it, the pool's own wait timeout.
pub async fn checkout_within(
    pool: &Pool,
    wait: Option<std::time::Duration>,
) -> Result<PooledConn, BackendError> {
    match wait {
        None => checkout(pool).await,
        Some(wait) => tokio::time::timeout(wait, checkout(pool))
            .await
            .map_err(|_| BackendError::PoolTimeout(managed::TimeoutType::Wait))?,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use managed::{PoolError, TimeoutType};

    #[test]
    fn pool_refusals_are_cases_of_their_own() {
        let timeout = BackendError::from(PoolError::Timeout(TimeoutType::Wait));
        assert!(matches!(
            timeout,
            BackendError::PoolTimeout(TimeoutType::Wait)
        ));
        assert_eq!(
            timeout.to_string(),
            "backend pool: timed out waiting for a free connection"
        );
        assert!(matches!(
            BackendError::from(PoolError::<BackendError>::Closed),
            BackendError::PoolClosed
        ));
        // A connection that could not be made keeps its own cause.
        assert!(matches!(
            BackendError::from(PoolError::Backend(BackendError::Closed)),
            BackendError::Closed
        ));
    }
}
