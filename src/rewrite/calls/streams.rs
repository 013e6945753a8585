//! The streams calls (seed files 007–009): the registry (create, drop,
//! pause, list, show), the runner's cycle steps, and the evaluation of a
//! stream's expressions (`stream_eval_v1`, run on the tenant's own role).

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const CREATE: CallSpec = CallSpec {
    name: "qw_stream_create_v1",
    sql: "SELECT queen.stream_create_v1(p_tenant => $1, p_name => $2, p_source => $3, p_group => $4, p_subscribe => $5, p_definition => $6, p_where => $7, p_key => $8, p_kind => $9, p_size_ms => $10, p_every_ms => $11, p_gap_ms => $12, p_event_time => $13, p_lateness_ms => $14, p_on_late => $15, p_grace_ms => $16, p_idle_ms => $17, p_agg_names => $18, p_agg_fns => $19, p_agg_args => $20, p_sink => $21, p_partition_by_key => $22, p_mode => $23) AS status",
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
    pub agg_args: Vec<Option<String>>,
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

pub const ACTIVE: CallSpec = CallSpec {
    name: "qw_stream_active_v1",
    sql: "SELECT id, tenant_id, name, source_queue, consumer_group, subscribe, window_kind, window_size_ms, window_every_ms, session_gap_ms, event_time, allowed_lateness_ms, on_late, grace_ms, idle_flush_ms, agg_names, agg_fns, sink_queue, partition_by_key, eval_sql, generation FROM queen.stream_active_v1()",
    params: &[],
    columns: &[
        column("id", Type::INT8),
        column("tenant_id", Type::UUID),
        column("name", Type::TEXT),
        column("source_queue", Type::TEXT),
        column("consumer_group", Type::TEXT),
        column("subscribe", Type::TEXT),
        column("window_kind", Type::TEXT),
        column("window_size_ms", Type::INT8),
        column("window_every_ms", Type::INT8),
        column("session_gap_ms", Type::INT8),
        column("event_time", Type::BOOL),
        column("allowed_lateness_ms", Type::INT8),
        column("on_late", Type::TEXT),
        column("grace_ms", Type::INT8),
        column("idle_flush_ms", Type::INT8),
        column("agg_names", Type::TEXT_ARRAY),
        column("agg_fns", Type::TEXT_ARRAY),
        column("sink_queue", Type::TEXT),
        column("partition_by_key", Type::BOOL),
        column("eval_sql", Type::TEXT),
        column("generation", Type::INT4),
    ],
};

pub struct Active;

impl Call for Active {
    const SPEC: &'static CallSpec = &ACTIVE;
    type Row = ActiveRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

/// A running stream's definition, as the runner needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveRow {
    pub id: i64,
    pub tenant: Uuid,
    pub name: String,
    pub source: String,
    pub group: String,
    pub subscribe: String,
    pub kind: String,
    pub size_ms: Option<i64>,
    pub every_ms: Option<i64>,
    pub gap_ms: Option<i64>,
    pub event_time: bool,
    pub lateness_ms: i64,
    pub on_late: String,
    pub grace_ms: i64,
    pub idle_ms: Option<i64>,
    pub agg_names: Vec<String>,
    pub agg_fns: Vec<String>,
    pub sink: String,
    pub partition_by_key: bool,
    pub eval_sql: String,
    pub generation: i32,
}

impl FromRow for ActiveRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        let text = |n: &str| -> Result<String, DecodeError> {
            Ok(row.get::<Option<String>>(n)?.unwrap_or_default())
        };
        Ok(ActiveRow {
            id: row.get("id")?,
            tenant: row.get("tenant_id")?,
            name: text("name")?,
            source: text("source_queue")?,
            group: text("consumer_group")?,
            subscribe: text("subscribe")?,
            kind: text("window_kind")?,
            size_ms: row.get("window_size_ms")?,
            every_ms: row.get("window_every_ms")?,
            gap_ms: row.get("session_gap_ms")?,
            event_time: row.get::<Option<bool>>("event_time")?.unwrap_or(false),
            lateness_ms: row.get::<Option<i64>>("allowed_lateness_ms")?.unwrap_or(0),
            on_late: text("on_late")?,
            grace_ms: row.get::<Option<i64>>("grace_ms")?.unwrap_or(0),
            idle_ms: row.get("idle_flush_ms")?,
            agg_names: row
                .get::<Option<Vec<String>>>("agg_names")?
                .unwrap_or_default(),
            agg_fns: row
                .get::<Option<Vec<String>>>("agg_fns")?
                .unwrap_or_default(),
            sink: text("sink_queue")?,
            partition_by_key: row
                .get::<Option<bool>>("partition_by_key")?
                .unwrap_or(false),
            eval_sql: text("eval_sql")?,
            generation: row.get::<Option<i32>>("generation")?.unwrap_or(0),
        })
    }
}

pub const CYCLE_BEGIN: CallSpec = CallSpec {
    name: "qw_stream_cycle_begin_v1",
    sql: "SELECT stream_time_us, max_event_us, last_message_at FROM queen.stream_cycle_begin_v1(p_stream_id => $1, p_generation => $2, p_partition_id => $3, p_partition_name => $4, p_skip_locked => $5)",
    params: &[Type::INT8, Type::INT4, Type::INT8, Type::TEXT, Type::BOOL],
    columns: &[
        column("stream_time_us", Type::INT8),
        column("max_event_us", Type::INT8),
        column("last_message_at", Type::TIMESTAMPTZ),
    ],
};

pub struct CycleBegin<'a> {
    pub stream_id: i64,
    pub generation: i32,
    pub partition_id: i64,
    pub partition_name: &'a str,
    pub skip_locked: bool,
}

