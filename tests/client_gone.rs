//! A client that leaves in the middle of a statement: the statement is
//! cancelled (on PostgreSQL, or a POP … WAIT waiting in the proxy), its
//! backend connection closed, and the pool has the connection's slot back
//! at once, not when the statement would have ended.

mod common;

use common::proxy::Proxy;
use common::raw::{pipeline, Raw};
use common::sql::rows;
use queenwire::protocol::frontend::build_query;
use queenwire::protocol::Message;
use std::time::{Duration, Instant};

const POOL_SIZE: usize = 2;
/// More clients than the pool has connections: without the cancel, the
/// last ones and a fresh client wait the whole minute.
const CLIENTS: usize = POOL_SIZE + 1;
/// Catches a hang, while each statement left behind runs for a minute.
const BOUND: Duration = Duration::from_secs(10);

/// How a client leaves: the simple queries it sends first, then the long
/// statement it leaves in the middle of.
struct Leaving {
    name: &'static str,
    first: &'static [&'static str],
    statement: fn() -> Vec<Message>,
    /// The statement runs `pg_sleep` on PostgreSQL (else it waits in the
    /// proxy, or on a block's connection).
    sleeps: bool,
}

const LEAVINGS: [Leaving; 5] = [
    Leaving {
        name: "autocommit",
        first: &[],
        statement: || vec![build_query("SELECT pg_sleep(60)")],
        sleeps: true,
    },
    Leaving {
        name: "in a transaction block",
        first: &["BEGIN"],
        statement: || vec![build_query("SELECT pg_sleep(60)")],
        sleeps: true,
    },
    Leaving {
        name: "extended protocol",
        first: &[],
        statement: || pipeline(&["SELECT pg_sleep(60)"]),
        sleeps: true,
    },
    Leaving {
        name: "POP … WAIT in a transaction block",
        first: &["BEGIN"],
        statement: || vec![build_query("POP FROM gone_q WAIT '60s'")],
        sleeps: false,
    },
    Leaving {
        name: "POP … WAIT",
        first: &[],
        statement: || vec![build_query("POP FROM gone_q WAIT '60s'")],
        sleeps: false,
    },
];

/// Backends of the proxy's database running `pg_sleep`.
async fn sleeping(direct: &tokio_postgres::Client) -> i64 {
    direct
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND state = 'active' \
             AND query ILIKE '%pg_sleep%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits (at most `BOUND`) until `done` says so.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + BOUND;
    while !done().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_client_gone_mid_statement_has_it_cancelled_and_frees_its_connection() {
    let proxy = Proxy::start_with("client_gone", |c| c.pool_size = POOL_SIZE).await;
    let direct = proxy.connect_direct().await;
    let admin = proxy.connect().await;
    admin.batch_execute("CREATE QUEUE gone_q").await.unwrap();
    drop(admin);
    for leaving in &LEAVINGS {
        let name = leaving.name;
        // Every client logs in (which takes a connection for a moment)
        // before any holds one.
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            clients.push(Raw::connect(proxy.addr).await);
        }
        // Sent without waiting for the answers: only `POOL_SIZE` of the
        // clients get a connection, the others wait for one.
        for raw in &mut clients {
            let mut messages: Vec<Message> = leaving.first.iter().map(build_query).collect();
            messages.extend((leaving.statement)());
            raw.send(&messages).await;
        }
        if leaving.sleeps {
            eventually(&format!("{name}: the statements run"), || async {
                sleeping(&direct).await == POOL_SIZE as i64
            })
            .await;
        } else {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        drop(clients);

        let began = Instant::now();
        let select_1 = async {
            let client = proxy.connect().await;
            let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
            (client, one)
        };
        let (client, one) = tokio::time::timeout(BOUND, select_1)
            .await
            .unwrap_or_else(|_| panic!("{name}: a new client's SELECT 1 waited for good"));
        assert_eq!(one, 1, "{name}");
        assert!(began.elapsed() < BOUND, "{name}");
        eventually(&format!("{name}: no pg_sleep left running"), || async {
            sleeping(&direct).await == 0
        })
        .await;
        // The sessions themselves are gone, the waits in the proxy too.
        eventually(&format!("{name}: the sessions ended"), || async {
            rows(&client, "SHOW QUEENWIRE CLIENTS").await.len() == 1
        })
        .await;
    }
}
