-- 013_analytics: queue deletion.

-- DROP QUEUE in one call and one transaction: the queue's log_txns and
-- log_dlq rows are deleted explicitly (both are FK-less by design, no
-- cascade reaches them), then the queues row, whose cascade takes
-- log_partitions -> log_segments / log_consumers, and
-- consumer_groups_metadata. Returns false when the queue does not exist
-- (the engine decides between DROP QUEUE IF EXISTS and 42704).
-- Locks, in order (every row the cascade deletes is already held, so the
-- cascade acquires nothing out of order):
--  -1. log_timers: the queue's unfired timers, deleted first (the global
--      order puts timer rows before every queue lock);
--   0. advisory: the queue key EXCLUSIVE: waits for the pushes, acks,
--      renewals, seeks and group drops in flight on the queue and holds off
--      new ones (pops skip the queue meanwhile), so no writer holding the
--      queue's partition or consumer rows can be waiting on this call (see
--      001_log_schema.sql for the foreign-key re-check this prevents);
--   1. queues: the row, FOR UPDATE (new partitions' foreign-key checks and
--      first-sight pops wait or skip); then its consumer_groups_metadata
--      rows, consumer_group ascending, FOR UPDATE;
--   2. log_partitions: the queue's rows, id ascending, FOR UPDATE (waits for
--      in-flight pushes; pops creating consumer rows skip them);
--   3. log_consumers: their rows, (partition_id, consumer_group) ascending,
--      FOR UPDATE (waits for in-flight acks, and for pops holding them in a
--      transaction block);
--   4. leaves: log_txns, log_dlq, then the cascade's log_segments.
CREATE OR REPLACE FUNCTION queen.delete_queue_v1(
    p_queue  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue_id UUID;
    v_pids     BIGINT[] := '{}';
    v_row      RECORD;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    SELECT q.id INTO v_queue_id FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- The queue's unfired timers go with it. Timer rows come before every
    -- queue lock in the global order, so they are taken first; a fire
    -- holding one of them finishes before this continues. (log_timers is
    -- created by 025, after this file: plpgsql resolves it at run time.)
    DELETE FROM queen.log_timers t
    WHERE t.tenant_id = p_tenant AND t.queue_name = p_queue;
    PERFORM pg_advisory_xact_lock(queen.log_queue_lock_key_v1(v_queue_id));
    PERFORM 1 FROM queen.queues q WHERE q.id = v_queue_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;  -- dropped by a concurrent call meanwhile
    END IF;
    FOR v_row IN
        SELECT m.consumer_group FROM queen.consumer_groups_metadata m
        WHERE m.queue_id = v_queue_id
        ORDER BY m.consumer_group
        FOR UPDATE
    LOOP
    END LOOP;

    FOR v_row IN
        SELECT p.id FROM queen.log_partitions p
        WHERE p.queue_id = v_queue_id
        ORDER BY p.id
        FOR UPDATE
    LOOP
        v_pids := v_pids || v_row.id;
    END LOOP;
    FOR v_row IN
        SELECT c.partition_id FROM queen.log_consumers c
        WHERE c.partition_id = ANY (v_pids)
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE
    LOOP
    END LOOP;

    DELETE FROM queen.log_txns t WHERE t.partition_id = ANY (v_pids);
    DELETE FROM queen.log_dlq d WHERE d.partition_id = ANY (v_pids);
    DELETE FROM queen.queues q WHERE q.id = v_queue_id;
    RETURN true;
END
$$;
