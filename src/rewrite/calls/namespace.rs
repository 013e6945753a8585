//! The wildcard POP's one call of its own: `log_namespace_queues_v2`
//! (004_log_pop), the queues of a namespace (and task), higher priority
//! first, with the POP's group registered on them. Each queue is then
//! popped with `log_pop_v2` as any POP ([`super::queues`]), an ephemeral
//! one from its owner's memory.

use super::queues::PopArgs;
use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use crate::protocol::SqlError;
use crate::rewrite::bind::Params;
use crate::rewrite::dialect::pop::{Pop as PopStatement, PopFrom};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const NAMESPACE_QUEUES: CallSpec = CallSpec {
    name: "qw_namespace_queues_v2",
    sql: "SELECT queue_name, priority, ephemeral FROM queen.log_namespace_queues_v2(p_namespace => $1, p_task => $2, p_group => $3, p_subscribe => $4, p_subscribe_at => $5::timestamptz, p_tenant => $6)",
    params: &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::UUID,
    ],
    columns: &[
        column("queue_name", Type::TEXT),
        column("priority", Type::INT4),
        column("ephemeral", Type::BOOL),
    ],
};

/// A wildcard POP's namespace and task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceArgs {
    pub namespace: String,
    pub task: Option<String>,
}

/// The namespace and task of `POP FROM NAMESPACE ns [TASK t]`; `None` for
/// a POP of one queue.
pub fn namespace_args(
    stmt: &PopStatement,
    params: &Params<'_>,
) -> Result<Option<NamespaceArgs>, SqlError> {
    let PopFrom::Namespace { namespace, task } = &stmt.from else {
        return Ok(None);
    };
    Ok(Some(NamespaceArgs {
        namespace: params.name(namespace, "namespace")?,
        task: task.as_ref().map(|t| params.name(t, "task")).transpose()?,
    }))
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceQueue {
    pub queue_name: String,
    pub priority: i32,
    /// Its messages are in its owner's memory (030).
    pub ephemeral: bool,
}

impl FromRow for NamespaceQueue {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(NamespaceQueue {
            queue_name: row.get("queue_name")?,
            priority: row.get("priority")?,
            ephemeral: row.get("ephemeral")?,
        })
    }
}
