//! The store's rules, one test each, on a clock the tests move.
use super::*;

fn quota() -> Quota {
    Quota {
        max_length: Some(3),
        max_bytes: None,
        ttl: None,
        drop_oldest: false,
        lease_time: Duration::from_secs(30),
        retry_limit: 1,
        retry_delay: Duration::ZERO,
        delayed_processing: Duration::ZERO,
        window_buffer: Duration::ZERO,
        dedup_window: Duration::from_secs(3600),
    }
}

fn msg(partition: &str, payload: &str) -> NewMessage {
    NewMessage {
        id: Uuid::now_v7(),
        partition: partition.into(),
        payload: payload.into(),
        transaction_id: None,
        trace_id: None,
        created_at_micros: 0,
    }
}

fn pop(s: &mut Store, group: &str, limit: usize, now: Instant) -> Vec<Delivered> {
    s.pop(
        group,
        Start::Oldest,
        limit,
        1,
        None,
        false,
        now,
        SystemTime::now(),
    )
}

#[test]
fn reject_refuses_a_push_that_does_not_fit_and_changes_nothing() {
    let mut s = Store::new(quota());
    let now = Instant::now();
    s.push(vec![msg("p", "1"), msg("p", "2")], now).unwrap();
    assert!(s.push(vec![msg("p", "3"), msg("p", "4")], now).is_err());
    assert_eq!(s.counts(), (2, 2));
    s.push(vec![msg("p", "3")], now).unwrap();
    assert_eq!(s.counts(), (3, 3));
}

#[test]
fn drop_oldest_makes_room() {
    let mut s = Store::new(Quota {
        drop_oldest: true,
        ..quota()
    });
    let now = Instant::now();
    s.push(vec![msg("p", "1"), msg("p", "2"), msg("p", "3")], now)
        .unwrap();
    s.push(vec![msg("p", "4"), msg("p", "5")], now).unwrap();
    let got: Vec<String> = pop(&mut s, "g", 10, now)
        .into_iter()
        .map(|d| d.msg.payload)
        .collect();
    assert_eq!(got, ["3", "4", "5"]);
}

#[test]
fn ttl_expires_messages() {
    let mut s = Store::new(Quota {
        ttl: Some(Duration::from_secs(5)),
        ..quota()
    });
    let t0 = Instant::now();
    s.push(vec![msg("p", "old")], t0).unwrap();
    s.push(vec![msg("p", "new")], t0 + Duration::from_secs(3))
        .unwrap();
    let got = pop(&mut s, "g", 10, t0 + Duration::from_secs(6));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].msg.payload, "new");
}

#[test]
fn a_partition_is_leased_to_one_consumer_and_an_expired_lease_redelivers() {
    let mut s = Store::new(quota());
    let t0 = Instant::now();
    s.push(vec![msg("a", "1"), msg("a", "2"), msg("b", "3")], t0)
        .unwrap();
    let first = pop(&mut s, "g", 10, t0);
    assert_eq!(first.len(), 2);
    let second = pop(&mut s, "g", 10, t0);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].msg.partition, "b");
    assert!(pop(&mut s, "g", 10, t0).is_empty());
    let later = t0 + Duration::from_secs(31);
    let again = pop(&mut s, "g", 10, later);
    assert_eq!(again.len(), 2);
    assert_eq!(again[0].retry_count, 1);
    // Past retry_limit (1) a's messages are dropped for the group; b's,
    // failed once, comes again.
    let rest = pop(&mut s, "g", 10, later + Duration::from_secs(62));
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(
        (rest[0].msg.partition.as_str(), rest[0].retry_count),
        ("b", 1)
    );
}

#[test]
fn ack_releases_and_collects_and_a_wrong_token_is_stale() {
    let mut s = Store::new(quota());
    let now = Instant::now();
    s.push(vec![msg("a", "1")], now).unwrap();
    let d = pop(&mut s, "g", 1, now);
    let (token, _) = d[0].lease.unwrap();
    assert_eq!(s.ack("g", d[0].seq, Uuid::now_v7(), false, now), "stale");
    assert_eq!(s.ack("g", d[0].seq, token, false, now), "acked");
    assert_eq!(s.counts(), (0, 0));
    assert_eq!(s.ack("g", d[0].seq, token, false, now), "stale");
}

