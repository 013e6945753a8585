-- 007_log_streams: the stream cycle (docs/streams.md). One cycle per
-- (stream, source partition), run by queenwire's stream runner in ONE
-- transaction on an engine connection:
--   1. stream_cycle_begin_v1 locks the stream_partitions row (streams space);
--   2. stream_state_load_v1 reads the open windows (no locks);
--   3. the engine assigns the batch to windows and closes the ripe ones;
--   4. stream_cycle_save_v1 writes the state upserts and deletes;
--   5. the closed windows are pushed into the sink through log_push_v1 (so
--      log_push_one_v1 stays the one place an offset is assigned);
--   6. log_ack_v1 acknowledges the batch under the source partition's lease.
-- Any failure rolls all of it back; the batch is delivered again.
-- The user's expressions were evaluated before, by stream_eval_v1, on a
-- connection of the tenant's own backend role (see stream_eval_v1).

-- The SELECT that evaluates a stream's expressions over a batch, $1 being
-- a JSON array of {ord, payload, partition, created_us, transaction_id}.
-- Pure text assembly, nothing runs here. Each user expression sits in
-- parentheses on lines of its own. Per aggregate argument: count(*) '1',
-- count(e) '1' when e is not NULL (else NULL), sum/avg/min/max (e)::numeric as text,
-- min_text/max_text (e)::text as a JSON string, min_timestamptz/max_timestamptz
-- (e)::timestamptz as microseconds since the epoch, first/last to_jsonb(e)
-- as text, reduce NULL (the engine folds the message's payload itself).
-- min/max become min_text, min_timestamptz, … by the argument's type, which
-- the engine asks PostgreSQL for at CREATE (stream_types_sql_v1).
CREATE OR REPLACE FUNCTION queen.stream_eval_sql_v1(
    p_where      TEXT,
    p_key        TEXT,
    p_event_time TEXT,
    p_agg_fns    TEXT[],
    p_agg_args   TEXT[]
) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_vals TEXT[] := '{}';
    i      INTEGER;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_agg_fns, 1), 0) LOOP
        v_vals := v_vals || CASE
            WHEN p_agg_fns[i] = 'reduce' THEN 'NULL::text'
            WHEN p_agg_args[i] IS NULL THEN '''1''::text'
            WHEN p_agg_fns[i] = 'count' THEN
                E'CASE WHEN (\n' || p_agg_args[i] || E'\n) IS NULL THEN NULL ELSE ''1'' END'
            WHEN p_agg_fns[i] IN ('sum', 'avg', 'min', 'max') THEN
                E'((\n' || p_agg_args[i] || E'\n)::numeric)::text'
            WHEN p_agg_fns[i] IN ('min_text', 'max_text') THEN
                E'to_jsonb((\n' || p_agg_args[i] || E'\n)::text)::text'
            WHEN p_agg_fns[i] IN ('min_timestamptz', 'max_timestamptz') THEN
                E'((extract(epoch FROM (\n' || p_agg_args[i]
                || E'\n)::timestamptz) * 1000000)::bigint)::text'
            ELSE
                E'COALESCE(to_jsonb(\n' || p_agg_args[i] || E'\n)::text, ''null'')'
        END;
    END LOOP;
    RETURN 'SELECT m.ord::bigint, ('
        || E'\n' || COALESCE(p_key, 'm.partition') || E'\n'
        || ')::text, '
        || CASE WHEN p_event_time IS NULL THEN 'NULL::bigint'
                ELSE E'(extract(epoch FROM (\n' || p_event_time
                     || E'\n)::timestamptz) * 1000000)::bigint' END
        || ', ('
        || E'\n' || COALESCE(p_where, 'true') || E'\n'
        || ')::boolean, ARRAY[' || COALESCE(array_to_string(v_vals, ', '), '') || ']::text[]'
        || ' FROM (SELECT r.ord, r.payload, r.partition, r.transaction_id,'
        || ' timestamptz ''epoch'' + r.created_us * interval ''1 microsecond'' AS created_at'
        || ' FROM jsonb_to_recordset($1) AS r(ord bigint, payload jsonb, partition text,'
        || ' created_us bigint, transaction_id text)) AS m';
END;
$$;

-- The SELECT that asks PostgreSQL the type of each expression in p_args
-- (a stream's min/max arguments) without evaluating any: one row shaped
-- like stream_eval_v1's, vals[i] being '<typcategory>:<type>' of the i-th
-- expression over the same four columns as the evaluation (the scalar
-- subquery over no message has the expression's type and no value). Run by
-- stream_eval_v1 on the tenant's role at CREATE, so a wrong expression is
-- refused with PostgreSQL's error there too. Pure text assembly.
CREATE OR REPLACE FUNCTION queen.stream_types_sql_v1(p_args TEXT[])
RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_types TEXT[] := '{}';
    i       INTEGER;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_args, 1), 0) LOOP
        v_types := v_types || (
            '(SELECT t.typcategory::text || '':'' || pg_catalog.format_type(t.oid, NULL)'
            || ' FROM pg_catalog.pg_type t WHERE t.oid = pg_catalog.pg_typeof((SELECT ('
            || E'\n' || p_args[i] || E'\n'
            || ') FROM (SELECT r.ord, r.payload, r.partition, r.transaction_id,'
            || ' timestamptz ''epoch'' + r.created_us * interval ''1 microsecond'' AS created_at'
            || ' FROM jsonb_to_recordset($1) AS r(ord bigint, payload jsonb, partition text,'
            || ' created_us bigint, transaction_id text)) AS m LIMIT 1)))');
    END LOOP;
    RETURN 'SELECT 0::bigint, NULL::text, NULL::bigint, NULL::boolean, ARRAY['
        || COALESCE(array_to_string(v_types, ', '), '') || ']::text[]';
END;
$$;

-- The fold SELECT of a stream's reduce(fn, init) aggregates (NULL when it
-- has none), shaped like stream_eval_v1's rows. $1 is a JSON array of jobs
-- {id, a, s, p}: a is the aggregate's position (1-based), s the window's
-- state wrapped in a one-element array (absent for a new window: then the
-- aggregate's init, cast to jsonb), p the payloads to fold, in the
-- window's order. Each job's state goes through fn(state, payload) once
-- per payload (a recursive CTE, one plan for the whole batch); a NULL
-- result becomes JSON null. The result row per job: ord = id, vals[1] the
-- final state's JSON text. fn is the name as written, pasted before its
-- argument list, so PostgreSQL resolves it with the caller's search_path
-- and rights: a missing function or one of another signature is refused
-- when the SELECT is planned (42883), a result that is not jsonb too
-- (42804). Pure text assembly.
CREATE OR REPLACE FUNCTION queen.stream_reduce_sql_v1(
    p_agg_fns   TEXT[],
    p_agg_args  TEXT[],
    p_agg_inits TEXT[]
) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_inits TEXT := '';
    v_steps TEXT := '';
    i       INTEGER;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_agg_fns, 1), 0) LOOP
        IF p_agg_fns[i] = 'reduce' THEN
            v_inits := v_inits || ' WHEN ' || i || E' THEN (\n'
                || COALESCE(p_agg_inits[i], 'NULL') || E'\n)::jsonb';
            v_steps := v_steps || ' WHEN ' || i || E' THEN \n'
                || p_agg_args[i] || E'\n(f.s, j.p -> f.n)';
        END IF;
    END LOOP;
    IF v_steps = '' THEN
        RETURN NULL;
    END IF;
    RETURN 'WITH RECURSIVE j AS MATERIALIZED ('
        || 'SELECT r.id, r.a, r.s, r.p, jsonb_array_length(r.p) AS n'
        || ' FROM jsonb_to_recordset($1) AS r(id bigint, a integer, s jsonb, p jsonb)),'
        || ' f(id, n, s) AS ('
        || 'SELECT j.id, 0, CASE WHEN j.s IS NOT NULL THEN j.s -> 0 ELSE CASE j.a'
        || v_inits || ' END END FROM j'
        || ' UNION ALL '
        || 'SELECT f.id, f.n + 1, COALESCE(CASE j.a' || v_steps || E' END, ''null''::jsonb)'
        || ' FROM f JOIN j ON j.id = f.id WHERE f.n < j.n)'
        || ' SELECT f.id, NULL::text, NULL::bigint, NULL::boolean, ARRAY[f.s::text]'
        || ' FROM f JOIN j ON j.id = f.id AND f.n = j.n';
END;
$$;

-- The text min/max of a cycle, compared by PostgreSQL in the database's
-- default collation: p_jobs is a JSON array of {i, v}, v the candidate
-- JSON strings of one aggregate of one window (its state's and the
-- batch's); per i the least and the greatest, as JSON text. Engine only;
-- runs no user text; no locks.
CREATE OR REPLACE FUNCTION queen.stream_extrema_v1(p_jobs JSONB)
RETURNS TABLE (id BIGINT, lo TEXT, hi TEXT)
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (j ->> 'i')::BIGINT, to_jsonb(min(e #>> '{}'))::TEXT, to_jsonb(max(e #>> '{}'))::TEXT
    FROM jsonb_array_elements(p_jobs) AS j, jsonb_array_elements(j -> 'v') AS e
    GROUP BY 1;
$$;

-- Runs a stream's evaluation SELECT over one batch (and, shaped the same,
-- its argument-type probe at CREATE and its reduce fold in each cycle:
-- stream_types_sql_v1, stream_reduce_sql_v1). SECURITY INVOKER on
-- purpose, and never made SECURITY DEFINER by 034: the user's expressions
-- run with the privileges of whoever calls this, which is the tenant's own
-- backend role (queen_t_<tenant>[_ro]); the engine calls it only on such a
-- connection, or, without a users file (operator only), on its own.
-- NULL keys come back as the empty string's absence: the engine maps them
-- to JSON null.
CREATE OR REPLACE FUNCTION queen.stream_eval_v1(p_sql TEXT, p_messages JSONB)
RETURNS TABLE (ord BIGINT, key TEXT, event_us BIGINT, keep BOOLEAN, vals TEXT[])
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY EXECUTE p_sql USING p_messages;
END;
$$;

-- Every stream that is not paused, for the runners. Engine only; no locks.
-- A result without reduce_sql (before reduce aggregates) is dropped first:
-- CREATE OR REPLACE cannot change a function's result.
DO $$
DECLARE
    v_fn REGPROCEDURE := to_regprocedure('queen.stream_active_v1()');
BEGIN
    IF v_fn IS NOT NULL AND pg_get_function_result(v_fn) NOT LIKE '%reduce_sql text%' THEN
        DROP FUNCTION queen.stream_active_v1();
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION queen.stream_active_v1()
RETURNS TABLE (
    id BIGINT, tenant_id UUID, name TEXT, source_queue TEXT, consumer_group TEXT,
    subscribe TEXT, subscribe_at TEXT, window_kind TEXT, window_size_ms BIGINT, window_every_ms BIGINT,
    session_gap_ms BIGINT, event_time BOOLEAN, allowed_lateness_ms BIGINT,
    on_late TEXT, grace_ms BIGINT, idle_flush_ms BIGINT, agg_names TEXT[],
    agg_fns TEXT[], sink_queue TEXT, partition_by_key BOOLEAN, eval_sql TEXT,
    generation INTEGER, reduce_sql TEXT
)
LANGUAGE sql STABLE
AS $$
    SELECT s.id, s.tenant_id, s.name::TEXT, s.source_queue::TEXT, s.consumer_group::TEXT,
           s.subscribe, s.subscribe_at::TEXT, s.window_kind, s.window_size_ms, s.window_every_ms,
           s.session_gap_ms, s.event_time_expr IS NOT NULL, s.allowed_lateness_ms,
           s.on_late, s.grace_ms, s.idle_flush_ms, s.agg_names, s.agg_fns,
           s.sink_queue::TEXT, s.partition_by_key, s.eval_sql, s.generation, s.reduce_sql
    FROM queen.streams s
    WHERE NOT s.paused
    ORDER BY s.id;
$$;

-- Step 1 of a cycle: locks (creating if needed) the progress row of
-- (stream, partition) and returns it; nothing when the stream is gone, is
-- paused or has another generation (dropped, reset), or, with
-- p_skip_locked, when another cycle holds the row (the idle flush steps
-- over a partition a cycle is running).
-- Locks: queen.streams row (FOR SHARE), then the stream_partitions row
-- (FOR UPDATE).
CREATE OR REPLACE FUNCTION queen.stream_cycle_begin_v1(
    p_stream_id      BIGINT,
    p_generation     INTEGER,
    p_partition_id   BIGINT,
    p_partition_name TEXT,
    p_skip_locked    BOOLEAN
) RETURNS TABLE (stream_time_us BIGINT, max_event_us BIGINT, last_message_at TIMESTAMPTZ)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1 FROM queen.streams s
    WHERE s.id = p_stream_id AND s.generation = p_generation AND NOT s.paused
    FOR SHARE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO queen.stream_partitions (stream_id, partition_id, partition_name)
    VALUES (p_stream_id, p_partition_id, p_partition_name)
    ON CONFLICT DO NOTHING;
    IF p_skip_locked THEN
        RETURN QUERY
        SELECT sp.stream_time_us, sp.max_event_us, sp.last_message_at
        FROM queen.stream_partitions sp
        WHERE sp.stream_id = p_stream_id AND sp.partition_id = p_partition_id
        FOR UPDATE SKIP LOCKED;
    ELSE
        RETURN QUERY
        SELECT sp.stream_time_us, sp.max_event_us, sp.last_message_at
        FROM queen.stream_partitions sp
        WHERE sp.stream_id = p_stream_id AND sp.partition_id = p_partition_id
        FOR UPDATE;
    END IF;
END;
$$;

-- Step 2: the open windows of (stream, partition), each state as the text
-- of its aggregates' values in the stream's aggregate order. No locks (the
-- caller holds the progress row, which every writer of these rows locks).
CREATE OR REPLACE FUNCTION queen.stream_state_load_v1(
    p_stream_id    BIGINT,
    p_partition_id BIGINT
) RETURNS TABLE (start_us BIGINT, end_us BIGINT, key TEXT, vals TEXT[], late BOOLEAN)
LANGUAGE sql STABLE
AS $$
    SELECT (extract(epoch FROM st.window_start) * 1000000)::BIGINT,
           (extract(epoch FROM st.window_end) * 1000000)::BIGINT,
           st.key::TEXT,
           ARRAY(SELECT (st.state -> n.name)::TEXT
                 FROM unnest(s.agg_names) WITH ORDINALITY AS n(name, i)
                 ORDER BY n.i),
           st.late
    FROM queen.stream_state st
    JOIN queen.streams s ON s.id = st.stream_id
    WHERE st.stream_id = p_stream_id AND st.partition_id = p_partition_id;
$$;

-- Step 5: the cycle's state changes and progress. Deletes by (start, key),
-- upserts with the state object's JSON text. Locks: the stream_partitions
-- row (already held), then stream_state rows of this (stream, partition).
CREATE OR REPLACE FUNCTION queen.stream_cycle_save_v1(
    p_stream_id      BIGINT,
    p_partition_id   BIGINT,
    p_stream_time_us BIGINT,
    p_max_event_us   BIGINT,
    p_saw_messages   BOOLEAN,
    p_messages       BIGINT,
    p_late_dropped   BIGINT,
    p_emitted        BIGINT,
    p_del_starts     BIGINT[],
    p_del_keys       TEXT[],
    p_up_starts      BIGINT[],
    p_up_ends        BIGINT[],
    p_up_keys        TEXT[],
    p_up_states      TEXT[],
    p_up_late        BOOLEAN[]
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM queen.stream_state st
    USING unnest(p_del_starts, p_del_keys) AS d(start_us, key)
    WHERE st.stream_id = p_stream_id AND st.partition_id = p_partition_id
      AND st.window_start = timestamptz 'epoch' + d.start_us * interval '1 microsecond'
      AND st.key = d.key;
    INSERT INTO queen.stream_state AS st
        (stream_id, partition_id, window_start, key, window_end, state, late, updated_at)
    SELECT p_stream_id, p_partition_id,
           timestamptz 'epoch' + u.start_us * interval '1 microsecond', u.key,
           timestamptz 'epoch' + u.end_us * interval '1 microsecond',
           u.state::JSONB, u.late, now()
    FROM unnest(p_up_starts, p_up_ends, p_up_keys, p_up_states, p_up_late)
         AS u(start_us, end_us, key, state, late)
    ORDER BY 3, 4
    ON CONFLICT (stream_id, partition_id, window_start, key) DO UPDATE
        SET window_end = EXCLUDED.window_end, state = EXCLUDED.state,
            late = EXCLUDED.late, updated_at = now();
    UPDATE queen.stream_partitions sp
    SET stream_time_us  = p_stream_time_us,
        max_event_us    = p_max_event_us,
        last_message_at = CASE WHEN p_saw_messages THEN now() ELSE sp.last_message_at END,
        messages        = sp.messages + p_messages,
        late_dropped    = sp.late_dropped + p_late_dropped,
        windows_emitted = sp.windows_emitted + p_emitted,
        updated_at      = now()
    WHERE sp.stream_id = p_stream_id AND sp.partition_id = p_partition_id;
    RETURN 1;
END;
$$;

-- The idle flush's work list: partitions of a stream with open windows
-- where no message was seen for p_idle_ms by the wall clock, with the
-- database's clock (the stream time an idle flush closes by). No locks.
CREATE OR REPLACE FUNCTION queen.stream_idle_partitions_v1(
    p_stream_id BIGINT,
    p_idle_ms   BIGINT
) RETURNS TABLE (partition_id BIGINT, partition_name TEXT, now_us BIGINT)
LANGUAGE sql STABLE
AS $$
    SELECT sp.partition_id, sp.partition_name::TEXT,
           (extract(epoch FROM now()) * 1000000)::BIGINT
    FROM queen.stream_partitions sp
    WHERE sp.stream_id = p_stream_id
      AND sp.last_message_at < now() - p_idle_ms * interval '1 millisecond'
      AND EXISTS (SELECT 1 FROM queen.stream_state st
                  WHERE st.stream_id = sp.stream_id AND st.partition_id = sp.partition_id);
$$;

-- A cycle failed outside PostgreSQL's transaction (an expression's
-- runtime error, say): noted on the stream for SHOW STREAMS, in a
-- transaction of its own. Locks: the queen.streams row.
CREATE OR REPLACE FUNCTION queen.stream_note_error_v1(p_stream_id BIGINT, p_error TEXT)
RETURNS INTEGER
LANGUAGE sql
AS $$
    UPDATE queen.streams SET last_error = p_error, last_error_at = now()
    WHERE id = p_stream_id;
    SELECT 1;
$$;
