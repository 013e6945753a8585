-- 006_log_maintenance: the maintenance steps the engine runs in the
-- background (one elected queenwire at a time, see 029): max_wait expiry,
-- retention of segments, cleanup of empty partitions, and their history.
--
-- Lock order (seed 000's one global order: advisory -> queues ->
-- log_partitions -> log_consumers -> leaves). No step here ever waits on a
-- row of the push/pop path: every row lock is SKIP LOCKED, every advisory
-- lock a try-lock, so a busy partition is simply left for the next cycle.
--   log_expire_pending_v1          log_consumers SKIP LOCKED, ascending;
--                                  leaf log_dlq.
--   log_retention_step_v1          leaves log_segments, log_txns (deleting
--                                  what the previous step marked), then one
--                                  log_partitions row, FOR NO KEY UPDATE
--                                  SKIP LOCKED (the push allocator's own
--                                  mode), held only for a one-row UPDATE of
--                                  the watermarks. Reads log_consumers
--                                  unlocked.
--   log_partition_cleanup_step_v1  log_partitions FOR UPDATE SKIP LOCKED, id
--                                  ascending, in one statement; the queue
--                                  key EXCLUSIVE as a try-lock (001: the
--                                  partition deleter's key); log_consumers
--                                  FOR UPDATE SKIP LOCKED, ascending; then
--                                  the deletes (log_txns, the partition and
--                                  its cascade, all rows already held).
--   log_retention_record_v1        leaf retention_history only.
-- None of them takes a tenant: a maintenance pass spans every tenant, and
-- only queenwire's engine role may call them (034).

-- max_wait_time_seconds: messages a group has left pending longer than the
-- queue allows are moved to the DLQ for that group (a snapshot each, reason
-- 'max_wait_time exceeded'), and the group's cursor moves past them; they
-- are never silently deleted. Age is judged per segment by its newest
-- message (max_created_at), so a message is never expired early. Only
-- groups that have a cursor (have popped at least once) and whose partition
-- is not leased are considered; a leased batch is the consumer's until its
-- lease ends. A shared group (032) leases messages, not the partition: its
-- pending messages above the start go one by one, its leased ones stay
-- (queen.log_shared_expire_v1), at most its max_in_flight window a call.
-- Returns how many messages were dead-lettered, at most p_limit.
-- Locks: log_consumers rows FOR UPDATE SKIP LOCKED, (partition_id,
-- consumer_group) ascending (maintenance never waits on a consumer or a
-- pop); then, for a shared group, log_shared_records rows and advisory
-- keys, SKIP LOCKED and try-locks only; then the leaf log_dlq. No
-- partition or queue lock is taken.
CREATE OR REPLACE FUNCTION queen.log_expire_pending_v1(p_limit INTEGER)
RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_c        RECORD;
    v_from     BIGINT;
    v_last     BIGINT;
    v_moved    INTEGER;
    v_total    INTEGER := 0;
BEGIN
    FOR v_c IN
        SELECT c.partition_id, c.consumer_group, c.cursor_offset, c.retry_count,
               q.max_wait_time_seconds, q.dead_letter_queue, q.max_in_flight,
               p.first_offset, NOT COALESCE(m.ordered, q.ordered) AS shared
        FROM queen.log_consumers c
        JOIN queen.log_partitions p ON p.id = c.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
        LEFT JOIN queen.consumer_groups_metadata m
               ON m.queue_id = q.id AND m.consumer_group = c.consumer_group
        WHERE q.max_wait_time_seconds > 0
          AND c.lease_token IS NULL
          AND p.last_offset > c.cursor_offset
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE OF c SKIP LOCKED
    LOOP
        EXIT WHEN v_total >= p_limit;
        -- A shared group's start is read as at least first_offset - 1, as
        -- its POP reads it (032): retention took what lies below.
        v_from := CASE WHEN v_c.shared THEN GREATEST(v_c.cursor_offset, v_c.first_offset - 1)
                       ELSE v_c.cursor_offset END;
        -- The newest offset of the oldest run of expired segments after the
        -- cursor (segments are in offset order and, per partition, in
        -- write order, so their max_created_at grows with base_offset).
        SELECT max(s.base_offset + s.message_count - 1) INTO v_last
        FROM queen.log_segments s
        WHERE s.partition_id = v_c.partition_id
          AND s.base_offset + s.message_count - 1 > v_from
          AND s.max_created_at < v_now - make_interval(secs => v_c.max_wait_time_seconds);
        CONTINUE WHEN v_last IS NULL;
        v_last := LEAST(v_last, v_from + (p_limit - v_total));
        IF v_c.shared THEN
            v_total := v_total + queen.log_shared_expire_v1(
                v_c.partition_id, v_c.consumer_group, v_from,
                LEAST(v_last, v_from + v_c.max_in_flight),
                v_c.dead_letter_queue);
            CONTINUE;
        END IF;

        IF v_c.dead_letter_queue THEN
            INSERT INTO queen.log_dlq
                (partition_id, message_offset, consumer_group, reason, retry_count,
                 message_id, base_offset, blob)
            SELECT v_c.partition_id, o.off, v_c.consumer_group, 'max_wait_time exceeded',
                   v_c.retry_count, t.message_ids[o.off - s.base_offset + 1], s.base_offset, s.blob
            FROM generate_series(v_c.cursor_offset + 1, v_last) AS o(off)
            JOIN queen.log_segments s
              ON s.partition_id = v_c.partition_id
             AND o.off BETWEEN s.base_offset AND s.base_offset + s.message_count - 1
            LEFT JOIN queen.log_txns t
              ON t.partition_id = s.partition_id AND t.base_offset = s.base_offset;
        END IF;
        v_moved := (v_last - v_c.cursor_offset)::INTEGER;
        UPDATE queen.log_consumers c
        SET cursor_offset = v_last, retry_count = 0,
            failed_count = c.failed_count + CASE WHEN v_c.dead_letter_queue THEN 0 ELSE v_moved END
        WHERE c.partition_id = v_c.partition_id AND c.consumer_group = v_c.consumer_group;
        v_total := v_total + v_moved;
    END LOOP;
    RETURN v_total;
END
$$;

-- Segments of a partition every group has acknowledged: the lowest cursor
-- over the groups the queue knows (consumer_groups_metadata), where a known
-- group without a cursor on this partition counts as -1 (it has not started
-- here). NULL when the queue has no group at all: nothing has consumed
-- anything, so the completed rule never applies (SEMANTICS.md). The same
-- definition as queen.log_queue_pending_v1 (001). Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_partition_floor_v1(
    p_partition_id BIGINT
) RETURNS BIGINT
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN g.n = 0 THEN NULL
        WHEN f.n < g.n THEN -1::BIGINT
        ELSE f.floor_offset
    END
    FROM queen.log_partitions p
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM queen.consumer_groups_metadata m WHERE m.queue_id = p.queue_id
    ) g
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(c.cursor_offset) AS floor_offset
        FROM queen.log_consumers c WHERE c.partition_id = p.id
    ) f
    WHERE p.id = p_partition_id
