//! The streams calls (seed files 007–009): the registry (create, drop,
//! pause, list, show), the runner's cycle steps, and the evaluation of a
//! stream's expressions (`stream_eval_v1`, run on the tenant's own role).

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const CREATE: CallSpec = CallSpec {
    name: "qw_stream_create_v1",
    sql: "SELECT queen.stream_create_v1(p_tenant => $1, p_name => $2, p_source => $3, p_group => $4, p_subscribe => $5, p_definition => $6, p_where => $7, p_key => $8, p_kind => $9, p_size_ms => $10, p_every_ms => $11, p_gap_ms => $12, p_event_time => $13, p_lateness_ms => $14, p_on_late => $15, p_grace_ms => $16, p_idle_ms => $17, p_agg_names => $18, p_agg_fns => $19, p_agg_args => $20, p_sink => $21, p_partition_by_key => $22, p_mode => $23, p_subscribe_at => $24::timestamptz, p_agg_inits => $25) AS status",
    params: &[
        Type::UUID,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
        Type::TEXT,
        Type::BOOL,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT_ARRAY,
    ],
    columns: &[column("status", Type::TEXT)],
};

/// A stream's registry row, as `CREATE STREAM` resolved it.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateStream {
    pub tenant: Uuid,
    pub name: String,
    pub source: String,
    pub group: String,
    pub subscribe: String,
    /// SUBSCRIBE FROM 'timestamp': the text, cast by PostgreSQL.
    pub subscribe_at: Option<String>,
    pub definition: String,
    pub where_expr: Option<String>,
    pub key_expr: Option<String>,
    pub kind: &'static str,
    pub size_ms: Option<i64>,
    pub every_ms: Option<i64>,
    pub gap_ms: Option<i64>,
    pub event_time: Option<String>,
    pub lateness_ms: i64,
    pub on_late: &'static str,
    pub grace_ms: i64,
    pub idle_ms: Option<i64>,
    pub agg_names: Vec<String>,
    pub agg_fns: Vec<String>,
    /// For `reduce` the function's name as written.
    pub agg_args: Vec<Option<String>>,
    /// `reduce`'s initial state expression (`None` for the others).
    pub agg_inits: Vec<Option<String>>,
    pub sink: String,
    pub partition_by_key: bool,
    /// `create`, `replace` or `reset`.
    pub mode: &'static str,
}

impl Call for CreateStream {
    const SPEC: &'static CallSpec = &CREATE;
    type Row = StatusRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.tenant,
            &self.name,
            &self.source,
            &self.group,
            &self.subscribe,
            &self.definition,
            &self.where_expr,
            &self.key_expr,
            &self.kind,
            &self.size_ms,
            &self.every_ms,
            &self.gap_ms,
            &self.event_time,
            &self.lateness_ms,
            &self.on_late,
            &self.grace_ms,
            &self.idle_ms,
            &self.agg_names,
            &self.agg_fns,
            &self.agg_args,
            &self.sink,
            &self.partition_by_key,
            &self.mode,
            &self.subscribe_at,
            &self.agg_inits,
        ]
    }
}

pub struct StatusRow {
    pub status: String,
}

impl FromRow for StatusRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(StatusRow {
            status: row.get::<Option<String>>("status")?.unwrap_or_default(),
        })
    }
}

/// The evaluation SELECT `stream_create_v1` will store, made the same way,
/// so the engine can try it on the tenant's role before anything is stored.
pub const EVAL_SQL: CallSpec = CallSpec {
    name: "qw_stream_eval_sql_v1",
    sql: "SELECT queen.stream_eval_sql_v1(p_where => $1, p_key => $2, p_event_time => $3, p_agg_fns => $4, p_agg_args => $5) AS eval_sql",
    params: &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
    ],
    columns: &[column("eval_sql", Type::TEXT)],
};

pub struct EvalSql<'a> {
    pub where_expr: &'a Option<String>,
    pub key_expr: &'a Option<String>,
    pub event_time: &'a Option<String>,
    pub agg_fns: &'a Vec<String>,
    pub agg_args: &'a Vec<Option<String>>,
}

impl Call for EvalSql<'_> {
    const SPEC: &'static CallSpec = &EVAL_SQL;
    type Row = EvalSqlRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            self.where_expr,
            self.key_expr,
            self.event_time,
            self.agg_fns,
            self.agg_args,
        ]
    }
}

