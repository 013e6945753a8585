//! The fused PUSH of several queues of a tenant: `log_push_many_v1`, one
//! call and one commit for the statements that waited while the tenant's
//! last push was written (`engine/fusion/push.rs`). Its rows are
//! `log_push_v1`'s, numbered over the whole call.

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
