//! The front door: users file tooling, loopback-only without one, and the
//! limits that keep a client from holding what others need.

mod common;

use common::proxy::Proxy;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn user_add_writes_verifiers_and_user_list_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.toml");
    for (name, policy) in [("alice", "full"), ("bob", "read_only")] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_queenwire"))
            .args([
                "user",
                "add",
                name,
                "--file",
                file.to_str().unwrap(),
                "--passthrough",
                policy,
            ])
            .args(["--tenant", "0f5c1a2b-0000-4000-8000-000000000001"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"correct horse\n")
            .unwrap();
        assert!(child.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("SCRAM-SHA-256$4096:"), "{text}");
    assert!(
        !text.contains("correct horse"),
        "the password itself must not be stored"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let out = Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args(["user", "list", "--file", file.to_str().unwrap()])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("alice\ttenant=0f5c1a2b-0000-4000-8000-000000000001\tpassthrough=full"),
        "{listed}"
    );
    assert!(
        listed.contains("bob\t") && listed.contains("passthrough=read_only"),
        "{listed}"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args([
            "user",
            "add",
            "x",
            "--file",
            file.to_str().unwrap(),
            "--passthrough",
            "everything",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

#[tokio::test]
async fn without_a_users_file_queenwire_listens_on_loopback_only() {
    let db = common::cluster::fresh_database("no_users_wildcard");
    let config = queenwire::server::Config {
        listen: "0.0.0.0:0".into(),
        backend: queenwire::server::Backend::External(Box::new(db)),
        ..queenwire::server::Config::default()
    };
    let err = queenwire::server::Server::start(config)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("without a users file"), "{err}");
}

#[tokio::test]
async fn connections_beyond_the_limit_get_53300() {
    let proxy = Proxy::start_with("max_conns", |c| c.max_connections = 2).await;
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    let err = proxy
        .client_config()
        .connect(tokio_postgres::NoTls)
        .await
        .err()
        .expect("third refused");
    assert_eq!(err.code().map(|c| c.code()), Some("53300"), "{err}");
    drop(a);
    // The slot comes back once a client leaves.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if proxy
            .client_config()
            .connect(tokio_postgres::NoTls)
            .await
            .is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.simple_query("SELECT 1").await.unwrap();
}

/// A client over the limit is told so after its startup packet, as
/// PostgreSQL does: libpq (psql's default sslmode=prefer sends an
/// SSLRequest first) shows the FATAL, not a failed SSL negotiation. A
/// cancel request still gets through when every slot is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_refuses_readably_and_still_takes_cancel_requests() {
    let proxy = Proxy::start_with("max_conns_psql", |c| c.max_connections = 1).await;
    let busy = proxy.connect().await;
    let (ok, _, stderr) = proxy
        .psql_env(&["-c", "SELECT 1"], &[("PGSSLMODE", "prefer")])
        .await;
    assert!(!ok);
    assert!(
        stderr.contains("sorry, too many clients already"),
        "{stderr}"
    );

    let cancel = busy.cancel_token();
    let sleeping = tokio::spawn(async move { busy.simple_query("SELECT pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    cancel
        .cancel_query(tokio_postgres::NoTls)
        .await
        .expect("the cancel request is sent");
    let err = tokio::time::timeout(Duration::from_secs(10), sleeping)
        .await
        .expect("the cancel reached the query")
        .unwrap()
        .expect_err("cancelled");
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
}

/// A login waits for a pool connection when every one is busy; a client
/// that gives up meanwhile (a driver's connect timeout) frees its slot at
/// once, so abandoned logins never fill --max-connections while the pool
/// is busy.
#[tokio::test]
async fn a_login_abandoned_while_the_pool_is_busy_frees_its_slot() {
    let proxy = Proxy::start_with("abandoned_logins", |c| {
        c.max_connections = 4;
        c.pool_size = 1;
    })
    .await;
    let holder = proxy.connect().await;
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let mut startup = Vec::new();
    let params = b"user\0tester\0database\0postgres\0\0";
    startup.extend_from_slice(&((8 + params.len()) as i32).to_be_bytes());
    startup.extend_from_slice(&196608i32.to_be_bytes());
    startup.extend_from_slice(params);
    for _ in 0..6 {
        let mut abandoned = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        abandoned.write_all(&startup).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(abandoned);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cfg = proxy.client_config();
    let login = tokio::spawn(async move { cfg.connect(tokio_postgres::NoTls).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !login.is_finished(),
        "the login waits for the pool (refused: the abandoned logins kept their slots)"
    );
    holder.batch_execute("COMMIT").await.unwrap();
    let (client, connection) = tokio::time::timeout(Duration::from_secs(20), login)
        .await
        .expect("the login completes once a connection is free")
        .unwrap()
        .expect("logged in");
    tokio::spawn(connection);
    assert_eq!(client.simple_query("SELECT 1").await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_silent_client_is_closed_after_the_startup_timeout() {
    let proxy = Proxy::start_with("startup_timeout", |c| {
        c.startup_timeout = Duration::from_millis(500)
    })
    .await;
    let mut silent = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("closed in time")
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    assert!(started.elapsed() >= Duration::from_millis(400));
    // Half a startup packet, then silence: the same.
    let mut half = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    half.write_all(&[0, 0, 0, 40, 0, 3]).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), half.read(&mut buf))
        .await
        .expect("closed in time")
        .unwrap_or(0);
    assert_eq!(n, 0);
    proxy
        .connect()
        .await
        .simple_query("SELECT 1")
        .await
        .unwrap();
}

#[tokio::test]
async fn idle_in_transaction_clients_are_disconnected_and_rolled_back() {
    let proxy = Proxy::start_with("idle_tx", |c| {
        c.idle_in_transaction_timeout = Some(Duration::from_millis(700))
    })
    .await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("CREATE TABLE t (x int)")
        .await
        .unwrap();
    let client = proxy.connect().await;
    client
        .batch_execute("BEGIN; INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let err = client.simple_query("COMMIT").await.unwrap_err();
    assert!(
        err.is_closed() || err.code().map(|c| c.code()) == Some("25P03"),
        "{err}"
    );
    let n: i64 = direct
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // Idle outside a transaction is fine.
    let idle = proxy.connect().await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    idle.simple_query("SELECT 1").await.unwrap();
}

/// A self-signed certificate for 127.0.0.1, made with the openssl CLI.
fn self_signed(dir: &std::path::Path) -> queenwire::server::TlsFiles {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ])
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

#[tokio::test]
async fn tls_is_offered_and_can_be_required() {
    let dir = tempfile::tempdir().unwrap();
    let files = self_signed(dir.path());
    let proxy = Proxy::start_with("tls", |c| {
        c.tls = Some(files.clone());
        c.require_tls = true;
    })
    .await;
    // psql with sslmode=require gets in over TLS…
    let (ok, out, err) = proxy
        .psql_env(
            &["-At", "-c", "SELECT 'tls works'"],
            &[("PGSSLMODE", "require")],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, "tls works\n");
    // …and its session really is encrypted (psql's \conninfo says so).
    let (ok, out, _) = proxy
        .psql_env(&["-c", "\\conninfo"], &[("PGSSLMODE", "require")])
        .await;
    assert!(ok && out.contains("SSL connection"), "{out}");
    // A plaintext login is refused.
    let (ok, _, err) = proxy
        .psql_env(&["-c", "SELECT 1"], &[("PGSSLMODE", "disable")])
        .await;
    assert!(!ok);
    assert!(err.contains("requires TLS"), "{err}");
}

#[tokio::test]
async fn tenants_see_and_touch_only_their_own_objects() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    use uuid::Uuid;
    let mut users = Users::default();
    for (name, tenant) in [("a", Uuid::from_u128(0xa)), ("b", Uuid::from_u128(0xb))] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant,
                passthrough: Passthrough::None,
                verifier: Verifier::new("pw"),
            },
        );
    }
    let users = std::sync::Arc::new(users);
    let proxy = Proxy::start_with("tenant_matrix", |c| c.users = Some(users.clone())).await;
    let login = |name: &'static str| {
        let mut cfg = proxy.client_config();
        cfg.user(name).password("pw");
        cfg
    };
    let a = common::proxy::connect(&login("a")).await;
    let b = common::proxy::connect(&login("b")).await;
    use common::sql::rows;

    // Tenant a's objects.
    a.batch_execute("CREATE QUEUE shared_name WITH (retry_limit = 1)")
        .await
        .unwrap();
    rows(&a, "PUSH INTO shared_name VALUES ('{\"owner\":\"a\"}')").await;
    let held = rows(&a, "POP FROM shared_name GROUP g LEASE 60").await;
    let receipt = held[0]["receipt"].clone().unwrap();
    rows(
        &a,
        "PUSH INTO shared_name VALUES ('{\"owner\":\"a\",\"n\":2}')",
    )
    .await;
    rows(&a, "KV PUT secrets k '\"a-only\"' FOREVER").await;
    rows(&a, "SCHEDULE INTO shared_name KEY t AFTER 600 VALUES ('1')").await;

    // Tenant b sees none of it…
    assert!(rows(&b, "SHOW QUEUES").await.is_empty());
    assert!(rows(&b, "SHOW GROUPS").await.is_empty());
    assert!(rows(&b, "SHOW SCHEDULES").await.is_empty());
    assert!(rows(&b, "KV GET secrets k").await.is_empty());
    assert!(rows(&b, "KV LIST secrets").await.is_empty());
    assert!(rows(&b, "POP FROM shared_name LIMIT 10").await.is_empty());
    let err = b
        .simple_query("SHOW PARTITIONS FROM shared_name")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42704"));
    let err = b
        .simple_query("SHOW DLQ FROM shared_name")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42704"));
    // …and cannot act on it, even holding a's receipt.
    let acked = rows(&b, &format!("ACK '{receipt}'")).await;
    assert_eq!(acked[0]["status"].as_deref(), Some("stale"));
    let failed = rows(&b, &format!("ACK '{receipt}' FAILED")).await;
    assert_eq!(failed[0]["status"].as_deref(), Some("stale"));
    let renewed = rows(&b, &format!("RENEW '{receipt}'")).await;
    assert_eq!(renewed[0]["lease_expires_at"], None);
    let cancelled = rows(&b, "CANCEL SCHEDULE t ON shared_name").await;
    assert_eq!(cancelled[0]["applied"].as_deref(), Some("f"));
    assert!(b
        .simple_query("SEEK GROUP g ON shared_name TO BEGINNING")
        .await
        .is_err());
    let err = b.simple_query("DROP QUEUE shared_name").await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42704"));
    let err = b
        .simple_query("ALTER QUEUE shared_name SET (retry_limit = 9)")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42704"));
    // b's own queue of the same name is its own.
    rows(&b, "PUSH INTO shared_name VALUES ('{\"owner\":\"b\"}')").await;
    let mine = rows(&b, "POP FROM shared_name LIMIT 10").await;
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["payload"].as_deref(), Some("{\"owner\":\"b\"}"));
    let put = rows(&b, "KV PUT secrets k '\"b\"' FOREVER IF ABSENT").await;
    assert_eq!(put[0]["applied"].as_deref(), Some("t"));

    // a's world is untouched.
    let still = rows(&a, &format!("ACK '{receipt}'")).await;
    assert_eq!(still[0]["status"].as_deref(), Some("acked"));
    let kv = rows(&a, "KV GET secrets k").await;
    assert_eq!(kv[0]["value"].as_deref(), Some("\"a-only\""));
    assert_eq!(rows(&a, "SHOW SCHEDULES").await.len(), 1);
    assert_eq!(rows(&a, "POP FROM shared_name LIMIT 10").await.len(), 2);
}

/// psql as a newcomer types it against a Unix socket: `-h DIR -p PORT`.
async fn psql_unix(
    dir: &std::path::Path,
    port: u16,
    args: &[&str],
    env: &[(&str, &str)],
) -> (bool, String, String) {
    common::proxy::psql_at(&dir.display().to_string(), port, args, env).await
}

#[tokio::test]
async fn clients_connect_on_the_unix_socket_as_on_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    // A file left behind by a process that is gone, at the name this
    // proxy will take: it is replaced, not an error.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let path = dir.path().join(format!(".s.PGSQL.{port}"));
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let socket_dir = dir.path().to_path_buf();
    let proxy = Proxy::start_with("unix_socket", |c| {
        c.listen = format!("127.0.0.1:{port}");
        c.unix_socket_dir = Some(socket_dir);
    })
    .await;
    assert_eq!(proxy.server.unix_socket.as_deref(), Some(path.as_path()));

    // psql over the socket: plain SQL and the dialect, and \conninfo says
    // it is the socket (psql's default sslmode=prefer is declined there).
    let (ok, out, err) = psql_unix(
        dir.path(),
        port,
        &[
            "-At",
            "-c",
            "PUSH INTO unix_q VALUES ('{\"n\":1}')",
            "-c",
            "SELECT 40 + 2",
            "-c",
            "\\conninfo",
        ],
        &[],
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("42\n"), "{out}");
    assert!(out.contains("via socket in"), "{out}");

    // tokio-postgres given the directory as its host.
    let mut cfg = tokio_postgres::Config::new();
    cfg.host_path(dir.path())
        .port(port)
        .user("tester")
        .dbname("x");
    let client = common::proxy::connect(&cfg).await;
    let rows = client
        .simple_query("POP FROM unix_q LIMIT 1 AUTO ACK")
        .await
        .unwrap();
    let popped = rows.iter().any(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => {
            r.get("payload").is_some_and(|p| p.contains("\"n\""))
        }
        _ => false,
    });
    assert!(popped, "the message pushed over the socket is popped");
    // The admin view says where it is, as PostgreSQL's connection log.
    let (ok, out, err) = psql_unix(
        dir.path(),
        port,
        &["-At", "-c", "SHOW QUEENWIRE CLIENTS"],
        &[],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.matches("|[local]|").count(), 2, "{out}");

    // A cancel request over the socket (libpq and tokio-postgres send it
    // on the connection's own socket) reaches the running statement.
    let token = client.cancel_token();
    let sleeper = tokio::spawn(async move {
        let result = client.simple_query("SELECT pg_sleep(30)").await;
        (client, result)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let (client, result) = tokio::time::timeout(Duration::from_secs(20), sleeper)
        .await
        .expect("the cancelled statement ends")
        .unwrap();
    let code = result.err().and_then(|e| e.code().cloned());
    assert_eq!(code, Some(tokio_postgres::error::SqlState::QUERY_CANCELED));

    // A live socket is never taken over by a second server.
    let taken = queenwire::frontend::accept::bind_unix(dir.path(), port);
    assert_eq!(
        taken.err().map(|e| e.kind()),
        Some(std::io::ErrorKind::AddrInUse)
    );
    assert!(path.exists(), "the live socket is still there");
    drop(client);

    // A stop removes the file: a later client is refused by the kernel.
    proxy.server.shutdown().await;
    assert!(!path.exists());
    let (ok, _, err) = psql_unix(dir.path(), port, &["-c", "SELECT 1"], &[]).await;
    assert!(!ok);
    assert!(err.contains("No such file"), "{err}");
}

#[tokio::test]
async fn tls_required_over_tcp_is_not_asked_of_the_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let files = self_signed(dir.path());
    let socket_dir = dir.path().to_path_buf();
    let proxy = Proxy::start_with("unix_tls", |c| {
        c.tls = Some(files.clone());
        c.require_tls = true;
        c.unix_socket_dir = Some(socket_dir);
    })
    .await;
    let port = proxy.addr.port();
    // PostgreSQL's hostssl lines do not apply to local connections either.
    let (ok, out, err) = psql_unix(
        dir.path(),
        port,
        &["-At", "-c", "SELECT 'local'"],
        &[("PGSSLMODE", "disable")],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "local\n");
    // Over TCP plaintext is still refused.
    let (ok, _, err) = proxy
        .psql_env(&["-c", "SELECT 1"], &[("PGSSLMODE", "disable")])
        .await;
    assert!(!ok && err.contains("requires TLS"), "{err}");
}