$$;

-- The retention work list: partitions, id ascending after p_after, of
-- queues with retention enabled whose OLDEST segment is due under one of
-- the two rules (age: retention_seconds; completed: every group's cursor
-- past it and completed_retention_seconds old) or already below
-- first_offset (marked by a step, not yet purged). Only the head segment is
-- looked at (one primary-key probe per partition), so a pass costs the
-- partitions, not the segments. The engine pages through it and runs one
-- queen.log_retention_step_v1 per partition, each its own transaction.
-- Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_retention_work_v1(
    p_after BIGINT,
    p_limit INTEGER
) RETURNS TABLE (partition_id BIGINT)
LANGUAGE sql STABLE
AS $$
    SELECT p.id
    FROM queen.log_partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    CROSS JOIN LATERAL (
        SELECT s.base_offset, s.max_created_at, s.base_offset + s.message_count - 1 AS last_offset
        FROM queen.log_segments s
        WHERE s.partition_id = p.id
        ORDER BY s.base_offset
        LIMIT 1
    ) h
    WHERE p.id > p_after
      AND q.retention_enabled
      AND (h.base_offset < p.first_offset
        OR (q.retention_seconds > 0
            AND h.max_created_at < clock_timestamp() - make_interval(secs => q.retention_seconds))
        OR (q.completed_retention_seconds > 0
            AND h.max_created_at < clock_timestamp() - make_interval(secs => q.completed_retention_seconds)
            AND h.last_offset <= queen.log_partition_floor_v1(p.id)))
    ORDER BY p.id
    LIMIT p_limit
