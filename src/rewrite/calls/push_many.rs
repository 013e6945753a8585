//! The fused PUSH of several queues of a tenant: `log_push_many_v1`, one
//! call and one commit for the statements that waited while the tenant's
//! last push was written (`engine/fusion/push.rs`). Its rows are
//! `log_push_v1`'s, numbered over the whole call. And `log_push_ids_v1`,
//! the same for one queue's partitions named by the ids earlier pushes
//! answered (`engine/queues/placed.rs`).

use super::queues::{Push, PushRow, PUSH};
use super::{Call, CallSpec};
use tokio_postgres::types::{ToSql, Type};

pub const PUSH_MANY: CallSpec = CallSpec {
    name: "qw_push_many_v1",
    sql: "SELECT msg_index, status, \"offset\", message_id, partition_id FROM queen.log_push_many_v1(p_queues => $1, p_partitions => $2, p_counts => $3, p_blobs => $4, p_txn_hashes => $5, p_message_ids => $6, p_min_created_at => $7, p_max_created_at => $8, p_trace_ids => $9, p_tenant => $10)",
    // log_push_v1's parameters and rows, p_queues in place of p_queue.
    params: &[
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
        Type::INT4_ARRAY,
        Type::BYTEA_ARRAY,
        Type::INT8_ARRAY,
        Type::UUID_ARRAY,
        Type::TIMESTAMPTZ_ARRAY,
        Type::TIMESTAMPTZ_ARRAY,
        Type::TEXT_ARRAY,
        Type::UUID,
    ],
    columns: PUSH.columns,
};

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

pub const PUSH_IDS: CallSpec = CallSpec {
    name: "qw_push_ids_v1",
    sql: "SELECT msg_index, status, \"offset\", message_id, partition_id FROM queen.log_push_ids_v1(p_queue => $1, p_partitions => $2, p_partition_ids => $3, p_counts => $4, p_blobs => $5, p_txn_hashes => $6, p_message_ids => $7, p_min_created_at => $8, p_max_created_at => $9, p_tenant => $10)",
    params: &[
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::INT4_ARRAY,
        Type::BYTEA_ARRAY,
        Type::INT8_ARRAY,
        Type::UUID_ARRAY,
        Type::TIMESTAMPTZ_ARRAY,
        Type::TIMESTAMPTZ_ARRAY,
        Type::UUID,
    ],
    columns: PUSH.columns,
};

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
