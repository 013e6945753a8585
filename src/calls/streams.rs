//! The streams calls (seed files 007–009): the registry (create, drop,
//! pause, list, show), the runner's cycle steps, and the evaluation of a
//! stream's expressions (`stream_eval_v1`, run on the tenant's own role).

use super::declare::calls;
use super::{DecodeError, FromRow, Row};
use std::time::SystemTime;
use uuid::Uuid;

calls! {
    pub const CREATE = "qw_stream_create_v1" {
        SELECT queen.stream_create_v1;
        /// A stream's registry row, as `CREATE STREAM` resolved it.
        #[derive(Debug, Clone, PartialEq)]
        pub struct CreateStream {
            tenant: Uuid = UUID,
            name: String = TEXT,
            source: String = TEXT,
            group: String = TEXT,
            subscribe: String = TEXT,
            /// SUBSCRIBE FROM 'timestamp': the text, cast by PostgreSQL.
            subscribe_at: Option<String> = TEXT::timestamptz,
            definition: String = TEXT,
            where_expr as where: Option<String> = TEXT,
            key_expr as key: Option<String> = TEXT,
            kind: &'static str = TEXT,
            size_ms: Option<i64> = INT8,
            every_ms: Option<i64> = INT8,
            gap_ms: Option<i64> = INT8,
            event_time: Option<String> = TEXT,
            lateness_ms: i64 = INT8,
            on_late: &'static str = TEXT,
            grace_ms: i64 = INT8,
            idle_ms: Option<i64> = INT8,
            agg_names: Vec<String> = TEXT_ARRAY,
            agg_fns: Vec<String> = TEXT_ARRAY,
            /// For `reduce` the function's name as written.
            agg_args: Vec<Option<String>> = TEXT_ARRAY,
            /// `reduce`'s initial state expression (`None` for the others).
            agg_inits: Vec<Option<String>> = TEXT_ARRAY,
            sink: String = TEXT,
            partition_by_key: bool = BOOL,
            /// `create`, `replace` or `reset`.
            mode: &'static str = TEXT,
        }
        pub struct StatusRow {
            status: String = TEXT or default,
        }
    }

    /// The evaluation SELECT `stream_create_v1` will store, made the same way,
    /// so the engine can try it on the tenant's role before anything is stored.
    pub const EVAL_SQL = "qw_stream_eval_sql_v1" {
        SELECT queen.stream_eval_sql_v1;
        pub struct EvalSql<'a> {
            where_expr as where: &'a Option<String> = TEXT,
            key_expr as key: &'a Option<String> = TEXT,
            event_time: &'a Option<String> = TEXT,
            agg_fns: &'a Vec<String> = TEXT_ARRAY,
            agg_args: &'a Vec<Option<String>> = TEXT_ARRAY,
        }
        pub struct EvalSqlRow {
            eval_sql: String = TEXT or default,
        }
    }

    /// The SELECT that asks PostgreSQL the types of some expressions (a
    /// stream's min/max arguments), run on the tenant's role by `stream_eval_v1`.
    pub const TYPES_SQL = "qw_stream_types_sql_v1" {
        SELECT queen.stream_types_sql_v1;
        pub struct TypesSql<'a> {
            args: &'a Vec<String> = TEXT_ARRAY,
        }
        row EvalSqlRow { eval_sql: TEXT }
    }

    /// The reduce fold SELECT `stream_create_v1` will store (NULL without a
    /// reduce), made the same way, so it is tried on the tenant's role first.
    pub const REDUCE_SQL = "qw_stream_reduce_sql_v1" {
        SELECT queen.stream_reduce_sql_v1;
        pub struct ReduceSql<'a> {
            agg_fns: &'a Vec<String> = TEXT_ARRAY,
            agg_args: &'a Vec<Option<String>> = TEXT_ARRAY,
            agg_inits: &'a Vec<Option<String>> = TEXT_ARRAY,
        }
        row EvalSqlRow { eval_sql: TEXT }
    }

    pub const EVAL = "qw_stream_eval_v1" {
        SELECT * FROM queen.stream_eval_v1;
        /// One batch through a stream's expressions: `messages` is a JSON array of
        /// `{ord, payload, partition, created_us, transaction_id}`.
        pub struct Eval<'a> {
            sql: &'a str = TEXT,
            messages: &'a str = TEXT::jsonb,
        }
        row EvalRow { ord: INT8, key: TEXT, event_us: INT8, keep: BOOL, vals: TEXT_ARRAY }
    }

    pub const DROP = "qw_stream_drop_v1" {
        SELECT queen.stream_drop_v1;
        pub struct DropStream<'a> {
            tenant: Uuid = UUID,
            name: &'a str = TEXT,
        }
        pub struct DoneRow {
            done: bool = BOOL or default,
        }
    }

    pub const SET_PAUSED = "qw_stream_set_paused_v1" {
        SELECT queen.stream_set_paused_v1;
        pub struct SetPaused<'a> {
            tenant: Uuid = UUID,
            name: &'a str = TEXT,
            paused: bool = BOOL,
        }
        row DoneRow { done: BOOL }
    }

    pub const LIST = "qw_stream_list_v1" {
        SELECT * FROM queen.stream_list_v1;
        /// The raw cells of SHOW STREAMS, in the spec's column order.
        pub struct ListStreams {
            tenant: Uuid = UUID,
        }
        row ListRow {
            name: TEXT,
            source_queue: TEXT,
            consumer_group: TEXT,
            sink_queue: TEXT,
            window_desc: TEXT,
            paused: BOOL,
            partitions: INT8,
            open_windows: INT8,
            messages: INT8,
            windows_emitted: INT8,
            late_dropped: INT8,
            lag: INT8,
            last_error: TEXT,
            definition: TEXT,
        }
    }

    pub const SHOW = "qw_stream_show_v1" {
        "SELECT partition_name, key, window_start, window_end, state::text AS state, late, stream_time, lag FROM queen.stream_show_v1(p_tenant => $1, p_name => $2)";
        pub struct ShowStream<'a> {
            tenant: Uuid = UUID,
            name: &'a str = TEXT,
        }
        /// One open window, as SHOW STREAM name lists it.
        pub struct ShowRow {
            partition as partition_name: Option<String> = TEXT,
            key: Option<String> = TEXT,
            window_start: Option<SystemTime> = TIMESTAMPTZ,
            window_end: Option<SystemTime> = TIMESTAMPTZ,
            state: Option<String> = TEXT,
            late: Option<bool> = BOOL,
            stream_time: Option<SystemTime> = TIMESTAMPTZ,
            lag: Option<i64> = INT8,
        }
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