$$;

-- One bounded retention step on one partition, in two halves so that the
-- partition row (the push allocator) is held only for a one-row UPDATE:
--   1. purge: delete the segments (and their log_txns rows, no foreign
--      key, 001) that lie wholly below first_offset, i.e. those the
--      previous step marked. No partition lock: they are leaf rows nobody
--      else writes (pushes append at the other end), and the queue's
--      deleter, the only other one who deletes them, holds the partition
--      and waits for us, while we never wait for it (2. skips).
--   2. mark: take the partition row FOR NO KEY UPDATE SKIP LOCKED and
--      raise the watermarks past the longest prefix, among the first
--      p_limit segments from first_offset, of segments each due under the
--      age rule (newest message older than retention_seconds, consumed or
--      not) or the completed rule (every group's cursor at or past its
--      last offset, and newest message older than
--      completed_retention_seconds). A prefix, never a hole: first_offset
--      stays a true low watermark, and a segment due out of order (clocks
--      of several queenwires differ) waits for the ones before it. When
--      the age rule cut through messages some group had not acknowledged,
--      expired_offset is raised to the last of them.
-- From the mark on, SHOW and max_queue_size count the marked messages as
-- gone; the next step deletes them, so the engine calls the step until
-- `more` is false (a step that marked nothing, after purging). Cursors
-- are not touched: a POP starts at the oldest segment left (004), and a
-- lease over a deleted range still acknowledges (ACK reads only the
-- consumer row).
-- Returns what this step marked (segments, messages, bytes, expired);
-- `more` when it marked anything (a purge is due, and maybe more to mark);
-- `locked` when a push held the partition row, so nothing was marked (the
-- engine retries shortly: never queueing behind the write path). Zeros
-- when the partition is gone or its queue has retention disabled.
-- Locks: leaves log_segments, log_txns, log_traces (purge); then, for the UPDATE
-- alone, the log_partitions row FOR NO KEY UPDATE SKIP LOCKED (the
-- queues and log_consumers rows are read, not locked).
CREATE OR REPLACE FUNCTION queen.log_retention_step_v1(
    p_partition_id BIGINT,
    p_limit        INTEGER
) RETURNS TABLE (segments INTEGER, messages BIGINT, bytes BIGINT, expired BIGINT, more BOOLEAN,
                locked BOOLEAN)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_first    BIGINT;
    v_purge_from BIGINT;
    v_p        RECORD;
    v_floor    BIGINT;
    v_upto     BIGINT;
    v_min_base BIGINT;
    v_count    INTEGER;
    v_messages BIGINT;
    v_bytes    BIGINT;
    v_expired  BIGINT;
