//! The ring's rules on plain state: rotation, parking, quiet ids, seeding.
use super::*;

fn seed(ids: &[i64]) -> Seeded {
    Seeded {
        ids: ids.to_vec(),
        window_from: Some(SystemTime::now()),
        ..Seeded::default()
    }
}

fn seeded_ring(ids: &[i64]) -> RingState {
    let mut r = RingState::default();
    assert_eq!(r.plan(Instant::now(), 0), Maintenance::Full);
    r.seed_done(true, seed(ids), Instant::now(), Duration::ZERO);
    r
}

#[test]
fn a_cold_ring_seeds_fully_once_and_others_claim_over_the_queue() {
    let mut r = RingState::default();
    let now = Instant::now();
    assert_eq!(r.plan(now, 0), Maintenance::Full);
    assert_eq!(r.plan(now, 0), Maintenance::WholeQueue);
    r.seed_done(true, seed(&[1, 2]), now, Duration::ZERO);
    assert_eq!(r.plan(now, 0), Maintenance::None);
    assert!(matches!(
        r.plan(now, 1),
        Maintenance::Window {
            deferrable: true,
            ..
        }
    ));
    r.seed_done(false, seed(&[]), now, Duration::ZERO);
    assert!(matches!(
        r.plan(now + RESEED_EVERY, 1),
        Maintenance::Window {
            deferrable: false,
            ..
        }
    ));
    r.seed_abandoned(false);
    assert!(matches!(r.plan(now, 1), Maintenance::Window { .. }));
    r.seed_done(false, seed(&[]), now, Duration::ZERO);
    assert_eq!(r.plan(now + RECONCILE_EVERY, 1), Maintenance::Full);
    // A full seed that took long stretches the reconcile period.
    r.seed_done(true, seed(&[]), now, Duration::from_secs(1));
    let later = now + RECONCILE_EVERY + Duration::from_secs(1);
    assert!(matches!(r.plan(later, 1), Maintenance::Window { .. }));
    r.seed_done(false, seed(&[]), later, Duration::ZERO);
    assert_eq!(
        r.plan(now + Duration::from_secs(u64::from(RECONCILE_SHARE)), 1),
        Maintenance::Full
    );
}

#[test]
fn the_rotation_serves_the_front_and_sends_the_claimed_to_the_back() {
    let mut r = seeded_ring(&[1, 2, 3, 4]);
    let t = r.take(2).unwrap();
    assert_eq!(t.ids, vec![1, 2]);
    // 1 claimed, 2 not reached.
    r.settle(
        t,
        &[(1, Judgement::Claimed(None)), (1, Judgement::Claimed(None))],
        false,
    );
    let t = r.take(10).unwrap();
    assert_eq!(t.ids, vec![2, 3, 4, 1]);
    r.put_back(t);
    assert_eq!(r.rotation_len(), 4);
}

#[test]
fn empty_drops_unless_readded_meanwhile_and_waiting_parks() {
    let mut r = seeded_ring(&[1, 2, 3]);
    let t = r.take(3).unwrap();
    r.add(2, false); // a reseed raced with the POP
    let soon = SystemTime::now() + Duration::from_secs(3600);
    r.settle(
        t,
        &[
            (1, Judgement::Empty),
            (2, Judgement::Empty),
            (3, Judgement::Waiting(Some(soon))),
        ],
        false,
    );
    assert_eq!(r.rotation_len(), 1);
    assert_eq!(r.parked_len(), 1);
    // A windowed reseed does not unpark; a release does.
    r.add(3, false);
    assert_eq!(r.parked_len(), 1);
    r.release(3, true);
    assert_eq!((r.rotation_len(), r.parked_len()), (2, 0));
    let t = r.take(5).unwrap();
    assert_eq!(t.ids, vec![2, 3]);
    // In a transaction block nothing is dropped.
    r.settle(t, &[(2, Judgement::Empty), (3, Judgement::Empty)], true);
    assert_eq!(r.rotation_len(), 2);
}

