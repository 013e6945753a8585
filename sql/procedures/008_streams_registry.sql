-- 008_streams_registry: CREATE [OR REPLACE] STREAM … [RESET], DROP STREAM,
-- ALTER STREAM … PAUSE | RESUME (docs/streams.md). Tenant-facing entry
-- points: each runs queen.tenant_guard_v1 first.
-- Lock order: the queen.streams row (FOR UPDATE), then its
-- stream_partitions and stream_state rows, then (RESET and DROP only) the
-- source's consumer rows through queen.log_drop_group_v1 (queues ->
-- log_partitions -> log_consumers): streams before queues, as in 002.
-- None of these run the user's expressions: the engine has already
-- validated them on the tenant's own backend role (stream_eval_v1), and the
-- runner evaluates them there too.

-- The stream's consumer group on its source, dropped (RESET, DROP STREAM)
-- so the next cycle subscribes afresh. A source that does not exist yet,
-- or a stream whose first cycle has not run (its group is created by the
-- cycle's first POP), has no group to drop: a DROP STREAM right after its
-- CREATE failed with 42704 on the group (seen in CI). Not closed: the
-- runner's POP runs in a transaction of its own, before its cycle takes
-- the stream row, so a POP that creates the group after this check, or
-- after the DROP committed and before the runner saw it, leaves the group
-- behind (as it did before this check). Locks: those of
-- queen.log_drop_group_v1.
CREATE OR REPLACE FUNCTION queen.stream_drop_group_v1(p_stream queen.streams, p_tenant UUID)
RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM queen.queues q
               JOIN queen.consumer_groups_metadata m ON m.queue_id = q.id
               WHERE q.tenant_id = p_tenant AND q.name = p_stream.source_queue
                 AND m.consumer_group = p_stream.consumer_group) THEN
        PERFORM queen.log_drop_group_v1(p_stream.source_queue, p_stream.consumer_group, p_tenant);
    END IF;
END;
$$;

-- p_mode: 'create' (a different definition under the name is 42710),
-- 'replace' (a different definition replaces it; one that reshapes the
-- state, see state_hash in 002, is 55000 without RESET), 'reset' (replace
-- and start over: open windows and progress deleted, the consumer group's
-- cursors dropped so it subscribes afresh).
-- Returns 'created', 'unchanged', 'replaced' or 'reset'.
-- p_agg_inits: a reduce aggregate's initial state expression (NULL for the
-- others). The signature before it is dropped so no ambiguous overload
-- survives (calls name their arguments).
DROP FUNCTION IF EXISTS queen.stream_create_v1(
    UUID, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT, TEXT,
    BIGINT, TEXT, BIGINT, BIGINT, TEXT[], TEXT[], TEXT[], TEXT, BOOLEAN, TEXT, TIMESTAMPTZ);
