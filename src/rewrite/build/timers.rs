//! SCHEDULE and CANCEL SCHEDULE as their calls (`crate::calls::timers`).

use crate::calls::queues::DEFAULT_PARTITION;
use crate::calls::timers::{Cancel, Schedule};
use crate::protocol::{SqlError, SqlState};
use crate::rewrite::bind::Params;
use crate::rewrite::dialect::timer::{CancelSchedule, FireAt, Schedule as ScheduleStatement};
use uuid::Uuid;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::timers::SCHEDULE;
    use crate::calls::Call;
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
}
