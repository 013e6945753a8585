//! Three `queenwire` processes on one database: retention and cleanup run in
//! exactly one of them per cycle (elected through `queen.maintenance_leases`,
//! recorded in `queen.retention_history`), and another one takes over within
//! two cycles after the runner is killed with `kill -9`; the same for the
//! other elected tasks (max_wait expiry, KV sweep, metrics rollup), seen in
//! each process's `queenwire_maintenance_runs_total`.

mod common;

use common::proxy::connect;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::config::Host;
use tokio_postgres::Client;

/// The retention cycle of the three processes, in seconds.
const INTERVAL_SECS: u64 = 2;
const INTERVAL: Duration = Duration::from_secs(INTERVAL_SECS);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The key=value backend string of a test database.
fn backend_string(db: &tokio_postgres::Config) -> String {
    let host = match &db.get_hosts()[0] {
        Host::Unix(path) => path.display().to_string(),
        Host::Tcp(name) => name.clone(),
    };
    format!(
        "host={host} port={} user={} dbname={}",
        db.get_ports()[0],
        db.get_user().unwrap(),
        db.get_dbname().unwrap()
    )
}

/// The children, killed (SIGKILL) and reaped when the test ends, passed or
/// not.
struct Fleet(Vec<Child>);

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(backend: &str) -> Child {
    spawn_with(backend, &[])
}

