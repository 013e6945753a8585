//! Shutdown as a type. The server owns the one [`Shutdown`]; the listener,
//! the sessions (through `frontend::Shared`) and every background loop hold
//! a [`ShutdownSignal`] and stop at their next await once it has begun.
//!
//! A signal can only be waited on, never triggered: a task cannot stop its
//! siblings. Dropping the `Shutdown` begins shutdown too, so a server that
//! is dropped without [`Server::shutdown`](crate::server::Server::shutdown)
//! stops listening all the same.

use tokio_util::sync::CancellationToken;

/// The trigger, owned by the server.
#[derive(Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// A signal for one more task.
    pub fn signal(&self) -> ShutdownSignal {
        ShutdownSignal {
            token: self.token.clone(),
        }
    }

    /// Tells every holder of a signal; idempotent.
    pub fn begin(&self) {
        self.token.cancel();
    }
}

impl Drop for Shutdown {
    fn drop(&mut self) {
        self.begin();
    }
}

/// What a task holds to learn that shutdown has begun.
#[derive(Clone)]
pub struct ShutdownSignal {
    token: CancellationToken,
}

impl ShutdownSignal {
    /// Resolves once shutdown has begun (at once if it already has). Meant
    /// as one branch of a `tokio::select!` beside the task's own work.
    pub async fn begun(&self) {
        self.token.cancelled().await
    }

    pub fn has_begun(&self) -> bool {
        self.token.is_cancelled()
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
    async fn dropping_the_trigger_begins_shutdown() {
        let shutdown = Shutdown::new();
        let signal = shutdown.signal();
        drop(shutdown);
        assert!(signal.has_begun());
        signal.begun().await;
    }
}