#[test]
fn a_leased_claim_parks_and_a_drained_one_goes_quiet_at_its_ack() {
    let mut r = seeded_ring(&[1, 2, 3, 4]);
    let lease = SystemTime::now() + Duration::from_secs(60);
    let t = r.take(4).unwrap();
    r.settle(
        t,
        &[
            (1, Judgement::Claimed(Some(lease))),
            (1, Judgement::Drained),
            (2, Judgement::Claimed(Some(lease))),
            (3, Judgement::Claimed(None)),
            (3, Judgement::Drained),
            (4, Judgement::Claimed(None)),
        ],
        false,
    );
    // 1 and 2 leased here: parked. 3 AUTO ACKed to its end: gone. 4
    // AUTO ACKed with more left: back in the rotation.
    assert_eq!((r.rotation_len(), r.parked_len()), (1, 2));
    // The ACKs: 2 comes back, 1 (drained) stays out and is not looked
    // at again, neither by a parked look nor by another POP.
    r.release(1, true);
    r.release(2, true);
    assert_eq!((r.rotation_len(), r.parked_len()), (2, 1));
    let t = r.take(5).unwrap();
    assert_eq!(t.ids, vec![4, 2]);
    r.settle(t, &[(4, Judgement::Empty), (2, Judgement::Empty)], false);
    assert!(r.take_parked(5, Instant::now()).is_none());
    // A write brings it back.
    r.add(1, false);
    assert_eq!((r.rotation_len(), r.parked_len()), (1, 0));
}

#[test]
fn a_drained_claim_written_to_or_failed_comes_back_at_its_ack() {
    let lease = SystemTime::now() + Duration::from_secs(60);
    let drained = |r: &mut RingState| {
        let t = r.take(1).unwrap();
        r.settle(
            t,
            &[
                (1, Judgement::Claimed(Some(lease))),
                (1, Judgement::Drained),
            ],
            false,
        );
        assert_eq!(r.parked_len(), 1);
    };
    // Written to while leased: a reseed leaves it parked, its ACK
    // brings it back.
    let mut r = seeded_ring(&[1]);
    drained(&mut r);
    r.add(1, false);
    assert_eq!(r.parked_len(), 1);
    r.release(1, true);
    assert_eq!((r.rotation_len(), r.parked_len()), (1, 0));
    // FAILED: the message comes back, so does the partition, also after
    // a plain ACK of another message of the batch left it quiet.
    let mut r = seeded_ring(&[1]);
    drained(&mut r);
    r.release(1, false);
    assert_eq!(r.rotation_len(), 1);
    let mut r = seeded_ring(&[1]);
    drained(&mut r);
    r.release(1, true);
    r.release(1, true);
    assert_eq!((r.rotation_len(), r.parked_len()), (0, 1));
    r.release(1, false);
    assert_eq!((r.rotation_len(), r.parked_len()), (1, 0));
    // A partial ACK whose lease then expires: back at the lease's end.
    let mut r = seeded_ring(&[1]);
    drained(&mut r);
    r.release(1, true);
    r.unpark_due(lease);
    assert_eq!(r.rotation_len(), 0);
    r.unpark_due(lease + Duration::from_secs(1));
    assert_eq!((r.rotation_len(), r.parked_len()), (1, 0));
    // A reseed that raced with the claim: no parking, no quiet.
    let mut r = seeded_ring(&[1]);
    let t = r.take(1).unwrap();
    r.add(1, false);
    r.settle(
        t,
        &[
            (1, Judgement::Claimed(Some(lease))),
            (1, Judgement::Drained),
        ],
        false,
    );
    assert_eq!((r.rotation_len(), r.parked_len()), (1, 0));
    // In a transaction block nothing is parked or dropped.
    let mut r = seeded_ring(&[1, 2]);
    let t = r.take(2).unwrap();
    r.settle(
        t,
        &[
            (1, Judgement::Claimed(Some(lease))),
            (1, Judgement::Drained),
            (2, Judgement::Claimed(None)),
            (2, Judgement::Drained),
        ],
        true,
    );
    assert_eq!((r.rotation_len(), r.parked_len()), (2, 0));
}

