//! Shutdown as a type, in three steps. The server owns the one
//! [`Shutdown`]; the listener and the sessions (through `frontend::Shared`)
//! and every background loop hold a [`ShutdownSignal`] of the step they
//! stop at:
//!
//! 1. **drain** — the listener stops accepting, parked POP WAITs end with
//!    zero rows, and each session closes (57P01) at its next idle point
//!    between transactions; a session inside a transaction block may still
//!    COMMIT;
//! 2. **terminate** — the drain timeout passed: every session left closes
//!    now (its transaction rolled back);
//! 3. **stop** — the sessions are gone: the background loops stop.
//!
//! A signal can only be waited on, never triggered: a task cannot stop its
//! siblings. Dropping the `Shutdown` begins every step, so a server that is
//! dropped without [`Server::shutdown`](crate::server::Server::shutdown)
//! stops listening all the same.

use futures::task::AtomicWaker;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio_util::sync::CancellationToken;

/// The trigger, owned by the server.
#[derive(Default)]
pub struct Shutdown {
    drain: Step,
    terminate: Step,
    stop: Step,
}

/// One step: a token for the tasks that wait on it now and then, and the
/// watches of the tasks that wait on it between every two requests.
#[derive(Default)]
struct Step {
    token: CancellationToken,
    watches: Arc<Watches>,
}

#[derive(Default)]
struct Watches {
    list: Mutex<WatchList>,
}

#[derive(Default)]
struct WatchList {
    watches: Vec<Weak<WatchState>>,
    /// Length after the last sweep of watches that are gone.
    swept: usize,
}

impl Step {
    fn begin(&self) {
        self.token.cancel();
        self.watches.fire();
    }

    fn signal(&self) -> ShutdownSignal {
        ShutdownSignal {
            token: self.token.clone(),
            watches: self.watches.clone(),
        }
    }
}

impl Watches {
    fn lock(&self) -> std::sync::MutexGuard<'_, WatchList> {
        // A panic while the lock was held left a valid list behind.
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fire(&self) {
        for watch in self.lock().watches.iter().filter_map(Weak::upgrade) {
            watch.fire();
        }
    }

    fn add(&self, watch: &Arc<WatchState>) {
        let mut list = self.lock();
        // Watches of tasks that ended are swept once the list has doubled
        // since the last sweep: the list stays within twice the live ones.
        if list.watches.len() >= 2 * list.swept.max(16) {
            list.watches.retain(|w| w.strong_count() > 0);
            list.swept = list.watches.len();
        }
        list.watches.push(Arc::downgrade(watch));
    }
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// A signal of the last step, for a background loop.
    pub fn signal(&self) -> ShutdownSignal {
        self.stop.signal()
    }

    /// A signal of the first step: stop accepting, close idle sessions.
    pub fn drain_signal(&self) -> ShutdownSignal {
        self.drain.signal()
    }

    /// A signal of the second step: close every session now.
    pub fn terminate_signal(&self) -> ShutdownSignal {
        self.terminate.signal()
    }

    /// Step 1; idempotent.
    pub fn begin_drain(&self) {
        self.drain.begin();
    }

    /// Step 2 (and step 1 if it has not begun); idempotent.
    pub fn terminate(&self) {
        self.drain.begin();
        self.terminate.begin();
    }

    /// Every step at once; idempotent.
    pub fn begin(&self) {
        self.terminate();
        self.stop.begin();
    }
}

impl Drop for Shutdown {
    fn drop(&mut self) {
        self.begin();
    }
}

/// What a task holds to learn that a step of the shutdown has begun.
#[derive(Clone)]
pub struct ShutdownSignal {
    token: CancellationToken,
    watches: Arc<Watches>,
}

impl ShutdownSignal {
    /// Resolves once the step has begun (at once if it already has). Meant
    /// as one branch of a `tokio::select!` beside the task's own work.
    pub async fn begun(&self) {
        self.token.cancelled().await
    }

    pub fn has_begun(&self) -> bool {
        self.token.is_cancelled()
    }

    /// A watch of this step for one task that waits on it again and again
    /// (a session, between every two requests): waiting on it costs no
    /// lock and no allocation, and many tasks waiting at once share
    /// nothing. Taking one locks the step's list once.
    pub fn watch(&self) -> Watch {
        let state = Arc::new(WatchState::default());
        self.watches.add(&state);
        // Begun before the watch was listed: the firing missed it.
        if self.token.is_cancelled() {
            state.fire();
        }
        Watch { state }
    }
}

/// One task's watch on one step of the shutdown ([`ShutdownSignal::watch`]).
pub struct Watch {
    state: Arc<WatchState>,
}

#[derive(Default)]
struct WatchState {
    fired: AtomicBool,
    waker: AtomicWaker,
}

impl WatchState {
    fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        self.waker.wake();
    }
}

impl Watch {
    pub fn has_begun(&self) -> bool {
        self.state.fired.load(Ordering::Acquire)
    }

    /// Resolves once the step has begun (at once if it already has). Only
    /// the task that owns the watch waits on it.
    pub async fn begun(&mut self) {
        std::future::poll_fn(|cx| {
            // Registered before the flag is read: a firing in between
            // wakes this waker.
            self.state.waker.register(cx.waker());
            if self.has_begun() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn every_signal_sees_the_shutdown_begin() {
        let shutdown = Shutdown::new();
        let (a, b) = (shutdown.signal(), shutdown.signal());
        assert!(!a.has_begun());
        let waiting = tokio::spawn(async move { a.begun().await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished());
        shutdown.begin();
        waiting.await.unwrap();
        assert!(b.has_begun());
        // A signal taken after the start resolves at once.
        shutdown.signal().begun().await;
    }

    #[tokio::test]
    async fn the_steps_begin_in_order() {
        let shutdown = Shutdown::new();
        let (drain, terminate, stop) = (
            shutdown.drain_signal(),
            shutdown.terminate_signal(),
            shutdown.signal(),
        );
        let mut watch = drain.watch();
        assert!(!watch.has_begun());
        shutdown.begin_drain();
        assert!(drain.has_begun() && watch.has_begun());
        watch.begun().await;
        // A watch taken after the step began has begun too.
        drain.watch().begun().await;
        assert!(!terminate.has_begun() && !stop.has_begun());
        shutdown.terminate();
        assert!(terminate.has_begun() && !stop.has_begun());
        shutdown.begin();
        assert!(stop.has_begun());
    }

    #[tokio::test]
    async fn dropping_the_trigger_begins_shutdown() {
        let shutdown = Shutdown::new();
        let (signal, drain) = (shutdown.signal(), shutdown.drain_signal());
        drop(shutdown);
        assert!(signal.has_begun() && drain.has_begun());
        signal.begun().await;
    }
}
