-- 017_traces: the seed's traces surface (management plane, 012-023): which
-- messages carry a trace id, and SHOW TRACE over them.
--
-- Global lock order (seed): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. log_traces is a leaf, written
-- only by queen.log_push_v1 (003) in its final statement, under the
-- partition locks that push already holds; the reader takes no locks.
--
-- What is recorded: the trace id is part of every message's frame (the
-- engine's segment format); a frame is compressed, so finding a trace's
-- messages across queues needs an index of its own. One row per message
-- pushed WITH a trace id, pointing at its segment; nothing at all for a
-- message without one (the push's gate is a one-time filter). The states
-- are not recorded at all: SHOW TRACE derives them from the consumer rows
-- and the DLQ at read time, so POP and ACK pay nothing for traces.
-- Measured: see docs/internals/storage.md (Traces).
--
-- Rows go with their messages: the retention step (006) deletes them with
-- the segments it purges, and the foreign key to log_partitions cascades
-- on partition cleanup and DROP QUEUE. SHOW TRACE also skips a row whose
-- segment is gone (between the mark and the purge).
CREATE TABLE IF NOT EXISTS queen.log_traces (
    tenant_id      UUID NOT NULL,
    trace_id       TEXT COLLATE "C" NOT NULL,
    message_id     UUID NOT NULL,
    partition_id   BIGINT NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    message_offset BIGINT NOT NULL,
    base_offset    BIGINT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, trace_id, message_id)
);

DO $$
BEGIN
    -- The retention purge's range and the cascade from log_partitions both
    -- need the referencing column first, or they scan the table.
    IF to_regclass('queen.idx_log_traces_partition_offset') IS NULL THEN
        CREATE INDEX idx_log_traces_partition_offset
            ON queen.log_traces (partition_id, message_offset);
    END IF;
END
$$;

-- SHOW TRACE 'trace-id': every message of the tenant carrying the trace
-- id, across its queues, by creation then queue, partition and offset,
-- one row per (message, group of its queue) — a queue without groups gives
-- one row with consumer_group NULL. Each row has the message's segment and
-- the group's consumer state (as SHOW MESSAGES), from which the engine
-- takes the frame and decides the state. At most p_limit messages.
-- Errors: 22023 p_limit < 1. Takes no locks.
CREATE OR REPLACE FUNCTION queen.trace_messages_v2(
    p_trace_id TEXT,
    p_limit    INTEGER DEFAULT 1000,
    p_tenant   UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queue          TEXT,
    message_id     UUID,
    message_offset BIGINT,
    consumer_group TEXT,
    partition_name TEXT,
    base_offset    BIGINT,
    message_count  INTEGER,
    blob           BYTEA,
    from_offset    BIGINT,
    from_time      TIMESTAMPTZ,
    cursor_offset  BIGINT,
    lease_from     BIGINT,
    lease_to       BIGINT,
    lease_acked    BIGINT[],
    dead_lettered  BIGINT[],
    leased         BIGINT[]
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be at least 1' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH t AS (
        SELECT t.message_id, t.partition_id, t.message_offset, t.base_offset, t.created_at
        FROM queen.log_traces t
        WHERE t.tenant_id = p_tenant AND t.trace_id = p_trace_id
        ORDER BY t.created_at, t.message_id
        LIMIT p_limit
    )
    SELECT q.name::TEXT, t.message_id, t.message_offset, m.consumer_group::TEXT, p.name::TEXT,
           s.base_offset, s.message_count, s.blob, t.message_offset, NULL::TIMESTAMPTZ,
           COALESCE(st.cursor_offset, -1), st.lease_from, st.lease_to, st.lease_acked, st.dead_lettered, st.leased
    FROM t
    JOIN queen.log_partitions p ON p.id = t.partition_id
    JOIN queen.queues q ON q.id = p.queue_id AND q.tenant_id = p_tenant
    JOIN queen.log_segments s ON s.partition_id = t.partition_id AND s.base_offset = t.base_offset
    LEFT JOIN queen.consumer_groups_metadata m ON m.queue_id = q.id
    LEFT JOIN LATERAL queen.log_browse_state_v2(p.id, m.consumer_group) st
           ON m.consumer_group IS NOT NULL
    ORDER BY t.created_at, t.message_id, m.consumer_group;
END
$$;


-- trace_messages_v2 without `leased`.
CREATE OR REPLACE FUNCTION queen.trace_messages_v1(
    p_trace_id TEXT,
    p_limit    INTEGER DEFAULT 1000,
    p_tenant   UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queue          TEXT,
    message_id     UUID,
    message_offset BIGINT,
    consumer_group TEXT,
    partition_name TEXT,
    base_offset    BIGINT,
    message_count  INTEGER,
    blob           BYTEA,
    from_offset    BIGINT,
    from_time      TIMESTAMPTZ,
    cursor_offset  BIGINT,
    lease_from     BIGINT,
    lease_to       BIGINT,
    lease_acked    BIGINT[],
    dead_lettered  BIGINT[]
)
LANGUAGE sql STABLE
AS $$
    SELECT b.queue, b.message_id, b.message_offset, b.consumer_group,
           b.partition_name, b.base_offset, b.message_count, b.blob, b.from_offset,
           b.from_time, b.cursor_offset, b.lease_from, b.lease_to,
           CASE WHEN b.leased IS NULL THEN b.lease_acked END, b.dead_lettered
    FROM queen.trace_messages_v2(p_trace_id, p_limit, p_tenant) b
$$;
