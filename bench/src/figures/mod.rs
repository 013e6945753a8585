//! `--figures`: measurements that print figures of queenwire alone, one
//! workload against a variant of itself (an ephemeral queue against a
//! durable one, a wildcard POP against a POP by name, POP at 10 to 100,000
//! partitions, PUSH and POP during a retention pass against without), and
//! diagnostics of where a POP's time goes. They are not cells: no other
//! system runs them, no goal is set on them.
//!
//! Each runs queenwire in this process (as the integration tests do) on a
//! fresh database of one embedded cluster, so a measurement can set what
//! the command line does not reach (the retention pass is driven by hand)
//! and start two queenwires on one database.
//!
//!     queenwire-bench --figures [NAME,...] [--quick]

mod counters;
mod ephemeral;
mod hotlist;
mod retention;
mod wildcard;

use crate::setup::{self, BoxError};
use queenwire::server::{Backend, Config, Server};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio_postgres::{Client, SimpleQueryMessage};

pub const USAGE: &str = "\
usage: queenwire-bench --figures [NAME,...] [--quick]

  NAME     pop_latency, explain_pop, calls_per_pop, wildcard_pop,
           ephemeral, ephemeral_forwarded, retention_latency,
           counter_bump (default: all of them)
  --quick  fewer samples, partitions and seconds: a check that each runs

  pop_latency reads QW_PARTITIONS (one partition count only) and
  QW_PROVISION=push (partitions written through the push procedure);
  explain_pop QW_PARTITIONS (default 100000); QW_WARM and QW_VACUUM shape
  the provisioned tables; retention_latency QW_HOLD=SECONDS (keep the
  cluster up after the VACUUM, to look at it with psql).";

/// Every measurement, in the order they run.
const ALL: &[&str] = &[
    "pop_latency",
    "explain_pop",
    "calls_per_pop",
    "wildcard_pop",
    "ephemeral",
    "ephemeral_forwarded",
    "retention_latency",
    "counter_bump",
];

pub struct FiguresArgs {
    names: Vec<String>,
    /// Fewer samples and smaller data: each measurement in seconds.
    quick: bool,
}

pub fn parse_args(argv: &[String]) -> Result<FiguresArgs, String> {
    let mut a = FiguresArgs {
        names: Vec::new(),
        quick: false,
    };
    let mut it = argv.iter().peekable();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--figures" => {
                if let Some(list) = it.next_if(|v| !v.starts_with("--")) {
                    for name in list.split(',').filter(|n| !n.is_empty()) {
                        if !ALL.contains(&name) {
                            return Err(format!("--figures: no measurement named {name}"));
                        }
                        a.names.push(name.to_string());
                    }
                }
            }
            "--quick" => a.quick = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("--figures: unknown argument {other}")),
        }
    }
    if a.names.is_empty() {
        a.names = ALL.iter().map(|n| n.to_string()).collect();
    }
    Ok(a)
}

pub async fn run(args: FiguresArgs) -> Result<(), BoxError> {
    let cluster = setup::start_cluster().await?;
    let site = Site {
        admin: cluster.pg.client_config(),
        databases: AtomicUsize::new(0),
    };
    let result = run_each(&site, &args).await;
    cluster.stop(false);
    result
}

async fn run_each(site: &Site, args: &FiguresArgs) -> Result<(), BoxError> {
    let quick = args.quick;
    for name in &args.names {
        println!("== {name}{}", if quick { " (quick)" } else { "" });
        match name.as_str() {
            "pop_latency" => hotlist::pop_latency_by_partitions(site, quick).await?,
            "explain_pop" => hotlist::explain_pop(site, quick).await?,
            "calls_per_pop" => hotlist::calls_per_pop(site, quick).await?,
            "wildcard_pop" => wildcard::figures(site, quick).await?,
            "ephemeral" => ephemeral::figures(site, quick).await?,
            "ephemeral_forwarded" => ephemeral::forwarded_figures(site, quick).await?,
            "retention_latency" => retention::during_a_pass_against_without(site, quick).await?,
            "counter_bump" => counters::counter_bump_per_push(quick),
            other => return Err(format!("no measurement named {other}").into()),
        }
    }
    Ok(())
}

/// The cluster the measurements make their databases in.
pub struct Site {
    admin: tokio_postgres::Config,
    databases: AtomicUsize,
}

impl Site {
    /// A new, empty database of the cluster.
    async fn fresh_database(&self, prefix: &str) -> Result<tokio_postgres::Config, BoxError> {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("figures_{prefix}_{n}");
        setup::connect(&self.admin)
            .await?
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        let mut config = self.admin.clone();
        config.dbname(&name);
        Ok(config)
    }
}

/// queenwire in this process, on its own database.
pub struct Proxy {
    /// Kept for the measurement's length: dropping it stops queenwire.
    _server: Server,
    pub addr: SocketAddr,
    /// Straight to the proxy's database, bypassing the proxy.
    pub direct: tokio_postgres::Config,
}

impl Proxy {
    async fn start(site: &Site, prefix: &str) -> Result<Proxy, BoxError> {
        Proxy::start_with(site, prefix, |_| {}).await
    }

    async fn start_with(
        site: &Site,
        prefix: &str,
        adjust: impl FnOnce(&mut Config),
    ) -> Result<Proxy, BoxError> {
        let direct = site.fresh_database(prefix).await?;
        Proxy::start_on(direct, adjust).await
    }

    /// A proxy on an existing database (a second queenwire beside one).
    async fn start_on(
        direct: tokio_postgres::Config,
        adjust: impl FnOnce(&mut Config),
    ) -> Result<Proxy, BoxError> {
        let mut config = Config {
            listen: "127.0.0.1:0".into(),
            backend: Backend::External(Box::new(direct.clone())),
            pool_size: 4,
            ..Config::default()
        };
        adjust(&mut config);
        let server = Server::start(config)
            .await
            .map_err(|e| format!("queenwire did not start: {e}"))?;
        let addr = server.local_addr;
        Ok(Proxy {
            _server: server,
            addr,
            direct,
        })
    }

    fn client_config(&self) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(self.addr.port())
            .user("tester")
            .dbname("anything");
        cfg
    }

    async fn connect(&self) -> Result<Client, BoxError> {
        Ok(setup::connect(&self.client_config()).await?)
    }

    async fn connect_direct(&self) -> Result<Client, BoxError> {
        Ok(setup::connect(&self.direct).await?)
    }
}

type Row = HashMap<String, Option<String>>;

/// Rows of a simple query as (column → text) maps.
async fn rows(client: &Client, sql: &str) -> Result<Vec<Row>, BoxError> {
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                r.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name().to_string(), r.get(i).map(str::to_string)))
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

fn col(row: &Row, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

/// Fails the measurement (its premise did not hold) with `what`.
fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), BoxError> {
    if ok {
        Ok(())
    } else {
        Err(what().into())
    }
}
