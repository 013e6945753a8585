-- 026_kv_sweep: the sweeper's two slow phases over queen.kv. They run in one
-- elected queenwire at a time (queen.maintenance_try_lease_v1, 029), but are
-- correct with several: the prune never waits and the rollup is
-- last-writer-wins. Neither takes the tenant parameter: the sweeper serves
-- every tenant.
--
-- Global lock order (seed 000): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. The prune takes kv rows with
-- SKIP LOCKED (never waits: no edge of any wait cycle); the rollup reads kv
-- without row locks and writes only the leaf kv_usage.

-- Deletes up to p_limit expired rows of shard p_shard (0..63), oldest expiry
-- first, and returns how many. Pruning is a disk-space job, never a
-- correctness job: kv_live_v1 already hides an expired row from its instant.
-- The scan is idx_kv_shard_expires (shard equality, then an expires_at range
-- inside the partial index's predicate). Locks: kv rows FOR UPDATE SKIP
-- LOCKED, so a row a writer holds (say, a put resurrecting it) is stepped
-- over, and a row rewritten with a later expiry since the snapshot is
-- re-checked against the latest version and left alone.
CREATE OR REPLACE FUNCTION queen.kv_prune_shard_v1(
    p_shard INTEGER,
    p_limit INTEGER
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     TIMESTAMPTZ := clock_timestamp();
    v_deleted INTEGER;
BEGIN
    IF p_shard IS NULL OR p_shard NOT BETWEEN 0 AND 63 OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'kv_prune_shard_v1: shard must be 0..63 and limit positive (got %, %)', p_shard, p_limit
            USING ERRCODE = '22023';
    END IF;
    WITH victims AS (
        SELECT k.tenant_id, k.namespace, k.key
        FROM queen.kv k
        WHERE k.shard = p_shard
          AND k.expires_at IS NOT NULL
          AND k.expires_at <= v_now
        ORDER BY k.expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM queen.kv k
    USING victims v
    WHERE k.tenant_id = v.tenant_id AND k.namespace = v.namespace AND k.key = v.key
      AND NOT queen.kv_live_v1(k.expires_at, v_now);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- Recomputes queen.kv_usage for every tenant: live keys, and bytes as
-- octet_length(namespace) + octet_length(key) + pg_column_size(value) (see
-- 024). A tenant that had a usage row and has no live key any more gets 0.
-- Last-writer-wins on computed_at: a row measured later is never overwritten
-- by an older measurement (two sweepers overlapping after a lease expiry).
-- Returns the number of tenant rows written.
-- Cost: one full scan of queen.kv per call; NOT measured above a few
-- thousand rows (seed 004 leaves the five-million-row figure open, and it is
-- the number that decides whether this keeps scanning or samples).
-- Locks: none on kv (an MVCC read); kv_usage rows (a leaf) by INSERT ... ON
-- CONFLICT DO UPDATE, in tenant_id order so two overlapping rollups take
-- them in the same order.
CREATE OR REPLACE FUNCTION queen.kv_usage_rollup_v1()
RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     TIMESTAMPTZ := clock_timestamp();
    v_written INTEGER;
BEGIN
    INSERT INTO queen.kv_usage AS u (tenant_id, keys, bytes, computed_at)
    SELECT COALESCE(m.tenant_id, o.tenant_id), COALESCE(m.keys, 0), COALESCE(m.bytes, 0), v_now
    FROM (
        SELECT k.tenant_id, count(*)::BIGINT AS keys,
               sum(octet_length(k.namespace) + octet_length(k.key) + pg_column_size(k.value))::BIGINT AS bytes
        FROM queen.kv k
        WHERE queen.kv_live_v1(k.expires_at, v_now)
        GROUP BY k.tenant_id
    ) m
    FULL JOIN queen.kv_usage o ON o.tenant_id = m.tenant_id
    ORDER BY 1
    ON CONFLICT (tenant_id) DO UPDATE
    SET keys = EXCLUDED.keys, bytes = EXCLUDED.bytes, computed_at = EXCLUDED.computed_at
    WHERE u.computed_at <= EXCLUDED.computed_at;
    GET DIAGNOSTICS v_written = ROW_COUNT;
    RETURN v_written;
END
$$;