fn spawn_with(backend: &str, extra: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args(extra)
        .args([
            "--backend",
            backend,
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--retention-interval",
            &INTERVAL_SECS.to_string(),
            "--pool-size",
            "2",
            "--log-level",
            "warn",
        ])
        .env_remove("DATABASE_URL")
        .env_remove("QUEENWIRE_BACKEND")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// One pass of a task: (holder, started_at and executed_at in seconds of
/// the database clock).
#[derive(Debug, Clone, PartialEq)]
struct Pass {
    holder: String,
    started: f64,
    ended: f64,
}

async fn passes(direct: &Client, task: &str) -> Vec<Pass> {
    direct
        .query(
            "SELECT holder, extract(epoch FROM started_at)::float8, extract(epoch FROM executed_at)::float8
             FROM queen.retention_history WHERE task = $1 ORDER BY started_at",
            &[&task],
        )
        .await
        .map(|rows| {
            rows.iter()
                .map(|r| Pass {
                    holder: r.get(0),
                    started: r.get(1),
                    ended: r.get(2),
                })
                .collect()
        })
        // The table appears with the first process's schema apply.
        .unwrap_or_default()
}

async fn db_now(direct: &Client) -> f64 {
    direct
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await
        .unwrap()
        .get(0)
}

/// The pid inside a holder name (`pid N <uuid>`).
fn holder_pid(holder: &str) -> u32 {
    holder
        .strip_prefix("pid ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("holder {holder:?} names no pid"))
}

/// One runner at a time: consecutive passes never overlap, are at least
/// half a cycle apart (a double run within one cycle would not be), and
/// one holder ran them all.
fn assert_one_runner_per_cycle(task: &str, passes: &[Pass]) {
    for pair in passes.windows(2) {
        assert!(
            pair[1].started >= pair[0].ended,
            "{task}: overlapping passes {pair:?}"
        );
        assert!(
            pair[1].started - pair[0].started >= INTERVAL.as_secs_f64() / 2.0,
            "{task}: two passes in one cycle {pair:?}"
        );
    }
    let mut holders: Vec<&str> = passes.iter().map(|p| p.holder.as_str()).collect();
    holders.dedup();
    assert_eq!(holders.len(), 1, "{task}: runners {holders:?}");
}

async fn wait_for_passes(direct: &Client, task: &str, n: usize, within: Duration) -> Vec<Pass> {
    let deadline = Instant::now() + within;
    loop {
        let got = passes(direct, task).await;
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{task}: only {} passes: {got:?}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn three_processes_run_each_task_once_per_cycle_and_one_takes_over_after_kill_9() {
    let db = common::cluster::fresh_database("retention_election");
    let backend = backend_string(&db);
    let mut fleet = Fleet((0..3).map(|_| spawn(&backend)).collect());
    let direct = connect(&db).await;

    // A few cycles with all three up.
    let before: Vec<(&str, Vec<Pass>)> = {
        let mut seen = Vec::new();
        for task in ["retention", "cleanup"] {
            seen.push((
                task,
                wait_for_passes(&direct, task, 4, Duration::from_secs(90)).await,
            ));
        }
        seen
    };
    for (task, passes) in &before {
        assert_one_runner_per_cycle(task, passes);
    }
    let leases: Vec<(String, String)> = direct
        .query(
            "SELECT task, holder FROM queen.maintenance_leases WHERE task IN ('log_retention', 'log_cleanup') ORDER BY task",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(leases.len(), 2, "{leases:?}");

    // kill -9 the process running retention.
    let runner = before[0].1.last().unwrap().holder.clone();
    let pid = holder_pid(&runner);
    let child = fleet
        .0
        .iter_mut()
        .find(|c| c.id() == pid)
        .unwrap_or_else(|| panic!("the runner {runner} is not one of ours"));
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = db_now(&direct).await;

    for (task, seen) in &before {
        let task = *task;
        let ran_in_killed = holder_pid(&seen.last().unwrap().holder) == pid;
        let deadline = Instant::now() + Duration::from_secs(60);
        let took_over = loop {
            let after: Vec<Pass> = passes(&direct, task)
                .await
                .into_iter()
                .filter(|p| p.started > killed_at)
                .collect();
            if let Some(first) = after.first() {
                break first.clone();
            }
            assert!(Instant::now() < deadline, "{task}: nobody took over");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let delay = took_over.started - killed_at;
        eprintln!(
            "{task}: killed {runner} (ran {task}: {ran_in_killed}); next pass by {} {delay:.2} s later",
            took_over.holder
        );
        assert_ne!(holder_pid(&took_over.holder), pid);
        if ran_in_killed {
            assert!(
                delay <= 2.0 * INTERVAL.as_secs_f64(),
                "{task}: takeover after {delay:.2} s, more than two cycles"
            );
        }
    }

    // And the survivors keep it to one runner per cycle afterwards.
    let settle = db_now(&direct).await;
    tokio::time::sleep(INTERVAL * 3).await;
    for task in ["retention", "cleanup"] {
        let after: Vec<Pass> = passes(&direct, task)
            .await
            .into_iter()
            .filter(|p| p.started > settle)
            .collect();
        assert!(after.len() >= 2, "{task}: {after:?}");
        assert_one_runner_per_cycle(task, &after);
    }
}

/// The maintenance tasks of `maintenance.rs`, each a 5 s cycle.
const TASKS: [&str; 3] = ["log_expire", "kv_sweep", "metrics_rollup"];
const TASK_CYCLE: Duration = Duration::from_secs(5);

/// `queenwire_maintenance_runs_total` by task, from a process's /metrics
/// (`None` while it does not answer).
async fn runs(port: u16) -> Option<std::collections::HashMap<String, u64>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).await.ok()?;
    let mut out = std::collections::HashMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("queenwire_maintenance_runs_total{task=\"") else {
            continue;
        };
        let Some((task, value)) = rest.split_once("\"} ") else {
            continue;
        };
        out.insert(task.to_string(), value.trim().parse().ok()?);
    }
    Some(out)
}

async fn all_runs(ports: &[u16]) -> Vec<std::collections::HashMap<String, u64>> {
    let mut v = Vec::new();
    for p in ports {
        v.push(runs(*p).await.unwrap_or_default());
    }
    v
}

fn count(m: &std::collections::HashMap<String, u64>, task: &str) -> u64 {
    m.get(task).copied().unwrap_or(0)
}

#[tokio::test]
async fn every_maintenance_task_has_one_runner_and_is_taken_over_after_kill_9() {
    let db = common::cluster::fresh_database("maintenance_election");
    let backend = backend_string(&db);
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut fleet = Fleet(
        ports
            .iter()
            .map(|p| {
                spawn_with(
                    &backend,
                    &["--metrics-listen".into(), format!("127.0.0.1:{p}")],
                )
            })
            .collect(),
    );

    // Each task runs a few cycles, always in one process.
    let deadline = Instant::now() + Duration::from_secs(90);
    let before = loop {
        let now = all_runs(&ports).await;
        if TASKS
            .iter()
            .all(|t| now.iter().map(|m| count(m, t)).sum::<u64>() >= 3)
        {
            break now;
        }
        assert!(Instant::now() < deadline, "tasks never ran: {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut runner = Vec::new();
    for task in TASKS {
        let running: Vec<usize> = (0..3).filter(|i| count(&before[*i], task) > 0).collect();
        assert_eq!(
            running.len(),
            1,
            "{task}: runners {running:?} in {before:?}"
        );
        runner.push((task, running[0]));
    }

    // kill -9 the process running the KV sweep.
    let victim = runner[1].1;
    fleet.0[victim].kill().unwrap();
    fleet.0[victim].wait().unwrap();
    let killed = Instant::now();
    let at_kill = all_runs(&ports).await;
    let survivors: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
    let moved: Vec<&str> = runner
        .iter()
        .filter(|(_, i)| *i == victim)
        .map(|(t, _)| *t)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut took_over = std::collections::HashMap::new();
    while took_over.len() < moved.len() {
        let now = all_runs(&ports).await;
        for task in &moved {
            if took_over.contains_key(task) {
                continue;
            }
            if let Some(i) = survivors
                .iter()
                .find(|i| count(&now[**i], task) > count(&at_kill[**i], task))
            {
                took_over.insert(*task, (*i, killed.elapsed()));
            }
        }
        assert!(Instant::now() < deadline, "nobody took over: {took_over:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (task, (i, after)) in &took_over {
        eprintln!("{task}: taken over by process {i} {after:?} after the kill");
        assert!(
            *after <= TASK_CYCLE * 2,
            "{task}: takeover after {after:?}, more than two cycles"
        );
    }

    // And afterwards one run per cycle among the survivors (a holder that
    // stalls for a whole lease under load may hand the task to the other
    // survivor, but never do both run it in one cycle).
    let settled = all_runs(&ports).await;
    let window = Instant::now();
    tokio::time::sleep(TASK_CYCLE * 3).await;
    let later = all_runs(&ports).await;
    let cycles = (window.elapsed().as_secs_f64() / TASK_CYCLE.as_secs_f64()).ceil() as u64;
    for task in TASKS {
        let ran: u64 = survivors
            .iter()
            .map(|i| count(&later[*i], task) - count(&settled[*i], task))
            .sum();
        assert!(
            (1..=cycles + 1).contains(&ran),
            "{task}: {ran} runs in {cycles} cycles after the takeover: {settled:?} then {later:?}"
        );
    }
}
