-- 009_streams_show: SHOW STREAMS and SHOW STREAM name (docs/streams.md).
-- Tenant-facing readers (queen.tenant_guard_v1 first); no locks.
-- Lag is what the stream's consumer group has not acknowledged yet on the
-- source: last_offset - cursor_offset summed over the source's partitions.

-- A stream's definition as a CREATE STREAM would say it (after the name),
-- from its registry row: what SHOW STREAMS shows. Durations in
-- milliseconds, clauses at their defaults left out, min/max typed by the
-- registry (min_text, max_timestamptz) shown as written. The registry's
-- own `definition` is the normalised text its hash is taken over, which
-- this does not change.
CREATE OR REPLACE FUNCTION queen.stream_definition_text_v1(s queen.streams)
RETURNS TEXT
LANGUAGE sql STABLE
AS $$
    SELECT concat_ws(' ',
        'FROM ' || quote_ident(s.source_queue),
        'GROUP ' || quote_ident(s.consumer_group),
        'SUBSCRIBE FROM ' || CASE s.subscribe
            WHEN 'beginning' THEN 'BEGINNING'
            WHEN 'now' THEN 'NOW'
            ELSE quote_literal(s.subscribe_at::TEXT) END,
        'WHERE ' || s.where_expr,
        'KEY BY ' || s.key_expr,
        'WINDOW ' || CASE s.window_kind
            WHEN 'tumbling' THEN format('TUMBLING %L', s.window_size_ms || 'ms')
            WHEN 'sliding' THEN format('SLIDING %L EVERY %L', s.window_size_ms || 'ms',
                                       s.window_every_ms || 'ms')
            ELSE format('SESSION GAP %L', s.session_gap_ms || 'ms') END,
        'EVENT TIME ' || s.event_time_expr
            || format(' ALLOWED LATENESS %L', s.allowed_lateness_ms || 'ms')
            || CASE WHEN s.on_late = 'include' THEN ' ON LATE INCLUDE' ELSE '' END,
        CASE WHEN s.grace_ms > 0 THEN format('GRACE %L', s.grace_ms || 'ms') END,
        CASE WHEN s.idle_flush_ms IS NOT NULL
             THEN format('IDLE FLUSH %L', s.idle_flush_ms || 'ms') END,
        'AGGREGATE (' || (
            SELECT string_agg(
                       CASE WHEN a.fn = 'reduce'
                            THEN 'reduce(' || a.arg || ', ' || a.init || ')'
                            ELSE regexp_replace(a.fn, '_(text|timestamptz)$', '')
                                 || '(' || COALESCE(a.arg, '*') || ')' END
                       || ' AS ' || quote_ident(a.name),
                       ', ' ORDER BY a.i)
            FROM unnest(s.agg_fns, s.agg_args, COALESCE(s.agg_inits, '{}'::TEXT[]), s.agg_names)
                 WITH ORDINALITY AS a(fn, arg, init, name, i)) || ')',
        'INTO ' || quote_ident(s.sink_queue),
        CASE WHEN s.partition_by_key THEN 'PARTITION BY KEY' END)
$$;

