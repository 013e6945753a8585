//! The retention and cleanup tasks' calls (`sql/procedures/006`), run by
//! the elected maintainer on its own connection (`crate::engine::retention`):
//! the work list, one bounded step per partition, the cleanup step, the
//! history record of each pass, and the retained-bytes slow lane (028).

use super::declare::calls;
use uuid::Uuid;

calls! {
    pub const WORK = "qw_log_retention_work_v1" {
        SELECT * FROM queen.log_retention_work_v1;
        /// Up to `limit` partitions after id `after` whose oldest segment is due.
        pub struct Work {
            after: i64 = INT8,
            limit: i32 = INT4,
        }
        pub struct WorkRow {
            partition_id: i64 = INT8,
        }
    }

    pub const STEP = "qw_log_retention_step_v1" {
        SELECT * FROM queen.log_retention_step_v1;
        /// Deletes at most `limit` due segments from the front of one partition.
        pub struct Step {
            partition_id: i64 = INT8,
            limit: i32 = INT4,
        }
        /// What one step deleted; `more` when it stopped at its limit, `locked`
        /// when a push held the partition and the step did nothing.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct StepRow {
            segments: i32 = INT4,
            messages: i64 = INT8,
            bytes: i64 = INT8,
            expired: i64 = INT8,
            more: bool = BOOL,
            locked: bool = BOOL,
        }
    }

    pub const CLEANUP_STEP = "qw_log_partition_cleanup_step_v1" {
        SELECT queen.log_partition_cleanup_step_v1;
        /// Deletes at most `limit` partitions empty and idle for `age_seconds`.
        pub struct CleanupStep {
            age_seconds as cleanup_age_seconds: i32 = INT4,
            limit: i32 = INT4,
        }
        pub struct Deleted {
            deleted: i32 = INT4,
        }
    }

    pub const RECORD = "qw_log_retention_record_v1" {
        SELECT queen.log_retention_record_v1;
        /// One pass of `task` (`retention` or `cleanup`) into
        /// `queen.retention_history`.
        pub struct Record<'a> {
            task: &'static str = TEXT,
            holder: &'a str = TEXT,
            duration_ms: i64 = INT8,
            partitions: i32 = INT4,
            segments: i64 = INT8,
            messages: i64 = INT8,
            bytes: i64 = INT8,
            expired: i64 = INT8,
        }
        row () { id: INT8 }
    }

    pub const RETAINED_BYTES_STEP = "qw_log_retained_bytes_step_v1" {
        SELECT * FROM queen.log_retained_bytes_step_v1;
        /// Measures the retained bytes of up to `limit` queues after `after`
        /// (`None`: from the first).
        pub struct RetainedBytesStep {
            after: Option<Uuid> = UUID,
            limit: i32 = INT4,
        }
        pub struct RetainedBytesRow {
            last_queue_id: Option<Uuid> = UUID,
            queues: i32 = INT4,
        }
    }
}
