//! Recurring timers (`SCHEDULE … EVERY` / `CRON`): each occurrence fires
//! exactly once however many queenwires share the database (a ledger:
//! messages pushed = occurrences the timer advanced past), missed
//! occurrences fire once unless `CATCH UP`, cron occurrences are computed
//! in the timer's time zone by PostgreSQL, and bad input changes nothing.

mod common;

use common::proxy::Proxy;
use common::sql::rows;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// A hang bound, never a pass/fail timing.
const HANG: Duration = Duration::from_secs(60);

async fn code(client: &Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(_) => panic!("{sql}: succeeded, an error was expected"),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| panic!("{sql}: {e}")),
    }
}

/// Every message of a queue, acknowledged.
async fn drain_queue(client: &Client, queue: &str) -> usize {
    let mut n = 0;
    loop {
        let got = rows(client, &format!("POP FROM {queue} LIMIT 1000 AUTO ACK")).await;
        if got.is_empty() {
            return n;
        }
        n += got.len();
    }
}

/// Removes the timer and returns how many occurrences it fired since its
/// fire time was `since`: the DELETE waits for a fire holding the row, so
/// the pushes of every fire it counts are committed.
async fn stop_and_count(direct: &Client, key: &str, since: &str, every_s: f64) -> i64 {
    let row = direct
        .query_one(
            "DELETE FROM queen.log_timers WHERE timer_key = $1 \
             RETURNING round(extract(epoch FROM fire_at - $2::text::timestamptz) / $3::float8)::int8",
            &[&key, &since, &every_s],
        )
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_occurrence_fires_exactly_once_across_two_queenwires() {
    let a = Proxy::start("recurring_two").await;
    let b = Proxy::start_on(a.direct.clone(), |_| {}).await;
    let client = a.connect().await;
    let direct = a.connect_direct().await;
    let scheduled = rows(
        &client,
        "SCHEDULE INTO ticks KEY tick EVERY '1s' CATCH UP VALUES ('{\"tick\":true}')",
    )
    .await;
    let first = scheduled[0]["fire_at"].clone().unwrap();
    // Let both processes race for a few occurrences.
    let deadline = Instant::now() + HANG;
    loop {
        let fired: i64 = direct
            .query_one(
                "SELECT round(extract(epoch FROM fire_at - $1::text::timestamptz))::int8 FROM queen.log_timers WHERE timer_key = 'tick'",
                &[&first],
            )
            .await
            .unwrap()
            .get(0);
        if fired >= 6 {
            break;
        }
        assert!(Instant::now() < deadline, "only {fired} occurrences fired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let occurrences = stop_and_count(&direct, "tick", &first, 1.0).await;
    let pushed = drain_queue(&b.connect().await, "ticks").await;
    assert_eq!(pushed as i64, occurrences, "one message per occurrence");
    assert!(occurrences >= 6);
}

#[tokio::test]
async fn missed_occurrences_fire_once_unless_catch_up() {
    let proxy = Proxy::start("recurring_missed").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    rows(&client, "SCHEDULE INTO once KEY m EVERY '60s' VALUES ('1')").await;
    rows(
        &client,
        "SCHEDULE INTO every KEY c EVERY '60s' CATCH UP VALUES ('1')",
    )
    .await;
    // As if no queenwire had run for ten minutes: ten occurrences missed,
    // the eleventh due now.
    let since: String = direct
        .query(
            "UPDATE queen.log_timers SET fire_at = date_trunc('second', clock_timestamp()) - interval '600 s' \
             WHERE timer_key IN ('m', 'c') RETURNING fire_at::text",
            &[],
        )
        .await
        .unwrap()[0]
        .get(0);
    let deadline = Instant::now() + HANG;
    loop {
        let due: i64 = direct
            .query_one(
                "SELECT count(*) FROM queen.log_timers WHERE fire_at <= clock_timestamp()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if due == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{due} timers still due");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Both went on at the same next occurrence, in phase with the period.
    let shown = rows(&client, "SHOW SCHEDULES").await;
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0]["fire_at"], shown[1]["fire_at"], "{shown:?}");
    assert_eq!(shown[0]["recurrence"].as_deref(), Some("every 60 s"));
    let c = stop_and_count(&direct, "c", &since, 60.0).await;
    let m = stop_and_count(&direct, "m", &since, 60.0).await;
    assert_eq!((c, m), (11, 11), "both advanced past the same occurrences");
    assert_eq!(
        drain_queue(&client, "every").await,
        11,
        "CATCH UP fires each"
    );
    assert_eq!(drain_queue(&client, "once").await, 1, "without, once");
}

#[tokio::test]
async fn cron_occurrences_follow_the_time_zone_and_show_schedules_says_when() {
    let proxy = Proxy::start("recurring_cron").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    let got = rows(
        &client,
        "SCHEDULE INTO reports KEY daily CRON '30 9 * * *' TIMEZONE 'Asia/Kolkata' VALUES ('{}')",
    )
    .await;
    let fire_at = got[0]["fire_at"].clone().unwrap();
    let check: (String, bool) = {
        let r = direct
            .query_one(
                "SELECT to_char($1::text::timestamptz AT TIME ZONE 'Asia/Kolkata', 'HH24:MI:SS'), \
                        $1::text::timestamptz > now() AND $1::text::timestamptz <= now() + interval '1 day'",
                &[&fire_at],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(check, ("09:30:00".to_string(), true), "{fire_at}");
    let five = rows(
        &client,
        "SCHEDULE INTO reports KEY often CRON '*/5 * * * *' VALUES ('{}')",
    )
    .await;
    let ok: bool = direct
        .query_one(
            "SELECT extract(minute FROM $1::text::timestamptz)::int % 5 = 0 AND extract(second FROM $1::text::timestamptz) = 0 \
                    AND $1::text::timestamptz > now() AND $1::text::timestamptz <= now() + interval '5 min'",
            &[&five[0]["fire_at"].clone().unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ok, "{five:?}");
    let shown = rows(&client, "SHOW SCHEDULES ON reports").await;
    assert_eq!(shown.len(), 2);
    assert_eq!(
        shown[0]["recurrence"].as_deref(),
        Some("cron 30 9 * * * Asia/Kolkata")
    );
    assert_eq!(shown[0]["fire_at"].as_deref(), Some(fire_at.as_str()));
    assert_eq!(
        shown[1]["recurrence"].as_deref(),
        Some("cron */5 * * * * UTC")
    );
    assert_eq!(shown[1]["catch_up"].as_deref(), Some("f"));
    // A one-shot SCHEDULE of the same key replaces the recurrence.
    rows(
        &client,
        "SCHEDULE INTO reports KEY often AFTER 600 VALUES ('{}')",
    )
    .await;
    let shown = rows(&client, "SHOW SCHEDULES ON reports").await;
    assert_eq!(shown[1]["recurrence"], None, "{shown:?}");

    // The next occurrence as PostgreSQL computes it, at known instants.
    for (spec, tz, after, expected) in [
        // Day of month OR day of week when both are restricted…
        (
            "0|0|13|*|5",
            "UTC",
            "2026-01-01 00:00+00",
            "2026-01-02 00:00:00+00",
        ),
        // …AND when one is written from `*`.
        (
            "0|0|*1,11,21,31|*|5",
            "UTC",
            "2026-01-01 00:00+00",
            "2026-05-01 00:00:00+00",
        ),
        // Wall-clock time in the zone, across the spring DST change.
        (
            "0|3|*|*|*",
            "Europe/Berlin",
            "2026-03-28 02:00+00",
            "2026-03-29 01:00:00+00",
        ),
        (
            "0|3|*|*|*",
            "Europe/Berlin",
            "2026-03-29 01:00+00",
            "2026-03-30 01:00:00+00",
        ),
        (
            "0|0|29|2|*",
            "UTC",
            "2026-01-01 00:00+00",
            "2028-02-29 00:00:00+00",
        ),
    ] {
        let next: String = direct
            .query_one(
                "SELECT to_char(queen.timer_cron_next_v1($1, $2, $3::text::timestamptz) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || '+00'",
                &[&spec, &tz, &after],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(next, expected, "{spec} {tz} after {after}");
    }
}

#[tokio::test]
async fn bad_recurrences_are_refused_and_change_nothing() {
    let proxy = Proxy::start("recurring_bad").await;
    let client = proxy.connect().await;
    for (sql, expected) in [
        (
            "SCHEDULE INTO q KEY k CRON '*/5 * * *' VALUES ('1')",
            "22023",
        ),
        (
            "SCHEDULE INTO q KEY k CRON '61 * * * *' VALUES ('1')",
            "22023",
        ),
        (
            "SCHEDULE INTO q KEY k CRON '0 0 31 2 *' VALUES ('1')",
            "22023",
        ),
        (
            "SCHEDULE INTO q KEY k CRON '0 * * * *' TIMEZONE 'Mars/Olympus' VALUES ('1')",
            "22023",
        ),
        ("SCHEDULE INTO q KEY k EVERY '500ms' VALUES ('1')", "22023"),
        ("SCHEDULE INTO q KEY k EVERY 'soon' VALUES ('1')", "22007"),
        (
            "SCHEDULE INTO q KEY k AFTER 5 CATCH UP VALUES ('1')",
            "42601",
        ),
    ] {
        let got = code(&client, sql).await;
        assert!(
            got == expected || (expected == "22007" && got.starts_with("22")),
            "{sql}: {got}"
        );
    }
    assert!(rows(&client, "SHOW SCHEDULES").await.is_empty());
    assert!(rows(&client, "SHOW QUEUES").await.is_empty());
    // The same through the extended protocol, with parameters.
    let statement = client
        .prepare_typed(
            "SCHEDULE INTO $1 KEY $2 CRON $3 TIMEZONE $4 VALUES ($5)",
            &[tokio_postgres::types::Type::TEXT; 5],
        )
        .await
        .unwrap();
    let err = client
        .query(
            &statement,
            &[
                &"q",
                &"k",
                &"0 * * * *",
                &"Nowhere/Land",
                &serde_free_json(),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("22023"), "{err}");
    let ok = client
        .query(
            &statement,
            &[
                &"q",
                &"k",
                &"0 * * * *",
                &"Europe/Berlin",
                &serde_free_json(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(rows(&client, "SHOW SCHEDULES").await.len(), 1);
}

/// The payload, sent as text (the statement is prepared with text types).
fn serde_free_json() -> &'static str {
    "{\"n\":1}"
}

#[tokio::test]
async fn a_timers_table_from_before_recurrence_gains_its_columns() {
    let proxy = Proxy::start("recurring_upgrade").await;
    let direct = proxy.connect_direct().await;
    rows(
        &proxy.connect().await,
        "SCHEDULE INTO old KEY o AFTER 600 VALUES ('1')",
    )
    .await;
    // The table as the previous release made it.
    direct
        .batch_execute(
            "ALTER TABLE queen.log_timers DROP COLUMN every_ms, DROP COLUMN cron, \
             DROP COLUMN cron_spec, DROP COLUMN time_zone, DROP COLUMN catch_up",
        )
        .await
        .unwrap();
    // The next start applies the schema again.
    let again = Proxy::start_on(proxy.direct.clone(), |_| {}).await;
    let client = again.connect().await;
    rows(&client, "SCHEDULE INTO old KEY r EVERY '1h' VALUES ('2')").await;
    let shown = rows(&client, "SHOW SCHEDULES ON old").await;
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0]["recurrence"], None);
    assert_eq!(shown[1]["recurrence"].as_deref(), Some("every 3600 s"));
}

/// A `queenwire` process on a test database, killed if the test fails.
struct Process(std::process::Child, u16);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    async fn start(direct: &tokio_postgres::Config) -> Process {
        let host = match direct.get_hosts().first() {
            Some(tokio_postgres::config::Host::Unix(dir)) => dir.display().to_string(),
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            None => panic!("no host"),
        };
        let backend = format!(
            "host={host} port={} user={} dbname={}",
            direct.get_ports().first().copied().unwrap_or(5432),
            direct.get_user().unwrap(),
            direct.get_dbname().unwrap()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_queenwire"))
            .args(["--backend", &backend, "--pool-size", "2"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env_remove("DATABASE_URL")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut process = Process(child, port);
        let deadline = Instant::now() + HANG;
        while process.try_connect().await.is_none() {
            assert!(process.0.try_wait().unwrap().is_none(), "queenwire exited");
            assert!(Instant::now() < deadline, "queenwire never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        process
    }

    async fn try_connect(&self) -> Option<Client> {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1").port(self.1).user("t").dbname("t");
        let (client, connection) = cfg.connect(tokio_postgres::NoTls).await.ok()?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Some(client)
    }

    /// SIGTERM, and the exit status.
    async fn stop(mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + HANG;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "queenwire did not exit");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn two_queenwire_processes_fire_each_occurrence_once() {
    let direct_cfg = common::cluster::fresh_database("recurring_processes");
    let a = Process::start(&direct_cfg).await;
    let b = Process::start(&direct_cfg).await;
    let direct = common::proxy::connect(&direct_cfg).await;
    let client = a.try_connect().await.unwrap();
    let first = rows(
        &client,
        "SCHEDULE INTO beats KEY beat EVERY '1s' CATCH UP VALUES ('{}')",
    )
    .await[0]["fire_at"]
        .clone()
        .unwrap();
    let deadline = Instant::now() + HANG;
    loop {
        let fired: i64 = direct
            .query_one(
                "SELECT round(extract(epoch FROM fire_at - $1::text::timestamptz))::int8 FROM queen.log_timers WHERE timer_key = 'beat'",
                &[&first],
            )
            .await
            .unwrap()
            .get(0);
        if fired >= 8 {
            break;
        }
        assert!(Instant::now() < deadline, "only {fired} occurrences fired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let occurrences = stop_and_count(&direct, "beat", &first, 1.0).await;
    let pushed = drain_queue(&b.try_connect().await.unwrap(), "beats").await;
    assert_eq!(pushed as i64, occurrences, "one message per occurrence");
    drop(client);
    assert!(a.stop().await.success());
    assert!(b.stop().await.success());
}
