-- 028_retained_bytes: the retained-bytes slow lane (seed 000: 028). How
-- much each queue keeps on disk (segments and their compressed bytes,
-- messages by the watermarks), measured now and then by the elected
-- maintainer, for SHOW and metrics to read without scanning segments.
--
-- Slow because it is the one maintenance read that costs the segments, not
-- the partitions: byte_size is per segment (so no blob is detoasted), but
-- every retained segment row is read. It runs every tenth retention cycle
-- (src/engine/retention.rs), in pages of queues.
--
-- Lock order: queue_retained_bytes is a leaf (one writer, the elected
-- maintainer; the queue's deleter reaches it only through the cascade).
-- Inserting a row checks its foreign key with FOR KEY SHARE on the queues
-- row while holding nothing but leaf rows; the deleter, which holds the
-- queues row FOR UPDATE, never waits for a row it cannot see (an
-- uncommitted insert), so no cycle forms. A queue dropped meanwhile makes
-- the page fail its foreign key: the page is skipped and measured next
-- time.

CREATE TABLE IF NOT EXISTS queen.queue_retained_bytes (
    queue_id    UUID PRIMARY KEY REFERENCES queen.queues(id) ON DELETE CASCADE,
    partitions  INTEGER NOT NULL,
    -- Retained segments (from first_offset) and the sum of their byte_size.
    segments    BIGINT NOT NULL,
    bytes       BIGINT NOT NULL,
    -- Retained messages, last_offset - first_offset + 1 per partition.
    messages    BIGINT NOT NULL,
    measured_at TIMESTAMPTZ NOT NULL
);

-- Measures up to p_limit queues, id ascending after p_after (NULL: from the
-- first), and stores the figures. Returns the last queue measured (NULL
-- when none was) and how many. Across tenants (no p_tenant): the slow lane
-- serves them all.
-- Locks: leaf queue_retained_bytes (upserts); the FOR KEY SHARE of their
-- foreign-key checks on queues (see the top of this file).
CREATE OR REPLACE FUNCTION queen.log_retained_bytes_step_v1(
    p_after UUID,
    p_limit INTEGER
) RETURNS TABLE (last_queue_id UUID, queues INTEGER)
LANGUAGE plpgsql
AS $$
DECLARE
    v_last  UUID;
    v_count INTEGER;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'log_retained_bytes_step_v1: a positive limit is required'
            USING ERRCODE = '22023';
    END IF;
    SELECT max(k.id::TEXT)::UUID, count(*) INTO v_last, v_count
    FROM (SELECT q.id FROM queen.queues q
          WHERE p_after IS NULL OR q.id > p_after
          ORDER BY q.id LIMIT p_limit) k;
    IF v_count = 0 THEN
        RETURN QUERY SELECT NULL::UUID, 0;
        RETURN;
    END IF;
    BEGIN
        INSERT INTO queen.queue_retained_bytes AS r
            (queue_id, partitions, segments, bytes, messages, measured_at)
        SELECT k.id, pc.partitions, sc.segments, sc.bytes, pc.messages, clock_timestamp()
        FROM (SELECT q.id FROM queen.queues q
              WHERE (p_after IS NULL OR q.id > p_after) AND q.id <= v_last) k
        CROSS JOIN LATERAL (
            SELECT count(*)::INTEGER AS partitions,
                   COALESCE(sum(GREATEST(p.last_offset - p.first_offset + 1, 0)), 0)::BIGINT AS messages
            FROM queen.log_partitions p WHERE p.queue_id = k.id
        ) pc
        CROSS JOIN LATERAL (
            SELECT count(*) AS segments, COALESCE(sum(s.byte_size), 0)::BIGINT AS bytes
            FROM queen.log_partitions p
            JOIN queen.log_segments s ON s.partition_id = p.id AND s.base_offset >= p.first_offset
            WHERE p.queue_id = k.id
        ) sc
        ON CONFLICT (queue_id) DO UPDATE
        SET partitions = EXCLUDED.partitions, segments = EXCLUDED.segments,
            bytes = EXCLUDED.bytes, messages = EXCLUDED.messages,
            measured_at = EXCLUDED.measured_at;
    EXCEPTION WHEN foreign_key_violation THEN
        -- A queue of the page was dropped meanwhile; the next lap measures
        -- the others.
        NULL;
    END;
    RETURN QUERY SELECT v_last, v_count;
END
$$;