BEGIN
    IF p_partition_id IS NULL OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'log_retention_step_v1: a partition and a positive limit are required'
            USING ERRCODE = '22023';
    END IF;
    -- This transaction's commit does not wait for its WAL to reach disk:
    -- a step lost in a crash is undone whole (WAL is replayed in order, so
    -- no later commit survives it), its segments are simply still there
    -- and the next pass deletes them again. What it buys: the partition
    -- row taken below is released at once, instead of after an fsync of
    -- the purge's WAL, so a push queued on it waits for an UPDATE, not for
    -- the disk.
    PERFORM set_config('synchronous_commit', 'off', true);
    -- 1. purge what the previous step marked.
    SELECT p.first_offset INTO v_first
    FROM queen.log_partitions p WHERE p.id = p_partition_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0::BIGINT, 0::BIGINT, 0::BIGINT, false, false;
        RETURN;
    END IF;
    -- first_offset is always a segment boundary (it is only ever set past
    -- a whole segment), so "below it" is a primary-key range. What is left
    -- below it is what the previous step marked, at most p_limit segments,
    -- just below first_offset: they are read from there downwards, so the
    -- index entries of what earlier steps deleted (dead until VACUUM) are
    -- never walked. A range "everything below first_offset" walked them
    -- all on every step, so steps grew longer as a pass went on (measured:
    -- PUSH/POP p99 during a 100,000-segment pass 2.1x / 1.9x of without,
    -- against 1.4x / 1.2x for 20,000). Twice p_limit: a backlog left by a
    -- larger limit drains, a step at a time.
    WITH purged AS (
        DELETE FROM queen.log_segments s
        WHERE s.partition_id = p_partition_id
          AND s.base_offset IN (
              SELECT s1.base_offset FROM queen.log_segments s1
              WHERE s1.partition_id = p_partition_id AND s1.base_offset < v_first
              ORDER BY s1.base_offset DESC
              LIMIT 2 * p_limit)
        RETURNING s.base_offset
    )
    SELECT min(purged.base_offset) INTO v_purge_from FROM purged;
    IF v_purge_from IS NOT NULL THEN
        DELETE FROM queen.log_txns t
        WHERE t.partition_id = p_partition_id
          AND t.base_offset >= v_purge_from AND t.base_offset < v_first;
        -- The trace index of the purged messages (017; a probe of its
        -- (partition_id, message_offset) index when the partition has none).
        DELETE FROM queen.log_traces t
        WHERE t.partition_id = p_partition_id
          AND t.message_offset >= v_purge_from AND t.message_offset < v_first;
    END IF;

    -- 2. mark the next due prefix. It is found before the partition lock
    -- is taken, so the lock covers only the UPDATE: segments below the
    -- tail never change, cursors only move forward (a SEEK back races
    -- with retention whether or not we hold the row: SEEK does not lock
    -- it against us), and first_offset has no other writer.
    SELECT p.first_offset, p.expired_offset, q.retention_seconds, q.completed_retention_seconds
      INTO v_p
    FROM queen.log_partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_partition_id AND q.retention_enabled;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0::BIGINT, 0::BIGINT, 0::BIGINT, false, false;
        RETURN;
    END IF;
    v_floor := queen.log_partition_floor_v1(p_partition_id);

    -- The due prefix among the next p_limit segments: bool_and over the
    -- offset order is true exactly up to the first segment not due. The
    -- range starts at first_offset (a segment boundary), so the scan
    -- never walks the index entries of what was just purged.
    SELECT min(d.base_offset), max(d.last_offset), count(*),
           COALESCE(sum(d.message_count), 0), COALESCE(sum(d.byte_size), 0)
      INTO v_min_base, v_upto, v_count, v_messages, v_bytes
    FROM (
        SELECT h.base_offset, h.last_offset, h.message_count, h.byte_size,
               bool_and(h.due) OVER (ORDER BY h.base_offset) AS prefix_due
        FROM (
            -- COALESCE: a NULL floor (no group) must read as "not due",
            -- since bool_and skips NULLs.
            SELECT s.base_offset, s.base_offset + s.message_count - 1 AS last_offset,
                   s.message_count, s.byte_size,
                   COALESCE((v_p.retention_seconds > 0
                    AND s.max_created_at < v_now - make_interval(secs => v_p.retention_seconds))
                   OR (v_p.completed_retention_seconds > 0
                       AND s.max_created_at < v_now - make_interval(secs => v_p.completed_retention_seconds)
                       AND s.base_offset + s.message_count - 1 <= v_floor), false) AS due
            FROM queen.log_segments s
            WHERE s.partition_id = p_partition_id
              AND s.base_offset >= v_p.first_offset
            ORDER BY s.base_offset
            LIMIT p_limit
        ) h
    ) d
    WHERE d.prefix_due;
    IF v_count = 0 THEN
        RETURN QUERY SELECT 0, 0::BIGINT, 0::BIGINT, 0::BIGINT, false, false;
        RETURN;
    END IF;

    PERFORM 1 FROM queen.log_partitions p
    WHERE p.id = p_partition_id
    FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- A push holds it (or the queue was just dropped).
        RETURN QUERY SELECT 0, 0::BIGINT, 0::BIGINT, 0::BIGINT, false,
            EXISTS (SELECT 1 FROM queen.log_partitions p WHERE p.id = p_partition_id);
        RETURN;
    END IF;

    -- Messages above every group's cursor (all of them when no group
    -- exists) went unacknowledged: the age rule expired them.
    v_expired := GREATEST(v_upto - GREATEST(COALESCE(v_floor, -1), v_min_base - 1, v_p.first_offset - 1), 0);
    UPDATE queen.log_partitions p
    SET first_offset = GREATEST(p.first_offset, v_upto + 1),
        expired_offset = CASE WHEN v_expired > 0 THEN GREATEST(p.expired_offset, v_upto)
                              ELSE p.expired_offset END
    WHERE p.id = p_partition_id;
    RETURN QUERY SELECT v_count, v_messages, v_bytes, v_expired, true, false;
