//! The stream workload: one stream (tumbling 1 s windows per key, count and
//! sum) over a source pushed at a paced 5,000 msg/s by four producers, one
//! partition each, for a fixed time. Sampled every 250 ms: the stream's lag
//! (`SHOW STREAMS`: source messages its group has not acknowledged yet).
//! Reported: the rate offered and achieved, the stream's consumption rate,
//! its largest and median lag while the producers ran, and how long it
//! took to reach lag 0 after they stopped. A stream keeps up when its lag
//! stays bounded (a few batches) instead of growing with time.

use crate::runner::median;
use crate::setup::{self, BoxError};
use crate::Bench;
use std::time::{Duration, Instant};

/// The offered rate, in messages per second.
pub const STREAM_RATE: u64 = 5_000;
const PRODUCERS: u64 = 4;
/// Messages per PUSH statement; each producer sends one every
/// `BATCH * PRODUCERS / STREAM_RATE` seconds.
const BATCH: u64 = 25;

#[derive(Debug, Clone, Default)]
pub struct StreamLag {
    pub offered: f64,
    pub pushed_rate: f64,
    pub consumed_rate: f64,
    pub max_lag: i64,
    pub median_lag: f64,
    pub drain: Option<Duration>,
    pub windows: i64,
    /// A second stream reading the whole backlog: messages per second.
    pub catch_up_rate: Option<f64>,
}

async fn lag_of(client: &tokio_postgres::Client, name: &str) -> Result<(i64, i64, i64), BoxError> {
    for m in client.simple_query("SHOW STREAMS").await? {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            if r.get("stream") == Some(name) {
                let n = |c: &str| r.get(c).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
                return Ok((n("lag"), n("messages"), n("windows_emitted")));
            }
        }
    }
    Err(format!("stream {name} not listed").into())
}

impl Bench {
    pub async fn stream_lag(&mut self) -> Result<(), BoxError> {
        let source = self.next_name("streamsrc");
        let sink = self.next_name("streamsink");
        let name = self.next_name("stream");
        let secs = if self.args.quick { 10 } else { 30 };
        self.qw_admin
            .simple_query(&format!(
                "CREATE STREAM {name} FROM {source} KEY BY payload->>'k' WINDOW TUMBLING '1s' \
                 AGGREGATE (count(*) AS n, sum((payload->>'v')::numeric) AS total) INTO {sink}"
            ))
            .await?;
        eprintln!("bench: stream: {STREAM_RATE} msg/s offered for {secs} s");
        let period = Duration::from_secs_f64((BATCH * PRODUCERS) as f64 / STREAM_RATE as f64);
        let began = Instant::now();
        let until = began + Duration::from_secs(secs);
        let mut producers = Vec::new();
        for p in 0..PRODUCERS {
            let client = setup::connect(&self.proxy_cfg).await?;
            let sql = format!(
                "PUSH INTO {source} (partition, payload) VALUES {}",
                (0..BATCH)
                    .map(|i| format!("('p{p}', '{{\"k\": \"k{}\", \"v\": {i}}}')", i % 8))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            producers.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut pushed = 0u64;
                while Instant::now() < until {
                    tick.tick().await;
                    if client.simple_query(&sql).await.is_err() {
                        break;
                    }
                    pushed += BATCH;
                }
                pushed
            }));
        }
        let mut lags = Vec::new();
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            lags.push(lag_of(&self.qw_admin, &name).await?.0);
        }
        let mut pushed = 0;
        for p in producers {
            pushed += p.await.unwrap_or(0);
        }
        let push_secs = began.elapsed().as_secs_f64();
        let stopped = Instant::now();
        let mut drain = None;
        let mut last = (0, 0, 0);
        while stopped.elapsed() < Duration::from_secs(120) {
            last = lag_of(&self.qw_admin, &name).await?;
            if last.0 == 0 && last.1 as u64 >= pushed {
                drain = Some(stopped.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut sorted: Vec<f64> = lags.iter().map(|l| *l as f64).collect();
        sorted.sort_by(f64::total_cmp);
        let mut result = StreamLag {
            offered: STREAM_RATE as f64,
            pushed_rate: pushed as f64 / push_secs,
            consumed_rate: last.1 as f64 / (push_secs + drain.map_or(0.0, |d| d.as_secs_f64())),
            max_lag: lags.iter().copied().max().unwrap_or(0),
            median_lag: if sorted.is_empty() {
                0.0
            } else {
                median(&mut sorted)
            },
            drain,
            windows: last.2,
            catch_up_rate: None,
        };
        // Capacity: a second stream over the same source reads the whole
        // backlog from the beginning, as fast as the runner goes.
        let catch_up_name = self.next_name("stream");
        let catch_up_sink = self.next_name("streamsink");
        let began = Instant::now();
        self.qw_admin
            .simple_query(&format!(
                "CREATE STREAM {catch_up_name} FROM {source} KEY BY payload->>'k' WINDOW TUMBLING '1s' \
                 AGGREGATE (count(*) AS n, sum((payload->>'v')::numeric) AS total) INTO {catch_up_sink}"
            ))
            .await?;
        while began.elapsed() < Duration::from_secs(300) {
            let (lag, messages, _) = lag_of(&self.qw_admin, &catch_up_name).await?;
            if lag == 0 && messages as u64 >= pushed {
                result.catch_up_rate = Some(messages as f64 / began.elapsed().as_secs_f64());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.qw_admin
            .simple_query(&format!("DROP STREAM {catch_up_name}"))
            .await?;
        eprintln!("bench: stream: {result:?}");
        self.extras.notes.push(format!(
            "stream: {:.0} msg/s offered, {:.0} pushed, {:.0} consumed by the stream; lag while pushing median {:.0}, max {} messages; lag 0 {} after the producers stopped; {} windows emitted; a second stream read the {}-message backlog at {} msg/s",
            result.offered,
            result.pushed_rate,
            result.consumed_rate,
            result.median_lag,
            result.max_lag,
            result.drain.map_or("not reached within 120 s".to_string(), |d| format!("{:.2} s", d.as_secs_f64())),
            result.windows,
            pushed,
            result.catch_up_rate.map_or("n/a".to_string(), |r| format!("{r:.0}")),
        ));
        self.extras.stream = Some(result);
        self.qw_admin
            .simple_query(&format!("DROP STREAM {name}"))
            .await?;
        Ok(())
    }
}
