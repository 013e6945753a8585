//! The server's lifecycle: every session holds a slot of the connection cap
//! while it lives, and shutdown stops the listener and the background tasks
//! without waiting for the sessions already in.

mod common;

use common::proxy::{connect, Proxy};
use std::time::{Duration, Instant};

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
async fn shutdown_stops_accepting_and_a_session_already_in_goes_on() {
    let proxy = Proxy::start("lifecycle_shutdown").await;
    let client_config = proxy.client_config();
    let inside = proxy.connect().await;
    tokio::time::timeout(Duration::from_secs(10), proxy.server.shutdown())
        .await
        .expect("shutdown returns promptly");
    assert!(
        client_config.connect(tokio_postgres::NoTls).await.is_err(),
        "a client got in after shutdown"
    );
    let rows = inside.simple_query("SELECT 1").await.unwrap();
    assert!(!rows.is_empty());
    // The database itself is untouched.
    connect(&proxy.direct)
        .await
        .simple_query("SELECT 1")
        .await
        .unwrap();
}
