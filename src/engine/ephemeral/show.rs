//! SHOW QUEUES of ephemeral queues: where their messages are and, in
//! their owner, how many.

use super::Ephemeral;
use crate::backend::call::Calls;
use crate::calls::ephemeral::{QueueRow, Queues};
use crate::engine::values::Cell;
use crate::engine::ExecError;
use std::collections::HashMap;
use uuid::Uuid;

/// SHOW QUEUES: the durable rows (`queues::show_queues`) with their
/// `storage` column; an ephemeral queue's counts are its owner's, asked of
/// the owner when it is another queenwire (NULL when there is none now, or
/// it cannot be asked).
pub async fn show_queues(
    conn: &mut Calls<'_>,
    hub: &Ephemeral,
    rows: Vec<Vec<Cell>>,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let declared: HashMap<String, QueueRow> = conn
        .run(&Queues { tenant })
        .await?
        .into_iter()
        .map(|r| (r.queue_name.clone(), r))
        .collect();
    let mut counts = HashMap::new();
    for q in declared.values() {
        let here = hub.counts(q.ref_);
        let found = match (here, &q.holder) {
            (None, Some(holder)) if *holder != hub.holder => {
                hub.remote_counts(tenant, q.ref_, holder).await
            }
            _ => here,
        };
        counts.insert(q.ref_, found);
    }
    Ok(rows
        .into_iter()
        .map(|mut row| {
            let name = match row.first() {
                Some(Cell::Text(n)) => Some(n.clone()),
                _ => None,
            };
            let storage = match name.as_ref().and_then(|n| declared.get(n)) {
                None => "durable".to_string(),
                Some(q) => {
                    let counts = counts.get(&q.ref_).copied().flatten();
                    if let (Some(m), Some(p)) = (row.get_mut(2), counts) {
                        *m = Cell::Int8(p.0);
                    }
                    if let (Some(m), Some(p)) = (row.get_mut(3), counts) {
                        *m = Cell::Int8(p.1);
                    }
                    if counts.is_none() {
                        for at in [2, 3] {
                            if let Some(c) = row.get_mut(at) {
                                *c = Cell::Null;
                            }
                        }
                    }
                    match &q.holder {
                        Some(h) => {
                            format!("ephemeral: in the memory of {h} only, lost if it stops")
                        }
                        None => "ephemeral: no owner now (the next statement elects one); \
                                 messages live only in an owner's memory"
                            .to_string(),
                    }
                }
            };
            row.push(Cell::Text(storage));
            row
        })
        .collect())
}
