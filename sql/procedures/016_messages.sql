-- 016_messages: the seed's messages surface (management plane, 012-023):
-- browsing a queue's messages without leasing them (SHOW MESSAGES, SHOW
-- MESSAGE) and taking dead-lettered messages back (REPLAY DLQ).
--
-- Global lock order (seed): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. The browse readers take no
-- locks at all: a browse never moves a cursor and never touches a lease.
-- The replay's locks are listed at it.
--
-- Messages live framed and compressed in log_segments.blob, so these
-- readers return whole segments and the consumer state beside them; the
-- engine decodes the frames (src/engine/frame.rs) and decides each
-- message's state, exactly as POP decodes what log_pop_v1 returns.

-- The group's state beside each segment comes from log_browse_state_v2
-- (032: it reads shared groups' records too).

-- SHOW MESSAGES FROM queue [PARTITION p] [GROUP g] [FROM ...] [LIMIT k]:
-- the segments holding the first p_limit messages at or after the start, in
-- every partition (or the one named) by partition name, then offset, each
-- with the group's state on its partition. The start is p_from_offset, or,
-- with p_from_time, the first segment whose newest message is at or after
-- it (the engine drops the older frames of that segment; from_offset and
-- from_time come back so it knows where to cut). In time mode the first
-- segment of a partition counts one message toward p_limit: how many of its
-- messages qualify is known only after decoding, and at least its newest
-- does. So the engine may get more segments than it needs, never fewer
-- messages than exist, and never more than p_limit segments.
-- p_group NULL is queue mode ('__QUEUE_MODE__').
-- Errors: 42704 unknown queue, partition or group (a named group that never
-- popped the queue); 22023 p_limit < 1 or p_from_offset < 0. Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_browse_v2(
    p_queue       TEXT,
    p_partition   TEXT DEFAULT NULL,
    p_group       TEXT DEFAULT NULL,
    p_from_offset BIGINT DEFAULT NULL,
    p_from_time   TIMESTAMPTZ DEFAULT NULL,
    p_limit       INTEGER DEFAULT 100,
    p_tenant      UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
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
DECLARE
    v_queue_id UUID;
    v_group    TEXT := COALESCE(p_group, '__QUEUE_MODE__');
    v_left     BIGINT := p_limit;
    v_part     RECORD;
    v_seg      RECORD;
    v_state    RECORD;
    v_from     BIGINT;
    v_first    BOOLEAN;
    v_found    BOOLEAN := false;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be at least 1' USING ERRCODE = '22023';
    END IF;
    IF p_from_offset < 0 THEN
        RAISE EXCEPTION 'offset must be 0 or more, got %', p_from_offset USING ERRCODE = '22023';
    END IF;
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    IF v_group <> '__QUEUE_MODE__' AND NOT EXISTS (
        SELECT 1 FROM queen.consumer_groups_metadata m
        WHERE m.queue_id = v_queue_id AND m.consumer_group = v_group) THEN
        RAISE EXCEPTION 'consumer group "%" does not exist on queue "%"', v_group, p_queue
            USING ERRCODE = '42704';
    END IF;

    FOR v_part IN
        SELECT p.id, p.name FROM queen.log_partitions p
        WHERE p.queue_id = v_queue_id AND (p_partition IS NULL OR p.name = p_partition)
        ORDER BY p.name
    LOOP
        v_found := true;
        v_from := CASE WHEN p_from_time IS NOT NULL
                       THEN queen.log_cursor_at_v1(v_part.id, p_from_time, p_tenant) + 1
                       ELSE COALESCE(p_from_offset, 0) END;
        SELECT * INTO v_state FROM queen.log_browse_state_v2(v_part.id, v_group);
        v_first := true;
        FOR v_seg IN
            SELECT s.base_offset, s.message_count, s.blob
            FROM queen.log_segments s
            WHERE s.partition_id = v_part.id
              AND s.base_offset >= COALESCE(
                      (SELECT max(s2.base_offset) FROM queen.log_segments s2
                       WHERE s2.partition_id = v_part.id AND s2.base_offset <= v_from),
                      v_from)
              AND s.base_offset + s.message_count - 1 >= v_from
            ORDER BY s.base_offset
        LOOP
            partition_name := v_part.name;
            base_offset := v_seg.base_offset;
            message_count := v_seg.message_count;
            blob := v_seg.blob;
            from_offset := v_from;
            from_time := p_from_time;
            cursor_offset := v_state.cursor_offset;
            lease_from := v_state.lease_from;
            lease_to := v_state.lease_to;
            lease_acked := v_state.lease_acked;
            dead_lettered := v_state.dead_lettered;
            leased := v_state.leased;
            RETURN NEXT;
            IF v_first AND p_from_time IS NOT NULL THEN
                v_left := v_left - 1;
            ELSE
                v_left := v_left - (v_seg.base_offset + v_seg.message_count
                                    - GREATEST(v_seg.base_offset, v_from));
            END IF;
            v_first := false;
            EXIT WHEN v_left <= 0;
        END LOOP;
        EXIT WHEN v_left <= 0;
    END LOOP;
    IF p_partition IS NOT NULL AND NOT v_found THEN
        RAISE EXCEPTION 'partition "%" does not exist in queue "%"', p_partition, p_queue
            USING ERRCODE = '42704';
    END IF;
END
$$;

-- log_browse_v2 without `leased` (a shared group's messages above its
-- start read as pending).
CREATE OR REPLACE FUNCTION queen.log_browse_v1(
    p_queue       TEXT,
    p_partition   TEXT DEFAULT NULL,
    p_group       TEXT DEFAULT NULL,
    p_from_offset BIGINT DEFAULT NULL,
    p_from_time   TIMESTAMPTZ DEFAULT NULL,
    p_limit       INTEGER DEFAULT 100,
    p_tenant      UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
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
    SELECT b.partition_name, b.base_offset, b.message_count, b.blob, b.from_offset,
           b.from_time, b.cursor_offset, b.lease_from, b.lease_to,
           CASE WHEN b.leased IS NULL THEN b.lease_acked END, b.dead_lettered
    FROM queen.log_browse_v2(p_queue, p_partition, p_group, p_from_offset, p_from_time,
                             p_limit, p_tenant) b
$$;

-- SHOW MESSAGE 'id' FROM queue [GROUP g]: the segments of the queue that
-- may hold the message, found by time: a message id is a UUIDv7 whose
-- millisecond timestamp the engine passes as p_around, and the frame's
-- created_at was taken by the same proxy within the same instant, so the
-- message's segment has min_created_at <= p_around + 1 s and
-- max_created_at >= p_around - 1 s. The engine decodes them and keeps the
-- frame with the id (log_txns is not used: retention prunes it). Cost: a
-- scan of the queue's segment rows (not their blobs); log_segments has no
-- time index by design (the seed's: the PK is the pop path).
-- Errors: 42704 unknown queue or group, as log_browse_v1. Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_browse_message_v2(
    p_queue  TEXT,
    p_around TIMESTAMPTZ,
    p_group  TEXT DEFAULT NULL,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
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
DECLARE
    v_queue_id UUID;
    v_group    TEXT := COALESCE(p_group, '__QUEUE_MODE__');
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    IF v_group <> '__QUEUE_MODE__' AND NOT EXISTS (
        SELECT 1 FROM queen.consumer_groups_metadata m
        WHERE m.queue_id = v_queue_id AND m.consumer_group = v_group) THEN
        RAISE EXCEPTION 'consumer group "%" does not exist on queue "%"', v_group, p_queue
            USING ERRCODE = '42704';
    END IF;
    RETURN QUERY
    SELECT p.name::TEXT, s.base_offset, s.message_count, s.blob, s.base_offset, NULL::TIMESTAMPTZ,
           st.cursor_offset, st.lease_from, st.lease_to, st.lease_acked, st.dead_lettered, st.leased
    FROM queen.log_partitions p
    JOIN queen.log_segments s ON s.partition_id = p.id
    CROSS JOIN LATERAL queen.log_browse_state_v2(p.id, v_group) st
    WHERE p.queue_id = v_queue_id
      AND s.min_created_at <= p_around + INTERVAL '1 second'
      AND s.max_created_at >= p_around - INTERVAL '1 second'
    ORDER BY p.name, s.base_offset;
END
$$;

-- log_browse_message_v2 without `leased`.
CREATE OR REPLACE FUNCTION queen.log_browse_message_v1(
    p_queue  TEXT,
    p_around TIMESTAMPTZ,
    p_group  TEXT DEFAULT NULL,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
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
    SELECT b.partition_name, b.base_offset, b.message_count, b.blob, b.from_offset,
           b.from_time, b.cursor_offset, b.lease_from, b.lease_to,
           CASE WHEN b.leased IS NULL THEN b.lease_acked END, b.dead_lettered
    FROM queen.log_browse_message_v2(p_queue, p_around, p_group, p_tenant) b
$$;

-- REPLAY DLQ FROM queue [PARTITION p] [GROUP g] [WHERE reason LIKE x]
-- [LIMIT n], first half: takes up to p_limit of the queue's dead-lettered
-- messages out of log_dlq, by partition and offset (so replayed messages
-- keep their order), and returns each with its segment, from which the
-- engine takes the frame and pushes it again through log_push_v1 in the
-- SAME transaction (the engine ends both with one commit: a crash leaves
-- each message either still in the DLQ or replayed, never both, never
-- neither). Rows whose segment was already gone when they were
-- dead-lettered (blob NULL) have no payload to replay and stay.
-- Concurrent replays split the rows between them: a row another replay has
-- taken is stepped over (SKIP LOCKED), so each row is replayed once.
-- Errors: 42704 unknown queue or partition; 22023 p_limit < 1.
-- Locks, in order (the push that follows takes the same ones again, which
-- acquires nothing new, then its leaves):
--   1. advisory: the queue key SHARED (excludes DROP QUEUE, which deletes
--      DLQ rows holding it exclusively);
--   2. log_partitions: the partitions of the candidate rows, id ascending,
--      FOR NO KEY UPDATE (the push's own lock, taken before the leaf);
--   3. leaf log_dlq: the rows taken, FOR UPDATE SKIP LOCKED, deleted.
CREATE OR REPLACE FUNCTION queen.dlq_replay_take_v1(
    p_queue       TEXT,
    p_partition   TEXT DEFAULT NULL,
    p_group       TEXT DEFAULT NULL,
    p_reason_like TEXT DEFAULT NULL,
    p_limit       INTEGER DEFAULT 100,
    p_tenant      UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    partition_name TEXT,
    message_offset BIGINT,
    consumer_group TEXT,
    reason         TEXT,
    base_offset    BIGINT,
    blob           BYTEA
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id UUID;
    v_pids     BIGINT[];
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be at least 1' USING ERRCODE = '22023';
    END IF;
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    IF p_partition IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM queen.log_partitions p
        WHERE p.queue_id = v_queue_id AND p.name = p_partition) THEN
        RAISE EXCEPTION 'partition "%" does not exist in queue "%"', p_partition, p_queue
            USING ERRCODE = '42704';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(v_queue_id));

    SELECT array_agg(DISTINCT d.partition_id) INTO v_pids
    FROM queen.log_dlq d
    JOIN queen.log_partitions p ON p.id = d.partition_id
    WHERE p.queue_id = v_queue_id
      AND (p_partition IS NULL OR p.name = p_partition)
      AND (p_group IS NULL OR d.consumer_group = p_group)
      AND (p_reason_like IS NULL OR d.reason LIKE p_reason_like)
      AND d.blob IS NOT NULL;
    IF v_pids IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM queen.log_partitions p
    WHERE p.id = ANY (v_pids)
    ORDER BY p.id
    FOR NO KEY UPDATE;

    RETURN QUERY
    WITH taken AS (
        SELECT d.id
        FROM queen.log_dlq d
        WHERE d.partition_id = ANY (v_pids)
          AND (p_group IS NULL OR d.consumer_group = p_group)
          AND (p_reason_like IS NULL OR d.reason LIKE p_reason_like)
          AND d.blob IS NOT NULL
        ORDER BY d.partition_id, d.message_offset, d.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM queen.log_dlq d
        USING taken t
        WHERE d.id = t.id
        RETURNING d.partition_id, d.message_offset, d.consumer_group, d.reason, d.base_offset,
                  d.blob, d.id
    )
    SELECT p.name::TEXT, g.message_offset, g.consumer_group::TEXT, g.reason, g.base_offset, g.blob
    FROM gone g
    JOIN queen.log_partitions p ON p.id = g.partition_id
    ORDER BY p.id, g.message_offset, g.id;
END
$$;
