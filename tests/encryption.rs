//! Payload encryption at rest (`encryption = true`, `--encryption-key-file`):
//! round trips over both protocols, no plaintext in `queen.log_segments`,
//! key rotation with old keys still opening, a PUSH refused without a key
//! (nothing stored), a POP without the key failing while the message stays,
//! and altered ciphertext giving an error, never a crash.

mod common;

use common::proxy::Proxy;
use common::sql::rows;
use queenwire::engine::sealing::Sealing;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres::types::Type;
use tokio_postgres::Client;

const KEY_A: &str = "ka 1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";
const KEY_B: &str = "kb 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const SECRET: &str = "hunter2-card-4111111111111111";

fn write_keys(dir: &Path, lines: &[&str]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("keys");
    std::fs::write(&path, format!("# test keys\n{}\n", lines.join("\n"))).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn sealing(path: &Path) -> Arc<Sealing> {
    Arc::new(Sealing::load(Some(path.to_path_buf())).unwrap())
}

async fn code(client: &Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(_) => panic!("{sql}: succeeded, an error was expected"),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| panic!("{sql}: {e}")),
    }
}

/// Every stored blob of the database (segments and DLQ copies), read
/// straight from PostgreSQL.
async fn blobs(direct: &Client) -> Vec<Vec<u8>> {
    direct
        .query(
            "SELECT blob FROM queen.log_segments UNION ALL SELECT blob FROM queen.log_dlq WHERE blob IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Vec<u8>>(0))
        .collect()
}

/// The segments' blobs of one queue.
async fn queue_blobs(direct: &Client, queue: &str) -> Vec<Vec<u8>> {
    direct
        .query(
            "SELECT s.blob FROM queen.log_segments s JOIN queen.log_partitions p \
             ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id \
             WHERE q.name = $1",
            &[&queue],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The key id in a sealed blob's header.
fn key_id(blob: &[u8]) -> String {
    assert_eq!(blob[0], 2, "a sealed blob");
    String::from_utf8(blob[2..2 + blob[1] as usize].to_vec()).unwrap()
}

fn payloads(rows: &[common::sql::Row]) -> Vec<String> {
    rows.iter()
        .map(|r| r["payload"].clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn an_encrypted_queue_round_trips_over_both_protocols_and_stores_no_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[KEY_A]);
    let proxy = Proxy::start_with("crypt_rt", |c| c.sealing = sealing(&keys)).await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    client
        .batch_execute("CREATE QUEUE vault WITH (encryption = true, retry_limit = 0)")
        .await
        .unwrap();
    // Simple protocol, with a transaction id and a trace id.
    client
        .batch_execute(&format!(
            "PUSH INTO vault (payload, transaction_id, trace_id) VALUES ('{{\"s\": \"{SECRET}\"}}', 'txn-{SECRET}', 'trace-1')"
        ))
        .await
        .unwrap();
    // Extended protocol: Parse with a text parameter, Describe, Execute.
    let push = client
        .prepare_typed("PUSH INTO vault VALUES ($1)", &[Type::TEXT])
        .await
        .unwrap();
    assert_eq!(push.columns()[5].name(), "status");
    let pushed = client
        .query(&push, &[&format!("{{\"s\": \"{SECRET}-2\"}}")])
        .await
        .unwrap();
    assert_eq!(pushed[0].get::<_, String>("status"), "queued");
    // Inside a transaction block too.
    client
        .batch_execute(&format!(
            "BEGIN; PUSH INTO vault VALUES ('{{\"s\": \"{SECRET}-3\"}}'); COMMIT;"
        ))
        .await
        .unwrap();

    let stored = blobs(&direct).await;
    assert_eq!(stored.len(), 3, "one segment per push");
    for blob in &stored {
        assert_eq!(key_id(blob), "ka");
        for needle in [SECRET, "hunter2", "txn-", "4111"] {
            assert!(!contains(blob, needle), "plaintext {needle:?} stored");
        }
    }

    // SHOW MESSAGES decrypts (and leases nothing).
    let shown = rows(&client, "SHOW MESSAGES FROM vault").await;
    assert_eq!(shown.len(), 3);
    assert!(payloads(&shown)[0].contains(SECRET));
    assert_eq!(
        shown[0]["transaction_id"].as_deref(),
        Some(&*format!("txn-{SECRET}"))
    );
    // POP over the simple protocol…
    let popped = rows(&client, "POP FROM vault LIMIT 2").await;
    assert_eq!(popped.len(), 2);
    assert!(payloads(&popped)[1].contains(&format!("{SECRET}-2")));
    assert_eq!(popped[0]["trace_id"].as_deref(), Some("trace-1"));
    // …and the extended one (Describe answered before Execute).
    let pop = client
        .prepare("POP FROM vault GROUP g2 LIMIT 3")
        .await
        .unwrap();
    assert_eq!(pop.columns()[5].name(), "payload");
    assert_eq!(pop.columns()[5].type_(), &Type::JSONB);
    assert_eq!(client.query(&pop, &[]).await.unwrap().len(), 3);

    // A dead-lettered copy stays sealed; SHOW DLQ and REPLAY DLQ open it.
    let receipt = popped[0]["receipt"].clone().unwrap();
    client
        .batch_execute(&format!("ACK '{receipt}' FAILED REASON 'boom'"))
        .await
        .unwrap();
    let dlq = rows(&client, "SHOW DLQ FROM vault").await;
    assert!(payloads(&dlq)[0].contains(SECRET));
    let replayed = rows(&client, "REPLAY DLQ FROM vault").await;
    assert_eq!(replayed.len(), 1);
    for blob in blobs(&direct).await {
        assert_eq!(key_id(&blob), "ka");
        assert!(!contains(&blob, SECRET));
    }
    let again = rows(&client, "POP FROM vault GROUP g3 LIMIT 10").await;
    assert_eq!(again.len(), 4, "three pushed and one replayed");
    assert!(payloads(&again)[3].contains(SECRET));
}

#[tokio::test]
async fn a_plain_queue_stays_plain_and_alter_queue_switches_new_segments() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[KEY_A]);
    let proxy = Proxy::start_with("crypt_alter", |c| c.sealing = sealing(&keys)).await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    let version = |d: Vec<Vec<u8>>| d.iter().map(|b| b[0]).collect::<Vec<u8>>();
    client
        .batch_execute("PUSH INTO q VALUES ('{\"n\": 1}')")
        .await
        .unwrap();
    client
        .batch_execute("ALTER QUEUE q SET (encryption_enabled = on)")
        .await
        .unwrap();
    // This queenwire's last word on q was "plain": the database corrects it.
    client
        .batch_execute("PUSH INTO q VALUES ('{\"n\": 2}')")
        .await
        .unwrap();
    client
        .batch_execute("ALTER QUEUE q SET (encryption = off)")
        .await
        .unwrap();
    client
        .batch_execute("PUSH INTO q VALUES ('{\"n\": 3}')")
        .await
        .unwrap();
    let stored = direct
        .query(
            "SELECT blob FROM queen.log_segments ORDER BY base_offset",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Vec<u8>>(0))
        .collect::<Vec<_>>();
    assert_eq!(version(stored), vec![1, 2, 1]);
    let popped = rows(&client, "POP FROM q LIMIT 3").await;
    assert_eq!(payloads(&popped).len(), 3);
    assert!(payloads(&popped)[1].contains('2'));
}

#[tokio::test]
async fn without_a_key_an_encrypted_queue_refuses_push_and_stores_nothing() {
    let proxy = Proxy::start("crypt_nokey").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    client
        .batch_execute("CREATE QUEUE vault WITH (encryption = true)")
        .await
        .unwrap();
    assert_eq!(
        code(&client, "PUSH INTO vault VALUES ('{\"s\": 1}')").await,
        "55000"
    );
    // Extended protocol.
    let err = client
        .query("PUSH INTO vault VALUES ('{\"s\": 2}')", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "55000");
    assert!(message(&err).contains("encryption key"), "{err:?}");
    // Inside a block: the block fails as for PostgreSQL's own error.
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        code(&client, "PUSH INTO vault VALUES ('{\"s\": 3}')").await,
        "55000"
    );
    assert_eq!(code(&client, "SELECT 1").await, "25P02");
    client.batch_execute("ROLLBACK").await.unwrap();
    // Several at once (fused writes).
    let mut tasks = Vec::new();
    for n in 0..8 {
        let c = proxy.connect().await;
        tasks.push(tokio::spawn(async move {
            c.simple_query(&format!("PUSH INTO vault VALUES ('{{\"n\": {n}}}')"))
                .await
                .unwrap_err()
                .code()
                .map(|c| c.code().to_string())
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().as_deref(), Some("55000"));
    }
    let stored: i64 = direct
        .query_one("SELECT count(*) FROM queen.log_segments", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 0, "nothing stored in plaintext");
    // A plain queue still works, and the session goes on.
    client
        .batch_execute("PUSH INTO plain VALUES ('{}')")
        .await
        .unwrap();
    assert_eq!(rows(&client, "SELECT 1 AS one").await.len(), 1);
}

#[tokio::test]
async fn rotation_keeps_old_keys_opening_and_a_pop_without_its_key_leaves_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[KEY_A]);
    let proxy = Proxy::start_with("crypt_rot", |c| c.sealing = sealing(&keys)).await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    client
        .batch_execute("CREATE QUEUE vault WITH (encryption = true)")
        .await
        .unwrap();
    client
        .batch_execute("PUSH INTO vault VALUES ('{\"k\": \"a\"}')")
        .await
        .unwrap();
    // Rotate: B first (current), A kept below it; SIGHUP's reload.
    write_keys(dir.path(), &[KEY_B, KEY_A]);
    proxy.server.reload().await.unwrap();
    client
        .batch_execute("PUSH INTO vault VALUES ('{\"k\": \"b\"}')")
        .await
        .unwrap();
    let ids: Vec<String> = blobs(&direct).await.iter().map(|b| key_id(b)).collect();
    assert_eq!(ids, vec!["ka", "kb"]);

    // A second queenwire that holds only B.
    let only_b = tempfile::tempdir().unwrap();
    let b_file = write_keys(only_b.path(), &[KEY_B]);
    let other = Proxy::start_on(proxy.direct.clone(), |c| c.sealing = sealing(&b_file)).await;
    let other_client = other.connect().await;
    // Simple protocol (the claim commits by itself): refused, given back.
    let err = other_client
        .simple_query("POP FROM vault")
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "55000");
    assert!(message(&err).contains("\"ka\""), "{err:?}");
    // Extended protocol (the claim is rolled back with the error).
    let err = other_client.query("POP FROM vault", &[]).await.unwrap_err();
    assert_eq!(err.code().unwrap().code(), "55000");
    assert_eq!(
        code(&other_client, "SHOW MESSAGES FROM vault").await,
        "55000"
    );
    // Nothing is leased and no failure was counted.
    let leased: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.log_consumers WHERE lease_token IS NOT NULL OR retry_count > 0 OR cursor_offset >= 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(leased, 0);
    // The first queenwire, with both keys, gets both, in order.
    let popped = rows(&client, "POP FROM vault LIMIT 2").await;
    assert_eq!(payloads(&popped).len(), 2);
    assert!(payloads(&popped)[0].contains("\"a\""));
    assert!(payloads(&popped)[1].contains("\"b\""));
    assert_eq!(popped[0]["retry_count"].as_deref(), Some("0"));
    // AUTO ACK without the key: the cursor is moved back too.
    client
        .batch_execute("PUSH INTO vault2 VALUES ('{}')")
        .await
        .unwrap();
    client
        .batch_execute("ALTER QUEUE vault2 SET (encryption = true)")
        .await
        .unwrap();
    write_keys(dir.path(), &[KEY_A]);
    proxy.server.reload().await.unwrap();
    client
        .batch_execute("PUSH INTO vault2 VALUES ('{\"k\": \"a2\"}')")
        .await
        .unwrap();
    let plain = rows(&other_client, "POP FROM vault2 GROUP auto AUTO ACK").await;
    assert_eq!(plain.len(), 1, "the plain message before the switch");
    assert_eq!(
        code(&other_client, "POP FROM vault2 GROUP auto AUTO ACK").await,
        "55000"
    );
    // The second queenwire gets key A too (SIGHUP): the message it could
    // not open is there for it now, found through its own hot list.
    write_keys(only_b.path(), &[KEY_B, KEY_A]);
    other.server.reload().await.unwrap();
    let left = rows(&other_client, "POP FROM vault2 GROUP auto AUTO ACK").await;
    assert!(payloads(&left)[0].contains("a2"));
    // A bad key file on reload keeps the old keys.
    std::fs::write(&keys, "garbage").unwrap();
    assert!(proxy.server.reload().await.is_err());
    client
        .batch_execute("PUSH INTO vault VALUES ('{\"k\": \"still\"}')")
        .await
        .unwrap();
}