END
$$;

-- Whether partition p_partition_id may be reclaimed by the cleanup phase:
-- it holds no segment (never written, or emptied by retention), both its
-- timestamps (created_at and last_write_at) are older than p_cutoff, and no
-- DLQ row names it (log_dlq has no foreign key: dropping the partition
-- would strand the snapshots, since every DLQ reader joins through
-- log_partitions). LANGUAGE sql on purpose: the body is resolved when the
-- function is created, so it can only name tables applied before this
-- file (001, 005), which is what keeps it from ever growing a leg on the
-- KV or timer tables (024/025) and the per-partition scan it fronts.
-- Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_partition_dead_v1(
    p_partition_id BIGINT,
    p_cutoff       TIMESTAMPTZ
) RETURNS BOOLEAN
LANGUAGE sql STABLE
AS $$
    SELECT p.created_at < p_cutoff
       AND COALESCE(p.last_write_at, p.created_at) < p_cutoff
       AND NOT EXISTS (SELECT 1 FROM queen.log_segments s WHERE s.partition_id = p.id)
       AND NOT EXISTS (SELECT 1 FROM queen.log_dlq d WHERE d.partition_id = p.id)
    FROM queen.log_partitions p
    WHERE p.id = p_partition_id
$$;

-- The cleanup phase, one bounded step: deletes at most p_limit partitions
-- that queen.log_partition_dead_v1 finds dead for p_cleanup_age_seconds,
-- with their log_txns rows (none expected; the obligation of 001) and, by
-- cascade, their group cursors. A later push recreates the partition under
-- a new id, from offset 0. The partitions are taken ascending by id in ONE
-- statement with SKIP LOCKED, so a pusher holding one is stepped over
-- rather than queued behind; a partition is kept for a later cycle when
-- its queue key cannot be had exclusively at once (a push, ack, seek or
-- drop in flight on the queue) or a consumer row of it is locked (a POP's
-- lease being written, an ACK). Returns the number deleted.
-- Locks: log_partitions FOR UPDATE SKIP LOCKED, id ascending; the queue
-- key EXCLUSIVE, try-lock only; log_consumers FOR UPDATE SKIP LOCKED,
-- (partition_id, consumer_group) ascending; leaves log_txns.
CREATE OR REPLACE FUNCTION queen.log_partition_cleanup_step_v1(
    p_cleanup_age_seconds INTEGER,
    p_limit               INTEGER
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_cutoff TIMESTAMPTZ;
    v_ids    BIGINT[];
    v_locked BIGINT[];
    v_busy   BIGINT[];
    v_count  INTEGER;
BEGIN
    IF p_cleanup_age_seconds IS NULL OR p_cleanup_age_seconds < 0 OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'log_partition_cleanup_step_v1: a cleanup age >= 0 and a positive limit are required'
            USING ERRCODE = '22023';
    END IF;
    v_cutoff := clock_timestamp() - make_interval(secs => p_cleanup_age_seconds);
    SELECT COALESCE(array_agg(l.id ORDER BY l.id), '{}') INTO v_ids
    FROM (
        SELECT p.id, p.queue_id
        FROM queen.log_partitions p
        WHERE p.created_at < v_cutoff
          AND COALESCE(p.last_write_at, p.created_at) < v_cutoff
          AND queen.log_partition_dead_v1(p.id, v_cutoff)
        ORDER BY p.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ) l
    WHERE pg_try_advisory_xact_lock(queen.log_queue_lock_key_v1(l.queue_id));
    IF cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;
    -- The consumer rows, ascending; a partition with a row we could not
    -- lock is busy and kept. (No row can be added meanwhile: creating one
    -- needs FOR KEY SHARE on the partition, which our FOR UPDATE excludes.)
    SELECT COALESCE(array_agg(c.partition_id), '{}') INTO v_locked
    FROM (SELECT c.partition_id
          FROM queen.log_consumers c
          WHERE c.partition_id = ANY (v_ids)
          ORDER BY c.partition_id, c.consumer_group
          FOR UPDATE SKIP LOCKED) c;
    SELECT COALESCE(array_agg(c.partition_id), '{}') INTO v_busy
    FROM (SELECT c.partition_id, count(*) AS n
          FROM queen.log_consumers c
          WHERE c.partition_id = ANY (v_ids)
          GROUP BY c.partition_id) c
    WHERE c.n > (SELECT count(*) FROM unnest(v_locked) l WHERE l = c.partition_id);
    SELECT COALESCE(array_agg(i ORDER BY i), '{}') INTO v_ids
    FROM unnest(v_ids) i WHERE i <> ALL (v_busy);

    DELETE FROM queen.log_txns t WHERE t.partition_id = ANY (v_ids);
    DELETE FROM queen.log_partitions p WHERE p.id = ANY (v_ids);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

-- Records one pass of a retention or cleanup task in
-- queen.retention_history (the pass began p_duration_ms before now, by the
-- database clock) and prunes rows older than 7 days, at most 1000 a call,
-- so the history is bounded too. Returns the new row's id.
-- Locks: leaf retention_history only.
CREATE OR REPLACE FUNCTION queen.log_retention_record_v1(
    p_task        TEXT,
    p_holder      TEXT,
    p_duration_ms BIGINT,
    p_partitions  INTEGER,
    p_segments    BIGINT,
    p_messages    BIGINT,
    p_bytes       BIGINT,
    p_expired     BIGINT
) RETURNS BIGINT
LANGUAGE plpgsql
AS $$
DECLARE
    v_now TIMESTAMPTZ := clock_timestamp();
    v_id  BIGINT;
BEGIN
    IF p_task IS NULL OR p_task NOT IN ('retention', 'cleanup') OR p_holder IS NULL THEN
        RAISE EXCEPTION 'log_retention_record_v1: task retention or cleanup and a holder are required'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO queen.retention_history
        (task, holder, started_at, executed_at, partitions, segments, messages, bytes, expired_messages)
    VALUES (p_task, p_holder, v_now - GREATEST(p_duration_ms, 0) * INTERVAL '1 millisecond', v_now,
            COALESCE(p_partitions, 0), COALESCE(p_segments, 0), COALESCE(p_messages, 0),
            COALESCE(p_bytes, 0), COALESCE(p_expired, 0))
    RETURNING id INTO v_id;
    DELETE FROM queen.retention_history h
    WHERE h.id IN (SELECT o.id FROM queen.retention_history o
                   WHERE o.executed_at < v_now - INTERVAL '7 days'
                   ORDER BY o.executed_at LIMIT 1000);
    RETURN v_id;
END
$$;

-- The index the history readers (and the prune above) scan, newest first.
-- Created only when absent (see schema.sql: CREATE INDEX IF NOT EXISTS
-- takes a SHARE lock before it checks the name).
DO $$
BEGIN
    IF to_regclass('queen.idx_retention_history_executed_at') IS NULL THEN
        CREATE INDEX idx_retention_history_executed_at
            ON queen.retention_history (executed_at DESC);
    END IF;
END
$$;
