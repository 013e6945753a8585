//! What PUSH, POP and ACK tell the metrics per queue (`Engine::execute`
//! records every statement's kind and latency): the messages pushed,
//! popped, acknowledged, failed or dead-lettered, read off the result rows
//! (the rows name the queue, or carry the receipts whose partitions POP
//! handed out).

use super::receipt::{partition_head, partition_of};
use super::values::Cell;
use crate::metrics::queues::QueueCounters;
use crate::metrics::Metrics;
use std::sync::Arc;
use uuid::Uuid;

fn text(row: &[Cell], at: usize) -> Option<&str> {
    row.get(at).and_then(Cell::as_text)
}

/// The counters of consecutive rows' queue, looked up once per run of rows
/// naming the same queue (past the cap, the `other` bucket is looked up
/// again for each row).
struct Last(Option<Arc<QueueCounters>>);

impl Last {
    fn get(&mut self, m: &Metrics, tenant: Uuid, queue: &str) -> Arc<QueueCounters> {
        match &self.0 {
            Some(c) if &*c.name == queue && c.tenant == Some(tenant) => c.clone(),
            _ => {
                let c = m.queues.get(tenant, queue);
                self.0 = Some(c.clone());
                c
            }
        }
    }
}

/// A PUSH's rows: message_id, queue, partition, offset, transaction_id,
/// status.
pub fn pushed(m: &Metrics, tenant: Uuid, rows: &[Vec<Cell>]) {
    let mut last = Last(None);
    for row in rows {
        if let (Some(queue), Some(status)) = (text(row, 1), text(row, 5)) {
            if status != "duplicate" {
                QueueCounters::add(&last.get(m, tenant, queue).pushed, 1);
            }
        }
    }
}

/// A POP's rows: receipt, message_id, queue, …
pub fn popped(m: &Metrics, tenant: Uuid, auto_ack: bool, rows: &[Vec<Cell>]) {
    let mut last = Last(None);
    let mut learned = None;
    for row in rows {
        let Some(queue) = text(row, 2) else { continue };
        let c = last.get(m, tenant, queue);
        QueueCounters::add(&c.popped, 1);
        // AUTO ACK: acknowledged at delivery.
        if auto_ack {
            QueueCounters::add(&c.acked, 1);
        }
        let receipt = text(row, 0);
        let head = receipt.and_then(partition_head);
        if head.is_none() || head != learned {
            if let Some(partition) = receipt.and_then(partition_of) {
                m.queues.learn_partition(partition, &c);
            }
            learned = head;
        }
    }
}

/// An ACK's rows: receipt, status.
pub fn acked(m: &Metrics, rows: &[Vec<Cell>]) {
    // A partition's receipts come in runs: its counters are looked up once
    // a run, not once a receipt.
    let mut run: Option<(Option<&str>, Arc<QueueCounters>)> = None;
    for row in rows {
        let Some(status) = text(row, 1) else { continue };
        let receipt = text(row, 0);
        let head = receipt.and_then(partition_head);
        if !matches!(&run, Some((h, _)) if head.is_some() && *h == head) {
            let c = m.queues.of_partition(receipt.and_then(partition_of));
            run = Some((head, c));
        }
        let Some((_, c)) = &run else { continue };
        match status {
            "acked" => QueueCounters::add(&c.acked, 1),
            "retry" => QueueCounters::add(&c.failed, 1),
            "dead_lettered" => {
                QueueCounters::add(&c.failed, 1);
                QueueCounters::add(&c.dead_lettered, 1);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::receipt::{Receipt, ReceiptKey};
    use std::sync::atomic::Ordering;

    fn receipt(key: &ReceiptKey, partition_id: i64, offset: i64) -> Cell {
        Cell::Text(key.encode(&Receipt {
            partition_id,
            offset,
            lease_token: Uuid::nil(),
            group: "__QUEUE_MODE__".into(),
            shared: false,
        }))
    }

    /// Receipts of two queues' partitions interleaved in one ACK count
    /// each in its own queue, run by run.
    #[test]
    fn an_ack_counts_each_receipt_in_its_partitions_queue() {
        let m = Metrics::new(100, true);
        let key = ReceiptKey::new(b"secret".to_vec());
        let tenant = Uuid::nil();
        let popped = |queue: &str, partition: i64| {
            vec![
                receipt(&key, partition, 0),
                Cell::Null,
                Cell::Text(queue.into()),
            ]
        };
        super::popped(&m, tenant, false, &[popped("a", 1), popped("a", 1)]);
        super::popped(&m, tenant, false, &[popped("b", 2)]);
        let acked = |partition: i64, offset: i64| {
            vec![receipt(&key, partition, offset), Cell::Text("acked".into())]
        };
        let rows = [
            acked(1, 0),
            acked(1, 1),
            acked(2, 0),
            acked(1, 2),
            acked(2, 1),
        ];
        super::acked(&m, &rows);
        let acked_of = |queue: &str| m.queues.get(tenant, queue).acked.load(Ordering::Relaxed);
        assert_eq!((acked_of("a"), acked_of("b")), (3, 2));
    }
}