#[test]
fn acking_a_batch_one_by_one_releases_its_partition() {
    let mut s = Store::new(quota());
    let now = Instant::now();
    s.push(vec![msg("a", "1"), msg("a", "2")], now).unwrap();
    let d = pop(&mut s, "g", 10, now);
    for m in &d {
        assert_eq!(s.ack("g", m.seq, m.lease.unwrap().0, false, now), "acked");
    }
    s.push(vec![msg("a", "3")], now).unwrap();
    let next = pop(&mut s, "g", 10, now);
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].msg.payload, "3");
}

#[test]
fn failed_acks_retry_then_dead_letter() {
    let mut s = Store::new(quota());
    let now = Instant::now();
    s.push(vec![msg("a", "1")], now).unwrap();
    let d = pop(&mut s, "g", 1, now);
    assert_eq!(
        s.ack("g", d[0].seq, d[0].lease.unwrap().0, true, now),
        "retry"
    );
    let d = pop(&mut s, "g", 1, now);
    assert_eq!(d[0].retry_count, 1);
    assert_eq!(
        s.ack("g", d[0].seq, d[0].lease.unwrap().0, true, now),
        "dead_lettered"
    );
    assert!(pop(&mut s, "g", 1, now).is_empty());
}

#[test]
fn groups_fan_out_and_now_starts_after_the_newest() {
    let mut s = Store::new(quota());
    let now = Instant::now();
    s.push(vec![msg("a", "1")], now).unwrap();
    assert_eq!(pop(&mut s, "early", 5, now).len(), 1);
    let late = s.pop(
        "late",
        Start::Newest,
        5,
        1,
        None,
        true,
        now,
        SystemTime::now(),
    );
    assert!(late.is_empty());
    s.push(vec![msg("a", "2")], now).unwrap();
    let late = s.pop(
        "late",
        Start::Newest,
        5,
        1,
        None,
        true,
        now,
        SystemTime::now(),
    );
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].msg.payload, "2");
}

#[test]
fn retry_delay_holds_the_partition_back_for_that_group_only() {
    let mut s = Store::new(Quota {
        max_length: None,
        retry_delay: Duration::from_secs(2),
        ..quota()
    });
    let t0 = Instant::now();
    s.push(vec![msg("a", "1"), msg("b", "2")], t0).unwrap();
    let d = pop(&mut s, "g", 1, t0);
    assert_eq!(d[0].msg.payload, "1");
    assert_eq!(
        s.ack("g", d[0].seq, d[0].lease.unwrap().0, true, t0),
        "retry"
    );
    // Partition a is held back; b is not, nor is a for another group.
    let next = pop(&mut s, "g", 1, t0);
    assert_eq!(next[0].msg.payload, "2");
    assert_eq!(pop(&mut s, "other", 1, t0)[0].msg.payload, "1");
    assert_eq!(
        s.ack("g", next[0].seq, next[0].lease.unwrap().0, false, t0),
        "acked"
    );
    assert!(pop(&mut s, "g", 1, t0 + Duration::from_millis(1999)).is_empty());
    let again = pop(&mut s, "g", 1, t0 + Duration::from_secs(2));
    assert_eq!(
        (again[0].msg.payload.as_str(), again[0].retry_count),
        ("1", 1)
    );
}

#[test]
fn delayed_processing_hides_young_messages_in_order() {
    let mut s = Store::new(Quota {
        max_length: None,
        delayed_processing: Duration::from_secs(5),
        ..quota()
    });
    let t0 = Instant::now();
    s.push(vec![msg("a", "1")], t0).unwrap();
    s.push(vec![msg("b", "2")], t0 + Duration::from_secs(3))
        .unwrap();
    assert!(pop(&mut s, "g", 10, t0 + Duration::from_secs(4)).is_empty());
    let d = pop(&mut s, "g", 10, t0 + Duration::from_secs(6));
    assert_eq!(d.len(), 1, "only the message held 5 s");
    assert_eq!(d[0].msg.payload, "1");
    assert_eq!(
        pop(&mut s, "g", 10, t0 + Duration::from_secs(8))[0]
            .msg
            .payload,
        "2"
    );
}

