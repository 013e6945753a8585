//! POP as its calls' values (`crate::calls::queues::PopArgs`, and a
//! wildcard POP's `crate::calls::namespace::NamespaceArgs`).

use crate::calls::namespace::NamespaceArgs;
use crate::calls::queues::{PopArgs, QUEUE_MODE_GROUP};
use crate::protocol::SqlError;
use crate::rewrite::bind::Params;
use crate::rewrite::dialect::pop::{Pop as PopStatement, PopFrom, SubscribeFrom};

/// A POP statement's call values. A wildcard POP's `queue` is empty: the
/// engine fills in each queue of the namespace ([`namespace_args`]).
pub fn pop_args(stmt: &PopStatement, params: &Params<'_>) -> Result<PopArgs, SqlError> {
    let (subscribe, subscribe_at) = subscription(stmt.subscribe_from.as_ref(), params)?;
    Ok(PopArgs {
        queue: match &stmt.from {
            PopFrom::Queue(queue) => params.name(queue, "queue")?,
            PopFrom::Namespace { .. } => String::new(),
        },
        partition: stmt
            .partition
            .as_ref()
            .map(|p| params.name(p, "partition"))
            .transpose()?,
        group: match &stmt.group {
            Some(g) => params.name(g, "group")?,
            None => QUEUE_MODE_GROUP.to_string(),
        },
        limit: params.count(&stmt.limit, "LIMIT")? as i32,
        max_partitions: params.count(&stmt.partitions, "PARTITIONS")? as i32,
        lease_ms: stmt
            .lease
            .as_ref()
            .map(|l| params.duration(l, "LEASE"))
            .transpose()?
            .map(|d| d.as_millis().clamp(1, i64::MAX as u128) as i64),
        subscribe,
        subscribe_at,
        auto_ack: stmt.auto_ack,
        wait: stmt
            .wait
            .as_ref()
            .map(|w| params.duration(w, "WAIT"))
            .transpose()?,
    })
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

/// Where a new group starts reading, as the procedures take it: the mode
/// and, for a timestamp, its text (cast by PostgreSQL, so it reads it as
/// it would). No SUBSCRIBE FROM is the beginning.
pub(super) fn subscription(
    from: Option<&SubscribeFrom>,
    params: &Params<'_>,
) -> Result<(&'static str, Option<String>), SqlError> {
    Ok(match from {
        None | Some(SubscribeFrom::Beginning) => ("beginning", None),
        Some(SubscribeFrom::Now) => ("now", None),
        Some(SubscribeFrom::Timestamp(ts)) => {
            ("timestamp", Some(params.text(ts, "SUBSCRIBE FROM")?))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::queues::{Pop, PopCandidates, POP, POP_CANDIDATES};
    use crate::calls::Call;
    use crate::rewrite::dialect::{self, Statement};
    use std::time::Duration;
    use uuid::Uuid;

    fn pop(sql: &str, params: &[Option<String>]) -> Result<PopArgs, SqlError> {
        let Some(Ok(Statement::Pop(p))) = dialect::parse(sql) else {
            panic!("{sql}");
        };
        pop_args(&p, &Params(params))
    }

    #[test]
    fn a_bare_pop_takes_the_procedures_defaults() {
        let args = pop("POP FROM q", &[]).unwrap();
        assert_eq!(args.queue, "q");
        assert_eq!(args.partition, None);
        assert_eq!(args.group, QUEUE_MODE_GROUP);
        assert_eq!((args.limit, args.max_partitions), (1, 1));
        assert_eq!(args.subscribe, "beginning");
        assert_eq!((args.lease_ms, args.wait), (None, None));
        let call = Pop {
            args: &args,
            tenant: Uuid::nil(),
        };
        assert_eq!(call.params().len(), POP.params.len());
        let call = PopCandidates {
            args: &args,
            tenant: Uuid::nil(),
            candidates: None,
            partition_limit: None,
            create: true,
        };
        assert_eq!(call.params().len(), POP_CANDIDATES.params.len());
    }

    #[test]
    fn a_pop_binds_its_parameters() {
        let params = [Some("jobs".to_string()), Some("250ms".to_string())];
        let args = pop(
            "POP FROM $1 GROUP g LIMIT 5 LEASE $2 WAIT '2s' SUBSCRIBE FROM NOW",
            &params,
        )
        .unwrap();
        assert_eq!(args.queue, "jobs");
        assert_eq!(args.group, "g");
        assert_eq!(args.limit, 5);
        assert_eq!(args.lease_ms, Some(250));
        assert_eq!(args.wait, Some(Duration::from_secs(2)));
        assert_eq!(args.subscribe, "now");
        assert_eq!(pop("POP FROM $1", &[None]).unwrap_err().code(), "22004");
    }
}