pub struct EvalSqlRow {
    pub eval_sql: String,
}

impl FromRow for EvalSqlRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(EvalSqlRow {
            eval_sql: row.get::<Option<String>>("eval_sql")?.unwrap_or_default(),
        })
    }
}

/// The SELECT that asks PostgreSQL the types of some expressions (a
/// stream's min/max arguments), run on the tenant's role by `stream_eval_v1`.
pub const TYPES_SQL: CallSpec = CallSpec {
    name: "qw_stream_types_sql_v1",
    sql: "SELECT queen.stream_types_sql_v1(p_args => $1) AS eval_sql",
    params: &[Type::TEXT_ARRAY],
    columns: &[column("eval_sql", Type::TEXT)],
};

pub struct TypesSql<'a> {
    pub args: &'a Vec<String>,
}

impl Call for TypesSql<'_> {
    const SPEC: &'static CallSpec = &TYPES_SQL;
    type Row = EvalSqlRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![self.args]
    }
}

/// The reduce fold SELECT `stream_create_v1` will store (NULL without a
/// reduce), made the same way, so it is tried on the tenant's role first.
pub const REDUCE_SQL: CallSpec = CallSpec {
    name: "qw_stream_reduce_sql_v1",
    sql: "SELECT queen.stream_reduce_sql_v1(p_agg_fns => $1, p_agg_args => $2, p_agg_inits => $3) AS eval_sql",
    params: &[Type::TEXT_ARRAY, Type::TEXT_ARRAY, Type::TEXT_ARRAY],
    columns: &[column("eval_sql", Type::TEXT)],
};

pub struct ReduceSql<'a> {
    pub agg_fns: &'a Vec<String>,
    pub agg_args: &'a Vec<Option<String>>,
    pub agg_inits: &'a Vec<Option<String>>,
}

impl Call for ReduceSql<'_> {
    const SPEC: &'static CallSpec = &REDUCE_SQL;
    type Row = EvalSqlRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![self.agg_fns, self.agg_args, self.agg_inits]
    }
}

pub const EVAL: CallSpec = CallSpec {
    name: "qw_stream_eval_v1",
    sql: "SELECT ord, key, event_us, keep, vals FROM queen.stream_eval_v1(p_sql => $1, p_messages => $2::jsonb)",
    params: &[Type::TEXT, Type::TEXT],
    columns: &[
        column("ord", Type::INT8),
        column("key", Type::TEXT),
        column("event_us", Type::INT8),
        column("keep", Type::BOOL),
        column("vals", Type::TEXT_ARRAY),
    ],
};

/// One batch through a stream's expressions: `messages` is a JSON array of
/// `{ord, payload, partition, created_us, transaction_id}`.
pub struct Eval<'a> {
    pub sql: &'a str,
    pub messages: &'a str,
}

impl Call for Eval<'_> {
    const SPEC: &'static CallSpec = &EVAL;
    type Row = EvalRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.sql, &self.messages]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EvalRow {
    pub ord: i64,
    pub key: Option<String>,
    pub event_us: Option<i64>,
    pub keep: Option<bool>,
    pub vals: Vec<Option<String>>,
}

impl FromRow for EvalRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(EvalRow {
            ord: row.get::<Option<i64>>("ord")?.unwrap_or(-1),
            key: row.get("key")?,
            event_us: row.get("event_us")?,
            keep: row.get("keep")?,
            vals: row
                .get::<Option<Vec<Option<String>>>>("vals")?
                .unwrap_or_default(),
        })
    }
}

pub const DROP: CallSpec = CallSpec {
    name: "qw_stream_drop_v1",
    sql: "SELECT queen.stream_drop_v1(p_tenant => $1, p_name => $2) AS done",
    params: &[Type::UUID, Type::TEXT],
    columns: &[column("done", Type::BOOL)],
};

pub const SET_PAUSED: CallSpec = CallSpec {
    name: "qw_stream_set_paused_v1",
    sql: "SELECT queen.stream_set_paused_v1(p_tenant => $1, p_name => $2, p_paused => $3) AS done",
    params: &[Type::UUID, Type::TEXT, Type::BOOL],
    columns: &[column("done", Type::BOOL)],
};

pub struct DropStream<'a> {
    pub tenant: Uuid,
    pub name: &'a str,
}

impl Call for DropStream<'_> {
    const SPEC: &'static CallSpec = &DROP;
    type Row = DoneRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.tenant, &self.name]
    }
}

