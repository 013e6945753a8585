//! The idle-connections and churn parts.

use super::{fds, rss_mb};
use crate::setup::{self, BoxError};
use bytes::{Buf, BytesMut};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::Config;

// ---- part 2: idle connections ---------------------------------------------

/// A TCP connection that has finished startup (up to ReadyForQuery).
pub(crate) async fn raw_startup(addr: SocketAddr) -> Result<TcpStream, BoxError> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut packet = BytesMut::new();
    postgres_protocol::message::frontend::startup_message(
        [("user", "bench"), ("database", "postgres")],
        &mut packet,
    )?;
    stream.write_all(&packet).await?;
    let mut buf = BytesMut::with_capacity(512);
    loop {
        while buf.len() >= 5 {
            let tag = buf[0];
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < 1 + len {
                break;
            }
            if tag == b'E' {
                let text = String::from_utf8_lossy(&buf[5..1 + len]).replace('\0', " ");
                return Err(format!("startup refused: {text}").into());
            }
            if tag == b'Z' {
                return Ok(stream);
            }
            buf.advance(1 + len);
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err("closed during startup".into());
        }
    }
}

/// Connect + `SELECT 1` of one fresh client, in ms.
async fn one_more(cfg: &Config) -> Result<f64, BoxError> {
    let t0 = Instant::now();
    let client = setup::connect(cfg).await?;
    client.simple_query("SELECT 1").await?;
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

async fn one_more_times(cfg: &Config) -> Result<String, BoxError> {
    let mut t = Vec::new();
    for _ in 0..5 {
        t.push(one_more(cfg).await?);
    }
    Ok(t.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", "))
}

pub(super) async fn idle(
    n: usize,
    cfg: &Config,
    pid: u32,
    addr: SocketAddr,
) -> Result<(), BoxError> {
    println!("### Idle connections: {n} (TCP + startup, then silent)");
    println!();
    let before = (rss_mb(pid), fds(pid));
    let base_times = one_more_times(cfg).await?;
    eprintln!("soak: opening {n} idle connections");
    let t0 = Instant::now();
    let mut open = Vec::with_capacity(n);
    let mut failure = None;
    const AT_ONCE: usize = 100;
    while open.len() < n && failure.is_none() {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..AT_ONCE.min(n - open.len()) {
            batch.spawn(tokio::time::timeout(
                Duration::from_secs(30),
                raw_startup(addr),
            ));
        }
        while let Some(r) = batch.join_next().await {
            match r {
                Ok(Ok(Ok(s))) => open.push(s),
                Ok(Ok(Err(e))) => {
                    failure.get_or_insert(setup::describe(&*e));
                }
                Ok(Err(_)) => {
                    failure.get_or_insert("a startup took more than 30 s".into());
                }
                Err(e) => {
                    failure.get_or_insert(e.to_string());
                }
            }
        }
        if open.len().is_multiple_of(2000) {
            eprintln!(
                "soak: {} idle open after {:.1} s",
                open.len(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let opened_in = t0.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let with = (rss_mb(pid), fds(pid));
    let with_times = one_more_times(cfg).await;
    let opened = open.len();
    drop(open);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = (rss_mb(pid), fds(pid));
    println!("| | queenwire RSS MB | FDs | connect + SELECT 1, 5 tries (ms) |");
    println!("|---|---:|---:|---|");
    println!("| before | {:.1} | {} | {base_times} |", before.0, before.1);
    println!(
        "| {opened} idle open | {:.1} | {} | {} |",
        with.0,
        with.1,
        with_times
            .as_ref()
            .map_or_else(|e| format!("failed: {e}"), |s| s.clone())
    );
    println!("| after closing them | {:.1} | {} | |", after.0, after.1);
    println!();
    println!(
        "Opened {opened} of {n} in {opened_in:.1} s ({AT_ONCE} at a time); {:.1} kB of queenwire RSS per idle connection.{}",
        (with.0 - before.0) * 1024.0 / opened.max(1) as f64,
        failure.map_or(String::new(), |f| format!(" Stopped opening: {f}."))
    );
    println!();
    Ok(())
}

// ---- part 3: churn --------------------------------------------------------

pub(super) async fn churn(
    rounds: usize,
    clients: usize,
    cfg: &Config,
    pid: u32,
) -> Result<(), BoxError> {
    println!("### Churn: {rounds} rounds of {clients} clients (connect, SELECT 1, disconnect; 50 at a time)");
    println!();
    println!(
        "| round | RSS MB before | FDs before | RSS MB after | FDs after | seconds | failures |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for round in 1..=rounds {
        let before = (rss_mb(pid), fds(pid));
        let t0 = Instant::now();
        let next = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let (cfg, next, failures) = (cfg.clone(), next.clone(), failures.clone());
            tasks.spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < clients as u64 {
                    let r = tokio::time::timeout(Duration::from_secs(30), one_more(&cfg)).await;
                    if !matches!(r, Ok(Ok(_))) && failures.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("soak: churn client failed: {r:?}");
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let secs = t0.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = (rss_mb(pid), fds(pid));
        println!(
            "| {round} | {:.1} | {} | {:.1} | {} | {secs:.2} | {} |",
            before.0,
            before.1,
            after.0,
            after.1,
            failures.load(Ordering::Relaxed)
        );
    }
    println!();
    Ok(())
}
