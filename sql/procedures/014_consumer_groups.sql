-- 014_consumer_groups: the seed's consumer-groups surface (management
-- plane, 012-023): the group list with a state, one group's detail per
-- partition, and the lagging partitions.
--
-- Global lock order (seed): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. Every reader here takes no
-- locks; each joins queen.queues on the tenant, which is also the
-- queue-existence guard.
--
-- Group states (docs/dialect.md, SHOW GROUPS), judged against the queue's
-- own lease_time L, so a queue with long leases is not called lagging for
-- doing what it was configured to do:
--   Stable   nothing pending, or the oldest pending message waits less
--            than L (consumers keep up within a lease);
--   Lagging  the oldest pending message has waited L or longer;
--   Dead     messages are pending and no consumer of the group has claimed
--            a partition of the queue for 10 x L (never claimed: since the
--            group was first seen).

-- One group on every partition of a queue: the cursor (the group's
-- effective one: a partition it has not met yet shows where its
-- subscription would start it), the partition's last offset, the lag in
-- messages (a shared group's as log_show_groups_v1 counts it) and its
-- oldest pending message, the live lease's batch and
-- expiry, the retry count, the retry delay (blocked_until) and the last
-- claim. No lease holder is shown: the proxy records none (a lease is a
-- token, which the receipts authenticate and SHOW never reveals).
-- Errors: 42704 unknown queue or group. Takes no locks.
CREATE OR REPLACE FUNCTION queen.consumer_group_detail_v1(
    p_queue  TEXT,
    p_group  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    partition_name    TEXT,
    cursor_offset     BIGINT,
    last_offset       BIGINT,
    lag               BIGINT,
    oldest_pending_at TIMESTAMPTZ,
    lease_expires_at  TIMESTAMPTZ,
    lease_from        BIGINT,
    lease_to          BIGINT,
    retry_count       INTEGER,
    blocked_until     TIMESTAMPTZ,
    last_claimed_at   TIMESTAMPTZ
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id UUID;
    v_sub_at   TIMESTAMPTZ;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    SELECT m.subscription_at INTO v_sub_at FROM queen.consumer_groups_metadata m
    WHERE m.queue_id = v_queue_id AND m.consumer_group = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer group "%" does not exist on queue "%"', p_group, p_queue
            USING ERRCODE = '42704';
    END IF;
    RETURN QUERY
    SELECT p.name::TEXT,
           x.cur,
           p.last_offset,
           l.lag,
           CASE WHEN l.lag > 0 THEN y.oldest END,
           CASE WHEN c.lease_expires_at > now() THEN c.lease_expires_at END,
           CASE WHEN c.lease_expires_at > now() THEN c.batch_from END,
           CASE WHEN c.lease_expires_at > now() THEN c.batch_to END,
           COALESCE(c.retry_count, 0),
           CASE WHEN c.blocked_until > now() THEN c.blocked_until END,
           c.last_claimed_at
    FROM queen.log_partitions p
    LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
    CROSS JOIN LATERAL (
        SELECT COALESCE(c.cursor_offset, queen.log_cursor_at_v1(p.id, v_sub_at, p_tenant)) AS cur
    ) x
    CROSS JOIN LATERAL queen.log_group_lag_v1(p.id, p_group, x.cur, p.first_offset, p.last_offset) l
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
    ) y ON true
    WHERE p.queue_id = v_queue_id
    ORDER BY p.name;
END
$$;

-- SHOW GROUPS [ON queue]: log_show_groups_v1's columns (010, unchanged, so
-- the group_lag view and SHOW GROUPS agree) and, appended: the time lag
-- (seconds the oldest pending message has waited, 0 when none), the
-- group's last claim on the queue, and its state (Stable / Lagging / Dead,
-- the top of this file).
-- Errors: 42704 unknown queue (when named). Takes no locks.
CREATE OR REPLACE FUNCTION queen.consumer_groups_v1(
    p_queue  TEXT DEFAULT NULL,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queue             TEXT,
    consumer_group    TEXT,
    partitions        BIGINT,
    lag               BIGINT,
    oldest_pending_at TIMESTAMPTZ,
    leased_partitions BIGINT,
    time_lag_seconds  BIGINT,
    last_claimed_at   TIMESTAMPTZ,
    state             TEXT
)
-- plpgsql: the body reads queen.log_shared_records, created later (032).
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT g.queue, g.consumer_group, g.partitions, g.lag, g.oldest_pending_at,
           g.leased_partitions,
           COALESCE(floor(extract(epoch FROM now() - g.oldest_pending_at)), 0)::BIGINT,
           GREATEST(lc.last_claim, ls.last_lease),
           CASE
               WHEN g.lag = 0 THEN 'Stable'
               WHEN COALESCE(GREATEST(lc.last_claim, ls.last_lease), m.created_at)
                    < now() - make_interval(secs => 10.0 * q.lease_time) THEN 'Dead'
               WHEN g.oldest_pending_at <= now() - make_interval(secs => q.lease_time) THEN 'Lagging'
               ELSE 'Stable'
           END
    FROM queen.log_show_groups_v1(p_queue, p_tenant) g
    JOIN queen.queues q ON q.tenant_id = p_tenant AND q.name = g.queue
    JOIN queen.consumer_groups_metadata m
      ON m.queue_id = q.id AND m.consumer_group = g.consumer_group
    CROSS JOIN LATERAL (
        SELECT max(c.last_claimed_at) AS last_claim
        FROM queen.log_partitions p
        JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
        WHERE p.queue_id = q.id
    ) lc
    -- A shared group's claims write no group row (its start moves every
    -- 64 finished messages or so): its latest claim is read from its
    -- message leases above the start, the latest lease's end less the
    -- queue's lease_time (never later than now).
    CROSS JOIN LATERAL (
        SELECT CASE WHEN max(r.lease_expires_at) IS NOT NULL
                    THEN LEAST(max(r.lease_expires_at) - make_interval(secs => q.lease_time), now())
               END AS last_lease
        FROM queen.log_partitions p
        JOIN queen.log_shared_records r
          ON r.partition_id = p.id AND r.consumer_group = g.consumer_group
        WHERE p.queue_id = q.id
    ) ls
    WHERE queen.tenant_guard_v1(p_tenant)
    ORDER BY g.queue, g.consumer_group;
