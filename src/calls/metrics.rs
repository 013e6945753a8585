//! What `/metrics` and `/ready` read from PostgreSQL, as queenwire's own
//! role (every tenant): queue depth for the first queues in (tenant,
//! queue) order, group lag (`queen.group_lag`), how many queues there are,
//! and whether the schema is there.

use super::declare::calls;
use uuid::Uuid;

calls! {
    /// `queen.queue_depth`'s numbers (the expressions of
    /// `queen.log_show_queues_v1`, 010_log_admin) for the first `$1` queues
    /// only: the view computes every queue of every tenant before any LIMIT
    /// applies (about 23 µs a queue: 0.23 s for 10,000), this reads `$1` of
    /// them through the (tenant_id, name) index (1.7 ms for 1,000 of 10,000).
    pub const QUEUE_DEPTH = "qw_metrics_queue_depth" {
        "SELECT q.tenant_id, q.name::TEXT AS queue, (SELECT COALESCE(sum(GREATEST(p.last_offset - p.first_offset + 1, 0)), 0)::BIGINT FROM queen.log_partitions p WHERE p.queue_id = q.id) AS messages, queen.log_queue_pending_v1(p_queue_id => q.id, p_tenant => q.tenant_id) AS pending, (SELECT count(*) FROM queen.log_partitions p JOIN queen.log_dlq d ON d.partition_id = p.id WHERE p.queue_id = q.id) AS dead_lettered FROM (SELECT id, tenant_id, name FROM queen.queues ORDER BY tenant_id, name LIMIT $1) q ORDER BY q.tenant_id, q.name";
        pub struct QueueDepth {
            limit: i64 = INT8,
        }
        pub struct DepthRow {
            tenant_id: Option<Uuid> = UUID,
            queue: Option<String> = TEXT,
            messages: Option<i64> = INT8,
            pending: Option<i64> = INT8,
            dead_lettered: Option<i64> = INT8,
        }
    }

    pub const QUEUE_COUNT = "qw_metrics_queue_count" {
        "SELECT count(*) AS queues FROM queen.queues";
        pub struct QueueCount;
        pub struct CountRow {
            queues: Option<i64> = INT8,
        }
    }

    pub const GROUP_LAG = "qw_metrics_group_lag" {
        "SELECT tenant_id, queue, consumer_group, lag FROM queen.group_lag ORDER BY tenant_id, queue, consumer_group";
        pub struct GroupLag;
        pub struct LagRow {
            tenant_id: Option<Uuid> = UUID,
            queue: Option<String> = TEXT,
            consumer_group: Option<String> = TEXT,
            lag: Option<i64> = INT8,
        }
    }

    /// The schema is applied when the stats views (011) and the maintenance
    /// leases (029) exist.
    pub const SCHEMA_APPLIED = "qw_metrics_schema_applied" {
        "SELECT (to_regclass('queen.queue_depth') IS NOT NULL AND to_regclass('queen.maintenance_leases') IS NOT NULL) AS schema_applied";
        pub struct SchemaApplied;
        pub struct AppliedRow {
            schema_applied: Option<bool> = BOOL,
        }
    }

    /// One process's counters of one minute into `queen.worker_metrics` and
    /// `queen.queue_ops_metrics` (019_worker_metrics).
    pub const FLUSH = "qw_metrics_flush_v1" {
        SELECT queen.metrics_flush_v1;
        pub struct Flush<'a> {
            hostname: &'a str = TEXT,
            pid: i32 = INT4,
            bucket: std::time::SystemTime = TIMESTAMPTZ,
            /// A JSON object of `worker_metrics` columns.
            worker: String = TEXT::text::jsonb,
            /// A JSON array of `{tenant, queue, <counters>}`.
            queues: String = TEXT::text::jsonb,
        }
        row () { queues: INT4 }
    }

    /// The elected metrics rollup (folds the partition counters' deltas,
    /// prunes old metrics rows): the number of deltas folded.
    pub const ROLLUP = "qw_metrics_rollup_v1" {
        "SELECT queen.metrics_rollup_v1(p_keep => make_interval(days => $1), p_batch => $2) AS folded";
        pub struct Rollup {
            keep_days: i32 = INT4,
            batch: i32 = INT4,
        }
        pub struct FoldedRow {
            folded: Option<i32> = INT4,
        }
    }
}
