//! Timestamps through queenwire: literals read in the session's TimeZone
//! wherever the statement runs, and fire times printed as PostgreSQL
//! prints them over its whole range.

mod common;

use common::proxy::Proxy;
use common::sql::rows;
use std::time::SystemTime;
use tokio_postgres::types::{Timestamp, ToSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

async fn code(client: &Client, sql: &str) -> String {
    let err = client.simple_query(sql).await.expect_err(sql);
    err.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| panic!("{sql}: {err}"))
}

/// The one text value of a statement's first row's column `column`.
async fn value(client: &Client, sql: &str, column: &str) -> String {
    for m in client.simple_query(sql).await.unwrap() {
        if let SimpleQueryMessage::Row(row) = m {
            return row.get(column).unwrap_or_else(|| panic!("{sql}")).into();
        }
    }
    panic!("{sql}: no row")
}

#[tokio::test]
async fn fire_times_print_as_postgresql_prints_them_and_infinite_ones_are_refused() {
    let proxy = Proxy::start("timestamps_range").await;
    let client = proxy.connect().await;
    for (at, printed) in [
        (
            "294276-12-31 23:59:59.999999+00",
            "294276-12-31 23:59:59.999999+00",
        ),
        ("10000-01-01 00:00:00+00", "10000-01-01 00:00:00+00"),
        ("9999-12-31 12:00:00.5+00", "9999-12-31 12:00:00.5+00"),
    ] {
        let sql = format!("SCHEDULE INTO far KEY '{at}' AT '{at}' VALUES ('1')");
        assert_eq!(value(&client, &sql, "fire_at").await, printed, "{sql}");
    }
    let listed = rows(&client, "SHOW SCHEDULES ON far").await;
    let mut fire_ats: Vec<String> = listed
        .iter()
        .map(|r| r["fire_at"].clone().unwrap())
        .collect();
    fire_ats.sort();
    assert_eq!(
        fire_ats,
        [
            "10000-01-01 00:00:00+00",
            "294276-12-31 23:59:59.999999+00",
            "9999-12-31 12:00:00.5+00"
        ]
    );
    // In the past: fired at once, but SCHEDULE prints it first.
    for (at, printed) in [
        ("0044-03-15 00:00:00+00 BC", "0044-03-15 00:00:00+00 BC"),
        ("4713-11-24 00:00:00+00 BC", "4713-11-24 00:00:00+00 BC"),
        ("0001-01-01 00:00:00+00", "0001-01-01 00:00:00+00"),
    ] {
        let sql = format!("SCHEDULE INTO past KEY k AT '{at}' VALUES ('1')");
        assert_eq!(value(&client, &sql, "fire_at").await, printed, "{sql}");
    }
    // A timer at infinity never fires: refused, as text or bound in binary.
    for at in ["infinity", "-infinity", " Infinity "] {
        let sql = format!("SCHEDULE INTO far KEY inf AT '{at}' VALUES ('1')");
        assert_eq!(code(&client, &sql).await, "22008", "{sql}");
    }
    let statement = client
        .prepare_typed(
            "SCHEDULE INTO far KEY inf AT $1 VALUES ('1')",
            &[Type::TIMESTAMPTZ],
        )
        .await
        .unwrap();
    for at in [Timestamp::<SystemTime>::PosInfinity, Timestamp::NegInfinity] {
        let params: [&(dyn ToSql + Sync); 1] = [&at];
        let err = client.query(&statement, &params).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("22008"), "{err}");
    }
    assert!(rows(&client, "SHOW SCHEDULES ON far")
        .await
        .iter()
        .all(|r| r["key"].as_deref() != Some("inf")));
}

#[tokio::test]
async fn timestamp_literals_are_read_in_the_sessions_time_zone() {
    let proxy = Proxy::start("timestamps_zone").await;
    let client = proxy.connect().await;
    client
        .batch_execute("SET TimeZone = 'Asia/Kolkata'")
        .await
        .unwrap();
    let midnight = "SCHEDULE INTO tz KEY a AT '2030-01-01 00:00' VALUES ('1')";
    assert_eq!(
        value(&client, midnight, "fire_at").await,
        "2029-12-31 18:30:00+00"
    );
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        value(&client, midnight, "fire_at").await,
        "2029-12-31 18:30:00+00"
    );
    client.batch_execute("COMMIT").await.unwrap();
    let text_at = client
        .prepare_typed("SCHEDULE INTO tz KEY b AT $1 VALUES ('1')", &[Type::TEXT])
        .await
        .unwrap();
    let bound = client
        .query(&text_at, &[&"2030-01-01 00:00"])
        .await
        .unwrap();
    let fire_at: SystemTime = bound[0].get("fire_at");
    let kolkata_midnight = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_893_436_200);
    assert_eq!(fire_at, kolkata_midnight);

    // Three hours ahead on a UTC clock is two and a half hours ago in
    // Kolkata: a message pushed now is after it only when read there.
    rows(&client, "PUSH INTO tz2 VALUES ('1')").await;
    let local = value(
        &client,
        "SELECT to_char(now() AT TIME ZONE 'UTC' + interval '3 hours', 'YYYY-MM-DD HH24:MI:SS') AS t",
        "t",
    )
    .await;
    let subscribed = format!("POP FROM tz2 GROUP g1 SUBSCRIBE FROM '{local}' AUTO ACK");
    assert_eq!(rows(&client, &subscribed).await.len(), 1, "{subscribed}");
    rows(&client, "POP FROM tz2 GROUP g2 SUBSCRIBE FROM NOW").await;
    rows(
        &client,
        &format!("SEEK GROUP g2 ON tz2 TO TIMESTAMP '{local}'"),
    )
    .await;
    assert_eq!(
        rows(&client, "POP FROM tz2 GROUP g2").await.len(),
        1,
        "SEEK"
    );

    // Back in the server's zone, the same text is another instant.
    client.batch_execute("SET TimeZone = 'UTC'").await.unwrap();
    assert_eq!(
        value(&client, midnight, "fire_at").await,
        "2030-01-01 00:00:00+00"
    );
}

/// A duration past PostgreSQL's interval range is its 22008, for a WAIT, a
/// LEASE and an ephemeral queue's RENEW … FOR alike, and the session goes
/// on (a deadline that far once overflowed the clock and ended the
/// session's task).
#[tokio::test]
async fn durations_past_the_interval_range_are_refused_not_fatal() {
    let proxy = Proxy::start("durations_huge").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE eph_huge WITH (class = ephemeral)")
        .await
        .unwrap();
    rows(&client, "PUSH INTO eph_huge VALUES ('1')").await;
    let held = rows(&client, "POP FROM eph_huge").await;
    let receipt = held[0].get("receipt").cloned().flatten().unwrap();
    for sql in [
        "POP FROM empty_huge WAIT '9223372036854775807'".to_string(),
        "POP FROM empty_huge WAIT '300000 years'".to_string(),
        "POP FROM empty_huge LEASE '9223372036854775807'".to_string(),
        format!("RENEW '{receipt}' FOR '9223372036854775807'"),
    ] {
        assert_eq!(code(&client, &sql).await, "22008", "{sql}");
        rows(&client, "SELECT 1").await;
    }
}
