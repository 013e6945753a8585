//! The server's lifecycle: every session holds a slot of the connection cap
//! while it lives; a drain (what SIGTERM runs) stops accepting at once,
//! ends parked POP WAITs with zero rows, closes idle sessions with 57P01,
//! lets open transactions commit until the timeout and rolls back the rest;
//! a reload (what SIGHUP runs) replaces the users file and certificate
//! without touching the sessions already in.

mod common;

use common::proxy::{connect, Proxy};
use common::sql::rows;
use queenwire::users::{Passthrough, User, Users, Verifier};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// A hang bound, never a pass/fail timing.
const HANG: Duration = Duration::from_secs(30);

/// A client whose connection task reports how the connection ended: an
/// ErrorResponse the server sends unasked (57P01) ends it with that error.
async fn watched(cfg: &tokio_postgres::Config) -> (Client, JoinHandle<Option<String>>) {
    let (client, connection) = cfg.connect(tokio_postgres::NoTls).await.expect("connects");
    let ended = tokio::spawn(async move {
        connection
            .await
            .err()
            .map(|e| e.code().map_or(e.to_string(), |c| c.code().to_string()))
    });
    (client, ended)
}

/// The SQLSTATE that ended a watched connection.
async fn ended_with(ended: JoinHandle<Option<String>>) -> Option<String> {
    tokio::time::timeout(HANG, ended)
        .await
        .expect("the connection ends")
        .unwrap()
}

