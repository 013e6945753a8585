//! `POP FROM NAMESPACE ns [TASK t] …`: one attempt of a wildcard POP.
//!
//! `queen.log_namespace_queues_v2` (004_log_pop) lists the namespace's
//! queues, higher `priority` first, and registers the POP's group on those
//! that have not seen it. The attempt then pops the queues one after the
//! other, each exactly as a POP of that one queue (its hot list ring, its
//! `log_pop_v2`), until the POP's LIMIT or PARTITIONS is used up: a lower
//! priority is looked at only when every queue above it gave less than
//! that. Within one priority the queues take turns (`hotlist/rotation.rs`): the
//! next POP of the same (tenant, namespace, task, group) starts after the
//! queue the last one was served from, so with Q busy queues of one
//! priority each is served within Q POPs (SEMANTICS.md's fairness, one
//! level up). The rotation is this process's; each queenwire keeps its own,
//! as each keeps its own rings. The database still decides who gets what.
//!
//! Rows are POP's rows; each names its queue, so the consumer ACKs as for
//! any POP.

use super::hotlist::rotation::RotationKey;
use super::hotlist::Hotlist;
use super::pop::PopPlan;
use super::receipt::ReceiptKey;
use super::values::Cell;
use super::wake::{queue_key, Waiters};
use super::ExecError;
use crate::backend::call::Calls;
use crate::calls::namespace::{NamespaceArgs, NamespaceQueue, NamespaceQueues};
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// A wildcard POP: its plan (queue empty) and its namespace.
pub struct NamespacePop {
    pub plan: PopPlan,
    pub scope: NamespaceArgs,
}

impl NamespacePop {
    fn key(&self, tenant: Uuid) -> RotationKey {
        (
            tenant,
            self.scope.namespace.clone(),
            self.scope.task.clone(),
            self.plan.group().to_string(),
        )
    }

    /// The namespace's queues now, the group registered on them.
    pub async fn queues(
        &self,
        conn: &mut Calls<'_>,
        tenant: Uuid,
    ) -> Result<Vec<NamespaceQueue>, ExecError> {
        Ok(conn
            .run(&NamespaceQueues {
                scope: &self.scope,
                args: self.plan.args(),
                tenant,
            })
            .await?)
    }

    /// One attempt over `queues` (from [`NamespacePop::queues`]); an
    /// ephemeral queue among them is popped from its owner's memory
    /// (`engine`'s ephemeral queues, forwarded when another queenwire owns
    /// it).
    #[allow(clippy::too_many_arguments)]
    pub async fn attempt(
        &self,
        engine: &super::Engine,
        conn: &mut Calls<'_>,
        queues: &[NamespaceQueue],
        waiters: &Waiters,
        key: &ReceiptKey,
        tenant: Uuid,
        in_block: bool,
    ) -> Result<Vec<Vec<Cell>>, ExecError> {
        let hot: &Hotlist = &waiters.hot;
        let rotation = self.key(tenant);
        let priority_of: HashMap<&str, i32> = queues
            .iter()
            .map(|q| (q.queue_name.as_str(), q.priority))
            .collect();
        let ephemeral: HashSet<&str> = queues
            .iter()
            .filter(|q| q.ephemeral)
            .map(|q| q.queue_name.as_str())
            .collect();
        let order = hot.rotations.order(&rotation, queues);
        let mut rows = Vec::new();
        let mut limit_left = self.plan.limit();
        let mut partitions_left = self.plan.max_partitions();
        for queue in order {
            let plan = self.plan.for_queue(queue, limit_left, partitions_left);
            let got = if ephemeral.contains(queue) {
                engine
                    .namespace_ephemeral_pop(tenant, queue, plan.args())
                    .await?
            } else {
                let digest = waiters.digest(&queue_key(tenant, queue));
                hot.pop(conn, &plan, key, tenant, &digest, in_block)
                    .await?
                    .rows
            };
            if got.is_empty() {
                continue;
            }
            if let Some(priority) = priority_of.get(queue) {
                hot.rotations.served(&rotation, *priority, queue);
            }
            let partitions: HashSet<&str> = got
                .iter()
                .filter_map(|row| row.get(3).and_then(Cell::as_text))
                .collect();
            partitions_left = partitions_left.saturating_sub(partitions.len().max(1));
            limit_left = limit_left.saturating_sub(got.len());
            rows.extend(got);
            if limit_left == 0 || partitions_left == 0 {
                break;
            }
        }
        Ok(rows)
    }
}
