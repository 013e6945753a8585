//! Streams (docs/streams.md): the statements (`CREATE [OR REPLACE] STREAM`,
//! `DROP STREAM`, `ALTER STREAM … PAUSE | RESUME`, `SHOW STREAMS`,
//! `SHOW STREAM`), the runner every queenwire runs ([`runner`]), the window
//! rules ([`window`]) and the aggregates ([`aggregate`]).
//!
//! Security: a stream's expressions are the user's SQL. They are never
//! executed by a SECURITY DEFINER function nor on the engine's own
//! connections when there is a users file: [`Evaluators`] hands out the
//! pool of the tenant's own backend role (`queen_t_<tenant>_ro`, else
//! `queen_t_<tenant>`, the roles plain SQL runs as), and both the CREATE's
//! validation and every cycle's evaluation call `queen.stream_eval_v1`
//! (SECURITY INVOKER) there. Logged in as that role, the connection cannot
//! reach any other (`SET ROLE` is limited by membership), so an expression
//! can do exactly what the user's own plain SQL could. A tenant with no
//! such role (every user of it has passthrough `none`) cannot create a
//! stream (`42501`). Without a users file (embedded, loopback, operator
//! only) there are no tenant roles and the engine's pool evaluates.

pub mod aggregate;
mod evaluate;
mod resolve;
pub mod runner;
pub mod window;

pub use runner::run;

use super::values::{Cell, Params};
use super::ExecError;
use crate::backend::call::{CallEnd, Calls};
use crate::backend::{pool, BackendError, Pool};
use crate::calls::streams::{
    CreateStream as CreateCall, DropStream, Eval, EvalRow, EvalSql, ListStreams, ReduceSql,
    SetPaused, ShowStream, TypesSql,
};
use crate::protocol::{SqlError, SqlState};
use crate::rewrite::dialect::pop::SubscribeFrom;
use crate::rewrite::dialect::stream::{AggFn, CreateStream, Window};
use crate::rewrite::dialect::validate_name;
use std::sync::OnceLock;
use std::time::Duration;
use uuid::Uuid;

type PickPool = Box<dyn Fn(Uuid) -> Option<Pool> + Send + Sync>;

/// Where a tenant's stream expressions are evaluated (see the module doc).
#[derive(Default)]
pub struct Evaluators {
    pick: OnceLock<PickPool>,
}

impl Evaluators {
    /// Set once, by the server, when the pools exist.
    pub fn set(&self, pick: PickPool) {
        let _ = self.pick.set(pick);
    }

    /// The pool whose connections evaluate `tenant`'s expressions.
    pub fn pool(&self, tenant: Uuid) -> Option<Pool> {
        self.pick.get().and_then(|pick| pick(tenant))
    }
}

