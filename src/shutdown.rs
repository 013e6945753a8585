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

use tokio_util::sync::CancellationToken;

/// The trigger, owned by the server.
#[derive(Default)]
pub struct Shutdown {
    drain: CancellationToken,
    terminate: CancellationToken,
    stop: CancellationToken,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// A signal of the last step, for a background loop.
    pub fn signal(&self) -> ShutdownSignal {
        ShutdownSignal {
            token: self.stop.clone(),
        }
    }

    /// A signal of the first step: stop accepting, close idle sessions.
    pub fn drain_signal(&self) -> ShutdownSignal {
        ShutdownSignal {
            token: self.drain.clone(),
        }
    }

    /// A signal of the second step: close every session now.
    pub fn terminate_signal(&self) -> ShutdownSignal {
        ShutdownSignal {
            token: self.terminate.clone(),
        }
    }

    /// Step 1; idempotent.
    pub fn begin_drain(&self) {
        self.drain.cancel();
    }

    /// Step 2 (and step 1 if it has not begun); idempotent.
    pub fn terminate(&self) {
        self.drain.cancel();
        self.terminate.cancel();
    }

    /// Every step at once; idempotent.
    pub fn begin(&self) {
        self.terminate();
        self.stop.cancel();
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

    /// A signal of the same step for one task alone: waiting on it touches
    /// only that task's own node, so many sessions waiting at once never
    /// contend on one lock (the child leaves the tree when dropped).
    pub fn child(&self) -> ShutdownSignal {
        ShutdownSignal {
            token: self.token.child_token(),
        }
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
        let child = drain.child();
        shutdown.begin_drain();
        assert!(drain.has_begun() && child.has_begun());
        child.begun().await;
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