#[tokio::test]
async fn altered_ciphertext_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[KEY_A]);
    let proxy = Proxy::start_with("crypt_garble", |c| c.sealing = sealing(&keys)).await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    client
        .batch_execute(
            "CREATE QUEUE vault WITH (encryption = true);
             PUSH INTO vault VALUES ('{\"n\": 1}');
             PUSH INTO short VALUES ('{}');
             ALTER QUEUE short SET (encryption = true);",
        )
        .await
        .unwrap();
    // One byte of the ciphertext flipped; a sealed blob cut short.
    direct
        .batch_execute(
            "UPDATE queen.log_segments s SET blob = set_byte(blob, octet_length(blob) - 20, get_byte(blob, octet_length(blob) - 20) # 1)
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
             WHERE s.partition_id = p.id AND q.name = 'vault';
             UPDATE queen.log_segments s SET blob = '\\x0202'::bytea
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
             WHERE s.partition_id = p.id AND q.name = 'short';",
        )
        .await
        .unwrap();
    assert_eq!(code(&client, "POP FROM vault").await, "XX001");
    assert_eq!(code(&client, "SHOW MESSAGES FROM vault").await, "XX001");
    let err = client.query("POP FROM vault", &[]).await.unwrap_err();
    assert_eq!(err.code().unwrap().code(), "XX001");
    assert_eq!(code(&client, "POP FROM short").await, "XX001");
    // Inside a block: the block fails as for PostgreSQL's own error.
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(code(&client, "POP FROM vault").await, "XX001");
    assert_eq!(code(&client, "SELECT 1").await, "25P02");
    client.batch_execute("ROLLBACK").await.unwrap();
    // The message is not leased away by the failures.
    let leased = common::sql::leases_held(&direct).await;
    assert_eq!(leased, 0);
    let fresh = proxy.connect().await;
    assert_eq!(rows(&fresh, "SELECT 1 AS one").await.len(), 1);
}