CREATE OR REPLACE FUNCTION queen.stream_list_v1(p_tenant UUID)
RETURNS TABLE (
    name TEXT, source_queue TEXT, consumer_group TEXT, sink_queue TEXT,
    window_desc TEXT, paused BOOLEAN, partitions BIGINT, open_windows BIGINT,
    messages BIGINT, windows_emitted BIGINT, late_dropped BIGINT, lag BIGINT,
    last_error TEXT, definition TEXT
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    RETURN QUERY
    SELECT s.name::TEXT, s.source_queue::TEXT, s.consumer_group::TEXT, s.sink_queue::TEXT,
           CASE s.window_kind
               WHEN 'tumbling' THEN 'TUMBLING ' || s.window_size_ms || 'ms'
               WHEN 'sliding' THEN 'SLIDING ' || s.window_size_ms || 'ms EVERY ' || s.window_every_ms || 'ms'
               ELSE 'SESSION GAP ' || s.session_gap_ms || 'ms' END,
           s.paused,
           (SELECT count(*) FROM queen.stream_partitions sp WHERE sp.stream_id = s.id),
           (SELECT count(*) FROM queen.stream_state st WHERE st.stream_id = s.id),
           (SELECT COALESCE(sum(sp.messages), 0)::BIGINT FROM queen.stream_partitions sp WHERE sp.stream_id = s.id),
           (SELECT COALESCE(sum(sp.windows_emitted), 0)::BIGINT FROM queen.stream_partitions sp WHERE sp.stream_id = s.id),
           (SELECT COALESCE(sum(sp.late_dropped), 0)::BIGINT FROM queen.stream_partitions sp WHERE sp.stream_id = s.id),
           (SELECT COALESCE(sum(p.last_offset - COALESCE(c.cursor_offset, -1)), 0)::BIGINT
            FROM queen.queues q
            JOIN queen.log_partitions p ON p.queue_id = q.id
            LEFT JOIN queen.log_consumers c
                   ON c.partition_id = p.id AND c.consumer_group = s.consumer_group
            WHERE q.tenant_id = s.tenant_id AND q.name = s.source_queue),
           s.last_error, queen.stream_definition_text_v1(s)
    FROM queen.streams s
    WHERE s.tenant_id = p_tenant
    ORDER BY s.name;
END;
$$;

-- SHOW STREAM name: one row per open window, with its source partition's
-- stream time and lag.
CREATE OR REPLACE FUNCTION queen.stream_show_v1(p_tenant UUID, p_name TEXT)
RETURNS TABLE (
    partition_name TEXT, key TEXT, window_start TIMESTAMPTZ, window_end TIMESTAMPTZ,
    state JSONB, late BOOLEAN, stream_time TIMESTAMPTZ, lag BIGINT
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_stream queen.streams%ROWTYPE;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    SELECT * INTO v_stream FROM queen.streams WHERE tenant_id = p_tenant AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream "%" does not exist', p_name USING ERRCODE = '42704';
    END IF;
    RETURN QUERY
    SELECT sp.partition_name::TEXT, st.key::TEXT, st.window_start, st.window_end, st.state,
           st.late,
           timestamptz 'epoch' + sp.stream_time_us * interval '1 microsecond',
           (SELECT p.last_offset - COALESCE(c.cursor_offset, -1)
            FROM queen.log_partitions p
            LEFT JOIN queen.log_consumers c
                   ON c.partition_id = p.id AND c.consumer_group = v_stream.consumer_group
            WHERE p.id = sp.partition_id)
    FROM queen.stream_partitions sp
    JOIN queen.stream_state st
      ON st.stream_id = sp.stream_id AND st.partition_id = sp.partition_id
    WHERE sp.stream_id = v_stream.id
    ORDER BY sp.partition_name, st.window_start, st.key;
END;
$$;

-- queen.stream_windows: the open windows as a plain view, for SQL and BI
-- tools through the proxy (a tenant role has no privilege on the stream
-- tables themselves). Filtered by queen.tenant_visible_v1 like the views
-- of 011 (a tenant role sees its own tenant, the owner and the engine all),
-- security_barrier; created only when its COMMENT lacks the version below
-- (CREATE OR REPLACE VIEW takes ACCESS EXCLUSIVE). Granted in 034.
DO $$
BEGIN
    IF obj_description(to_regclass('queen.stream_windows'), 'pg_class')
       IS DISTINCT FROM 'queenwire 009 v1' THEN
        CREATE OR REPLACE VIEW queen.stream_windows WITH (security_barrier) AS
        SELECT s.tenant_id, s.name::TEXT AS stream, sp.partition_name::TEXT AS partition,
               st.key::TEXT AS key, st.window_start, st.window_end, st.state, st.late
        FROM queen.streams s
        JOIN queen.stream_state st ON st.stream_id = s.id
        JOIN queen.stream_partitions sp
          ON sp.stream_id = st.stream_id AND sp.partition_id = st.partition_id
        WHERE queen.tenant_visible_v1(s.tenant_id);
        COMMENT ON VIEW queen.stream_windows IS 'queenwire 009 v1';
    END IF;
END
$$;
