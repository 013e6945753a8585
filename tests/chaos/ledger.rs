//! The ledgers the chaos test's clients keep, and the checker that diffs
//! them (SEMANTICS.md, "Proving it").

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

/// One delivery whose ACK answered `acked`.
#[derive(Clone, Debug)]
pub struct Acked {
    pub txn: String,
    pub partition: String,
    pub offset: i64,
    pub consumer: usize,
    /// When the POP's reply arrived and when the first ACK was sent: inside
    /// the lease, so two of these for one partition must not overlap.
    pub popped: Instant,
    pub ack_sent: Instant,
}

#[derive(Default)]
pub struct Ledgers {
    /// Transaction ids a PUSH confirmed (`queued` or `duplicate`).
    pub pushed: Mutex<Vec<String>>,
    pub acked: Mutex<Vec<Acked>>,
    /// Transaction ids the transactional consumer committed with an effect.
    pub effects_committed: Mutex<Vec<String>>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub pushed: usize,
    pub acknowledged: usize,
    pub lost: usize,
    pub acked_twice: usize,
    pub unknown_acked: usize,
    pub effects_wrong: usize,
    pub out_of_order: usize,
    pub overlapping_leases: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// One group consumer forgets one message it acknowledged.
    DropOneAcked,
}

pub fn check(ledgers: &Ledgers, effect_rows: &[String]) -> Report {
    let pushed: HashSet<String> = ledgers.pushed.lock().unwrap().iter().cloned().collect();
    let acked = ledgers.acked.lock().unwrap().clone();
    let mut times: HashMap<&str, usize> = HashMap::new();
    for a in &acked {
        *times.entry(a.txn.as_str()).or_default() += 1;
    }
    let mut report = Report {
        pushed: pushed.len(),
        acknowledged: times.len(),
        lost: pushed
            .iter()
            .filter(|t| !times.contains_key(t.as_str()))
            .count(),
        acked_twice: times.values().filter(|n| **n > 1).count(),
        unknown_acked: times.keys().filter(|t| !pushed.contains(**t)).count(),
        ..Report::default()
    };
    // Effects: exactly one row per message the transactional consumer
    // acknowledged, and none for anything else.
    let mut rows: HashMap<&str, usize> = HashMap::new();
    for t in effect_rows {
        *rows.entry(t.as_str()).or_default() += 1;
    }
    let committed: HashSet<String> = ledgers
        .effects_committed
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .collect();
    report.effects_wrong = committed
        .iter()
        .filter(|t| rows.get(t.as_str()) != Some(&1))
        .count()
        + rows.keys().filter(|t| !committed.contains(**t)).count();
    // Order: within a partition, acknowledged deliveries come in offset
    // order, and offset order is the producer's order.
    let mut by_partition: BTreeMap<&str, Vec<&Acked>> = BTreeMap::new();
    for a in &acked {
        by_partition
            .entry(a.partition.as_str())
            .or_default()
            .push(a);
    }
    let seq = |txn: &str| -> usize { txn.rsplit('-').next().unwrap().parse().unwrap() };
    for deliveries in by_partition.values_mut() {
        deliveries.sort_by_key(|a| (a.popped, a.offset));
        report.out_of_order += deliveries
            .windows(2)
            .filter(|w| w[0].offset >= w[1].offset)
            .count();
        let mut by_offset = deliveries.clone();
        by_offset.sort_by_key(|a| a.offset);
        report.out_of_order += by_offset
            .windows(2)
            .filter(|w| seq(&w[0].txn) >= seq(&w[1].txn))
            .count();
        // Leases of one partition never overlap across consumers.
        for (i, a) in deliveries.iter().enumerate() {
            for b in &deliveries[i + 1..] {
                if a.consumer != b.consumer && b.popped < a.ack_sent && a.popped < b.ack_sent {
                    report.overlapping_leases += 1;
                }
            }
        }
    }
    report
}