#[test]
fn parked_ids_come_back_when_due_or_when_looked_at_again() {
    let mut r = seeded_ring(&[1, 2]);
    let t = r.take(2).unwrap();
    let now = SystemTime::now();
    r.settle(
        t,
        &[
            (1, Judgement::Waiting(Some(now))),
            (2, Judgement::Waiting(Some(now + Duration::from_secs(60)))),
        ],
        false,
    );
    // A waiting POP looks again when the soonest parked id is due.
    assert_eq!(r.next_due(), Some(now + PARK_SLACK));
    r.unpark_due(now + Duration::from_secs(1));
    assert_eq!(
        r.next_due(),
        Some(now + Duration::from_secs(60) + PARK_SLACK)
    );
    let t = r.take(5).unwrap();
    assert_eq!(t.ids, vec![1]);
    r.settle(t, &[(1, Judgement::Empty)], false);
    r.unpark_due(now + Duration::from_secs(1));
    assert!(r.take(5).is_none());
    let t = r.take_parked(5, Instant::now()).unwrap();
    assert_eq!(t.ids, vec![2]);
    r.settle(t, &[(2, Judgement::Locked)], false);
    assert_eq!(r.rotation_len(), 1);
}

#[test]
fn parked_ids_are_looked_at_again_at_most_every_parked_look_interval() {
    let mut r = seeded_ring(&[1]);
    let t = r.take(1).unwrap();
    let later = SystemTime::now() + Duration::from_secs(60);
    r.settle(t, &[(1, Judgement::Waiting(Some(later)))], false);
    let now = Instant::now();
    let t = r.take_parked(5, now).unwrap();
    assert_eq!(t.ids, vec![1]);
    // Another POP meanwhile: the id is a parked look's, not shared.
    assert!(r.in_flight_ids(5).is_empty());
    r.settle(t, &[(1, Judgement::Waiting(Some(later)))], false);
    assert_eq!(r.parked_len(), 1);
    assert!(r.take_parked(5, now + PARKED_LOOK_EVERY / 2).is_none());
    assert_eq!(
        r.take_parked(5, now + PARKED_LOOK_EVERY).unwrap().ids,
        vec![1]
    );
}

#[test]
fn ids_in_flight_can_be_looked_at_by_another_pop() {
    let mut r = seeded_ring(&[1, 2]);
    let t = r.take(5).unwrap();
    assert!(r.take(5).is_none());
    let mut shared = r.in_flight_ids(5);
    shared.sort();
    assert_eq!(shared, vec![1, 2]);
    r.settle(t, &[(1, Judgement::Claimed(None))], false);
    assert!(r.in_flight_ids(5).is_empty());
    assert_eq!(r.rotation_len(), 2);
    // An id taken alone is its POP's: it claims it if anyone can.
    let t = r.take(1).unwrap();
    assert!(r.in_flight_ids(5).is_empty());
    r.put_back(t);
    let t = r.take(2).unwrap();
    assert_eq!(r.in_flight_ids(5).len(), 2);
    r.put_back(t);
    assert!(r.in_flight_ids(5).is_empty());
}

#[test]
fn a_repair_is_news_only_after_the_first_sight() {
    let mut r = RingState::default();
    r.plan(Instant::now(), 0);
    let at = SystemTime::now();
    let mut s = seed(&[1]);
    s.repair_at = Some(at);
    s.repair_whole = true;
    r.seed_done(true, s.clone(), Instant::now(), Duration::ZERO);
    assert_eq!(r.plan(Instant::now(), 0), Maintenance::None);
    // A new repair naming one partition: that one comes back at once.
    r.plan(Instant::now(), 1);
    let mut s2 = seed(&[]);
    s2.repair_at = Some(at + Duration::from_secs(1));
    s2.repair_partition = Some(7);
    r.seed_done(false, s2, Instant::now(), Duration::ZERO);
    assert_eq!(r.rotation_len(), 2);
    // A whole-queue one: a full reseed next.
    r.plan(Instant::now(), 2);
    let mut s3 = seed(&[]);
    s3.repair_at = Some(at + Duration::from_secs(2));
    s3.repair_whole = true;
    r.seed_done(false, s3, Instant::now(), Duration::ZERO);
    assert_eq!(r.plan(Instant::now(), 2), Maintenance::Full);
}

