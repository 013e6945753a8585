//! The backend pool.
//!
//! A connection is handed out for one transaction (or one pinned session)
//! and comes back only when it is idle and clean; anything else is closed
//! instead of recycled.
//!
//! Taking a connection is on the path of every statement, so a free one
//! costs no allocation, no timer and no round trip: a semaphore permit
//! (one per connection the pool may open) taken without waiting, and the
//! most recently returned connection popped from a stack under a lock
//! (the warmest, and the others may idle out on the server's side
//! undisturbed). Connections live boxed, so handing one out and back moves
//! a pointer, not the connection. Only a checkout that must wait for a
//! permit sets a timer, and only one that finds no idle connection opens
//! one.

pub use super::conn::TimeoutType;
use super::conn::{BackendConn, BackendError};
use super::target::BackendTarget;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Prepared statements a pooled connection keeps before it deallocates
/// them all (clients' statements with proxy-global names accumulate on
/// every connection their sessions land on).
pub const MAX_PREPARED_PER_CONNECTION: usize = 1000;

/// The longest opening a connection may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// A pool of connections to one target (cheap to clone: it is shared).
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

/// Boxed: a connection goes in and out of the stack as a pointer.
#[allow(clippy::vec_box)]
type Idle = Vec<Box<BackendConn>>;

struct Inner {
    target: Arc<BackendTarget>,
    max_size: usize,
    /// Idle connections, the most recently returned last.
    idle: Mutex<Idle>,
    /// One permit per connection that may be handed out now.
    permits: Semaphore,
    /// Connections open, idle or handed out.
    size: AtomicUsize,
    /// Checkouts waiting for a permit.
    waiting: AtomicUsize,
}

/// A connection handed out. Dropped, it goes back to the pool if it is
/// clean (`BackendConn::is_clean`), else it is closed.
pub struct PooledConn {
    conn: Option<Box<BackendConn>>,
    pool: Arc<Inner>,
}

/// A pool's sizes, for the admin view and `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub max_size: usize,
    /// Connections open.
    pub size: usize,
    /// Of them, idle in the pool.
    pub available: usize,
    /// Checkouts waiting for a connection.
    pub waiting: usize,
}

pub fn build_pool(target: Arc<BackendTarget>, size: usize) -> Result<Pool, BackendError> {
    if size == 0 {
        return Err(BackendError::Config(
            "the backend pool needs at least one connection".into(),
        ));
    }
    Ok(Pool {
        inner: Arc::new(Inner {
            target,
            max_size: size,
            idle: Mutex::new(Vec::with_capacity(size)),
            permits: Semaphore::new(size),
            size: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
        }),
    })
}

impl Pool {
    pub fn status(&self) -> Status {
        let available = self.inner.idle_stack().len();
        Status {
            max_size: self.inner.max_size,
            size: self.inner.size.load(Ordering::Relaxed),
            available,
            waiting: self.inner.waiting.load(Ordering::Relaxed),
        }
    }

    /// Whether a checkout now would find a connection, or room for one,
    /// without waiting.
    pub fn has_free(&self) -> bool {
        self.inner.permits.available_permits() > 0
    }

    /// A connection, waiting at most `wait` for one to be free (`None`:
    /// however long it takes).
    async fn get(&self, wait: Option<Duration>) -> Result<PooledConn, BackendError> {
        let permit = match self.inner.permits.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                let _waiting = Counted::add(&self.inner.waiting);
                let acquire = self.inner.permits.acquire();
                let acquired = match wait {
                    None => acquire.await,
                    Some(wait) => tokio::time::timeout(wait, acquire)
                        .await
                        .map_err(|_| BackendError::PoolTimeout(TimeoutType::Wait))?,
                };
                // The semaphore is never closed.
                acquired.map_err(|_| BackendError::PoolClosed)?
            }
        };
        // From here the permit is the PooledConn's (or given back on an
        // error by `Slot`).
        permit.forget();
        let slot = Slot(Some(self.inner.clone()));
        loop {
            let Some(mut conn) = self.inner.idle_stack().pop() else {
                break;
            };
            // Counted until handed out, also if this checkout is dropped
            // while the connection is checked.
            let counted = Counted(&self.inner.size);
            if recycle(&mut conn).await {
                std::mem::forget(counted);
                return Ok(slot.fill(conn));
            }
        }
        let counted = Counted::add(&self.inner.size);
        let made =
            tokio::time::timeout(CREATE_TIMEOUT, BackendConn::connect(&self.inner.target)).await;
        match made {
            Ok(Ok(conn)) => {
                std::mem::forget(counted);
                Ok(slot.fill(Box::new(conn)))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(BackendError::PoolTimeout(TimeoutType::Create)),
        }
    }
}

