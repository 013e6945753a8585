//! The workloads measured once per run rather than per concurrency level:
//! POP latency against the number of partitions (and how fast PUSH
//! provisions new partitions), pgbench's TPC-B through queenwire and
//! directly, and queenwire's memory with 1,000 idle clients.

use crate::ops::Op;
use crate::pgbench::{find_pgbench, parse_tps, TPCB_SCALE};
use crate::runner::{percentile, run_slice, Slice, SliceSpec};
use crate::setup::{self, BoxError};
use crate::{duration, Bench};
use std::process::Command;
use std::time::Duration;

/// Partition counts of the POP-latency workload.
pub const POP_SCALE_PARTITIONS: &[usize] = &[10, 1_000, 10_000, 100_000];
/// Messages queued before the POP slices of one partition count.
const POP_SCALE_MESSAGES: u64 = 20_000;
/// Clients that provision partitions.
const PROVISIONERS: usize = 8;
/// Clients of the provisioning that gives each statement's row a new
/// partition with more clients than the goals' eight: how the rate of one
/// message a statement grows with the clients the fused writes can take.
const MANY_PROVISIONERS: usize = 32;
/// Partitions made by the batched provisioning, and rows (each a new
/// partition) per statement.
const BATCH_PROVISIONED: usize = 100_000;
const PROVISION_BATCH: usize = 100;
/// Idle client connections held open for the memory figure.
pub const IDLE_CLIENTS: usize = 1_000;

