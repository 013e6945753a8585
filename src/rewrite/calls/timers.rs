//! Timers: SCHEDULE (`timer_schedule_v2`), CANCEL SCHEDULE
//! (`timer_cancel_v1`), SHOW SCHEDULES (`timer_list_v2`), and the fire
//! loop's claim, delete and postpone.

use super::queues::DEFAULT_PARTITION;
use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use crate::protocol::{SqlError, SqlState};
use crate::rewrite::bind::Params;
use crate::rewrite::dialect::timer::{CancelSchedule, FireAt, Schedule as ScheduleStatement};
use std::time::SystemTime;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const SCHEDULE: CallSpec = CallSpec {
    name: "qw_timer_schedule_v2",
    sql: "SELECT queen.timer_schedule_v2(p_queue => $1, p_key => $2, p_partition => $3, p_payload => $4, p_fire_at => COALESCE($5::timestamptz, clock_timestamp() + $6 * interval '1 millisecond'), p_every_ms => $8, p_cron => $9, p_cron_spec => $10, p_time_zone => $11, p_catch_up => $12, p_tenant => $7) AS fire_at",
    params: &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::UUID,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::BOOL,
    ],
    columns: &[column("fire_at", Type::TIMESTAMPTZ)],
};

#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub queue: String,
    pub key: String,
    pub partition: String,
    /// JSON text, checked.
    pub payload: String,
    /// Timestamp text (cast by PostgreSQL), or else `after_ms` from now.
    pub at: Option<String>,
    pub after_ms: Option<i64>,
    pub tenant: Uuid,
    /// Recurring every this many milliseconds (the first fire is
    /// `after_ms` from now).
    pub every_ms: Option<i64>,
    /// Recurring at a cron expression's occurrences: as written, and
    /// normalised (`dialect::cron`); the first fire is computed by
    /// PostgreSQL.
    pub cron: Option<String>,
    pub cron_spec: Option<String>,
    /// The cron expression's time zone (PostgreSQL's names; `None`: UTC).
    pub time_zone: Option<String>,
    pub catch_up: bool,
}

impl Call for Schedule {
    const SPEC: &'static CallSpec = &SCHEDULE;
    type Row = ScheduleRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.queue,
            &self.key,
            &self.partition,
            &self.payload,
            &self.at,
            &self.after_ms,
            &self.tenant,
            &self.every_ms,
            &self.cron,
            &self.cron_spec,
            &self.time_zone,
            &self.catch_up,
        ]
    }
}

/// The shortest `EVERY`: the fire loop looks for due timers a few times a
/// second, so a shorter period would only fire late.
pub const MIN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub fn schedule(
    stmt: &ScheduleStatement,
    params: &Params<'_>,
    max_payload: usize,
    tenant: Uuid,
) -> Result<Schedule, SqlError> {
    let queue = params.name(&stmt.queue, "queue")?;
    let key = params.name(&stmt.key, "timer key")?;
    let partition = match &stmt.partition {
        Some(p) => params.name(p, "partition")?,
        None => DEFAULT_PARTITION.to_string(),
    };
    let payload = params.json(&stmt.payload, "payload", max_payload)?;
    let millis = |d: std::time::Duration| d.as_millis().min(i64::MAX as u128) as i64;
    let invalid = |m: String| SqlError::error(SqlState::INVALID_PARAMETER_VALUE, m);
    let mut call = Schedule {
        queue,
        key,
        partition,
        payload,
        at: None,
        after_ms: None,
        tenant,
        every_ms: None,
        cron: None,
        cron_spec: None,
        time_zone: None,
        catch_up: stmt.catch_up,
    };
    match &stmt.fire {
        FireAt::At(ts) => call.at = Some(params.text(ts, "AT")?),
        FireAt::After(d) => call.after_ms = Some(millis(params.duration(d, "AFTER")?)),
        FireAt::Every(d) => {
            let d = params.duration(d, "EVERY")?;
            if d < MIN_EVERY {
                return Err(invalid(format!(
                    "EVERY must be at least {} s",
                    MIN_EVERY.as_secs()
                )));
            }
            call.after_ms = Some(millis(d));
            call.every_ms = Some(millis(d));
        }
        FireAt::Cron { expr, time_zone } => {
            let expr = params.text(expr, "CRON")?;
            call.cron_spec =
                Some(crate::rewrite::dialect::cron::normalise(&expr).map_err(invalid)?);
            call.cron = Some(expr.trim().to_string());
            call.time_zone = match time_zone {
                Some(tz) => Some(params.text(tz, "TIMEZONE")?),
                None => None,
            };
        }
    }
    Ok(call)
}

pub struct ScheduleRow {
    pub fire_at: Option<SystemTime>,
}

impl FromRow for ScheduleRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(ScheduleRow {
            fire_at: row.get("fire_at")?,
        })
    }
}

pub const CANCEL: CallSpec = CallSpec {
    name: "qw_timer_cancel_v1",
    sql: "SELECT queen.timer_cancel_v1(p_queue => $1, p_key => $2, p_tenant => $3) AS cancelled",
    params: &[Type::TEXT, Type::TEXT, Type::UUID],
    columns: &[column("cancelled", Type::BOOL)],
};

