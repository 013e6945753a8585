//! The tenant purge (031): one bounded step of `PURGE TENANT`.

use super::declare::calls;
use std::time::SystemTime;
use uuid::Uuid;

calls! {
    pub const STEP = "qw_tenant_purge_step_v1" {
        SELECT * FROM queen.tenant_purge_step_v1;
        pub struct PurgeStep {
            tenant: Uuid = UUID,
            batch: i32 = INT4,
            /// The first step's `started`: later steps leave the queues
            /// made after it alone.
            before: Option<SystemTime> = TIMESTAMPTZ,
        }
        /// What one step removed; `done` when nothing of the tenant is left.
        #[derive(Debug, Default, Clone, Copy)]
        pub struct PurgeStepRow {
            kv_keys: i64 = INT8 or default,
            timers: i64 = INT8 or default,
            queues: i64 = INT8 or default,
            partitions: i64 = INT8 or default,
            segments: i64 = INT8 or default,
            messages: i64 = INT8 or default,
            dlq: i64 = INT8 or default,
            done: bool = BOOL or default,
            started: Option<SystemTime> = TIMESTAMPTZ,
        }
    }
}