CREATE OR REPLACE FUNCTION queen.stream_create_v1(
    p_tenant         UUID,
    p_name           TEXT,
    p_source         TEXT,
    p_group          TEXT,
    p_subscribe      TEXT,
    p_definition     TEXT,
    p_where          TEXT,
    p_key            TEXT,
    p_kind           TEXT,
    p_size_ms        BIGINT,
    p_every_ms       BIGINT,
    p_gap_ms         BIGINT,
    p_event_time     TEXT,
    p_lateness_ms    BIGINT,
    p_on_late        TEXT,
    p_grace_ms       BIGINT,
    p_idle_ms        BIGINT,
    p_agg_names      TEXT[],
    p_agg_fns        TEXT[],
    p_agg_args       TEXT[],
    p_sink           TEXT,
    p_partition_by_key BOOLEAN,
    p_mode           TEXT,
    p_subscribe_at   TIMESTAMPTZ DEFAULT NULL,
    p_agg_inits      TEXT[] DEFAULT NULL
) RETURNS TEXT
LANGUAGE plpgsql
AS $$
DECLARE
    v_hash       TEXT := md5(p_definition);
    v_state_hash TEXT := md5(concat_ws(E'\x1f', p_source, p_group, p_key, p_kind,
                             p_size_ms, p_every_ms, p_gap_ms, p_event_time,
                             array_to_string(p_agg_names, E'\x1e'),
                             array_to_string(p_agg_fns, E'\x1e'),
                             array_to_string(p_agg_args, E'\x1e', E'\x1d'),
                             -- NULL (skipped) without a reduce: the hash
                             -- of a stream from before reduce is unchanged.
                             NULLIF(array_to_string(p_agg_inits, E'\x1e'), '')));
    v_old        queen.streams%ROWTYPE;
    v_eval       TEXT := queen.stream_eval_sql_v1(p_where, p_key, p_event_time, p_agg_fns, p_agg_args);
    v_reduce     TEXT := queen.stream_reduce_sql_v1(p_agg_fns, p_agg_args, p_agg_inits);
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_mode NOT IN ('create', 'replace', 'reset') THEN
        RAISE EXCEPTION 'stream_create_v1: unknown mode %', p_mode USING ERRCODE = '22023';
    END IF;
    SELECT * INTO v_old FROM queen.streams
    WHERE tenant_id = p_tenant AND name = p_name
    FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO queen.streams (
            tenant_id, name, source_queue, consumer_group, subscribe, subscribe_at, definition,
            definition_hash, state_hash, where_expr, key_expr, window_kind,
            window_size_ms, window_every_ms, session_gap_ms, event_time_expr,
            allowed_lateness_ms, on_late, grace_ms, idle_flush_ms, agg_names,
            agg_fns, agg_args, agg_inits, sink_queue, partition_by_key, eval_sql, reduce_sql)
        VALUES (
            p_tenant, p_name, p_source, p_group, p_subscribe, p_subscribe_at, p_definition,
            v_hash, v_state_hash, p_where, p_key, p_kind,
            p_size_ms, p_every_ms, p_gap_ms, p_event_time,
            p_lateness_ms, p_on_late, p_grace_ms, p_idle_ms, p_agg_names,
            p_agg_fns, p_agg_args, p_agg_inits, p_sink, p_partition_by_key, v_eval, v_reduce)
        ON CONFLICT (tenant_id, name) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'stream "%" was created concurrently', p_name
                USING ERRCODE = '40001';
        END IF;
        RETURN 'created';
    END IF;
    IF v_old.definition_hash = v_hash AND p_mode <> 'reset' THEN
        RETURN 'unchanged';
    END IF;
    IF p_mode = 'create' THEN
        RAISE EXCEPTION 'stream "%" already exists with a different definition', p_name
            USING ERRCODE = '42710',
                  HINT = 'CREATE OR REPLACE STREAM changes it (add RESET to start its windows over)';
    END IF;
    IF p_mode = 'replace' AND v_old.state_hash <> v_state_hash THEN
        RAISE EXCEPTION 'the new definition of stream "%" changes its source, group, key, window, event time or aggregates, which its open windows were built with', p_name
            USING ERRCODE = '55000',
                  HINT = 'add RESET: CREATE OR REPLACE STREAM … RESET drops its open windows and reads the source again';
    END IF;
    IF p_mode = 'reset' THEN
        DELETE FROM queen.stream_state WHERE stream_id = v_old.id;
        DELETE FROM queen.stream_partitions WHERE stream_id = v_old.id;
        PERFORM queen.stream_drop_group_v1(v_old, p_tenant);
    END IF;
    UPDATE queen.streams SET
        source_queue = p_source, consumer_group = p_group, subscribe = p_subscribe,
        subscribe_at = p_subscribe_at,
        definition = p_definition, definition_hash = v_hash, state_hash = v_state_hash,
        where_expr = p_where, key_expr = p_key, window_kind = p_kind,
        window_size_ms = p_size_ms, window_every_ms = p_every_ms,
        session_gap_ms = p_gap_ms, event_time_expr = p_event_time,
        allowed_lateness_ms = p_lateness_ms, on_late = p_on_late,
        grace_ms = p_grace_ms, idle_flush_ms = p_idle_ms, agg_names = p_agg_names,
        agg_fns = p_agg_fns, agg_args = p_agg_args, agg_inits = p_agg_inits,
        sink_queue = p_sink, partition_by_key = p_partition_by_key, eval_sql = v_eval,
        reduce_sql = v_reduce,
        generation = generation + CASE WHEN p_mode = 'reset' THEN 1 ELSE 0 END,
        last_error = NULL, last_error_at = NULL, updated_at = now()
    WHERE id = v_old.id;
    RETURN CASE WHEN p_mode = 'reset' THEN 'reset' ELSE 'replaced' END;
END;
$$;

-- DROP STREAM: the stream, its open windows, its progress and its consumer
-- group's cursors on the source. False when there was no such stream.
CREATE OR REPLACE FUNCTION queen.stream_drop_v1(p_tenant UUID, p_name TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
DECLARE
    v_old queen.streams%ROWTYPE;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    SELECT * INTO v_old FROM queen.streams
    WHERE tenant_id = p_tenant AND name = p_name
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM queen.stream_state WHERE stream_id = v_old.id;
    DELETE FROM queen.stream_partitions WHERE stream_id = v_old.id;
    DELETE FROM queen.streams WHERE id = v_old.id;
    PERFORM queen.stream_drop_group_v1(v_old, p_tenant);
    RETURN true;
END;
$$;

-- ALTER STREAM … PAUSE | RESUME. False when there is no such stream. A
-- paused stream keeps its windows and its cursor; cycles that began before
-- the pause finish (they hold the row FOR SHARE, this waits for them).
CREATE OR REPLACE FUNCTION queen.stream_set_paused_v1(p_tenant UUID, p_name TEXT, p_paused BOOLEAN)
RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    UPDATE queen.streams SET paused = p_paused, updated_at = now()
    WHERE tenant_id = p_tenant AND name = p_name;
    RETURN FOUND;
END;
$$;