#[test]
fn a_key_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = write_keys(dir.path(), &[KEY_A]);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Sealing::load(Some(path)).unwrap_err();
    assert!(err.contains("chmod 600"), "{err}");
}

#[tokio::test]
async fn fused_pushes_timers_and_psql_reach_an_encrypted_queue_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[KEY_A]);
    let proxy = Proxy::start_with("crypt_paths", |c| c.sealing = sealing(&keys)).await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    // The option as a parameter: Describe says bool before Execute.
    let create = client
        .prepare("CREATE QUEUE vault WITH (encryption = $1)")
        .await
        .unwrap();
    assert_eq!(create.params(), &[Type::BOOL]);
    client.execute(&create, &[&true]).await.unwrap();
    // Many sessions at once, outside blocks: fused writes, which also
    // carry pushes into a plain queue of the tenant (one call for both).
    let mut tasks = Vec::new();
    for n in 0..16 {
        let c = proxy.connect().await;
        tasks.push(tokio::spawn(async move {
            c.simple_query(&format!(
                "PUSH INTO vault VALUES ('{{\"n\": {n}, \"s\": \"{SECRET}\"}}')"
            ))
            .await
            .unwrap();
            c.simple_query(&format!("PUSH INTO open VALUES ('{{\"n\": {n}}}')"))
                .await
                .unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let plain = queue_blobs(&direct, "open").await;
    assert!(!plain.is_empty());
    assert!(
        plain.iter().all(|b| b.first() != Some(&2)),
        "the plain queue stays plain"
    );
    assert_eq!(
        rows(&client, "SHOW MESSAGES FROM open LIMIT 100")
            .await
            .len(),
        16
    );
    // A timer fires into the queue (the timer loop's own connection).
    client
        .batch_execute(&format!(
            "SCHEDULE INTO vault KEY t1 AFTER 0 VALUES ('{{\"timer\": \"{SECRET}\"}}')"
        ))
        .await
        .unwrap();
    // psql, a real client of its own.
    let (ok, out, err) = proxy
        .psql(&[
            "-At",
            "-c",
            &format!("PUSH INTO vault VALUES ('{{\"psql\": \"{SECRET}\"}}')"),
        ])
        .await;
    assert!(ok, "{err}");
    assert!(out.contains("queued"), "{out}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let got = loop {
        let got = rows(&client, "SHOW MESSAGES FROM vault LIMIT 100").await;
        if got.len() >= 18 || tokio::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(got.len(), 18, "16 pushes, one timer, one psql push");
    assert!(payloads(&got).iter().all(|p| p.contains(SECRET)));
    let stored = queue_blobs(&direct, "vault").await;
    assert!(!stored.is_empty());
    for blob in &stored {
        assert_eq!(key_id(blob), "ka");
        assert!(!contains(blob, SECRET));
    }
    let (ok, out, err) = proxy
        .psql(&["-At", "-c", "POP FROM vault GROUP p LIMIT 100"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().filter(|l| l.contains(SECRET)).count(),
        18,
        "{out}"
    );
}

/// Large statements are framed by their sessions before the fused write,
/// sealed or not as this queenwire guesses (engine `pre_encode`): a guess
/// the database corrects, after an ALTER QUEUE either way, must frame them
/// again, so that no segment is stored the wrong way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_fused_pushes_are_framed_again_when_the_guess_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[KEY_A]);
    let proxy = Proxy::start_with("crypt_framed", |c| c.sealing = sealing(&keys)).await;
    let admin = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    // This queenwire learns "plain" for big, then the queue is switched.
    admin
        .batch_execute("PUSH INTO big VALUES ('{}')")
        .await
        .unwrap();
    // (version, messages) of the segments in offset order, consecutive
    // segments of one version summed.
    let versions = || async {
        let mut runs: Vec<(i32, i32)> = Vec::new();
        for r in direct
            .query(
                "SELECT get_byte(blob, 0), message_count FROM queen.log_segments ORDER BY base_offset",
                &[],
            )
            .await
            .unwrap()
        {
            let (v, n): (i32, i32) = (r.get(0), r.get(1));
            match runs.last_mut() {
                Some((lv, ln)) if *lv == v => *ln += n,
                _ => runs.push((v, n)),
            }
        }
        runs
    };
    let push_all = |round: usize| {
        let cfgs: Vec<_> = (0..4).map(|_| proxy.client_config()).collect();
        async move {
            let mut tasks = Vec::new();
            for (c, cfg) in cfgs.into_iter().enumerate() {
                tasks.push(tokio::spawn(async move {
                    let client = common::proxy::connect(&cfg).await;
                    let values: Vec<String> = (0..20)
                        .map(|i| format!("('{{\"r\": {round}, \"c\": {c}, \"i\": {i}, \"s\": \"{SECRET}\"}}')"))
                        .collect();
                    let got = rows(&client, &format!("PUSH INTO big VALUES {}", values.join(", "))).await;
                    assert_eq!(got.len(), 20);
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    admin
        .batch_execute("ALTER QUEUE big SET (encryption = on)")
        .await
        .unwrap();
    push_all(1).await;
    assert_eq!(
        versions().await,
        vec![(1, 1), (2, 80)],
        "framed plain, stored sealed"
    );
    admin
        .batch_execute("ALTER QUEUE big SET (encryption = off)")
        .await
        .unwrap();
    push_all(2).await;
    assert_eq!(
        versions().await,
        vec![(1, 1), (2, 80), (1, 80)],
        "framed sealed, stored plain"
    );
    let popped = rows(&admin, "POP FROM big LIMIT 1000 AUTO ACK").await;
    assert_eq!(popped.len(), 161);
    assert_eq!(
        payloads(&popped)
            .iter()
            .filter(|p| p.contains(SECRET))
            .count(),
        160
    );
}

#[test]
fn the_binary_refuses_a_key_file_it_cannot_use_before_starting() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = write_keys(dir.path(), &[KEY_A]);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let run = |file: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_queenwire"))
            .args(["--backend", "postgres://nobody@127.0.0.1:1/none"])
            .args(["--listen", "127.0.0.1:0", "--encryption-key-file"])
            .arg(file)
            .output()
            .unwrap()
    };
    let out = run(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chmod 600"), "{err}");
    let out = run(&dir.path().join("missing"));
    assert_eq!(out.status.code(), Some(2));
    let garbled = write_keys(dir.path(), &["k1 not-hex"]);
    let out = run(&garbled);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "the line is named"
    );
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--encryption-key-file") && help.contains("QUEENWIRE_ENCRYPTION_KEY_FILE")
    );
}

/// Pushers race an ALTER QUEUE that keeps switching encryption: every
/// acknowledged push is popped exactly once and readable, none is lost or
/// doubled (ledgered), and a push either lands or is refused whole.
#[tokio::test]
async fn pushes_racing_encryption_switches_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[KEY_A]);
    let proxy = Proxy::start_with("crypt_race", |c| {
        c.sealing = sealing(&keys);
        c.pool_size = 8;
    })
    .await;
    let admin = proxy.connect().await;
    admin.batch_execute("CREATE QUEUE race").await.unwrap();
    let mut pushers = Vec::new();
    for p in 0..4 {
        let c = proxy.connect().await;
        pushers.push(tokio::spawn(async move {
            let mut ledger = Vec::new();
            for n in 0..40 {
                let txn = format!("p{p}-{n}");
                let sql = if n % 2 == 0 {
                    format!("PUSH INTO race (payload, transaction_id) VALUES ('{{\"t\": \"{txn}\"}}', '{txn}')")
                } else {
                    format!("BEGIN; PUSH INTO race (payload, transaction_id) VALUES ('{{\"t\": \"{txn}\"}}', '{txn}'); COMMIT;")
                };
                match c.batch_execute(&sql).await {
                    Ok(()) => ledger.push(txn),
                    Err(e) => {
                        let code = e.code().map(|c| c.code().to_string());
                        assert_eq!(code.as_deref(), Some("40001"), "{e:?}");
                        let _ = c.batch_execute("ROLLBACK").await;
                    }
                }
            }
            ledger
        }));
    }
    for round in 0..30 {
        let on = if round % 2 == 0 { "on" } else { "off" };
        admin
            .batch_execute(&format!("ALTER QUEUE race SET (encryption = {on})"))
            .await
            .unwrap();
        tokio::task::yield_now().await;
    }
    let mut pushed = Vec::new();
    for p in pushers {
        pushed.extend(p.await.unwrap());
    }
    pushed.sort();
    let popped = rows(&admin, "POP FROM race GROUP ledger LIMIT 1000").await;
    let mut got: Vec<String> = popped
        .iter()
        .map(|r| r["transaction_id"].clone().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, pushed, "every acknowledged push, once");
    assert!(pushed.len() >= 100, "most pushes landed: {}", pushed.len());
    let direct = proxy.connect_direct().await;
    let versions: Vec<i32> = direct
        .query(
            "SELECT DISTINCT get_byte(blob, 0) FROM queen.log_segments ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    println!(
        "segment versions stored: {versions:?}, pushes landed: {}",
        pushed.len()
    );
}