#[test]
fn ids_leased_here_are_looked_at_again_less_often_than_others() {
    let mut r = seeded_ring(&[1, 2]);
    let lease = SystemTime::now() + Duration::from_secs(60);
    let t = r.take(2).unwrap();
    // 1 leased by this POP, 2 found leased by someone else.
    r.settle(
        t,
        &[
            (1, Judgement::Claimed(Some(lease))),
            (2, Judgement::Waiting(Some(lease))),
        ],
        false,
    );
    let now = Instant::now();
    let t = r.take_parked(5, now).unwrap();
    assert_eq!(t.ids.len(), 2, "the first look takes both");
    r.settle(
        t,
        &[
            (1, Judgement::Waiting(Some(lease))),
            (2, Judgement::Waiting(Some(lease))),
        ],
        false,
    );
    let t = r.take_parked(5, now + PARKED_LOOK_EVERY).unwrap();
    assert_eq!(t.ids, vec![2], "the own lease waits longer");
    r.settle(t, &[(2, Judgement::Waiting(Some(lease)))], false);
    let t = r.take_parked(5, now + OWN_LEASE_LOOK_EVERY).unwrap();
    assert_eq!(t.ids, vec![1, 2]);
    // Both found empty at last (acknowledged elsewhere): out of the ring.
    r.settle(t, &[(1, Judgement::Empty), (2, Judgement::Empty)], false);
    assert_eq!((r.rotation_len(), r.parked_len()), (0, 0));
}

#[test]
fn a_push_brings_back_a_waiting_partition_of_a_shared_group_only() {
    let soon = SystemTime::now() + Duration::from_secs(3600);
    for shared in [false, true] {
        let mut r = seeded_ring(&[1, 2]);
        let t = r.take(2).unwrap();
        // Partition 1: all its messages leased (an ordered group's lease,
        // or every message of a shared group's); 2 claimed.
        let claim = if shared {
            Judgement::Shared
        } else {
            Judgement::Claimed(Some(soon))
        };
        r.settle(t, &[(1, Judgement::Waiting(Some(soon))), (2, claim)], false);
        assert_eq!(r.parked_len(), if shared { 1 } else { 2 });
        // A push into 1: new messages a shared group can claim at once; an
        // ordered group's lease still holds the partition.
        r.fed(&[1]);
        let parked = r.parked_len();
        assert_eq!(parked, if shared { 0 } else { 2 }, "shared: {shared}");
    }
}

#[test]
fn a_claim_given_back_undelivered_comes_back_at_the_front() {
    let mut r = seeded_ring(&[1, 2, 3, 4]);
    let lease = SystemTime::now() + Duration::from_secs(60);
    // A consumer's claim of 1, then its ACK; the ACK's write claims 2 for
    // its next POP, which comes too late: 2 is given back.
    let t = r.take(1).unwrap();
    r.settle(t, &[(1, Judgement::Claimed(Some(lease)))], false);
    r.release(1, true);
    let t = r.take(1).unwrap();
    assert_eq!(t.ids, vec![2]);
    r.settle(t, &[(2, Judgement::Claimed(Some(lease)))], false);
    r.given_back(2);
    // 2's turn was not used: it is served next, not after 3, 4 and 1.
    let t = r.take(10).unwrap();
    assert_eq!(t.ids, vec![2, 3, 4, 1]);
    r.put_back(t);
    // An id not parked (in the rotation, or gone) is left where it is.
    r.given_back(3);
    r.given_back(9);
    assert_eq!(r.take(10).unwrap().ids, vec![2, 3, 4, 1]);
}
