//! The fused PUSH of several queues of a tenant: `log_push_many_v1`, one
//! call and one commit for the statements that waited while the tenant's
//! last push was written (`engine/fusion/push.rs`). Its rows are
//! `log_push_v1`'s, numbered over the whole call. And `log_push_ids_v1`,
//! the same for one queue's partitions named by the ids earlier pushes
//! answered (`engine/queues/placed.rs`).

use super::declare::calls;
use super::queues::{Push, PushRow};
use super::{Call, CallSpec};
use tokio_postgres::types::ToSql;

calls! {
    /// log_push_v1's parameters and rows, p_queues in place of p_queue.
    pub const PUSH_MANY = "qw_push_many_v1" {
        SELECT * FROM queen.log_push_many_v1;
        args(
            queues: TEXT_ARRAY,
            partitions: TEXT_ARRAY,
            counts: INT4_ARRAY,
            blobs: BYTEA_ARRAY,
            txn_hashes: INT8_ARRAY,
            message_ids: UUID_ARRAY,
            min_created_at: TIMESTAMPTZ_ARRAY,
            max_created_at: TIMESTAMPTZ_ARRAY,
            trace_ids: TEXT_ARRAY,
            tenant: UUID,
        );
        row PushRow { msg_index: INT4, status: TEXT, offset: INT8, message_id: UUID, partition_id: INT8 }
    }

    pub const PUSH_IDS = "qw_push_ids_v1" {
        SELECT * FROM queen.log_push_ids_v1;
        args(
            queue: TEXT,
            partitions: TEXT_ARRAY,
            partition_ids: INT8_ARRAY,
            counts: INT4_ARRAY,
            blobs: BYTEA_ARRAY,
            txn_hashes: INT8_ARRAY,
            message_ids: UUID_ARRAY,
            min_created_at: TIMESTAMPTZ_ARRAY,
            max_created_at: TIMESTAMPTZ_ARRAY,
            tenant: UUID,
        );
        row PushRow { msg_index: INT4, status: TEXT, offset: INT8, message_id: UUID, partition_id: INT8 }
    }
}

/// [`Push`] with a queue per segment (its `queue` unused): the segments of
/// one queue are consecutive.
pub struct PushMany<'a> {
    pub queues: Vec<&'a str>,
    pub push: Push<'a>,
}

impl Call for PushMany<'_> {
    const SPEC: &'static CallSpec = &PUSH_MANY;
    type Row = PushRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut params = self.push.params();
        params[0] = &self.queues;
        params
    }
}

/// [`Push`] of one queue (no trace ids) with each segment's partition id:
/// its rows are [`PushRow`]s, or one `stale` row when nothing was written.
pub struct PushIds<'a> {
    pub partition_ids: Vec<i64>,
    pub push: Push<'a>,
}

impl Call for PushIds<'_> {
    const SPEC: &'static CallSpec = &PUSH_IDS;
    type Row = PushRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let p = &self.push;
        vec![
            &p.queue,
            &p.partitions,
            &self.partition_ids,
            &p.counts,
            &p.blobs,
            &p.txn_hashes,
            &p.message_ids,
            &p.min_created_at,
            &p.max_created_at,
            &p.tenant,
        ]
    }
}
