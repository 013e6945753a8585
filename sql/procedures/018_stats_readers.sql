-- 018_stats_readers: the seed's stats-readers surface (management plane,
-- 012-023) as plain views in `queen` a BI tool reads with SELECT through
-- the proxy: per queue, per namespace and per task (the queues' own
-- namespace and task options), the lag of each queue's groups, and the
-- operations per queue and minute.
--
-- Tenant scoping as in 011 and 015: every view carries tenant_id and shows
-- only what queen.tenant_visible_v1 allows the session's login role (a
-- tenant role its own tenant; the owner and queenwire's engine role all),
-- through security_barrier views. A view calls only entry points a tenant
-- role may execute (log_show_queues_v1, consumer_groups_v1, queue_ops_v1,
-- each checking the tenant), so a number means what it means in SHOW.
--
-- Global lock order (seed): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. Everything here only reads and
-- takes no locks.
--
-- Views are (re)created only when their COMMENT does not carry the version
-- below (CREATE OR REPLACE VIEW takes ACCESS EXCLUSIVE; see 011).

-- Operations per queue and minute since p_since, from
-- queen.queue_ops_metrics: the per-queue counters every queenwire adds to
-- the minute's row when it flushes, once a minute (019): messages pushed, popped (handed
-- out), acknowledged, failed (ACK … FAILED) and dead-lettered, and the
-- partitions created and deleted. The proxies count messages per queue,
-- not statements (the table's *_requests columns are per process only, in
-- worker_metrics), so no request counts are shown. They are what the
-- proxies saw, so they are approximate in the way metrics are: a process
-- that dies loses its unflushed counts, and queues past a process's
-- per-queue cap are counted as `other` and not here. Pushed messages by segment time, exact, are queue_stats' and
-- throughput_per_minute's (015).
-- plpgsql, so the body resolves queue_ops_metrics (created by 019, after
-- this file) when it runs, not when it is created.
-- Errors: 42501 another tenant. Takes no locks.
CREATE OR REPLACE FUNCTION queen.queue_ops_v1(
    p_since  TIMESTAMPTZ DEFAULT now() - INTERVAL '24 hours',
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queue              TEXT,
    minute             TIMESTAMPTZ,
    pushed             BIGINT,
    popped             BIGINT,
    acked              BIGINT,
    failed             BIGINT,
    dead_lettered      BIGINT,
    partitions_created INTEGER,
    partitions_deleted INTEGER
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    RETURN QUERY
    SELECT q.name::TEXT, m.bucket_time, m.push_messages, m.pop_messages, m.ack_success,
           m.ack_failed, m.dead_lettered, m.partitions_created, m.partitions_deleted
    FROM queen.queue_ops_metrics m
    JOIN queen.queues q ON q.id = m.queue_id
    WHERE q.tenant_id = p_tenant AND m.bucket_time >= p_since
    ORDER BY q.name, m.bucket_time;
END
$$;

DO $$
BEGIN
    -- One row per queue: SHOW QUEUES' numbers (log_show_queues_v1), the
    -- queue's namespace, task and priority, and the messages pushed in the
    -- last minute and hour by segment time (011's throughput). Only
    -- partitions written in the last hour have their segment headers read.
    IF obj_description(to_regclass('queen.queue_stats'), 'pg_class')
       IS DISTINCT FROM 'queenwire 018 v1' THEN
        CREATE OR REPLACE VIEW queen.queue_stats WITH (security_barrier) AS
        SELECT t.tenant_id, d.queue, q.namespace, q.task, q.priority,
               d.partitions, d.messages, d.pending, d.dead_lettered,
               COALESCE(w.pushed_last_minute, 0)::BIGINT AS pushed_last_minute,
               COALESCE(w.pushed_last_hour, 0)::BIGINT AS pushed_last_hour,
               d.created_at
        FROM (SELECT DISTINCT q.tenant_id FROM queen.queues q
              WHERE queen.tenant_visible_v1(q.tenant_id)) t
        CROSS JOIN LATERAL queen.log_show_queues_v1(t.tenant_id) d
        JOIN queen.queues q ON q.tenant_id = t.tenant_id AND q.name = d.queue
        LEFT JOIN LATERAL (
            SELECT sum(s.message_count) FILTER (
                       WHERE s.max_created_at > now() - INTERVAL '1 minute') AS pushed_last_minute,
                   sum(s.message_count) AS pushed_last_hour
            FROM queen.log_partitions p
            JOIN queen.log_segments s ON s.partition_id = p.id
            WHERE p.queue_id = q.id
              AND p.last_write_at > now() - INTERVAL '1 hour'
              AND s.max_created_at > now() - INTERVAL '1 hour') w ON true;
        COMMENT ON VIEW queen.queue_stats IS 'queenwire 018 v1';
    END IF;

    -- queue_stats summed per namespace (NULL: the queues without one).
    IF obj_description(to_regclass('queen.namespace_stats'), 'pg_class')
       IS DISTINCT FROM 'queenwire 018 v1' THEN
        CREATE OR REPLACE VIEW queen.namespace_stats WITH (security_barrier) AS
        SELECT s.tenant_id, s.namespace, count(*) AS queues,
               sum(s.partitions)::BIGINT AS partitions, sum(s.messages)::BIGINT AS messages,
               sum(s.pending)::BIGINT AS pending, sum(s.dead_lettered)::BIGINT AS dead_lettered,
               sum(s.pushed_last_minute)::BIGINT AS pushed_last_minute,
               sum(s.pushed_last_hour)::BIGINT AS pushed_last_hour
        FROM queen.queue_stats s
        GROUP BY s.tenant_id, s.namespace;
        COMMENT ON VIEW queen.namespace_stats IS 'queenwire 018 v1';
    END IF;

    -- queue_stats summed per (namespace, task): a task is named within its
    -- namespace, as a wildcard POP addresses it.
    IF obj_description(to_regclass('queen.task_stats'), 'pg_class')
       IS DISTINCT FROM 'queenwire 018 v1' THEN
        CREATE OR REPLACE VIEW queen.task_stats WITH (security_barrier) AS
        SELECT s.tenant_id, s.namespace, s.task, count(*) AS queues,
               sum(s.partitions)::BIGINT AS partitions, sum(s.messages)::BIGINT AS messages,
               sum(s.pending)::BIGINT AS pending, sum(s.dead_lettered)::BIGINT AS dead_lettered,
               sum(s.pushed_last_minute)::BIGINT AS pushed_last_minute,
               sum(s.pushed_last_hour)::BIGINT AS pushed_last_hour
        FROM queen.queue_stats s
        GROUP BY s.tenant_id, s.namespace, s.task;
        COMMENT ON VIEW queen.task_stats IS 'queenwire 018 v1';
    END IF;

    -- One row per queue that has a consumer group: its groups' lag
    -- (consumer_groups_v1, SHOW GROUPS' numbers and states) — the largest
    -- and the total in messages, the oldest pending message, the longest
    -- wait, and how many groups are Lagging or Dead.
    IF obj_description(to_regclass('queen.queue_lag'), 'pg_class')
       IS DISTINCT FROM 'queenwire 018 v1' THEN
        CREATE OR REPLACE VIEW queen.queue_lag WITH (security_barrier) AS
        SELECT t.tenant_id, g.queue, count(*) AS groups,
               max(g.lag)::BIGINT AS max_lag, sum(g.lag)::BIGINT AS total_lag,
               min(g.oldest_pending_at) AS oldest_pending_at,
               max(g.time_lag_seconds)::BIGINT AS max_time_lag_seconds,
               count(*) FILTER (WHERE g.state = 'Lagging') AS lagging_groups,
               count(*) FILTER (WHERE g.state = 'Dead') AS dead_groups
        FROM (SELECT DISTINCT q.tenant_id FROM queen.queues q
              WHERE queen.tenant_visible_v1(q.tenant_id)) t
        CROSS JOIN LATERAL queen.consumer_groups_v1(NULL, t.tenant_id) g
        GROUP BY t.tenant_id, g.queue;
        COMMENT ON VIEW queen.queue_lag IS 'queenwire 018 v1';
    END IF;

    -- Operations per queue and minute over the last 24 hours
    -- (queen.queue_ops_v1 above; call it for another window).
    IF obj_description(to_regclass('queen.queue_ops_per_minute'), 'pg_class')
       IS DISTINCT FROM 'queenwire 018 v1' THEN
        CREATE OR REPLACE VIEW queen.queue_ops_per_minute WITH (security_barrier) AS
        SELECT t.tenant_id, o.queue, o.minute, o.pushed, o.popped, o.acked, o.failed,
               o.dead_lettered, o.partitions_created, o.partitions_deleted
        FROM (SELECT DISTINCT q.tenant_id FROM queen.queues q
              WHERE queen.tenant_visible_v1(q.tenant_id)) t
        CROSS JOIN LATERAL queen.queue_ops_v1(now() - INTERVAL '24 hours', t.tenant_id) o;
        COMMENT ON VIEW queen.queue_ops_per_minute IS 'queenwire 018 v1';
    END IF;
END
$$;