fn invalid(message: String) -> ExecError {
    ExecError::Refused(SqlError::error(SqlState::INVALID_PARAMETER_VALUE, message))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A positive duration of at least a millisecond.
fn window_ms(
    params: &Params<'_>,
    v: &crate::rewrite::dialect::Value<Duration>,
    what: &str,
) -> Result<i64, ExecError> {
    let ms = millis(params.duration(v, what)?);
    if ms < 1 {
        return Err(invalid(format!("{what} must be at least 1 ms")));
    }
    Ok(ms)
}

/// The registry call of a CREATE STREAM, its values bound and checked.
fn resolve(
    stmt: &CreateStream,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<CreateCall, ExecError> {
    let name = params.name(&stmt.name, "stream")?;
    let source = params.name(&stmt.source, "queue")?;
    let sink = params.name(&stmt.sink, "queue")?;
    let group = match &stmt.group {
        Some(g) => params.name(g, "group")?,
        None => {
            let g = format!("stream:{name}");
            validate_name("group", &g).map_err(crate::rewrite::bind::parse_error)?;
            g
        }
    };
    if sink == source {
        return Err(invalid(
            "a stream's sink cannot be its source queue (it would read its own windows)".into(),
        ));
    }
    let (subscribe, subscribe_at) = match &stmt.subscribe {
        None | Some(SubscribeFrom::Beginning) => ("beginning".to_string(), None),
        Some(SubscribeFrom::Now) => ("now".to_string(), None),
        Some(SubscribeFrom::Timestamp(ts)) => (
            "timestamp".to_string(),
            Some(params.text(ts, "SUBSCRIBE FROM")?),
        ),
    };
    let (kind, size_ms, every_ms, gap_ms) = match &stmt.window {
        Window::Tumbling(size) => (
            "tumbling",
            Some(window_ms(params, size, "TUMBLING")?),
            None,
            None,
        ),
        Window::Sliding { size, every } => {
            let size = window_ms(params, size, "SLIDING")?;
            let every = window_ms(params, every, "EVERY")?;
            if every > size {
                return Err(invalid(
                    "EVERY cannot be longer than the SLIDING window".into(),
                ));
            }
            ("sliding", Some(size), Some(every), None)
        }
        Window::Session { gap } => ("session", None, None, Some(window_ms(params, gap, "GAP")?)),
    };
    let opt_ms = |v: &Option<crate::rewrite::dialect::Value<Duration>>,
                  what|
     -> Result<Option<i64>, ExecError> {
        Ok(match v {
            Some(v) => Some(millis(params.duration(v, what)?)),
            None => None,
        })
    };
    let lateness_ms = match &stmt.event_time {
        Some(et) => opt_ms(&et.lateness, "ALLOWED LATENESS")?.unwrap_or(0),
        None => 0,
    };
    if matches!(stmt.window, Window::Session { .. })
        && stmt.aggregates.iter().any(|a| a.func == AggFn::Reduce)
    {
        // Sessions merge when an event bridges two, and a reduce has no
        // merge: its state cannot be rebuilt without the payloads.
        return Err(ExecError::Refused(SqlError {
            hint: Some(
                "use TUMBLING or SLIDING windows, or fold the emitted sessions downstream".into(),
            ),
            ..SqlError::error(
                SqlState::FEATURE_NOT_SUPPORTED,
                "reduce cannot be used with SESSION windows (sessions merge, and a reduce has no merge function)",
            )
        }));
    }
    let idle_ms = opt_ms(&stmt.idle_flush, "IDLE FLUSH")?;
    if idle_ms == Some(0) {
        return Err(invalid("IDLE FLUSH must be at least 1 ms".into()));
    }
    let mut call = CreateCall {
        tenant,
        name,
        source,
        group,
        subscribe,
        subscribe_at,
        definition: String::new(),
        where_expr: stmt.where_expr.clone(),
        key_expr: stmt.key_expr.clone(),
        kind,
        size_ms,
        every_ms,
        gap_ms,
        event_time: stmt.event_time.as_ref().map(|e| e.expr.clone()),
        lateness_ms,
        on_late: if stmt.event_time.as_ref().is_some_and(|e| e.include_late) {
            "include"
        } else {
            "drop"
        },
        grace_ms: opt_ms(&stmt.grace, "GRACE")?.unwrap_or(0),
        idle_ms,
        agg_names: stmt.aggregates.iter().map(|a| a.alias.clone()).collect(),
        agg_fns: stmt
            .aggregates
            .iter()
            .map(|a| a.func.name().to_string())
            .collect(),
        agg_args: stmt.aggregates.iter().map(|a| a.arg.clone()).collect(),
        agg_inits: stmt.aggregates.iter().map(|a| a.init.clone()).collect(),
        sink,
        partition_by_key: stmt.partition_by_key,
        mode: match (stmt.or_replace, stmt.reset) {
            (_, true) => "reset",
            (true, false) => "replace",
            (false, false) => "create",
        },
    };
    call.definition = definition(&call);
    Ok(call)
}

/// The normalised definition the registry hashes: every bound value, in
/// one order, durations in milliseconds.
fn definition(c: &CreateCall) -> String {
    let aggs: Vec<String> = c
        .agg_fns
        .iter()
        .zip(&c.agg_args)
        .zip(&c.agg_inits)
        .zip(&c.agg_names)
        .map(|(((f, a), i), n)| {
            let a = a.as_deref().unwrap_or("*");
            match i {
                Some(init) => format!("{f}({a}, {init}) AS {n:?}"),
                None => format!("{f}({a}) AS {n:?}"),
            }
        })
        .collect();
    format!(
        "FROM {:?} GROUP {:?} SUBSCRIBE FROM {} {:?} WHERE {:?} KEY BY {:?} WINDOW {} {:?}/{:?}/{:?} ms EVENT TIME {:?} ALLOWED LATENESS {} ms ON LATE {} GRACE {} ms IDLE FLUSH {:?} ms AGGREGATE ({}) INTO {:?}{}",
        c.source,
        c.group,
        c.subscribe,
        c.subscribe_at,
        c.where_expr,
        c.key_expr,
        c.kind,
        c.size_ms,
        c.every_ms,
        c.gap_ms,
        c.event_time,
        c.lateness_ms,
        c.on_late,
        c.grace_ms,
        c.idle_ms,
        aggs.join(", "),
        c.sink,
        if c.partition_by_key { " PARTITION BY KEY" } else { "" }
    )
}

/// CREATE [OR REPLACE] STREAM: the expressions are tried by PostgreSQL on
/// the tenant's role first (its own error, e.g. 42703, if one is wrong),
/// then the registry row is written on the session's connection.
pub async fn create(
    conn: &mut Calls<'_>,
    stmt: &CreateStream,
    params: &Params<'_>,
    evaluators: &Evaluators,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let mut call = resolve(stmt, params, tenant)?;
    ordered_min_max(conn, evaluators, &mut call).await?;
    let eval_sql = conn
        .run(&EvalSql {
            where_expr: &call.where_expr,
            key_expr: &call.key_expr,
            event_time: &call.event_time,
            agg_fns: &call.agg_fns,
            agg_args: &call.agg_args,
        })
        .await?
        .into_iter()
        .next()
        .map(|r| r.eval_sql)
        .unwrap_or_default();
    on_tenant_role(evaluators, tenant, &eval_sql).await?;
    let reduce_sql = conn
        .run(&ReduceSql {
            agg_fns: &call.agg_fns,
            agg_args: &call.agg_args,
            agg_inits: &call.agg_inits,
        })
        .await?
        .into_iter()
        .next()
        .map(|r| r.eval_sql);
    if let Some(sql) = reduce_sql.filter(|s| !s.is_empty()) {
        // Planned (and its functions' EXECUTE checked) on the tenant's
        // role: a missing function, another signature, a result that is
        // not jsonb or a bad initial state is PostgreSQL's own error.
        on_tenant_role(evaluators, tenant, &sql).await?;
    }
    conn.run(&call).await?;
    Ok(Vec::new())
}

/// min/max follow their argument's type, which PostgreSQL tells (on the
/// tenant's role, evaluating nothing): text types (category S) are
/// compared as text in the database's collation, date/time types
/// (category D) as timestamptz, anything else as numeric, as before. The
/// definition (and its hash) keeps the names as written: it is made before.
async fn ordered_min_max(
    conn: &mut Calls<'_>,
    evaluators: &Evaluators,
    call: &mut CreateCall,
) -> Result<(), ExecError> {
    let at: Vec<usize> = (0..call.agg_fns.len())
        .filter(|&i| {
            matches!(call.agg_fns[i].as_str(), "min" | "max") && call.agg_args[i].is_some()
        })
        .collect();
    if at.is_empty() {
        return Ok(());
    }
    let args: Vec<String> = at
        .iter()
        .map(|&i| call.agg_args[i].clone().unwrap_or_default())
        .collect();
    let sql = conn
        .run(&TypesSql { args: &args })
        .await?
        .into_iter()
        .next()
        .map(|r| r.eval_sql)
        .unwrap_or_default();
    let rows = on_tenant_role(evaluators, call.tenant, &sql).await?;
    let types = rows.into_iter().next().map(|r| r.vals).unwrap_or_default();
    for (&i, ty) in at.iter().zip(types) {
        let class = match ty.as_deref().and_then(|t| t.split_once(':')) {
            Some(("S", _)) => "text",
            Some(("D", _)) => "timestamptz",
            _ => continue,
        };
        call.agg_fns[i] = format!("{}_{class}", call.agg_fns[i]);
    }
    Ok(())
}

/// Runs one of a stream's SELECTs over no message on the tenant's role
/// (`stream_eval_v1`): PostgreSQL plans it, so a wrong expression or
/// function is refused with its own error.
async fn on_tenant_role(
    evaluators: &Evaluators,
    tenant: Uuid,
    eval_sql: &str,
) -> Result<Vec<EvalRow>, ExecError> {
    let Some(eval_pool) = evaluators.pool(tenant) else {
        return Err(ExecError::Refused(SqlError::error(
            SqlState::INSUFFICIENT_PRIVILEGE,
            "a stream's expressions run with the tenant's own backend role, and this tenant has none (its users have passthrough none)",
        )));
    };
    let mut conn = pool::checkout(&eval_pool).await.map_err(ExecError::Lost)?;
    let tried = conn
        .run(
            &Eval {
                sql: eval_sql,
                messages: "[]",
            },
            CallEnd::Sync,
        )
        .await;
    pool::release(conn);
    match tried {
        Ok(rows) => Ok(rows),
        // PostgreSQL's own error, raised on the session's connection too.
        Err(BackendError::Server(e)) => Err(ExecError::Refused(e)),
        Err(e) => Err(ExecError::Lost(e)),
    }
}

pub async fn drop(
    conn: &mut Calls<'_>,
    name: &str,
    if_exists: bool,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.run(&DropStream { tenant, name }).await?;
    if !rows.first().is_some_and(|r| r.done) && !if_exists {
        return Err(missing(name));
    }
    Ok(Vec::new())
}

fn missing(name: &str) -> ExecError {
    ExecError::Refused(SqlError::error(
        SqlState::UNDEFINED_OBJECT,
        format!("stream \"{name}\" does not exist"),
    ))
}

pub async fn set_paused(
    conn: &mut Calls<'_>,
    name: &str,
    paused: bool,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn
        .run(&SetPaused {
            tenant,
            name,
            paused,
        })
        .await?;
    if !rows.first().is_some_and(|r| r.done) {
        return Err(missing(name));
    }
    Ok(Vec::new())
}

pub async fn list(conn: &mut Calls<'_>, tenant: Uuid) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.run(&ListStreams { tenant }).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let mut cells: Vec<Cell> = r.texts.into_iter().map(Cell::opt_text).collect();
            cells.push(r.paused.map_or(Cell::Null, Cell::Bool));
            cells.extend(
                r.counts
                    .into_iter()
                    .map(|c| c.map_or(Cell::Null, Cell::Int8)),
            );
            cells.push(Cell::opt_text(r.last_error));
            cells.push(Cell::opt_text(r.definition));
            cells
        })
        .collect())
}

pub async fn show(
    conn: &mut Calls<'_>,
    name: &str,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.run(&ShowStream { tenant, name }).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            vec![
                Cell::opt_text(r.partition),
                Cell::opt_text(r.key),
                Cell::timestamp(r.window_start),
                Cell::timestamp(r.window_end),
                r.state.map_or(Cell::Null, Cell::Jsonb),
                r.late.map_or(Cell::Null, Cell::Bool),
                Cell::timestamp(r.stream_time),
                r.lag.map_or(Cell::Null, Cell::Int8),
            ]
        })
        .collect())
}
