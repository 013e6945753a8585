//! How a background task (timers, wake-ups, maintenance) reports its
//! backend: one WARN when it loses it, one INFO when it is back, and only
//! DEBUG for the retries in between. A PostgreSQL restart is one event to
//! an operator, not a WARN per retry of every loop.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// One task's view of its backend connection.
pub struct Health {
    task: &'static str,
    /// When the current outage began, and how many attempts failed since.
    outage: Option<(Instant, u64)>,
}

impl Health {
    pub fn new(task: &'static str) -> Health {
        Health { task, outage: None }
    }

    /// An attempt failed because the backend could not be reached or the
    /// connection broke.
    pub fn lost(&mut self, why: &dyn Display) {
        match &mut self.outage {
            None => {
                tracing::warn!(task = self.task, "lost the backend: {why}; retrying");
                self.outage = Some((Instant::now(), 1));
            }
            Some((_, failures)) => {
                *failures += 1;
                tracing::debug!(task = self.task, "backend still unreachable: {why}");
            }
        }
    }

    /// An attempt succeeded: ends an outage, if there was one.
    pub fn ok(&mut self) {
        if let Some((since, failures)) = self.outage.take() {
            tracing::info!(
                task = self.task,
                "backend back after {:.1?} ({failures} failed attempts)",
                since.elapsed()
            );
        }
    }
}

/// A tokio-postgres client on `config`, retried every second until the
/// backend takes it; the outage is reported through `health`.
pub async fn connect_client(
    config: &tokio_postgres::Config,
    health: &mut Health,
) -> tokio_postgres::Client {
    loop {
        match config.connect(tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                return client;
            }
            Err(e) => {
                health.lost(&e);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