#[test]
fn window_buffer_hides_a_partition_until_its_newest_message_is_old_enough() {
    let mut s = Store::new(Quota {
        max_length: None,
        window_buffer: Duration::from_secs(5),
        ..quota()
    });
    let t0 = Instant::now();
    s.push(vec![msg("a", "1")], t0).unwrap();
    s.push(vec![msg("b", "2")], t0).unwrap();
    // a is written to again: its window starts over; b's does not.
    s.push(vec![msg("a", "3")], t0 + Duration::from_secs(4))
        .unwrap();
    let d = s.pop(
        "g",
        Start::Oldest,
        10,
        10,
        None,
        true,
        t0 + Duration::from_secs(6),
        SystemTime::now(),
    );
    let got: Vec<&str> = d.iter().map(|m| m.msg.payload.as_str()).collect();
    assert_eq!(got, vec!["2"]);
    let d = s.pop(
        "g",
        Start::Oldest,
        10,
        10,
        None,
        true,
        t0 + Duration::from_secs(9),
        SystemTime::now(),
    );
    let got: Vec<&str> = d.iter().map(|m| m.msg.payload.as_str()).collect();
    assert_eq!(got, vec!["1", "3"]);
}

fn with_txn(partition: &str, payload: &str, txn: &str) -> NewMessage {
    NewMessage {
        transaction_id: Some(txn.into()),
        ..msg(partition, payload)
    }
}

#[test]
fn a_transaction_id_pushed_again_is_a_duplicate_of_the_first() {
    let mut s = Store::new(Quota {
        max_length: None,
        ..quota()
    });
    let t0 = Instant::now();
    let first = s.push(vec![with_txn("a", "1", "t1")], t0).unwrap();
    let Pushed::Queued(seq) = first[0] else {
        panic!("{first:?}")
    };
    let id = s.messages[0].msg.id;
    // Again, in another partition (not a duplicate), and twice in one PUSH.
    let again = s
        .push(
            vec![
                with_txn("a", "2", "t1"),
                with_txn("b", "3", "t1"),
                with_txn("b", "4", "t1"),
            ],
            t0 + Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(again[0], Pushed::Duplicate { seq, id });
    let Pushed::Queued(b) = again[1] else {
        panic!("{again:?}")
    };
    assert!(matches!(again[2], Pushed::Duplicate { seq, .. } if seq == b));
    assert_eq!(s.counts().0, 2, "nothing stored for the duplicates");
    // Remembered for the window even once consumed; forgotten after it.
    assert_eq!(pop(&mut s, "g", 10, t0).len(), 1);
    let later = s
        .push(
            vec![with_txn("a", "5", "t1")],
            t0 + Duration::from_secs(3599),
        )
        .unwrap();
    assert!(matches!(later[0], Pushed::Duplicate { .. }));
    let after = s
        .push(
            vec![with_txn("a", "6", "t1")],
            t0 + Duration::from_secs(3601),
        )
        .unwrap();
    assert!(matches!(after[0], Pushed::Queued(_)));
}

#[test]
fn with_no_window_only_repeats_within_one_push_are_duplicates() {
    let mut s = Store::new(Quota {
        max_length: None,
        dedup_window: Duration::ZERO,
        ..quota()
    });
    let t0 = Instant::now();
    let one = s
        .push(vec![with_txn("a", "1", "t"), with_txn("a", "2", "t")], t0)
        .unwrap();
    assert!(matches!(one[1], Pushed::Duplicate { .. }));
    let two = s.push(vec![with_txn("a", "3", "t")], t0).unwrap();
    assert!(matches!(two[0], Pushed::Queued(_)));
}