pub struct SetPaused<'a> {
    pub tenant: Uuid,
    pub name: &'a str,
    pub paused: bool,
}

impl Call for SetPaused<'_> {
    const SPEC: &'static CallSpec = &SET_PAUSED;
    type Row = DoneRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.tenant, &self.name, &self.paused]
    }
}

pub struct DoneRow {
    pub done: bool,
}

impl FromRow for DoneRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(DoneRow {
            done: row.get::<Option<bool>>("done")?.unwrap_or(false),
        })
    }
}

pub const LIST: CallSpec = CallSpec {
    name: "qw_stream_list_v1",
    sql: "SELECT name, source_queue, consumer_group, sink_queue, window_desc, paused, partitions, open_windows, messages, windows_emitted, late_dropped, lag, last_error, definition FROM queen.stream_list_v1(p_tenant => $1)",
    params: &[Type::UUID],
    columns: &[
        column("name", Type::TEXT),
        column("source_queue", Type::TEXT),
        column("consumer_group", Type::TEXT),
        column("sink_queue", Type::TEXT),
        column("window_desc", Type::TEXT),
        column("paused", Type::BOOL),
        column("partitions", Type::INT8),
        column("open_windows", Type::INT8),
        column("messages", Type::INT8),
        column("windows_emitted", Type::INT8),
        column("late_dropped", Type::INT8),
        column("lag", Type::INT8),
        column("last_error", Type::TEXT),
        column("definition", Type::TEXT),
    ],
};

pub const SHOW: CallSpec = CallSpec {
    name: "qw_stream_show_v1",
    sql: "SELECT partition_name, key, window_start, window_end, state::text AS state, late, stream_time, lag FROM queen.stream_show_v1(p_tenant => $1, p_name => $2)",
    params: &[Type::UUID, Type::TEXT],
    columns: &[
        column("partition_name", Type::TEXT),
        column("key", Type::TEXT),
        column("window_start", Type::TIMESTAMPTZ),
        column("window_end", Type::TIMESTAMPTZ),
        column("state", Type::TEXT),
        column("late", Type::BOOL),
        column("stream_time", Type::TIMESTAMPTZ),
        column("lag", Type::INT8),
    ],
};

/// The raw cells of SHOW STREAMS / SHOW STREAM, in the spec's column order.
pub struct ListStreams {
    pub tenant: Uuid,
}

impl Call for ListStreams {
    const SPEC: &'static CallSpec = &LIST;
    type Row = ListRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.tenant]
    }
}

/// One stream, as SHOW STREAMS lists it.
pub struct ListRow {
    pub texts: [Option<String>; 5],
    pub paused: Option<bool>,
    pub counts: [Option<i64>; 6],
    pub last_error: Option<String>,
    pub definition: Option<String>,
}

impl FromRow for ListRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(ListRow {
            texts: [
                row.get("name")?,
                row.get("source_queue")?,
                row.get("consumer_group")?,
                row.get("sink_queue")?,
                row.get("window_desc")?,
            ],
            paused: row.get("paused")?,
            counts: [
                row.get("partitions")?,
                row.get("open_windows")?,
                row.get("messages")?,
                row.get("windows_emitted")?,
                row.get("late_dropped")?,
                row.get("lag")?,
            ],
            last_error: row.get("last_error")?,
            definition: row.get("definition")?,
        })
    }
}

pub struct ShowStream<'a> {
    pub tenant: Uuid,
    pub name: &'a str,
}

impl Call for ShowStream<'_> {
    const SPEC: &'static CallSpec = &SHOW;
    type Row = ShowRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.tenant, &self.name]
    }
}

/// One open window, as SHOW STREAM name lists it.
pub struct ShowRow {
    pub partition: Option<String>,
    pub key: Option<String>,
    pub window_start: Option<std::time::SystemTime>,
    pub window_end: Option<std::time::SystemTime>,
    pub state: Option<String>,
    pub late: Option<bool>,
    pub stream_time: Option<std::time::SystemTime>,
    pub lag: Option<i64>,
}

impl FromRow for ShowRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(ShowRow {
            partition: row.get("partition_name")?,
            key: row.get("key")?,
            window_start: row.get("window_start")?,
            window_end: row.get("window_end")?,
            state: row.get("state")?,
            late: row.get("late")?,
            stream_time: row.get("stream_time")?,
            lag: row.get("lag")?,
        })
    }
}
