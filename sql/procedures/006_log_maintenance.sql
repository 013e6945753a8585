-- 006_log_maintenance: the maintenance steps the engine runs in the
-- background (one elected queenwire at a time, see 029).

-- max_wait_time_seconds: messages a group has left pending longer than the
-- queue allows are moved to the DLQ for that group (a snapshot each, reason
-- 'max_wait_time exceeded'), and the group's cursor moves past them; they
-- are never silently deleted. Age is judged per segment by its newest
-- message (max_created_at), so a message is never expired early. Only
-- groups that have a cursor (have popped at least once) and whose partition
-- is not leased are considered; a leased batch is the consumer's until its
-- lease ends.
-- Returns how many messages were dead-lettered, at most p_limit.
-- Locks: log_consumers rows FOR UPDATE SKIP LOCKED, (partition_id,
-- consumer_group) ascending (maintenance never waits on a consumer or a
-- pop); then the leaf log_dlq. No partition or queue lock is taken.
CREATE OR REPLACE FUNCTION queen.log_expire_pending_v1(p_limit INTEGER)
RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_c        RECORD;
    v_last     BIGINT;
    v_moved    INTEGER;
    v_total    INTEGER := 0;
BEGIN
    FOR v_c IN
        SELECT c.partition_id, c.consumer_group, c.cursor_offset, c.retry_count,
               q.max_wait_time_seconds, q.dead_letter_queue
        FROM queen.log_consumers c
        JOIN queen.log_partitions p ON p.id = c.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
        WHERE q.max_wait_time_seconds > 0
          AND c.lease_token IS NULL
          AND p.last_offset > c.cursor_offset
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE OF c SKIP LOCKED
    LOOP
        EXIT WHEN v_total >= p_limit;
        -- The newest offset of the oldest run of expired segments after the
        -- cursor (segments are in offset order and, per partition, in
        -- write order, so their max_created_at grows with base_offset).
        SELECT max(s.base_offset + s.message_count - 1) INTO v_last
        FROM queen.log_segments s
        WHERE s.partition_id = v_c.partition_id
          AND s.base_offset + s.message_count - 1 > v_c.cursor_offset
          AND s.max_created_at < v_now - make_interval(secs => v_c.max_wait_time_seconds);
        CONTINUE WHEN v_last IS NULL;
        v_last := LEAST(v_last, v_c.cursor_offset + (p_limit - v_total));

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