impl Call for CycleBegin<'_> {
    const SPEC: &'static CallSpec = &CYCLE_BEGIN;
    type Row = ProgressRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.stream_id,
            &self.generation,
            &self.partition_id,
            &self.partition_name,
            &self.skip_locked,
        ]
    }
}

pub struct ProgressRow {
    pub stream_time_us: Option<i64>,
    pub max_event_us: Option<i64>,
}

impl FromRow for ProgressRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(ProgressRow {
            stream_time_us: row.get("stream_time_us")?,
            max_event_us: row.get("max_event_us")?,
        })
    }
}

pub const STATE_LOAD: CallSpec = CallSpec {
    name: "qw_stream_state_load_v1",
    sql: "SELECT start_us, end_us, key, vals, late FROM queen.stream_state_load_v1(p_stream_id => $1, p_partition_id => $2)",
    params: &[Type::INT8, Type::INT8],
    columns: &[
        column("start_us", Type::INT8),
        column("end_us", Type::INT8),
        column("key", Type::TEXT),
        column("vals", Type::TEXT_ARRAY),
        column("late", Type::BOOL),
    ],
};

pub struct StateLoad {
    pub stream_id: i64,
    pub partition_id: i64,
}

impl Call for StateLoad {
    const SPEC: &'static CallSpec = &STATE_LOAD;
    type Row = StateRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.stream_id, &self.partition_id]
    }
}

pub struct StateRow {
    pub start_us: i64,
    pub end_us: i64,
    pub key: String,
    pub vals: Vec<Option<String>>,
    pub late: bool,
}

impl FromRow for StateRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(StateRow {
            start_us: row.get::<Option<i64>>("start_us")?.unwrap_or(0),
            end_us: row.get::<Option<i64>>("end_us")?.unwrap_or(0),
            key: row.get::<Option<String>>("key")?.unwrap_or_default(),
            vals: row
                .get::<Option<Vec<Option<String>>>>("vals")?
                .unwrap_or_default(),
            late: row.get::<Option<bool>>("late")?.unwrap_or(false),
        })
    }
}

pub const CYCLE_SAVE: CallSpec = CallSpec {
    name: "qw_stream_cycle_save_v1",
    sql: "SELECT queen.stream_cycle_save_v1(p_stream_id => $1, p_partition_id => $2, p_stream_time_us => $3, p_max_event_us => $4, p_saw_messages => $5, p_messages => $6, p_late_dropped => $7, p_emitted => $8, p_del_starts => $9, p_del_keys => $10, p_up_starts => $11, p_up_ends => $12, p_up_keys => $13, p_up_states => $14, p_up_late => $15) AS saved",
    params: &[
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::BOOL,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
        Type::BOOL_ARRAY,
    ],
    columns: &[column("saved", Type::INT4)],
};

#[derive(Debug, Default)]
pub struct CycleSave {
    pub stream_id: i64,
    pub partition_id: i64,
    pub stream_time_us: Option<i64>,
    pub max_event_us: Option<i64>,
    pub saw_messages: bool,
    pub messages: i64,
    pub late_dropped: i64,
    pub emitted: i64,
    pub del_starts: Vec<i64>,
    pub del_keys: Vec<String>,
    pub up_starts: Vec<i64>,
    pub up_ends: Vec<i64>,
    pub up_keys: Vec<String>,
    pub up_states: Vec<String>,
    pub up_late: Vec<bool>,
}

impl Call for CycleSave {
    const SPEC: &'static CallSpec = &CYCLE_SAVE;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.stream_id,
            &self.partition_id,
            &self.stream_time_us,
            &self.max_event_us,
            &self.saw_messages,
            &self.messages,
            &self.late_dropped,
            &self.emitted,
            &self.del_starts,
            &self.del_keys,
            &self.up_starts,
            &self.up_ends,
            &self.up_keys,
            &self.up_states,
            &self.up_late,
        ]
    }
}

pub const IDLE_PARTITIONS: CallSpec = CallSpec {
    name: "qw_stream_idle_partitions_v1",
    sql: "SELECT partition_id, partition_name, idle_us FROM queen.stream_idle_partitions_v1(p_stream_id => $1, p_idle_ms => $2)",
    params: &[Type::INT8, Type::INT8],
    columns: &[
        column("partition_id", Type::INT8),
        column("partition_name", Type::TEXT),
        column("idle_us", Type::INT8),
    ],
};

pub struct IdlePartitions {
    pub stream_id: i64,
    pub idle_ms: i64,
}

impl Call for IdlePartitions {
    const SPEC: &'static CallSpec = &IDLE_PARTITIONS;
    type Row = IdleRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.stream_id, &self.idle_ms]
    }
}

pub struct IdleRow {
    pub partition_id: i64,
    pub partition_name: String,
    pub idle_us: i64,
}

impl FromRow for IdleRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(IdleRow {
            partition_id: row.get("partition_id")?,
            partition_name: row
                .get::<Option<String>>("partition_name")?
                .unwrap_or_default(),
            idle_us: row.get::<Option<i64>>("idle_us")?.unwrap_or(0),
        })
    }
}

pub const NOTE_ERROR: CallSpec = CallSpec {
    name: "qw_stream_note_error_v1",
    sql: "SELECT queen.stream_note_error_v1(p_stream_id => $1, p_error => $2) AS noted",
    params: &[Type::INT8, Type::TEXT],
    columns: &[column("noted", Type::INT4)],
};

pub struct NoteError<'a> {
    pub stream_id: i64,
    pub error: &'a str,
}

impl Call for NoteError<'_> {
    const SPEC: &'static CallSpec = &NOTE_ERROR;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.stream_id, &self.error]
    }
}
