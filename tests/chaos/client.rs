//! A client of the chaos test: reconnects whenever its session is gone and
//! classifies failures the way docs/dialect.md's retry rules do.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio_postgres::{Client, SimpleQueryMessage};

const STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);

/// Statements answered 08006, with an unknown outcome (08007, a dropped
/// connection) and with another error, for the record (both tests of the
/// binary add to them).
pub static NOT_SENT: AtomicUsize = AtomicUsize::new(0);
pub static UNKNOWN: AtomicUsize = AtomicUsize::new(0);
pub static FAILED: AtomicUsize = AtomicUsize::new(0);

/// What a failed statement means for a client following the retry rules.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// 08006: not sent.
    NotSent,
    /// 08007, a dropped connection, or no answer in time.
    Unknown,
    /// Any other error (the statement failed and changed nothing).
    Failed(String),
}

pub fn classify(e: &tokio_postgres::Error) -> Failure {
    match e.as_db_error().map(|d| d.code().code()) {
        Some("08006") => Failure::NotSent,
        Some("08007") | None => Failure::Unknown,
        Some(code) => Failure::Failed(format!("{code}: {e}")),
    }
}

pub type Row = HashMap<String, Option<String>>;

/// A client that reconnects whenever its connection is gone.
pub struct Conn {
    pub cfg: tokio_postgres::Config,
    pub client: Option<Client>,
}

impl Conn {
    pub fn new(cfg: tokio_postgres::Config) -> Conn {
        Conn { cfg, client: None }
    }

    pub async fn client(&mut self) -> &Client {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            loop {
                if let Ok(Ok((client, connection))) = tokio::time::timeout(
                    Duration::from_secs(5),
                    self.cfg.connect(tokio_postgres::NoTls),
                )
                .await
                {
                    tokio::spawn(connection);
                    self.client = Some(client);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.client.as_ref().unwrap()
    }

    pub async fn query(&mut self, sql: &str) -> Result<Vec<Row>, Failure> {
        let client = self.client().await;
        let result = tokio::time::timeout(STATEMENT_TIMEOUT, client.simple_query(sql)).await;
        let failure = match result {
            Ok(Ok(messages)) => {
                return Ok(messages
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
            Ok(Err(e)) => classify(&e),
            Err(_) => Failure::Unknown,
        };
        match failure {
            Failure::NotSent => NOT_SENT.fetch_add(1, Ordering::Relaxed),
            Failure::Unknown => UNKNOWN.fetch_add(1, Ordering::Relaxed),
            Failure::Failed(_) => FAILED.fetch_add(1, Ordering::Relaxed),
        };
        // The session may be gone, or inside a failed block: start afresh
        // (a block is rolled back with it).
        self.client = None;
        Err(failure)
    }
}

pub fn col(row: &Row, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}