#[derive(Debug, Clone, PartialEq)]
pub struct Cancel {
    pub queue: String,
    pub key: String,
    pub tenant: Uuid,
}

impl Call for Cancel {
    const SPEC: &'static CallSpec = &CANCEL;
    type Row = CancelRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.key, &self.tenant]
    }
}

pub fn cancel(
    stmt: &CancelSchedule,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<Cancel, SqlError> {
    Ok(Cancel {
        queue: params.name(&stmt.queue, "queue")?,
        key: params.name(&stmt.key, "timer key")?,
        tenant,
    })
}

pub struct CancelRow {
    pub cancelled: Option<bool>,
}

impl FromRow for CancelRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(CancelRow {
            cancelled: row.get("cancelled")?,
        })
    }
}

pub const LIST: CallSpec = CallSpec {
    name: "qw_timer_list_v2",
    sql: "SELECT queue, key, partition, fire_at, recurrence, catch_up FROM queen.timer_list_v2(p_queue => $1, p_tenant => $2)",
    params: &[Type::TEXT, Type::UUID],
    columns: &[
        column("queue", Type::TEXT),
        column("key", Type::TEXT),
        column("partition", Type::TEXT),
        column("fire_at", Type::TIMESTAMPTZ),
        column("recurrence", Type::TEXT),
        column("catch_up", Type::BOOL),
    ],
};

pub struct List<'a> {
    /// `None`: every queue of the tenant.
    pub queue: Option<&'a str>,
    pub tenant: Uuid,
}

impl Call for List<'_> {
    const SPEC: &'static CallSpec = &LIST;
    type Row = TimerRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.tenant]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TimerRow {
    pub queue: Option<String>,
    pub key: Option<String>,
    pub partition: Option<String>,
    pub fire_at: Option<SystemTime>,
    /// `every 300 s`, `cron */5 * * * * Europe/Berlin`; `None`: one-shot.
    pub recurrence: Option<String>,
    pub catch_up: Option<bool>,
}

impl FromRow for TimerRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(TimerRow {
            queue: row.get("queue")?,
            key: row.get("key")?,
            partition: row.get("partition")?,
            fire_at: row.get("fire_at")?,
            recurrence: row.get("recurrence")?,
            catch_up: row.get("catch_up")?,
        })
    }
}

pub const CLAIM_DUE: CallSpec = CallSpec {
    name: "qw_timer_claim_due_v1",
    sql: "SELECT tenant_id, queue, key, partition, payload FROM queen.timer_claim_due_v1(p_limit => $1)",
    params: &[Type::INT4],
    columns: &[
        column("tenant_id", Type::UUID),
        column("queue", Type::TEXT),
        column("key", Type::TEXT),
        column("partition", Type::TEXT),
        column("payload", Type::TEXT),
    ],
};

/// Claims (locks) up to `limit` due timers until the transaction ends.
pub struct ClaimDue {
    pub limit: i32,
}

impl Call for ClaimDue {
    const SPEC: &'static CallSpec = &CLAIM_DUE;
    type Row = DueTimer;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.limit]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DueTimer {
    pub tenant_id: Uuid,
    pub queue: String,
    pub key: String,
    pub partition: Option<String>,
    /// JSON text.
    pub payload: String,
}

impl FromRow for DueTimer {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(DueTimer {
            tenant_id: row.get("tenant_id")?,
            queue: row.get("queue")?,
            key: row.get("key")?,
            partition: row.get("partition")?,
            payload: row.get("payload")?,
        })
    }
}

pub const DELETE_FIRED: CallSpec = CallSpec {
    name: "qw_timer_delete_fired_v1",
    sql: "SELECT queen.timer_delete_fired_v1(p_tenants => $1, p_queues => $2, p_keys => $3) AS deleted",
    params: &[Type::UUID_ARRAY, Type::TEXT_ARRAY, Type::TEXT_ARRAY],
    columns: &[column("deleted", Type::INT4)],
};

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

pub const POSTPONE: CallSpec = CallSpec {
    name: "qw_timer_postpone_v1",
    sql: "SELECT queen.timer_postpone_v1(p_tenants => $1, p_queues => $2, p_keys => $3, p_delay_ms => $4) AS postponed",
    params: &[
        Type::UUID_ARRAY,
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
        Type::INT8,
    ],
    columns: &[column("postponed", Type::INT4)],
};

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
    use crate::rewrite::dialect::{self, Statement};

    #[test]
    fn schedule_after_a_duration_passes_milliseconds() {
        let Some(Ok(Statement::Schedule(s))) =
            dialect::parse("SCHEDULE INTO q KEY k AFTER '1.5s' VALUES ('{}')")
        else {
            panic!("parse");
        };
        let call = schedule(&s, &Params(&[]), 1024, Uuid::nil()).unwrap();
        assert_eq!(call.partition, DEFAULT_PARTITION);
        assert_eq!((call.at.as_deref(), call.after_ms), (None, Some(1500)));
        assert_eq!(call.params().len(), SCHEDULE.params.len());
        assert_eq!(
            schedule(&s, &Params(&[]), 1, Uuid::nil())
                .unwrap_err()
                .code(),
            "54000"
        );
    }

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
