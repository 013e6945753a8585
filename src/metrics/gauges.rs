//! Gauges read from PostgreSQL at scrape time: queue depth and DLQ depth
//! (`queen.queue_depth`'s numbers) and group lag (`queen.group_lag`), on
//! one connection of the exporter's own, cached for [`CACHE_FOR`] so that
//! scrapes in quick succession (several Prometheus servers, a dashboard)
//! cost one read. The series are bounded like the counters: depth for the
//! first `cap` queues in (tenant, queue) order only (the rest are counted
//! in [`Snapshot::omitted_queues`]: summing their pending messages would
//! cost the read of every queue the cap exists to avoid), lag for the
//! first `cap` groups with the rest summed into `other`.
//!
//! The readiness probe asks a second connection whether the schema is
//! there (so a slow read of the views never holds up a probe); a failure
//! to connect or to answer within [`PROBE_TIMEOUT`] is "not ready".

use crate::backend::call::query;
use crate::calls::metrics::{GroupLag, QueueCount, QueueDepth, SchemaApplied};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long one read of the views serves scrapes.
pub const CACHE_FOR: Duration = Duration::from_secs(5);
/// How long a readiness answer serves probes.
pub const READY_CACHE_FOR: Duration = Duration::from_secs(1);
/// A connect or a query slower than this counts as a failure.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// One queue's gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Depth {
    pub tenant: String,
    pub queue: String,
    pub messages: i64,
    pub pending: i64,
    pub dead_lettered: i64,
}

/// One group's lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lag {
    pub tenant: String,
    pub queue: String,
    pub group: String,
    pub lag: i64,
}

/// What one read of the views found.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub depth: Vec<Depth>,
    /// Queues past the cap, without depth gauges.
    pub omitted_queues: i64,
    pub lag: Vec<Lag>,
    /// The read succeeded.
    pub ok: bool,
}

/// A connection of the exporter's own and its last answer.
struct Probe<T> {
    client: Option<tokio_postgres::Client>,
    last: Option<(Instant, T)>,
}

impl<T> Default for Probe<T> {
    fn default() -> Probe<T> {
        Probe {
            client: None,
            last: None,
        }
    }
}

pub struct Gauges {
    config: tokio_postgres::Config,
    cap: usize,
    views: Mutex<Probe<Snapshot>>,
    ready: Mutex<Probe<bool>>,
}

impl Gauges {
    /// `config`: a connection as queenwire's own role (it sees every
    /// tenant's rows of the views).
    pub fn new(config: tokio_postgres::Config, cap: usize) -> Gauges {
        Gauges {
            config,
            cap,
            views: Mutex::default(),
            ready: Mutex::default(),
        }
    }

    /// The gauges, read again when the cached read is older than
    /// [`CACHE_FOR`].
    pub async fn snapshot(&self) -> Snapshot {
        let mut state = self.views.lock().await;
        if let Some((at, snap)) = &state.last {
            if at.elapsed() < CACHE_FOR {
                return snap.clone();
            }
        }
        let snap = match tokio::time::timeout(PROBE_TIMEOUT, self.read(&mut state.client)).await {
            Ok(Ok(snap)) => snap,
            Ok(Err(e)) => {
                tracing::debug!("metrics: reading the queue views failed: {e}");
                state.client = None;
                Snapshot::default()
            }
            Err(_) => {
                state.client = None;
                Snapshot::default()
            }
        };
        state.last = Some((Instant::now(), snap.clone()));
        snap
    }

    /// The backend answers and the schema is applied.
    pub async fn ready(&self) -> bool {
        let mut state = self.ready.lock().await;
        if let Some((at, ready)) = state.last {
            if at.elapsed() < READY_CACHE_FOR {
                return ready;
            }
        }
        let probe = async {
            let client = connected(&self.config, &mut state.client).await?;
            let rows = query(client, &SchemaApplied)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<bool, String>(rows.first().and_then(|r| r.schema_applied) == Some(true))
        };
        let ready = match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(ready)) => ready,
            Ok(Err(e)) => {
                tracing::debug!("metrics: readiness probe failed: {e}");
                false
            }
            Err(_) => false,
        };
        if !ready {
            state.client = None;
        }
        state.last = Some((Instant::now(), ready));
        ready
    }

    async fn read(&self, client: &mut Option<tokio_postgres::Client>) -> Result<Snapshot, String> {
        let client = connected(&self.config, client).await?;
        let limit = i64::try_from(self.cap).unwrap_or(i64::MAX);
        let depth_rows = query(client, &QueueDepth { limit })
            .await
            .map_err(|e| e.to_string())?;
        let queues = query(client, &QueueCount)
            .await
            .map_err(|e| e.to_string())?
            .first()
            .and_then(|r| r.queues)
            .unwrap_or(0);
        let lag_rows = query(client, &GroupLag).await.map_err(|e| e.to_string())?;
        let depth: Vec<Depth> = depth_rows
            .into_iter()
            .map(|r| Depth {
                tenant: r.tenant_id.map(|t| t.to_string()).unwrap_or_default(),
                queue: r.queue.unwrap_or_default(),
                messages: r.messages.unwrap_or(0),
                pending: r.pending.unwrap_or(0),
                dead_lettered: r.dead_lettered.unwrap_or(0),
            })
            .collect();
        let omitted_queues = (queues - depth.len() as i64).max(0);
        let mut lag = Vec::new();
        let mut other_lag = 0i64;
        let mut lag_overflow = false;
        for r in lag_rows {
            let l = Lag {
                tenant: r.tenant_id.map(|t| t.to_string()).unwrap_or_default(),
                queue: r.queue.unwrap_or_default(),
                group: r.consumer_group.unwrap_or_default(),
                lag: r.lag.unwrap_or(0),
            };
            if lag.len() < self.cap {
                lag.push(l);
            } else {
                lag_overflow = true;
                other_lag += l.lag;
            }
        }
        if lag_overflow {
            lag.push(Lag {
                tenant: super::queues::OTHER.into(),
                queue: super::queues::OTHER.into(),
                group: super::queues::OTHER.into(),
                lag: other_lag,
            });
        }
        Ok(Snapshot {
            depth,
            omitted_queues,
            lag,
            ok: true,
        })
    }
}

/// The exporter's connection, made again when it is gone.
async fn connected<'c>(
    config: &tokio_postgres::Config,
    client: &'c mut Option<tokio_postgres::Client>,
) -> Result<&'c tokio_postgres::Client, String> {
    if client.as_ref().is_none_or(|c| c.is_closed()) {
        let (c, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        *client = Some(c);
    }
    client.as_ref().ok_or_else(|| "no connection".to_string())
}