impl Inner {
    fn idle_stack(&self) -> std::sync::MutexGuard<'_, Idle> {
        // A panic while the lock was held left a valid stack behind.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether an idle connection may serve again: clean, still open, with
/// nothing unread, and not holding too many prepared statements.
async fn recycle(conn: &mut BackendConn) -> bool {
    conn.is_clean()
        && conn.is_quiet()
        && conn
            .trim_prepared(MAX_PREPARED_PER_CONNECTION)
            .await
            .is_ok()
}

/// A permit taken for a checkout that has no connection yet: given back
/// if the checkout fails.
struct Slot(Option<Arc<Inner>>);

impl Slot {
    fn fill(mut self, conn: Box<BackendConn>) -> PooledConn {
        match self.0.take() {
            Some(pool) => PooledConn {
                conn: Some(conn),
                pool,
            },
            None => unreachable!("a slot is filled once"),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(pool) = self.0.take() {
            pool.permits.add_permits(1);
        }
    }
}

/// One count in a gauge, taken back when dropped: a checkout waiting for
/// a permit (`waiting`), or a connection counted in `size` that is neither
/// idle nor handed out yet (it was closed, or never opened, if dropped).
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn add(count: &'a AtomicUsize) -> Counted<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::ops::Deref for PooledConn {
    type Target = BackendConn;
    fn deref(&self) -> &BackendConn {
        match &self.conn {
            Some(conn) => conn,
            None => unreachable!("a pooled connection is taken only as it is dropped"),
        }
    }
}

impl std::ops::DerefMut for PooledConn {
    fn deref_mut(&mut self) -> &mut BackendConn {
        match &mut self.conn {
            Some(conn) => conn,
            None => unreachable!("a pooled connection is taken only as it is dropped"),
        }
    }
}

impl PooledConn {
    /// Closes the connection instead of giving it back.
    fn close(mut self) {
        if self.conn.take().is_some() {
            self.pool.size.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for PooledConn {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if conn.is_clean() {
                self.pool.idle_stack().push(conn);
            } else {
                self.pool.size.fetch_sub(1, Ordering::Relaxed);
                drop(conn);
            }
        }
        // The connection is back (or gone) before its permit is.
        self.pool.permits.add_permits(1);
    }
}

/// Returns a connection to the pool if it is clean, else closes it.
pub fn release(conn: PooledConn) {
    drop(conn);
}

/// Closes a connection whose state the pool cannot vouch for.
pub fn discard(conn: PooledConn) {
    conn.close();
}

/// A connection from `pool`.
pub async fn checkout(pool: &Pool) -> Result<PooledConn, BackendError> {
    pool.get(None).await
}

/// A connection from `pool` within `wait` (`None`: however long it
/// takes) of waiting for one to be free.
pub async fn checkout_within(
    pool: &Pool,
    wait: Option<Duration>,
) -> Result<PooledConn, BackendError> {
    pool.get(wait).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target nothing listens on: every connect is refused at once.
    fn unreachable_target() -> Arc<BackendTarget> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let config: tokio_postgres::Config = format!("host=127.0.0.1 port={port} user=nobody")
            .parse()
            .expect("a config");
        Arc::new(BackendTarget::from_config(&config).expect("a target"))
    }

    #[tokio::test]
    async fn a_failed_connect_gives_its_slot_back() {
        let pool = build_pool(unreachable_target(), 1).expect("a pool");
        // With one slot, a second checkout would wait for good if the
        // first failure kept it.
        for _ in 0..3 {
            let got = tokio::time::timeout(
                Duration::from_secs(10),
                checkout_within(&pool, Some(Duration::from_millis(200))),
            )
            .await
            .expect("the checkout did not hang");
            assert!(got.is_err());
            let status = pool.status();
            assert_eq!((status.size, status.available, status.waiting), (0, 0, 0));
        }
        assert!(build_pool(unreachable_target(), 0).is_err());
    }

    #[tokio::test]
    async fn a_checkout_dropped_while_connecting_leaves_nothing_counted() {
        // A server that accepts and never answers: connecting hangs.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a listener");
        let port = listener.local_addr().expect("an address").port();
        let held = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                kept.push(socket);
            }
        });
        let config: tokio_postgres::Config = format!("host=127.0.0.1 port={port} user=nobody")
            .parse()
            .expect("a config");
        let target = Arc::new(BackendTarget::from_config(&config).expect("a target"));
        let pool = build_pool(target, 1).expect("a pool");
        for _ in 0..2 {
            let dropped = tokio::time::timeout(Duration::from_millis(100), checkout(&pool)).await;
            assert!(dropped.is_err(), "connecting should hang");
            let status = pool.status();
            assert_eq!((status.size, status.available, status.waiting), (0, 0, 0));
            assert_eq!(pool.inner.permits.available_permits(), 1);
        }
        held.abort();
    }
}
