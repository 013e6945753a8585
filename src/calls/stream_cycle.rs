//! The stream runner's calls (seed 007): the active streams, and the
//! steps of one cycle (begin, load, save), the idle flush's work list and
//! the error note. The registry and evaluation calls are in `streams`.

use super::declare::calls;
use super::{DecodeError, FromRow, Row};
use uuid::Uuid;

calls! {
    pub const ACTIVE = "qw_stream_active_v1" {
        SELECT * FROM queen.stream_active_v1;
        pub struct Active;
        /// A running stream's definition, as the runner needs it.
        #[derive(Debug, Clone, PartialEq)]
        pub struct ActiveRow {
            id: i64 = INT8,
            tenant as tenant_id: Uuid = UUID,
            name: String = TEXT or default,
            source as source_queue: String = TEXT or default,
            group as consumer_group: String = TEXT or default,
            subscribe: String = TEXT or default,
            /// For `timestamp`: its text.
            subscribe_at: Option<String> = TEXT,
            kind as window_kind: String = TEXT or default,
            size_ms as window_size_ms: Option<i64> = INT8,
            every_ms as window_every_ms: Option<i64> = INT8,
            gap_ms as session_gap_ms: Option<i64> = INT8,
            event_time: bool = BOOL or default,
            lateness_ms as allowed_lateness_ms: i64 = INT8 or default,
            on_late: String = TEXT or default,
            grace_ms: i64 = INT8 or default,
            idle_ms as idle_flush_ms: Option<i64> = INT8,
            agg_names: Vec<String> = TEXT_ARRAY or default,
            agg_fns: Vec<String> = TEXT_ARRAY or default,
            sink as sink_queue: String = TEXT or default,
            partition_by_key: bool = BOOL or default,
            eval_sql: String = TEXT or default,
            generation: i32 = INT4 or default,
            /// The fold SELECT of its reduce aggregates (`None`: it has none).
            reduce_sql: Option<String> = TEXT,
        }
    }

    pub const CYCLE_BEGIN = "qw_stream_cycle_begin_v1" {
        SELECT * FROM queen.stream_cycle_begin_v1;
        pub struct CycleBegin<'a> {
            stream_id: i64 = INT8,
            generation: i32 = INT4,
            partition_id: i64 = INT8,
            partition_name: &'a str = TEXT,
            skip_locked: bool = BOOL,
        }
        row ProgressRow { stream_time_us: INT8, max_event_us: INT8, last_message_at: TIMESTAMPTZ }
    }

    pub const STATE_LOAD = "qw_stream_state_load_v1" {
        SELECT * FROM queen.stream_state_load_v1;
        pub struct StateLoad {
            stream_id: i64 = INT8,
            partition_id: i64 = INT8,
        }
        pub struct StateRow {
            start_us: i64 = INT8 or default,
            end_us: i64 = INT8 or default,
            key: String = TEXT or default,
            vals: Vec<Option<String>> = TEXT_ARRAY or default,
            late: bool = BOOL or default,
        }
    }

    pub const CYCLE_SAVE = "qw_stream_cycle_save_v1" {
        SELECT queen.stream_cycle_save_v1;
        #[derive(Debug, Default)]
        pub struct CycleSave {
            stream_id: i64 = INT8,
            partition_id: i64 = INT8,
            stream_time_us: Option<i64> = INT8,
            max_event_us: Option<i64> = INT8,
            saw_messages: bool = BOOL,
            messages: i64 = INT8,
            late_dropped: i64 = INT8,
            emitted: i64 = INT8,
            del_starts: Vec<i64> = INT8_ARRAY,
            del_keys: Vec<String> = TEXT_ARRAY,
            up_starts: Vec<i64> = INT8_ARRAY,
            up_ends: Vec<i64> = INT8_ARRAY,
            up_keys: Vec<String> = TEXT_ARRAY,
            up_states: Vec<String> = TEXT_ARRAY,
            up_late: Vec<bool> = BOOL_ARRAY,
        }
        row () { saved: INT4 }
    }

    pub const IDLE_PARTITIONS = "qw_stream_idle_partitions_v1" {
        SELECT * FROM queen.stream_idle_partitions_v1;
        pub struct IdlePartitions {
            stream_id: i64 = INT8,
            idle_ms: i64 = INT8,
        }
        pub struct IdleRow {
            partition_id: i64 = INT8,
            partition_name: String = TEXT or default,
            /// The database's clock, microseconds since the epoch.
            now_us: i64 = INT8 or default,
        }
    }

    pub const NOTE_ERROR = "qw_stream_note_error_v1" {
        SELECT queen.stream_note_error_v1;
        pub struct NoteError<'a> {
            stream_id: i64 = INT8,
            error: &'a str = TEXT,
        }
        row () { noted: INT4 }
    }

    pub const EXTREMA = "qw_stream_extrema_v1" {
        SELECT * FROM queen.stream_extrema_v1;
        /// A cycle's text min/max, compared by PostgreSQL: `jobs` is a JSON array
        /// of `{i, v}`, `v` the candidate JSON strings of one state.
        pub struct Extrema<'a> {
            jobs: &'a str = TEXT::jsonb,
        }
        row ExtremaRow { id: INT8, lo: TEXT, hi: TEXT }
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