END
$$;

-- SHOW LAGGING PARTITIONS ON queue [GROUP g] [OVER d]: the (group,
-- partition) pairs whose oldest pending message has waited at least
-- p_over_seconds, longest wait first. Every group of the queue without
-- p_group. Built on consumer_group_detail_v1, so the numbers are SHOW
-- GROUP's.
-- Errors: 42704 unknown queue or group; 22023 p_over_seconds < 0.
-- Takes no locks.
CREATE OR REPLACE FUNCTION queen.lagging_partitions_v1(
    p_queue        TEXT,
    p_group        TEXT DEFAULT NULL,
    p_over_seconds BIGINT DEFAULT 60,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    consumer_group    TEXT,
    partition_name    TEXT,
    lag               BIGINT,
    oldest_pending_at TIMESTAMPTZ,
    time_lag_seconds  BIGINT
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id UUID;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_over_seconds IS NULL OR p_over_seconds < 0 THEN
        RAISE EXCEPTION 'OVER must be 0 seconds or more' USING ERRCODE = '22023';
    END IF;
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    RETURN QUERY
    SELECT m.consumer_group::TEXT, d.partition_name, d.lag, d.oldest_pending_at,
           floor(extract(epoch FROM now() - d.oldest_pending_at))::BIGINT
    FROM queen.consumer_groups_metadata m
    CROSS JOIN LATERAL queen.consumer_group_detail_v1(p_queue, m.consumer_group, p_tenant) d
    WHERE m.queue_id = v_queue_id
      AND (p_group IS NULL OR m.consumer_group = p_group)
      AND d.lag > 0
      AND d.oldest_pending_at <= now() - make_interval(secs => p_over_seconds)
    ORDER BY d.oldest_pending_at, m.consumer_group, d.partition_name;
    IF p_group IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM queen.consumer_groups_metadata m
        WHERE m.queue_id = v_queue_id AND m.consumer_group = p_group) THEN
        RAISE EXCEPTION 'consumer group "%" does not exist on queue "%"', p_group, p_queue
            USING ERRCODE = '42704';
    END IF;
