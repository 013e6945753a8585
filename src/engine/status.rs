//! SHOW STATUS: one call (`calls::status`), one row.

use super::values::Cell;
use super::ExecError;
use crate::backend::call::Calls;
use crate::calls::status::Status;
use crate::rewrite::dialect::status::THROUGHPUT_MINUTES;
use uuid::Uuid;

pub async fn show(conn: &mut Calls<'_>, tenant: Uuid) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn
        .run(&Status {
            minutes: THROUGHPUT_MINUTES,
            tenant,
        })
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let mut cells: Vec<Cell> = r
                .counts
                .into_iter()
                .map(|c| c.map_or(Cell::Null, Cell::Int8))
                .collect();
            cells.push(r.throughput.map_or(Cell::Null, Cell::Jsonb));
            cells
        })
        .collect())
}