#[derive(Default)]
pub struct Extras {
    /// (partitions, median POP latency µs, p99 µs).
    pub pop_latency: Vec<(usize, f64, f64)>,
    /// (partitions provisioned, partitions per second).
    pub provisioning: Vec<(usize, f64)>,
    /// The same with `PROVISION_BATCH` new partitions per statement:
    /// (partitions, rows per statement, partitions per second).
    pub provisioning_batch: Option<(usize, usize, f64)>,
    /// One message a statement into a new partition from
    /// `MANY_PROVISIONERS` clients: (clients, partitions, partitions per
    /// second).
    pub provisioning_many: Option<(usize, usize, f64)>,
    /// (system, transactions per second) per round.
    pub tpcb: Vec<(&'static str, f64)>,
    /// queenwire's RSS with the idle clients open, and before (MB).
    pub idle_rss_mb: Option<(f64, f64)>,
    pub notes: Vec<String>,
    /// The stream workload's figures.
    pub stream: Option<crate::stream::StreamLag>,
}

impl Bench {
    /// One single-client `POP … LIMIT 1 AUTO ACK` latency per partition
    /// count; partitions are made by pushing one message into each (eight
    /// clients), which is also the provisioning rate.
    ///
    /// All queues are provisioned first; their POP slices then run
    /// interleaved, the order of the counts reversed every other round (10,
    /// 1,000, 10,000, 100,000, then 100,000 … 10), twice as many rounds of
    /// half the length. `pop_scale` is a ratio of two latencies, and the
    /// cluster's background work (autovacuum after the provisioning, dirty
    /// buffers written back) drifts over a run: measured one count after
    /// the other, the drift landed on one side of the ratio.
    pub async fn pop_scale(&mut self) -> Result<(), BoxError> {
        let mut queues: Vec<(usize, String, u64)> = Vec::new();
        for &n in POP_SCALE_PARTITIONS {
            let queue = self.next_name("popscale");
            self.qw_admin
                .simple_query(&format!("CREATE QUEUE {queue}"))
                .await?;
            eprintln!("bench: pop_scale: provisioning {n} partitions");
            let slice = self.provision(&queue, n, 1, PROVISIONERS).await;
            if let Some(e) = slice.error {
                return Err(format!("provisioning {n} partitions: {e}").into());
            }
            self.extras.provisioning.push((n, slice.rate()));
            eprintln!(
                "bench: pop_scale: {n} partitions at {:.0} partitions/s",
                slice.rate()
            );
            let mut queued = slice.msgs;
            if queued < POP_SCALE_MESSAGES {
                let top_up = run_slice(
                    SliceSpec {
                        cfg: &self.proxy_cfg,
                        ops: vec![
                            Op::QwPush {
                                queue: queue.clone(),
                                batch: 100,
                                partitions: Some(n),
                                random: false,
                            };
                            4
                        ],
                        duration: Duration::from_secs(120),
                        budget: Some(POP_SCALE_MESSAGES - queued),
                        warmup: false,
                        label: String::new(),
                    },
                    &self.payloads,
                    self.probes,
                )
                .await;
                if let Some(e) = top_up.error {
                    return Err(format!("filling the {n}-partition queue: {e}").into());
                }
                queued += top_up.msgs;
            }
            queues.push((n, queue, queued));
        }
        let rounds = self.args.rounds * 2;
        for round in 0..rounds {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..queues.len()).collect()
            } else {
                (0..queues.len()).rev().collect()
            };
            for i in order {
                let (n, queue, queued) = queues[i].clone();
                let system = format!("queenwire {n}p");
                let slice = run_slice(
                    SliceSpec {
                        cfg: &self.proxy_cfg,
                        ops: vec![Op::QwPop {
                            queue,
                            limit: 1,
                            auto_ack: true,
                            group: None,
                            wait: None,
                        }],
                        duration: duration(self.args.secs / 2.0),
                        budget: Some(queued.saturating_sub(1)),
                        warmup: false,
                        label: format!("pop_scale {system}"),
                    },
                    &self.payloads,
                    self.probes,
                )
                .await;
                queues[i].2 = queued.saturating_sub(slice.msgs);
                self.record("pop_scale", &system, 1, round, slice);
            }
        }
        for &n in POP_SCALE_PARTITIONS {
            let system = format!("queenwire {n}p");
            let mut lat: Vec<u32> = self
                .cells
                .iter()
                .filter(|c| c.workload == "pop_scale" && c.system == system)
                .flat_map(|c| c.slices.iter())
                .filter(|s| s.error.is_none())
                .flat_map(|s| s.lat_us.iter().copied())
                .collect();
            lat.sort_unstable();
            if let (Some(p50), Some(p99)) = (percentile(&lat, 0.5), percentile(&lat, 0.99)) {
                self.extras.pop_latency.push((n, p50, p99));
            }
        }
        // Dropping 100,000 partitions is slow and not what is measured:
        // the queues stay (the data directory goes at the end).
        self.provision_batched().await?;
        self.provision_many().await
    }

    /// `clients` clients make `n` new partitions of `queue`, `batch` rows
    /// (each a new partition) per statement.
    async fn provision(&self, queue: &str, n: usize, batch: usize, clients: usize) -> Slice {
        let ops = (0..clients)
            .map(|w| Op::QwProvision {
                queue: queue.to_string(),
                first: w,
                step: clients,
                batch,
            })
            .collect();
        run_slice(
            SliceSpec {
                cfg: &self.proxy_cfg,
                ops,
                duration: Duration::from_secs(600),
                budget: Some(n as u64),
                warmup: false,
                label: String::new(),
            },
            &self.payloads,
            self.probes,
        )
        .await
    }

    /// Provisioning as a loader would do it: the same 8 clients, each
    /// statement `PROVISION_BATCH` rows into as many new partitions
    /// (`PUSH INTO q (partition, payload) VALUES …`), into a fresh queue.
    async fn provision_batched(&mut self) -> Result<(), BoxError> {
        let label = format!("{PROVISION_BATCH} per statement");
        let (made, rate) = self
            .provision_fresh(&label, PROVISION_BATCH, PROVISIONERS)
            .await?;
        self.extras.provisioning_batch = Some((made, PROVISION_BATCH, rate));
        Ok(())
    }

    /// One message a statement into a new partition, as `pop_scale` makes
    /// its partitions, from `MANY_PROVISIONERS` clients into a fresh queue
    /// (as many new partitions as the batched provisioning makes).
    async fn provision_many(&mut self) -> Result<(), BoxError> {
        let label = format!("one a statement, {MANY_PROVISIONERS} clients");
        let (made, rate) = self.provision_fresh(&label, 1, MANY_PROVISIONERS).await?;
        self.extras.provisioning_many = Some((MANY_PROVISIONERS, made, rate));
        Ok(())
    }

    /// `BATCH_PROVISIONED` new partitions of a fresh queue, `per_statement`
    /// a statement from `clients` clients: the partitions made and their
    /// rate.
    async fn provision_fresh(
        &mut self,
        label: &str,
        per_statement: usize,
        clients: usize,
    ) -> Result<(usize, f64), BoxError> {
        let queue = self.next_name("provision");
        self.qw_admin
            .simple_query(&format!("CREATE QUEUE {queue}"))
            .await?;
        eprintln!("bench: provisioning {BATCH_PROVISIONED} partitions, {label}");
        let slice = self
            .provision(&queue, BATCH_PROVISIONED, per_statement, clients)
            .await;
        if let Some(e) = slice.error {
            return Err(
                format!("provisioning {BATCH_PROVISIONED} partitions, {label}: {e}").into(),
            );
        }
        eprintln!(
            "bench: {BATCH_PROVISIONED} partitions, {label}, at {:.0} partitions/s",
            slice.rate()
        );
        Ok((slice.msgs as usize, slice.rate()))
    }

    /// pgbench's built-in TPC-B script, 8 clients, scale 10, alternating
    /// direct and through queenwire, simple protocol, both over the run's
    /// transport.
    pub async fn tpcb(&mut self) -> Result<(), BoxError> {
        let Some(pgbench) = find_pgbench() else {
            self.extras
                .notes
                .push("tpcb: no pgbench binary found".into());
            return Ok(());
        };
        eprintln!("bench: tpcb: pgbench -i -s {TPCB_SCALE}");
        let out = Command::new(&pgbench)
            .args(["-i", "-q", "-s", &TPCB_SCALE.to_string()])
            .args(setup::libpq_args(&self.direct_cfg)?)
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "pgbench -i failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let secs = (self.args.secs * 3.0).round().max(2.0) as u32;
        for round in 0..self.args.rounds {
            for system in ["direct", "queenwire"] {
                let target = if system == "direct" {
                    setup::libpq_args(&self.direct_cfg)?
                } else {
                    setup::libpq_args(&self.proxy_cfg)?
                };
                let out = Command::new(&pgbench)
                    .args(["-n", "-c", "8", "-j", "2", "-T", &secs.to_string()])
                    .args(&target)
                    .output()?;
                let text = String::from_utf8_lossy(&out.stdout);
                match parse_tps(&text) {
                    Some(tps) if out.status.success() => {
                        eprintln!("bench: tpcb round {} {system:<10} {tps:.0} tps", round + 1);
                        self.extras.tpcb.push((system, tps));
                    }
                    _ => {
                        let why = format!(
                            "tpcb {system} round {}: {}{}",
                            round + 1,
                            text.lines().last().unwrap_or(""),
                            String::from_utf8_lossy(&out.stderr)
                                .lines()
                                .last()
                                .unwrap_or("")
                        );
                        eprintln!("bench: {why}");
                        self.extras.notes.push(why);
                    }
                }
            }
        }
        Ok(())
    }

    /// queenwire's RSS with [`IDLE_CLIENTS`] clients connected (startup
    /// done) and silent.
    pub async fn idle_clients(&mut self, proxy_pid: u32) -> Result<(), BoxError> {
        let addr = self
            .proxy_cfg
            .get_ports()
            .first()
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], *p)))
            .ok_or("no proxy port")?;
        crate::procfs::raise_nofile();
        let rss = || crate::procfs::status_kb(proxy_pid, "VmRSS").map(|kb| kb as f64 / 1024.0);
        let before = rss().unwrap_or(0.0);
        eprintln!("bench: idle1000: opening {IDLE_CLIENTS} idle connections");
        let mut open = Vec::with_capacity(IDLE_CLIENTS);
        while open.len() < IDLE_CLIENTS {
            let mut batch = tokio::task::JoinSet::new();
            for _ in 0..100.min(IDLE_CLIENTS - open.len()) {
                batch.spawn(tokio::time::timeout(
                    Duration::from_secs(30),
                    crate::soak::conns::raw_startup(addr),
                ));
            }
            while let Some(r) = batch.join_next().await {
                match r {
                    Ok(Ok(Ok(s))) => open.push(s),
                    Ok(Ok(Err(e))) => {
                        return Err(format!("idle client: {}", setup::describe(&*e)).into())
                    }
                    _ => {
                        return Err("an idle client's startup failed or took more than 30 s".into())
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let with = rss().ok_or("no VmRSS for queenwire")?;
        drop(open);
        self.extras.idle_rss_mb = Some((with, before));
        eprintln!("bench: idle1000: RSS {before:.1} MB before, {with:.1} MB with them open");
        Ok(())
    }
}
