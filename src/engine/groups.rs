//! SHOW GROUP and SHOW LAGGING PARTITIONS: one call each
//! (`calls::groups`), rows passed on in the statements' column order.

use super::values::{Cell, Params};
use super::ExecError;
use crate::backend::call::Calls;
use crate::calls::groups::{Detail, Lagging};
use crate::rewrite::dialect::groups::GroupDetail;
use uuid::Uuid;

fn int8(v: Option<i64>) -> Cell {
    v.map_or(Cell::Null, Cell::Int8)
}

pub async fn execute(
    conn: &mut Calls<'_>,
    stmt: &GroupDetail,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    match stmt {
        GroupDetail::Group { group, queue } => {
            let group = params.name(group, "group")?;
            let queue = params.name(queue, "queue")?;
            let rows = conn
                .run(&Detail {
                    queue: &queue,
                    group: &group,
                    tenant,
                })
                .await?;
            Ok(rows
                .into_iter()
                .map(|r| {
                    vec![
                        Cell::opt_text(r.partition_name),
                        int8(r.cursor_offset),
                        int8(r.last_offset),
                        int8(r.lag),
                        Cell::timestamp(r.oldest_pending_at),
                        Cell::timestamp(r.lease_expires_at),
                        int8(r.lease_from),
                        int8(r.lease_to),
                        r.retry_count.map_or(Cell::Null, Cell::Int4),
                        Cell::timestamp(r.blocked_until),
                        Cell::timestamp(r.last_claimed_at),
                    ]
                })
                .collect())
        }
        GroupDetail::Lagging { queue, group, over } => {
            let queue = params.name(queue, "queue")?;
            let group = group
                .as_ref()
                .map(|g| params.name(g, "group"))
                .transpose()?;
            let over = params.duration(over, "OVER")?;
            let rows = conn
                .run(&Lagging {
                    queue: &queue,
                    group: group.as_deref(),
                    over_seconds: i64::try_from(over.as_secs()).unwrap_or(i64::MAX),
                    tenant,
                })
                .await?;
            Ok(rows
                .into_iter()
                .map(|r| {
                    vec![
                        Cell::opt_text(r.consumer_group),
                        Cell::opt_text(r.partition_name),
                        int8(r.lag),
                        Cell::timestamp(r.oldest_pending_at),
                        int8(r.time_lag_seconds),
                    ]
                })
                .collect())
        }
    }
}
