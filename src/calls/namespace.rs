//! The wildcard POP's one call of its own: `log_namespace_queues_v2`
//! (004_log_pop), the queues of a namespace (and task), higher priority
//! first, with the POP's group registered on them. Each queue is then
//! popped with `log_pop_v2` as any POP ([`super::queues`]), an ephemeral
//! one from its owner's memory.

use super::declare::calls;
use super::queues::PopArgs;
use super::{Call, CallSpec};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

calls! {
    pub const NAMESPACE_QUEUES = "qw_namespace_queues_v2" {
        SELECT * FROM queen.log_namespace_queues_v2;
        args(
            namespace: TEXT,
            task: TEXT,
            group: TEXT,
            subscribe: TEXT,
            subscribe_at: TEXT::timestamptz,
            tenant: UUID,
        );
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct NamespaceQueue {
            queue_name: String = TEXT,
            priority: i32 = INT4,
            /// Its messages are in its owner's memory (030).
            ephemeral: bool = BOOL,
        }
    }
}

/// A wildcard POP's namespace and task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceArgs {
    pub namespace: String,
    pub task: Option<String>,
}

/// The queues of a namespace (and task), higher priority first; registers
/// the POP's group on those that have not seen it (004_log_pop).
pub struct NamespaceQueues<'a> {
    pub scope: &'a NamespaceArgs,
    pub args: &'a PopArgs,
    pub tenant: Uuid,
}

impl Call for NamespaceQueues<'_> {
    const SPEC: &'static CallSpec = &NAMESPACE_QUEUES;
    type Row = NamespaceQueue;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.scope.namespace,
            &self.scope.task,
            &self.args.group,
            &self.args.subscribe,
            &self.args.subscribe_at,
            &self.tenant,
        ]
    }
}
