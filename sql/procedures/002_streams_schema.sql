-- 002_streams_schema: the streams registry and its state (docs/streams.md).
--
-- Lock order: the stream tables are a space of their own, between
-- queen.log_timers and the advisory keys:
--   kv -> log_timers -> streams (queen.streams, then queen.stream_partitions,
--   then queen.stream_state) -> advisory -> queues -> log_partitions ->
--   log_consumers -> leaves.
-- A stream cycle locks its stream_partitions row first, then pushes into the
-- sink (advisory, queue, partition) and acknowledges the source
-- (log_consumers). Nothing that holds a queue, partition or consumer lock
-- ever touches a stream table: that is why these tables carry no foreign key
-- to queen.queues or queen.log_partitions (a cascade from delete_queue_v1
-- would acquire stream locks after queue locks). A stream whose source
-- partition is gone keeps a few stale rows until the stream is dropped.

-- One row per declared stream. Identity is (tenant_id, name). The
-- definition is the normalised text of the CREATE STREAM (bound values,
-- durations in milliseconds) and definition_hash its md5: a CREATE of the
-- same name with another hash is refused unless OR REPLACE. state_hash
-- covers only what shapes the stored window state (source, group, key,
-- window, event time, aggregates): OR REPLACE may change anything else
-- in place, a change of the state's shape needs RESET.
-- User expressions (where_expr, key_expr, event_time_expr, agg_args) are
-- PostgreSQL expression text over payload, partition, created_at and
-- transaction_id; eval_sql is the one SELECT that evaluates them, made by
-- queen.stream_eval_sql_v1 and only ever run by queen.stream_eval_v1 with
-- the tenant's own privileges (never by a SECURITY DEFINER function).
CREATE TABLE IF NOT EXISTS queen.streams (
    id                  BIGSERIAL PRIMARY KEY,
    tenant_id           UUID NOT NULL,
    name                TEXT COLLATE "C" NOT NULL,
    source_queue        TEXT COLLATE "C" NOT NULL,
    consumer_group      TEXT COLLATE "C" NOT NULL,
    subscribe           TEXT NOT NULL DEFAULT 'beginning'
                        CHECK (subscribe IN ('beginning', 'now', 'timestamp')),
    subscribe_at        TIMESTAMPTZ,
    definition          TEXT NOT NULL,
    definition_hash     TEXT NOT NULL,
    state_hash          TEXT NOT NULL,
    where_expr          TEXT,
    key_expr            TEXT,
    window_kind         TEXT NOT NULL CHECK (window_kind IN ('tumbling', 'sliding', 'session')),
    window_size_ms      BIGINT,
    window_every_ms     BIGINT,
    session_gap_ms      BIGINT,
    event_time_expr     TEXT,
    allowed_lateness_ms BIGINT NOT NULL DEFAULT 0,
    on_late             TEXT NOT NULL DEFAULT 'drop' CHECK (on_late IN ('drop', 'include')),
    grace_ms            BIGINT NOT NULL DEFAULT 0,
    idle_flush_ms       BIGINT,
    agg_names           TEXT[] NOT NULL,
    agg_fns             TEXT[] NOT NULL,
    agg_args            TEXT[] NOT NULL,
    sink_queue          TEXT COLLATE "C" NOT NULL,
    partition_by_key    BOOLEAN NOT NULL DEFAULT false,
    eval_sql            TEXT NOT NULL,
    paused              BOOLEAN NOT NULL DEFAULT false,
    -- Bumped by RESET: a cycle that began under an older generation
    -- writes nothing.
    generation          INTEGER NOT NULL DEFAULT 1,
    last_error          TEXT,
    last_error_at       TIMESTAMPTZ,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- reduce(fn, init) aggregates (docs/streams.md): agg_args holds the
-- function's name as written and agg_inits its initial state expression
-- (NULL for the other aggregates); reduce_sql is the fold SELECT made by
-- queen.stream_reduce_sql_v1 (NULL without a reduce), run like eval_sql
-- by queen.stream_eval_v1 with the tenant's own privileges.
ALTER TABLE queen.streams ADD COLUMN IF NOT EXISTS agg_inits TEXT[];
ALTER TABLE queen.streams ADD COLUMN IF NOT EXISTS reduce_sql TEXT;

CREATE UNIQUE INDEX IF NOT EXISTS streams_tenant_name_uk
    ON queen.streams (tenant_id, name);

-- Progress per (stream, source partition): the stream time the windows
-- close by (microseconds since the epoch: the largest created_at seen, or
-- the event-time watermark), the largest event time seen, and when a
-- message was last seen by the wall clock (the idle flush's clock). The
-- row is the cycle's mutex: every cycle and every idle flush locks it
-- FOR UPDATE first, so two cycles of one (stream, partition) never
-- interleave even if a lease were lost mid-cycle.
CREATE TABLE IF NOT EXISTS queen.stream_partitions (
    stream_id        BIGINT NOT NULL,
    partition_id     BIGINT NOT NULL,
    partition_name   TEXT COLLATE "C" NOT NULL,
    stream_time_us   BIGINT,
    max_event_us     BIGINT,
    last_message_at  TIMESTAMPTZ,
    messages         BIGINT NOT NULL DEFAULT 0,
    late_dropped     BIGINT NOT NULL DEFAULT 0,
    windows_emitted  BIGINT NOT NULL DEFAULT 0,
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, partition_id)
);

-- One row per open window: (stream, source partition, window start, key).
-- state is a JSON object keyed by the aggregates' names (count and sum as
-- numbers, avg as [sum, count], min/max as numbers, JSON strings (text) or
-- microseconds since the epoch (timestamptz), first/last and reduce as the
-- JSON value wrapped in a one-element array); deleted in the transaction
-- that emits the window. Plain SQL can
-- read it: SELECT key, window_start, state FROM queen.stream_state.
CREATE TABLE IF NOT EXISTS queen.stream_state (
    stream_id     BIGINT NOT NULL,
    partition_id  BIGINT NOT NULL,
    window_start  TIMESTAMPTZ NOT NULL,
    key           TEXT COLLATE "C" NOT NULL,
    window_end    TIMESTAMPTZ NOT NULL,
    state         JSONB NOT NULL,
    -- Opened by a late event (ON LATE INCLUDE) after the window was emitted.
    late          BOOLEAN NOT NULL DEFAULT false,
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, partition_id, window_start, key)
);