END
$$;

-- ALTER GROUP grp ON queue SUBSCRIBE FROM …: the subscription update.
-- Replaces where the group starts on the partitions it has not met yet
-- (first sight places a cursor by the subscription, queen.log_cursor_at_v1,
-- so 'now' and a timestamp also hold for partitions created later). Cursors
-- the group already has stay where they are: moving them is SEEK GROUP's
-- job, and a subscription change that silently skipped or replayed
-- messages of partitions in use would surprise. A group not seen yet is
-- registered with the subscription, so it can be set before the first POP
-- (which then finds the group and ignores its own SUBSCRIBE FROM: the
-- choice is fixed at first sight, and this is the first sight). 'now' is
-- this call's instant. Announced in hotlist_repairs: pendingness of the
-- group's unmet partitions changes with it.
-- Returns the cursors kept (partitions the group has met).
-- Errors: 42704 unknown queue; 22023 bad mode or a timestamp missing.
-- Locks, in order:
--   1. advisory: the queue key SHARED (excludes DROP QUEUE), then the
--      group's first-sight key (the one a first-sight POP takes, so the two
--      are ordered);
--   2. queues: the queue row FOR KEY SHARE (as the first-sight POP);
--   3. consumer_groups_metadata: the group's row (insert or update; it sits
--      with queues in the global order);
--   4. leaf hotlist_repairs.
CREATE OR REPLACE FUNCTION queen.consumer_group_subscribe_v1(
    p_queue  TEXT,
    p_group  TEXT,
    p_mode   TEXT,
    p_at     TIMESTAMPTZ DEFAULT NULL,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS BIGINT
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue_id UUID;
    v_at       TIMESTAMPTZ;
    v_kept     BIGINT;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_mode IS NULL OR p_mode NOT IN ('beginning', 'now', 'timestamp')
       OR (p_mode = 'timestamp' AND p_at IS NULL) THEN
        RAISE EXCEPTION 'a subscription is beginning, now or a timestamp (with a time)'
            USING ERRCODE = '22023';
    END IF;
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(v_queue_id));
    PERFORM pg_advisory_xact_lock(-1 - (hashtext(v_queue_id::TEXT) & 2147483647), hashtext(p_group));
    -- A DROP QUEUE may have committed between the lookup and the key.
    PERFORM 1 FROM queen.queues q WHERE q.id = v_queue_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    v_at := CASE p_mode WHEN 'now' THEN clock_timestamp() WHEN 'timestamp' THEN p_at END;
    INSERT INTO queen.consumer_groups_metadata AS m
        (queue_id, consumer_group, subscription_mode, subscription_at)
    VALUES (v_queue_id, p_group, p_mode, v_at)
    ON CONFLICT (queue_id, consumer_group) DO UPDATE
    SET subscription_mode = EXCLUDED.subscription_mode,
        subscription_at = EXCLUDED.subscription_at;
    SELECT count(*) INTO v_kept
    FROM queen.log_consumers c
    JOIN queen.log_partitions p ON p.id = c.partition_id
    WHERE p.queue_id = v_queue_id AND c.consumer_group = p_group;
    PERFORM queen.log_hotlist_repair_v1(p_queue, p_group, NULL, 'subscribe', p_tenant);
    RETURN v_kept;
END
$$;
