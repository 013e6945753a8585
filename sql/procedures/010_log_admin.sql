-- 010_log_admin: SEEK, DROP GROUP, the DLQ reader and the SHOW readers.
--
-- Global lock order (seed): kv -> log_timers -> advisory -> queues (a
-- queue's consumer_groups_metadata rows sit with it, see schema.sql) ->
-- log_partitions -> log_consumers -> leaves (hotlist_repairs, log_dlq, ...).
-- The advisory keys are described at the top of 001_log_schema.sql. Every
-- reader here joins queen.queues on the tenant, which is also the
-- queue-existence guard.

-- Announces a deliberate cursor move in queen.hotlist_repairs. Prunes rows
-- older than an hour first, stepping over rows another writer holds (SKIP
-- LOCKED), so two writers pruning each other's rows cannot deadlock. Then
-- upserts the (tenant, queue, group) row; two repairs naming different
-- partitions widen to NULL (the whole queue) rather than one being lost.
-- Locks: hotlist_repairs rows only (a leaf, the caller's last step).
CREATE OR REPLACE FUNCTION queen.log_hotlist_repair_v1(
    p_queue     TEXT,
    p_group     TEXT,
    p_partition TEXT,
    p_reason    TEXT,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS VOID
LANGUAGE sql
AS $$
    DELETE FROM queen.hotlist_repairs h
    WHERE h.ctid IN (SELECT r.ctid FROM queen.hotlist_repairs r
                     WHERE r.repair_at < clock_timestamp() - INTERVAL '1 hour'
                     FOR UPDATE SKIP LOCKED);
    INSERT INTO queen.hotlist_repairs AS h
        (tenant_id, queue_name, consumer_group, partition_name, repair_at, reason)
    VALUES (p_tenant, p_queue, p_group, p_partition, clock_timestamp(), p_reason)
    ON CONFLICT (tenant_id, queue_name, consumer_group) DO UPDATE
    SET partition_name = CASE WHEN h.partition_name IS NOT DISTINCT FROM EXCLUDED.partition_name
                              THEN h.partition_name END,
        repair_at = EXCLUDED.repair_at,
        reason = EXCLUDED.reason;
$$;

-- SEEK GROUP: moves the group's cursor on every partition of the queue (or
-- the one named) to 'beginning' (-1), 'end' (the partition's last offset
-- now) or 'timestamp' (before the first segment whose newest message is at
-- or after p_at, see queen.log_cursor_at_v1); releases the group's leases
-- there (their receipts become stale), clears retry counts and retry
-- delays, and announces the move in hotlist_repairs. Returns the number of
-- partitions moved. The group's subscription stays as first recorded.
-- Errors: 42704 unknown queue, group (never popped) or partition; 22023 bad
-- target.
-- Partitions created while the call runs are not moved (their cursors start
-- by the group's subscription).
-- Locks, in order:
--   1. advisory: the queue key SHARED, then the (partition, group) keys,
--      ascending key order, blocking (a concurrent first-sight POP then
--      skips those partitions);
--   2. consumer_groups_metadata: the group's row FOR KEY SHARE (waits for a
--      DROP GROUP in flight, after which the group is unknown: 42704);
--   3. log_partitions: FOR KEY SHARE, id ascending (the consumer-row
--      inserts' foreign key; does not conflict with pushes);
--   4. log_consumers: upsert per partition, id ascending, FOR UPDATE; then
--      that partition's log_shared_records rows of the group (delete);
--   5. leaf hotlist_repairs.
CREATE OR REPLACE FUNCTION queen.log_seek_group_v1(
    p_queue     TEXT,
    p_group     TEXT,
    p_partition TEXT DEFAULT NULL,
    p_target    TEXT DEFAULT 'beginning',
    p_at        TIMESTAMPTZ DEFAULT NULL,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue_id UUID;
    v_pids     BIGINT[];
    v_locked   BIGINT[];
    v_row      RECORD;
    v_pid      BIGINT;
    v_cursor   BIGINT;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_target IS NULL OR p_target NOT IN ('beginning', 'end', 'timestamp')
       OR (p_target = 'timestamp' AND p_at IS NULL) THEN
        RAISE EXCEPTION 'seek target must be beginning, end or timestamp (with a time)'
            USING ERRCODE = '22023';
    END IF;
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    SELECT array_agg(p.id ORDER BY p.id) INTO v_pids
    FROM queen.log_partitions p
    WHERE p.queue_id = v_queue_id AND (p_partition IS NULL OR p.name = p_partition);
    IF p_partition IS NOT NULL AND v_pids IS NULL THEN
        RAISE EXCEPTION 'partition "%" does not exist in queue "%"', p_partition, p_queue
            USING ERRCODE = '42704';
    END IF;

    PERFORM pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(v_queue_id));
    PERFORM pg_advisory_xact_lock(k.k1, hashtext(p_group))
    FROM (SELECT (u.id % 2147483648)::INTEGER AS k1, u.id
          FROM unnest(v_pids) AS u(id)
          ORDER BY 1, 2) k;

    PERFORM 1 FROM queen.consumer_groups_metadata m
    WHERE m.queue_id = v_queue_id AND m.consumer_group = p_group
    FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer group "%" does not exist on queue "%"', p_group, p_queue
            USING ERRCODE = '42704';
    END IF;

    v_locked := '{}';
    FOR v_row IN
        SELECT p.id
        FROM queen.log_partitions p
        WHERE p.id = ANY (v_pids)
        ORDER BY p.id
        FOR KEY SHARE
    LOOP
        v_locked := v_locked || v_row.id;
    END LOOP;

    FOREACH v_pid IN ARRAY v_locked LOOP
        v_cursor := CASE p_target
            WHEN 'beginning' THEN -1
            WHEN 'end' THEN (SELECT p.last_offset FROM queen.log_partitions p WHERE p.id = v_pid)
            ELSE COALESCE(queen.log_cursor_at_v1(v_pid, p_at, p_tenant), -1)
        END;
        INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, cursor_offset)
        VALUES (v_pid, p_group, v_cursor)
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
        SET cursor_offset = EXCLUDED.cursor_offset, retry_count = 0, lease_token = NULL,
            lease_expires_at = NULL, batch_from = NULL, batch_to = NULL, batch_acked = NULL,
            blocked_until = NULL, purge_below = NULL, purge_at = NULL;
        -- A shared group (032) starts afresh from the new position: its
        -- messages' leases, retries and out-of-order acknowledgements go.
        DELETE FROM queen.log_shared_records r
        WHERE r.partition_id = v_pid AND r.consumer_group = p_group;
    END LOOP;

    PERFORM queen.log_hotlist_repair_v1(p_queue, p_group, p_partition, 'seek', p_tenant);
    RETURN cardinality(v_locked);
END
$$;

-- DROP GROUP: removes the group's cursors and its metadata (its next POP
-- subscribes afresh) and announces it in hotlist_repairs. DLQ snapshots of
-- the group stay. Returns the number of cursors removed.
-- Errors: 42704 unknown queue or group.
-- Locks, in order:
--   1. advisory: the queue key SHARED, then the (partition, group) keys of
--      the queue's partitions, ascending key order, blocking;
--   2. consumer_groups_metadata: the group's row FOR UPDATE, so no SEEK or
--      POP can create a cursor of the group until this commits;
--   3. log_consumers: the group's rows, partition_id ascending, FOR UPDATE;
--   4. leaf hotlist_repairs.
CREATE OR REPLACE FUNCTION queen.log_drop_group_v1(
    p_queue  TEXT,
    p_group  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue_id UUID;
    v_row      RECORD;
    v_pids     BIGINT[] := '{}';
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;

    PERFORM pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(v_queue_id));
    PERFORM pg_advisory_xact_lock(k.k1, hashtext(p_group))
    FROM (SELECT (p.id % 2147483648)::INTEGER AS k1, p.id
          FROM queen.log_partitions p
          WHERE p.queue_id = v_queue_id
          ORDER BY 1, 2) k;

    PERFORM 1 FROM queen.consumer_groups_metadata m
    WHERE m.queue_id = v_queue_id AND m.consumer_group = p_group
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer group "%" does not exist on queue "%"', p_group, p_queue
            USING ERRCODE = '42704';
    END IF;

    FOR v_row IN
        SELECT c.partition_id
        FROM queen.log_consumers c
        JOIN queen.log_partitions p ON p.id = c.partition_id
        WHERE p.queue_id = v_queue_id AND c.consumer_group = p_group
        ORDER BY c.partition_id
        FOR UPDATE OF c
    LOOP
        v_pids := v_pids || v_row.partition_id;
    END LOOP;

    DELETE FROM queen.log_consumers c
    WHERE c.partition_id = ANY (v_pids) AND c.consumer_group = p_group;
    DELETE FROM queen.consumer_groups_metadata m
    WHERE m.queue_id = v_queue_id AND m.consumer_group = p_group;
    PERFORM queen.log_hotlist_repair_v1(p_queue, p_group, NULL, 'drop_group', p_tenant);
    RETURN cardinality(v_pids);
END
$$;

-- SHOW DLQ: the queue's dead-lettered messages, newest first, at most
-- p_limit. The engine decodes each message (id, payload) from blob starting
-- at base_offset; blob is NULL when retention removed the segment before the
-- message was dead-lettered.
-- Errors: 42704 unknown queue; 22023 p_limit < 1. Takes no locks.
CREATE OR REPLACE FUNCTION queen.get_dlq_messages_v1(
    p_queue  TEXT,
    p_limit  INTEGER DEFAULT 100,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    message_offset BIGINT,
    partition_name TEXT,
    consumer_group TEXT,
    reason         TEXT,
    retry_count    INTEGER,
    failed_at      TIMESTAMPTZ,
    base_offset    BIGINT,
    blob           BYTEA
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id UUID;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be at least 1' USING ERRCODE = '22023';
    END IF;
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    RETURN QUERY
    SELECT d.message_offset, p.name::TEXT, d.consumer_group::TEXT, d.reason, d.retry_count,
           d.failed_at, d.base_offset, d.blob
    FROM queen.log_partitions p
    JOIN queen.log_dlq d ON d.partition_id = p.id
    WHERE p.queue_id = v_queue_id
    ORDER BY d.failed_at DESC, d.id DESC
    LIMIT p_limit;
END
$$;

-- SHOW QUEUES: per queue of the tenant, by name:
--   partitions     partition rows;
--   messages       retained messages (last_offset - first_offset + 1 per
--                  partition);
--   pending        not yet acknowledged by the furthest-behind group, all
--                  retained messages while no group has popped
--                  (queen.log_queue_pending_v1);
--   dead_lettered  DLQ snapshots (one per message and group).
-- Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_show_queues_v1(
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queue         TEXT,
    partitions    BIGINT,
    messages      BIGINT,
    pending       BIGINT,
    dead_lettered BIGINT,
    created_at    TIMESTAMPTZ
)
LANGUAGE sql STABLE
AS $$
    SELECT q.name::TEXT,
           (SELECT count(*) FROM queen.log_partitions p WHERE p.queue_id = q.id),
           (SELECT COALESCE(sum(GREATEST(p.last_offset - p.first_offset + 1, 0)), 0)::BIGINT
            FROM queen.log_partitions p WHERE p.queue_id = q.id),
           queen.log_queue_pending_v1(q.id, q.tenant_id),
           (SELECT count(*) FROM queen.log_partitions p
            JOIN queen.log_dlq d ON d.partition_id = p.id
            WHERE p.queue_id = q.id),
           q.created_at
    FROM queen.queues q
    WHERE queen.tenant_guard_v1(p_tenant) AND q.tenant_id = p_tenant
    ORDER BY q.name
$$;

-- SHOW PARTITIONS FROM queue: per partition, by name: retained messages, the
-- last offset assigned (-1 while empty) and the last write (NULL while
-- never written).
-- Errors: 42704 unknown queue. Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_show_partitions_v1(
    p_queue  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    partition_name TEXT,
    messages       BIGINT,
    last_offset    BIGINT,
    last_write_at  TIMESTAMPTZ
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id UUID;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    RETURN QUERY
    SELECT p.name::TEXT, GREATEST(p.last_offset - p.first_offset + 1, 0), p.last_offset,
           p.last_write_at
    FROM queen.log_partitions p
    WHERE p.queue_id = v_queue_id
    ORDER BY p.name;
END
$$;

-- SHOW GROUPS [ON queue]: per (queue, group) the tenant's queues know, by
-- queue then group:
--   partitions         partitions the group has a cursor on;
--   lag                retained messages after the group's cursor (a
--                      shared group's start, less what it finished above
--                      it: log_group_lag_v1), summed over the queue's
--                      partitions; a partition the group has not met yet
--                      counts from where its subscription would start it;
--   oldest_pending_at  created_at of the oldest message the group has not
--                      acknowledged (segment granularity: the first pending
--                      segment's oldest message); NULL when none;
--   leased_partitions  partitions the group holds a live lease on (a
--                      shared group: a live lease on a message there).
-- Errors: 42704 unknown queue (when named). Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_show_groups_v1(
    p_queue  TEXT DEFAULT NULL,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queue             TEXT,
    consumer_group    TEXT,
    partitions        BIGINT,
    lag               BIGINT,
    oldest_pending_at TIMESTAMPTZ,
    leased_partitions BIGINT
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_queue IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue) THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    RETURN QUERY
    SELECT q.name::TEXT,
           m.consumer_group::TEXT,
           count(c.partition_id),
           COALESCE(sum(l.lag), 0)::BIGINT,
           min(y.oldest) FILTER (WHERE l.lag > 0),
           count(*) FILTER (WHERE (c.lease_token IS NOT NULL AND c.lease_expires_at > now())
                                  OR l.leased)
    FROM queen.queues q
    JOIN queen.consumer_groups_metadata m ON m.queue_id = q.id
    LEFT JOIN queen.log_partitions p ON p.queue_id = q.id
    LEFT JOIN queen.log_consumers c
           ON c.partition_id = p.id AND c.consumer_group = m.consumer_group
    LEFT JOIN LATERAL (
        SELECT COALESCE(c.cursor_offset,
                        queen.log_cursor_at_v1(p.id, m.subscription_at, q.tenant_id)) AS cur
    ) x ON p.id IS NOT NULL
    LEFT JOIN LATERAL queen.log_group_lag_v1(
        p.id, m.consumer_group, x.cur, p.first_offset, p.last_offset
    ) l ON p.id IS NOT NULL
    LEFT JOIN LATERAL (
        SELECT s.min_created_at AS oldest
        FROM queen.log_segments s
        WHERE s.partition_id = p.id
          AND s.base_offset >= COALESCE(
                  (SELECT max(s2.base_offset) FROM queen.log_segments s2
                   WHERE s2.partition_id = p.id AND s2.base_offset <= x.cur + 1),
                  x.cur + 1)
          AND s.base_offset + s.message_count - 1 > x.cur
        ORDER BY s.base_offset
        LIMIT 1
    ) y ON p.id IS NOT NULL
    WHERE q.tenant_id = p_tenant AND (p_queue IS NULL OR q.name = p_queue)
    GROUP BY q.name, m.consumer_group
    ORDER BY q.name, m.consumer_group;
END
$$;