/// Waits until a new client is refused (the listener is closed).
async fn until_refused(cfg: &tokio_postgres::Config) {
    let deadline = Instant::now() + HANG;
    loop {
        match tokio::net::TcpStream::connect((
            "127.0.0.1",
            cfg.get_ports().first().copied().unwrap(),
        ))
        .await
        {
            // One that was queued when the listener closed is reset.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
                return;
            }
            Ok(_) => {
                assert!(Instant::now() < deadline, "the listener never closed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn drain(proxy: Proxy) -> JoinHandle<queenwire::server::DrainReport> {
    tokio::spawn(async move { proxy.server.shutdown().await })
}

#[tokio::test]
async fn each_session_holds_a_slot_until_its_client_leaves() {
    let proxy = Proxy::start("lifecycle_slots").await;
    assert_eq!(proxy.server.live_sessions(), 0);
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    a.simple_query("SELECT 1").await.unwrap();
    b.simple_query("SELECT 1").await.unwrap();
    assert_eq!(proxy.server.live_sessions(), 2);
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    while proxy.server.live_sessions() != 1 {
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.simple_query("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn a_drain_refuses_new_clients_closes_idle_ones_and_lets_a_transaction_commit() {
    let proxy = Proxy::start("lifecycle_drain").await;
    let cfg = proxy.client_config();
    let direct_cfg = proxy.direct.clone();
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("CREATE TABLE drained (n INT)")
        .await
        .unwrap();
    let (idle, idle_ended) = watched(&cfg).await;
    idle.simple_query("SELECT 1").await.unwrap();
    let (txn, txn_ended) = watched(&cfg).await;
    txn.batch_execute(
        "CREATE QUEUE dq WITH (retry_limit = 1); CREATE QUEUE empty WITH (retry_limit = 1)",
    )
    .await
    .unwrap();
    txn.batch_execute("BEGIN; INSERT INTO drained VALUES (1)")
        .await
        .unwrap();

    let stopping = drain(proxy);
    until_refused(&cfg).await;
    // The idle session is closed as PostgreSQL closes one at shutdown.
    assert_eq!(ended_with(idle_ended).await.as_deref(), Some("57P01"));
    assert!(idle.simple_query("SELECT 1").await.is_err());
    // The transaction goes on, dialect statements too, and commits.
    txn.batch_execute("INSERT INTO drained VALUES (2)")
        .await
        .unwrap();
    rows(&txn, "PUSH INTO dq VALUES ('{\"in\":\"txn\"}')").await;
    // A POP during the drain does not wait.
    let popped = tokio::time::timeout(HANG, rows(&txn, "POP FROM empty WAIT 600"))
        .await
        .expect("POP … WAIT returns during a drain");
    assert!(popped.is_empty());
    txn.batch_execute("COMMIT").await.unwrap();
    // Then it is idle, and closed.
    assert_eq!(ended_with(txn_ended).await.as_deref(), Some("57P01"));
    let report = tokio::time::timeout(HANG, stopping).await.unwrap().unwrap();
    assert_eq!((report.drained, report.terminated), (2, 0), "{report:?}");
    let n: i64 = direct
        .query_one("SELECT count(*) FROM drained", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    // The PUSH of the committed transaction is there for the next process.
    let again = Proxy::start_on(direct_cfg, |_| {}).await;
    let popped = rows(&again.connect().await, "POP FROM dq").await;
    assert_eq!(popped.len(), 1);
}

#[tokio::test]
async fn a_parked_pop_wait_returns_zero_rows_at_the_drain() {
    let proxy = Proxy::start("lifecycle_pop_wait").await;
    let cfg = proxy.client_config();
    let (waiter, ended) = watched(&cfg).await;
    waiter
        .batch_execute("CREATE QUEUE waitq WITH (retry_limit = 1)")
        .await
        .unwrap();
    let pop = tokio::spawn(async move {
        let out = rows(&waiter, "POP FROM waitq WAIT 600").await;
        (out, waiter)
    });
    // Let it park (if it has not yet, the drain makes it return anyway).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = drain(proxy);
    let (out, waiter) = tokio::time::timeout(HANG, pop)
        .await
        .expect("the POP … WAIT 600 ends with the drain")
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(ended_with(ended).await.as_deref(), Some("57P01"));
    drop(waiter);
    tokio::time::timeout(HANG, stopping).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_transaction_past_the_timeout_is_rolled_back_and_its_client_told() {
    let proxy = Proxy::start_with("lifecycle_timeout", |c| {
        c.shutdown_timeout = Duration::from_secs(1)
    })
    .await;
    let cfg = proxy.client_config();
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("CREATE TABLE lingering (n INT)")
        .await
        .unwrap();
    let (txn, txn_ended) = watched(&cfg).await;
    txn.batch_execute("BEGIN; INSERT INTO lingering VALUES (1)")
        .await
        .unwrap();
    // A statement still running at the timeout is cancelled.
    let (busy, busy_ended) = watched(&cfg).await;
    let sleeping = tokio::spawn(async move {
        let r = busy.simple_query("SELECT pg_sleep(600)").await;
        (
            r.err().and_then(|e| e.code().map(|c| c.code().to_string())),
            busy,
        )
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = tokio::time::timeout(HANG, drain(proxy))
        .await
        .expect("the drain ends after its timeout")
        .unwrap();
    assert_eq!(report.terminated, 2, "{report:?}");
    assert_eq!(report.abandoned, 0, "{report:?}");
    assert_eq!(ended_with(txn_ended).await.as_deref(), Some("57P01"));
    let (sleep_error, _busy) = tokio::time::timeout(HANG, sleeping).await.unwrap().unwrap();
    assert_eq!(sleep_error.as_deref(), Some("57014"));
    assert_eq!(ended_with(busy_ended).await.as_deref(), Some("57P01"));
    assert!(txn.batch_execute("COMMIT").await.is_err());
    let n: i64 = direct
        .query_one("SELECT count(*) FROM lingering", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the unfinished transaction was rolled back");
    // Nothing of it holds a lock or a backend any more.
    let deadline = Instant::now() + HANG;
    loop {
        let open: i64 = direct
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} backends still busy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn nothing_acknowledged_is_lost_across_a_drain_and_restart() {
    let proxy = Proxy::start("lifecycle_acks").await;
    let direct = proxy.direct.clone();
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE keep WITH (retry_limit = 5)")
        .await
        .unwrap();
    rows(
        &client,
        "PUSH INTO keep VALUES ('{\"n\":1}'), ('{\"n\":2}'), ('{\"n\":3}')",
    )
    .await;
    let acked = rows(&client, "POP FROM keep LEASE 1").await;
    assert_eq!(acked.len(), 1);
    let receipt = acked[0]["receipt"].clone().unwrap();
    let status = rows(&client, &format!("ACK '{receipt}'")).await;
    assert_eq!(status[0]["status"].as_deref(), Some("acked"));
    let acked_id = acked[0]["message_id"].clone().unwrap();
    let unacked = rows(&client, "POP FROM keep LEASE 1").await;
    assert_eq!(unacked.len(), 1);
    let unacked_id = unacked[0]["message_id"].clone().unwrap();
    tokio::time::timeout(HANG, proxy.server.shutdown())
        .await
        .unwrap();
    drop(client);

    let proxy = Proxy::start_on(direct, |_| {}).await;
    let client = proxy.connect().await;
    // The popped-but-unacknowledged message comes back when its lease
    // ends; the acknowledged one never does; the third was never popped.
    let mut seen = Vec::new();
    let deadline = Instant::now() + HANG;
    while seen.len() < 2 {
        assert!(Instant::now() < deadline, "only {seen:?} came back");
        for m in rows(&client, "POP FROM keep LIMIT 10 WAIT 2").await {
            let id = m["message_id"].clone().unwrap();
            assert_ne!(id, acked_id, "an acknowledged message was redelivered");
            let receipt = m["receipt"].clone().unwrap();
            rows(&client, &format!("ACK '{receipt}'")).await;
            seen.push(id);
        }
    }
    assert!(seen.contains(&unacked_id), "{seen:?}");
    assert!(rows(&client, "POP FROM keep LIMIT 10").await.is_empty());
}

/// A stop gives back the claim held for a session's next POP
/// (src/engine/fusion/hold.rs) once its sessions are gone: no lease is
/// left behind to expire (and count a failure) for a message nobody got.
#[tokio::test]
async fn a_stop_gives_back_the_claims_held_for_next_pops() {
    let proxy = Proxy::start("lifecycle_held").await;
    let direct_cfg = proxy.direct.clone();
    let client = proxy.connect().await;
    rows(
        &client,
        "PUSH INTO kept VALUES ('{\"n\":1}'), ('{\"n\":2}')",
    )
    .await;
    let got = rows(&client, "POP FROM kept LIMIT 1").await;
    let receipt = got[0]["receipt"].clone().unwrap();
    // The ACK's write claims message 2 for this session's next POP.
    let status = rows(&client, &format!("ACK '{receipt}'")).await;
    assert_eq!(status[0]["status"].as_deref(), Some("acked"));
    tokio::time::timeout(HANG, proxy.server.shutdown())
        .await
        .unwrap();
    drop(client);
    let direct = connect(&direct_cfg).await;
    let leased = common::sql::leases_held(&direct).await;
    assert_eq!(leased, 0, "a lease was left behind by the stop");
    let proxy = Proxy::start_on(direct_cfg, |_| {}).await;
    let client = proxy.connect().await;
    let got = rows(&client, "POP FROM kept LIMIT 1").await;
    assert_eq!(got.len(), 1, "message 2 is there at once");
    assert_eq!(got[0]["retry_count"].as_deref(), Some("0"));
}

// --- reload ------------------------------------------------------------

fn user(name: &str, tenant: u128, passthrough: Passthrough) -> (String, User) {
    (
        name.to_string(),
        User {
            name: name.into(),
            tenant: uuid::Uuid::from_u128(tenant),
            passthrough,
            verifier: Verifier::new("pw"),
        },
    )
}

fn save(path: &std::path::Path, list: Vec<(String, User)>) -> Arc<Users> {
    let users = Users {
        users: list.into_iter().collect(),
        admins: Default::default(),
    };
    users.save(path).unwrap();
    Arc::new(users)
}

async fn login(proxy_cfg: &tokio_postgres::Config, name: &str) -> Result<Client, String> {
    let mut cfg = proxy_cfg.clone();
    cfg.user(name).password("pw");
    match cfg.connect(tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok(client)
        }
        Err(e) => Err(e.code().map_or(e.to_string(), |c| c.code().to_string())),
    }
}

#[tokio::test]
async fn a_reload_replaces_the_users_for_new_logins_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.toml");
    let first = save(&path, vec![user("alice", 0xa11ce, Passthrough::Full)]);
    let users_path = path.clone();
    let proxy = Proxy::start_with("lifecycle_reload", |c| {
        c.users = Some(first);
        c.users_path = Some(users_path);
    })
    .await;
    let cfg = proxy.client_config();
    let alice = login(&cfg, "alice").await.unwrap();
    alice
        .batch_execute("CREATE QUEUE aq WITH (retry_limit = 1)")
        .await
        .unwrap();
    assert_eq!(login(&cfg, "bob").await.err().as_deref(), Some("28P01"));

    // alice goes, bob comes, in a tenant no user had: his backend role is
    // made on reload, as at start.
    save(&path, vec![user("bob", 0xb0b, Passthrough::Full)]);
    proxy.server.reload().await.unwrap();
    let bob = login(&cfg, "bob").await.unwrap();
    rows(&bob, "SELECT 1 AS plain_sql").await;
    bob.batch_execute("CREATE QUEUE bq WITH (retry_limit = 1)")
        .await
        .unwrap();
    let who = rows(&bob, "SELECT current_user AS u").await;
    assert_eq!(
        who[0]["u"].as_deref(),
        Some(format!("queen_t_{}", uuid::Uuid::from_u128(0xb0b).simple()).as_str())
    );
    assert_eq!(login(&cfg, "alice").await.err().as_deref(), Some("28P01"));
    // alice's session from before goes on, plain SQL and dialect alike.
    rows(&alice, "SELECT 1 AS still_here").await;
    rows(&alice, "PUSH INTO aq VALUES ('{}')").await;

    // A broken file is refused and the users stay as they were.
    std::fs::write(&path, "[users.bob\nthis is not toml").unwrap();
    let err = proxy.server.reload().await.unwrap_err();
    assert!(err.contains("users file"), "{err}");
    login(&cfg, "bob").await.unwrap();
    // So is a missing or empty one: it would lock everybody out.
    std::fs::remove_file(&path).unwrap();
    let err = proxy.server.reload().await.unwrap_err();
    assert!(err.contains("does not exist"), "{err}");
    std::fs::write(&path, "").unwrap();
    let err = proxy.server.reload().await.unwrap_err();
    assert!(err.contains("no users"), "{err}");
    login(&cfg, "bob").await.unwrap();
    assert_eq!(login(&cfg, "alice").await.err().as_deref(), Some("28P01"));
}

/// A self-signed certificate with this common name, made with the openssl
/// CLI, into `dir` (replacing what is there).
fn self_signed(dir: &std::path::Path, cn: &str) -> queenwire::server::TlsFiles {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", &format!("/CN={cn}")])
        .args([
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ])
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    queenwire::server::TlsFiles { cert, key }
}

/// The subject of the certificate the proxy presents to a new client.
async fn presented_subject(port: u16) -> String {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("openssl")
            .args(["s_client", "-starttls", "postgres", "-connect"])
            .arg(format!("127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl s_client runs")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_else(|| panic!("no subject in {text}"))
        .to_string()
}

#[tokio::test]
async fn a_reload_replaces_the_certificate_and_keeps_it_when_the_new_one_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    let files = self_signed(dir.path(), "first.example");
    let proxy = Proxy::start_with("lifecycle_tls", |c| c.tls = Some(files.clone())).await;
    let port = proxy.addr.port();
    assert!(presented_subject(port).await.contains("first.example"));
    let (ok, _, err) = proxy
        .psql_env(&["-At", "-c", "SELECT 1"], &[("PGSSLMODE", "require")])
        .await;
    assert!(ok, "{err}");
    let session = proxy.connect().await;

    self_signed(dir.path(), "second.example");
    proxy.server.reload().await.unwrap();
    assert!(presented_subject(port).await.contains("second.example"));
    session.simple_query("SELECT 1").await.unwrap();

    std::fs::write(&files.cert, "-----BEGIN CERTIFICATE-----\nbroken\n").unwrap();
    let err = proxy.server.reload().await.unwrap_err();
    assert!(err.contains("TLS") || err.contains("cert"), "{err}");
    assert!(presented_subject(port).await.contains("second.example"));
    let (ok, _, err) = proxy
        .psql_env(&["-At", "-c", "SELECT 1"], &[("PGSSLMODE", "require")])
        .await;
    assert!(ok, "{err}");
    session.simple_query("SELECT 1").await.unwrap();
    // The database itself is untouched by all this.
    connect(&proxy.direct)
        .await
        .simple_query("SELECT 1")
        .await
        .unwrap();
}

// --- the real binary and real signals ------------------------------------

/// The `key=value` backend string of a test database.
fn backend_string(cfg: &tokio_postgres::Config) -> String {
    let host = match cfg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Unix(dir)) => dir.display().to_string(),
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        None => panic!("no host"),
    };
    format!(
        "host={host} port={} user={} dbname={}",
        cfg.get_ports().first().copied().unwrap_or(5432),
        cfg.get_user().unwrap(),
        cfg.get_dbname().unwrap()
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed if the test fails before it exits.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &std::process::Child, sig: i32) {
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// Waits until `what` holds, within the hang bound.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + HANG;
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_binary_reloads_on_sighup_and_drains_on_sigterm_and_exits_0() {
    let direct = common::cluster::fresh_database("lifecycle_binary");
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.toml");
    save(&users, vec![user("alice", 0xa, Passthrough::Full)]);
    let log = dir.path().join("queenwire.log");
    let port = free_port();
    let mut child = Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_queenwire"))
            .args(["--backend", &backend_string(&direct)])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--users", users.to_str().unwrap()])
            .args(["--shutdown-timeout", "60", "--pool-size", "4"])
            .env_remove("DATABASE_URL")
            .stdout(std::process::Stdio::null())
            // Logs go to standard error.
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).dbname("x");
    let cfg = &cfg;
    let deadline = Instant::now() + HANG;
    while login(cfg, "alice").await.is_err() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "queenwire exited early"
        );
        assert!(Instant::now() < deadline, "queenwire never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();

    // SIGHUP with a broken users file: logged, and the old users stay.
    std::fs::write(&users, "not = [toml").unwrap();
    signal(child, libc::SIGHUP);
    until("the failed reload is logged", || async {
        logged().contains("users file not reloaded")
    })
    .await;
    login(cfg, "alice").await.unwrap();
    // SIGHUP with bob instead of alice.
    save(&users, vec![user("bob", 0xb, Passthrough::Full)]);
    signal(child, libc::SIGHUP);
    until("bob can log in", || async {
        login(cfg, "bob").await.is_ok()
    })
    .await;
    assert_eq!(login(cfg, "alice").await.err().as_deref(), Some("28P01"));

    let mut bob = cfg.clone();
    bob.user("bob").password("pw");
    let (txn, txn_ended) = watched(&bob).await;
    connect(&direct)
        .await
        .batch_execute("CREATE TABLE signalled (n INT); GRANT ALL ON signalled TO PUBLIC")
        .await
        .unwrap();
    txn.batch_execute("CREATE QUEUE sq WITH (retry_limit = 1)")
        .await
        .unwrap();
    let (idle, idle_ended) = watched(&bob).await;
    idle.simple_query("SELECT 1").await.unwrap();
    let (waiter, waiter_ended) = watched(&bob).await;
    let pop = tokio::spawn(async move { (rows(&waiter, "POP FROM sq WAIT 600").await, waiter) });
    txn.batch_execute("BEGIN; INSERT INTO signalled VALUES (1)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    signal(child, libc::SIGTERM);
    until_refused(cfg).await;
    let (popped, _waiter) = tokio::time::timeout(HANG, pop).await.unwrap().unwrap();
    assert!(popped.is_empty());
    assert_eq!(ended_with(waiter_ended).await.as_deref(), Some("57P01"));
    assert_eq!(ended_with(idle_ended).await.as_deref(), Some("57P01"));
    txn.batch_execute("INSERT INTO signalled VALUES (2); COMMIT")
        .await
        .unwrap();
    assert_eq!(ended_with(txn_ended).await.as_deref(), Some("57P01"));
    let deadline = Instant::now() + HANG;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "queenwire did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}\n{}", logged());
    let n: i64 = connect(&direct)
        .await
        .query_one("SELECT count(*) FROM signalled", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
}

#[tokio::test]
async fn a_second_signal_ends_the_wait_for_open_transactions() {
    let proxy = Proxy::start_with("lifecycle_hurry", |c| {
        c.shutdown_timeout = Duration::from_secs(600)
    })
    .await;
    let cfg = proxy.client_config();
    let (txn, txn_ended) = watched(&cfg).await;
    txn.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let (again, hurry) = tokio::sync::oneshot::channel::<()>();
    let stopping = tokio::spawn(async move {
        proxy
            .server
            .drain(async move {
                let _ = hurry.await;
            })
            .await
    });
    until_refused(&cfg).await;
    // The transaction may go on for now…
    txn.batch_execute("SELECT 2").await.unwrap();
    // …until the second signal.
    again.send(()).unwrap();
    let report = tokio::time::timeout(HANG, stopping)
        .await
        .expect("the drain ends at the second signal")
        .unwrap();
    assert_eq!((report.terminated, report.abandoned), (1, 0), "{report:?}");
    assert_eq!(ended_with(txn_ended).await.as_deref(), Some("57P01"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_one_of_many_idle_sessions_is_told_57p01() {
    const SESSIONS: usize = 200;
    let proxy = Proxy::start("lifecycle_many").await;
    let cfg = proxy.client_config();
    let mut ended = Vec::with_capacity(SESSIONS);
    let mut clients = Vec::with_capacity(SESSIONS);
    for _ in 0..SESSIONS {
        let (client, end) = watched(&cfg).await;
        clients.push(client);
        ended.push(end);
    }
    let started = Instant::now();
    let report = tokio::time::timeout(HANG, drain(proxy))
        .await
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        (report.drained, report.terminated),
        (SESSIONS, 0),
        "{report:?}"
    );
    for end in ended {
        assert_eq!(ended_with(end).await.as_deref(), Some("57P01"));
    }
    // A figure for the docs, not a pass/fail bound.
    eprintln!("{SESSIONS} idle sessions drained in {took:?}");
}
