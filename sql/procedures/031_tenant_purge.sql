-- 031_tenant_purge: the tenant purge (seed 000: "031 the tenant purge").
-- Removes everything of one tenant in bounded steps, each its own
-- transaction: queen.tenant_purge_step_v1 does at most p_batch rows of
-- work per table it touches and reports what it removed and whether
-- anything remains. The engine (PURGE TENANT) calls it until done.
--
-- Resumable by construction: there is no progress record. What is left
-- to delete IS the progress, so a crash between steps (or a purge stopped
-- halfway) leaves a state from which calling the step again finishes the
-- job. Every statement filters by p_tenant (directly, or through the
-- tenant's queue ids), so no other tenant's row is ever locked or deleted.
--
-- Phases, in the global lock order (kv -> log_timers -> advisory ->
-- queues -> log_partitions -> log_consumers -> leaves); one step runs ONE
-- phase, the first that still has rows, so a step never acquires a KV or
-- timer lock after a queue lock:
--   1. queen.kv rows, (namespace, key) ascending COLLATE "C", FOR UPDATE;
--   2. queen.log_timers rows, (queue_name, timer_key) ascending, FOR UPDATE;
--   2b. the tenant's streams: open windows, then progress and registry rows;
--   3. one queue (the tenant's lowest id): its advisory key EXCLUSIVE, as
--      queen.delete_queue_v1 takes it (waits for pushes, acks, seeks in
--      flight and holds off new ones; pops skip the queue), then the
--      queues row FOR UPDATE, then
--        a. leaves: log_txns, log_dlq, log_segments of its partitions,
--           up to p_batch rows each (the advisory key keeps every writer of
--           those partitions out, so no partition lock is needed);
--        b. once no leaf row is left: up to p_batch partitions, id
--           ascending FOR UPDATE, their log_consumers ascending FOR UPDATE,
--           deleted (the cascade takes the consumer rows already held);
--        c. once no partition is left: the consumer_groups_metadata rows
--           and the queues row (the cascade takes queue_ops_metrics and
--           queue_retained_bytes, leaves).
--   4. the tenant's hotlist_repairs, kv_usage, kv_quota and tenant_roles
--      rows (leaves, keyed by tenant; one statement each).
-- A PUSH racing the purge either commits before the step that deletes its
-- queue (and its rows are deleted by a later step of the same purge) or
-- re-provisions the queue afterwards: a new queue, which the purge leaves
-- alone. Phase 3 takes only the queues created before the purge's first
-- step began (p_before: that step's `started`, which the caller passes to
-- every later step), so a producer that keeps pushing neither loses the
-- pushes of a queue it re-created nor keeps the purge going. The
-- PostgreSQL roles themselves are not dropped: roles are cluster-wide and
-- may serve another database; only the mapping goes.

-- When a queue row was made (database clock at the insert), so that a
-- purge can tell the queues it found from those re-created meanwhile.
ALTER TABLE queen.queues ADD COLUMN IF NOT EXISTS created_at TIMESTAMPTZ NOT NULL
    DEFAULT clock_timestamp();

DROP FUNCTION IF EXISTS queen.tenant_purge_step_v1(UUID, INTEGER);
CREATE OR REPLACE FUNCTION queen.tenant_purge_step_v1(
    p_tenant UUID,
    p_batch  INTEGER,
    p_before TIMESTAMPTZ DEFAULT NULL
) RETURNS TABLE (
    kv_keys    BIGINT,
    timers     BIGINT,
    queues     BIGINT,
    partitions BIGINT,
    segments   BIGINT,
    messages   BIGINT,
    dlq        BIGINT,
    done       BOOLEAN,
    started    TIMESTAMPTZ
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue_id UUID;
    v_pids     BIGINT[];
    v_n        BIGINT;
    v_row      RECORD;
BEGIN
    IF p_tenant IS NULL OR p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION 'tenant_purge_step_v1: a tenant and a batch of at least 1 are required'
            USING ERRCODE = '22023';
    END IF;
    kv_keys := 0; timers := 0; queues := 0; partitions := 0;
    segments := 0; messages := 0; dlq := 0; done := false;
    started := COALESCE(p_before, clock_timestamp());

    -- 1. KV.
    WITH victims AS (
        SELECT k.namespace, k.key FROM queen.kv k
        WHERE k.tenant_id = p_tenant
        ORDER BY k.namespace COLLATE "C", k.key COLLATE "C"
        LIMIT p_batch
        FOR UPDATE
    ), gone AS (
        DELETE FROM queen.kv k USING victims v
        WHERE k.tenant_id = p_tenant AND k.namespace = v.namespace AND k.key = v.key
        RETURNING 1
    )
    SELECT count(*) INTO kv_keys FROM gone;
    IF kv_keys > 0 THEN
        RETURN NEXT;
        RETURN;
    END IF;

    -- 2. Timers.
    WITH victims AS (
        SELECT t.queue_name, t.timer_key FROM queen.log_timers t
        WHERE t.tenant_id = p_tenant
        ORDER BY t.queue_name COLLATE "C", t.timer_key COLLATE "C"
        LIMIT p_batch
        FOR UPDATE
    ), gone AS (
        DELETE FROM queen.log_timers t USING victims v
        WHERE t.tenant_id = p_tenant AND t.queue_name = v.queue_name
          AND t.timer_key = v.timer_key
        RETURNING 1
    )
    SELECT count(*) INTO timers FROM gone;
    IF timers > 0 THEN
        RETURN NEXT;
        RETURN;
    END IF;

    -- 2b. Streams (002: the stream tables sit between the timers and the
    -- advisory keys), so no runner re-reads a source being purged: up to
    -- p_batch open windows a step; once none is left, the progress rows
    -- and the registry rows (FOR UPDATE: waits for a running cycle).
    WITH victims AS (
        SELECT st.stream_id, st.partition_id, st.window_start, st.key
        FROM queen.stream_state st
        JOIN queen.streams s ON s.id = st.stream_id
        WHERE s.tenant_id = p_tenant
        LIMIT p_batch
    ), gone AS (
        DELETE FROM queen.stream_state st USING victims v
        WHERE st.stream_id = v.stream_id AND st.partition_id = v.partition_id
          AND st.window_start = v.window_start AND st.key = v.key
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM gone;
    IF v_n > 0 THEN
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM 1 FROM queen.streams s WHERE s.tenant_id = p_tenant ORDER BY s.id FOR UPDATE;
    -- A cycle that was running when the windows above were counted may
    -- have committed new ones while this step waited for the rows (seen as
    -- a flaky purge test): with the streams held no cycle writes any more,
    -- and this statement's snapshot sees what one wrote.
    DELETE FROM queen.stream_state st
    USING queen.streams s
    WHERE s.id = st.stream_id AND s.tenant_id = p_tenant;
    DELETE FROM queen.stream_partitions sp
    USING queen.streams s
    WHERE s.id = sp.stream_id AND s.tenant_id = p_tenant;
    DELETE FROM queen.streams s WHERE s.tenant_id = p_tenant;

    -- 3. One queue.
    SELECT q.id INTO v_queue_id FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.created_at < started
    ORDER BY q.id LIMIT 1;
    IF FOUND THEN
        PERFORM pg_advisory_xact_lock(queen.log_queue_lock_key_v1(v_queue_id));
        PERFORM 1 FROM queen.queues q
        WHERE q.id = v_queue_id AND q.tenant_id = p_tenant FOR UPDATE;
        IF NOT FOUND THEN
            RETURN NEXT;  -- dropped meanwhile: the next step takes the next
            RETURN;
        END IF;
        SELECT coalesce(array_agg(p.id ORDER BY p.id), '{}') INTO v_pids
        FROM queen.log_partitions p WHERE p.queue_id = v_queue_id;

        -- a. Leaves.
        WITH victims AS (
            SELECT t.partition_id, t.base_offset FROM queen.log_txns t
            WHERE t.partition_id = ANY (v_pids)
            ORDER BY t.partition_id, t.base_offset LIMIT p_batch
        ), gone AS (
            DELETE FROM queen.log_txns t USING victims v
            WHERE t.partition_id = v.partition_id AND t.base_offset = v.base_offset
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM gone;
        WITH victims AS (
            SELECT d.id FROM queen.log_dlq d
            WHERE d.partition_id = ANY (v_pids) ORDER BY d.id LIMIT p_batch
        ), gone AS (
            DELETE FROM queen.log_dlq d USING victims v WHERE d.id = v.id
            RETURNING 1
        )
        SELECT count(*) INTO dlq FROM gone;
        WITH victims AS (
            SELECT s.partition_id, s.base_offset FROM queen.log_segments s
            WHERE s.partition_id = ANY (v_pids)
            ORDER BY s.partition_id, s.base_offset LIMIT p_batch
        ), gone AS (
            DELETE FROM queen.log_segments s USING victims v
            WHERE s.partition_id = v.partition_id AND s.base_offset = v.base_offset
            RETURNING s.message_count
        )
        SELECT count(*), coalesce(sum(g.message_count), 0) INTO segments, messages FROM gone g;
        IF v_n + dlq + segments > 0 THEN
            RETURN NEXT;
            RETURN;
        END IF;

        -- b. Partitions (and their consumers), once empty.
        IF cardinality(v_pids) > 0 THEN
            v_pids := v_pids[1:p_batch];
            PERFORM 1 FROM queen.log_partitions p
            WHERE p.id = ANY (v_pids) ORDER BY p.id FOR UPDATE;
            FOR v_row IN
                SELECT c.partition_id FROM queen.log_consumers c
                WHERE c.partition_id = ANY (v_pids)
                ORDER BY c.partition_id, c.consumer_group
                FOR UPDATE
            LOOP
            END LOOP;
            DELETE FROM queen.log_partitions p WHERE p.id = ANY (v_pids);
            GET DIAGNOSTICS partitions = ROW_COUNT;
            RETURN NEXT;
            RETURN;
        END IF;

        -- c. The queue itself.
        FOR v_row IN
            SELECT m.consumer_group FROM queen.consumer_groups_metadata m
            WHERE m.queue_id = v_queue_id ORDER BY m.consumer_group FOR UPDATE
        LOOP
        END LOOP;
        DELETE FROM queen.queues q WHERE q.id = v_queue_id AND q.tenant_id = p_tenant;
        GET DIAGNOSTICS queues = ROW_COUNT;
        RETURN NEXT;
        RETURN;
    END IF;

    -- 4. Tenant-keyed leaves; then the purge is complete.
    DELETE FROM queen.hotlist_repairs h WHERE h.tenant_id = p_tenant;
    DELETE FROM queen.kv_usage u WHERE u.tenant_id = p_tenant;
    DELETE FROM queen.kv_quota u WHERE u.tenant_id = p_tenant;
    DELETE FROM queen.tenant_roles r WHERE r.tenant_id = p_tenant;
    done := true;
    RETURN NEXT;
END
$$;
