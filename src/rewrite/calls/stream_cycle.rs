//! The stream runner's calls (seed 007): the active streams, and the
//! steps of one cycle (begin, load, save), the idle flush's work list and
//! the error note. The registry and evaluation calls are in `streams`.

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const ACTIVE: CallSpec = CallSpec {
    name: "qw_stream_active_v1",
    sql: "SELECT id, tenant_id, name, source_queue, consumer_group, subscribe, subscribe_at, window_kind, window_size_ms, window_every_ms, session_gap_ms, event_time, allowed_lateness_ms, on_late, grace_ms, idle_flush_ms, agg_names, agg_fns, sink_queue, partition_by_key, eval_sql, generation, reduce_sql FROM queen.stream_active_v1()",
    params: &[],
    columns: &[
        column("id", Type::INT8),
        column("tenant_id", Type::UUID),
        column("name", Type::TEXT),
        column("source_queue", Type::TEXT),
        column("consumer_group", Type::TEXT),
        column("subscribe", Type::TEXT),
        column("subscribe_at", Type::TEXT),
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
        column("reduce_sql", Type::TEXT),
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
    /// For `timestamp`: its text.
    pub subscribe_at: Option<String>,
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
    /// The fold SELECT of its reduce aggregates (`None`: it has none).
    pub reduce_sql: Option<String>,
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
            subscribe_at: row.get("subscribe_at")?,
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
            reduce_sql: row.get("reduce_sql")?,
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
    sql: "SELECT partition_id, partition_name, now_us FROM queen.stream_idle_partitions_v1(p_stream_id => $1, p_idle_ms => $2)",
    params: &[Type::INT8, Type::INT8],
    columns: &[
        column("partition_id", Type::INT8),
        column("partition_name", Type::TEXT),
        column("now_us", Type::INT8),
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
    /// The database's clock, microseconds since the epoch.
    pub now_us: i64,
}

impl FromRow for IdleRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(IdleRow {
            partition_id: row.get("partition_id")?,
            partition_name: row
                .get::<Option<String>>("partition_name")?
                .unwrap_or_default(),
            now_us: row.get::<Option<i64>>("now_us")?.unwrap_or(0),
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

pub const EXTREMA: CallSpec = CallSpec {
    name: "qw_stream_extrema_v1",
    sql: "SELECT id, lo, hi FROM queen.stream_extrema_v1(p_jobs => $1::jsonb)",
    params: &[Type::TEXT],
    columns: &[
        column("id", Type::INT8),
        column("lo", Type::TEXT),
        column("hi", Type::TEXT),
    ],
};

/// A cycle's text min/max, compared by PostgreSQL: `jobs` is a JSON array
/// of `{i, v}`, `v` the candidate JSON strings of one state.
pub struct Extrema<'a> {
    pub jobs: &'a str,
}

impl Call for Extrema<'_> {
    const SPEC: &'static CallSpec = &EXTREMA;
    type Row = ExtremaRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.jobs]
    }
}

pub struct ExtremaRow {
    pub id: i64,
    /// JSON text of the least and the greatest candidate.
    pub lo: Option<String>,
    pub hi: Option<String>,
}

impl FromRow for ExtremaRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(ExtremaRow {
            id: row.get::<Option<i64>>("id")?.unwrap_or(-1),
            lo: row.get("lo")?,
            hi: row.get("hi")?,
        })
    }
}
