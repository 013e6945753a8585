//! Timers: SCHEDULE (`timer_schedule_v2`), CANCEL SCHEDULE
//! (`timer_cancel_v1`), SHOW SCHEDULES (`timer_list_v2`), and the fire
//! loop's claim, delete and postpone.

use super::declare::calls;
use super::{Call, CallSpec};
use std::time::SystemTime;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

calls! {
    pub const SCHEDULE = "qw_timer_schedule_v2" {
        "SELECT queen.timer_schedule_v2(p_queue => $1, p_key => $2, p_partition => $3, p_payload => $4, p_fire_at => COALESCE($5::timestamptz, clock_timestamp() + $6 * interval '1 millisecond'), p_every_ms => $8, p_cron => $9, p_cron_spec => $10, p_time_zone => $11, p_catch_up => $12, p_tenant => $7) AS fire_at";
        #[derive(Debug, Clone, PartialEq)]
        pub struct Schedule {
            queue: String = TEXT,
            key: String = TEXT,
            partition: String = TEXT,
            /// JSON text, checked.
            payload: String = TEXT,
            /// Timestamp text (cast by PostgreSQL), or else `after_ms` from now.
            at: Option<String> = TEXT,
            after_ms: Option<i64> = INT8,
            tenant: Uuid = UUID,
            /// Recurring every this many milliseconds (the first fire is
            /// `after_ms` from now).
            every_ms: Option<i64> = INT8,
            /// Recurring at a cron expression's occurrences: as written, and
            /// normalised (`dialect::cron`); the first fire is computed by
            /// PostgreSQL.
            cron: Option<String> = TEXT,
            cron_spec: Option<String> = TEXT,
            /// The cron expression's time zone (PostgreSQL's names; `None`: UTC).
            time_zone: Option<String> = TEXT,
            catch_up: bool = BOOL,
        }
        pub struct ScheduleRow {
            fire_at: Option<SystemTime> = TIMESTAMPTZ,
        }
    }

    pub const CANCEL = "qw_timer_cancel_v1" {
        SELECT queen.timer_cancel_v1;
        #[derive(Debug, Clone, PartialEq)]
        pub struct Cancel {
            queue: String = TEXT,
            key: String = TEXT,
            tenant: Uuid = UUID,
        }
        pub struct CancelRow {
            cancelled: Option<bool> = BOOL,
        }
    }

    pub const LIST = "qw_timer_list_v2" {
        SELECT * FROM queen.timer_list_v2;
        pub struct List<'a> {
            /// `None`: every queue of the tenant.
            queue: Option<&'a str> = TEXT,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct TimerRow {
            queue: Option<String> = TEXT,
            key: Option<String> = TEXT,
            partition: Option<String> = TEXT,
            fire_at: Option<SystemTime> = TIMESTAMPTZ,
            /// `every 300 s`, `cron */5 * * * * Europe/Berlin`; `None`: one-shot.
            recurrence: Option<String> = TEXT,
            catch_up: Option<bool> = BOOL,
        }
    }

    pub const CLAIM_DUE = "qw_timer_claim_due_v1" {
        SELECT * FROM queen.timer_claim_due_v1;
        /// Claims (locks) up to `limit` due timers until the transaction ends.
        pub struct ClaimDue {
            limit: i32 = INT4,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct DueTimer {
            tenant_id: Uuid = UUID,
            queue: String = TEXT,
            key: String = TEXT,
            partition: Option<String> = TEXT,
            /// JSON text.
            payload: String = TEXT,
        }
    }

    pub const DELETE_FIRED = "qw_timer_delete_fired_v1" {
        SELECT queen.timer_delete_fired_v1;
        args(tenants: UUID_ARRAY, queues: TEXT_ARRAY, keys: TEXT_ARRAY);
        row () { deleted: INT4 }
    }

    pub const POSTPONE = "qw_timer_postpone_v1" {
        SELECT queen.timer_postpone_v1;
        args(tenants: UUID_ARRAY, queues: TEXT_ARRAY, keys: TEXT_ARRAY, delay_ms: INT8);
        row () { postponed: INT4 }
    }
}

/// Timers named by parallel arrays (tenant, queue, key).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimerKeys {
    pub tenants: Vec<Uuid>,
    pub queues: Vec<String>,
    pub keys: Vec<String>,
}

impl TimerKeys {
    pub fn push(&mut self, tenant: Uuid, queue: &str, key: String) {
        self.tenants.push(tenant);
        self.queues.push(queue.to_string());
        self.keys.push(key);
    }

    pub fn len(&self) -> usize {
        self.tenants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tenants.is_empty()
    }
}

pub struct DeleteFired<'a> {
    pub timers: &'a TimerKeys,
}

impl Call for DeleteFired<'_> {
    const SPEC: &'static CallSpec = &DELETE_FIRED;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.timers.tenants, &self.timers.queues, &self.timers.keys]
    }
}

pub struct Postpone<'a> {
    pub timers: &'a TimerKeys,
    pub delay_ms: i64,
}

impl Call for Postpone<'_> {
    const SPEC: &'static CallSpec = &POSTPONE;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.timers.tenants,
            &self.timers.queues,
            &self.timers.keys,
            &self.delay_ms,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_keys_stay_parallel() {
        let mut keys = TimerKeys::default();
        keys.push(Uuid::nil(), "q", "a".into());
        keys.push(Uuid::nil(), "r", "b".into());
        assert_eq!(keys.len(), 2);
        let call = Postpone {
            timers: &keys,
            delay_ms: 5,
        };
        assert_eq!(call.params().len(), POSTPONE.params.len());
    }
}
