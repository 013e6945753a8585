-- 015_status: the seed's status surface (management plane, 012-023): what
-- a dashboard's first screen shows, for one tenant — SHOW STATUS and the
-- queen.status view.
--
-- Global lock order (seed): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. Everything here only reads and
-- takes no locks.
--
-- Throughput is counted from segment times (a segment counts in the minute
-- its newest message was framed, as the throughput view of 011): pushes
-- only. Acknowledgements are not counted per minute: no ack is recorded
-- with a time (an ACK moves a cursor in place), and recording one would put
-- a write on every ACK for the sake of a chart.

-- The tenant's overview, one row:
--   queues, partitions, consumer_groups  rows of each;
--   messages       retained messages;
--   pending        not yet acknowledged by each queue's furthest-behind
--                  group (SHOW QUEUES' pending, summed);
--   processing     messages inside live leases, not yet acked;
--   dead_lettered  DLQ rows;
--   active_leases  live (partition, group) leases;
--   pushed_last_minute  messages pushed in the last 60 s;
--   throughput     jsonb array, oldest first, of {"minute", "pushed"} for
--                  each of the last p_minutes whole minutes and the current
--                  one (minutes without pushes are 0).
-- Cost: a pass over the tenant's partitions and consumer rows; segments
-- are read (headers only) just for partitions written in the window.
-- Errors: 22023 p_minutes outside 1..1440. Takes no locks.
CREATE OR REPLACE FUNCTION queen.status_v1(
    p_minutes INTEGER DEFAULT 15,
    p_tenant  UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queues             BIGINT,
    partitions         BIGINT,
    consumer_groups    BIGINT,
    messages           BIGINT,
    pending            BIGINT,
    processing         BIGINT,
    dead_lettered      BIGINT,
    active_leases      BIGINT,
    pushed_last_minute BIGINT,
    throughput         JSONB
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_since TIMESTAMPTZ;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_minutes IS NULL OR p_minutes < 1 OR p_minutes > 1440 THEN
        RAISE EXCEPTION 'minutes must be 1 to 1440' USING ERRCODE = '22023';
    END IF;
    v_since := date_trunc('minute', now()) - make_interval(mins => p_minutes);
    RETURN QUERY
    WITH q AS (
        SELECT q.id FROM queen.queues q WHERE q.tenant_id = p_tenant
    ), p AS (
        SELECT p.id, p.last_offset, p.first_offset, p.last_write_at
        FROM queen.log_partitions p JOIN q ON q.id = p.queue_id
    ), c AS (
        SELECT c.* FROM queen.log_consumers c JOIN p ON p.id = c.partition_id
        WHERE c.lease_expires_at > now()
    ), recent AS (
        SELECT date_trunc('minute', s.max_created_at) AS minute, s.message_count
        FROM p
        JOIN queen.log_segments s ON s.partition_id = p.id
        WHERE p.last_write_at >= v_since AND s.max_created_at >= v_since
    )
    SELECT (SELECT count(*) FROM q),
           (SELECT count(*) FROM p),
           (SELECT count(*) FROM queen.consumer_groups_metadata m JOIN q ON q.id = m.queue_id),
           (SELECT COALESCE(sum(GREATEST(p.last_offset - p.first_offset + 1, 0)), 0)::BIGINT FROM p),
           (SELECT COALESCE(sum(queen.log_queue_pending_v1(q.id, p_tenant)), 0)::BIGINT FROM q),
           -- batch_acked holds only acked offsets past the cursor.
           (SELECT COALESCE(sum(GREATEST(c.batch_to - GREATEST(c.batch_from, c.cursor_offset + 1) + 1
                                         - COALESCE(cardinality(c.batch_acked), 0), 0)), 0)::BIGINT
            FROM c),
           (SELECT count(*) FROM queen.log_dlq d JOIN p ON p.id = d.partition_id),
           (SELECT count(*) FROM c),
           (SELECT COALESCE(sum(r.message_count), 0)::BIGINT FROM recent r
            WHERE r.minute >= date_trunc('minute', now() - INTERVAL '1 minute')
              AND r.minute IS NOT NULL),
           (SELECT jsonb_agg(jsonb_build_object('minute', m.minute, 'pushed', COALESCE(x.pushed, 0))
                             ORDER BY m.minute)
            FROM generate_series(v_since, date_trunc('minute', now()),
                                 INTERVAL '1 minute') AS m(minute)
            LEFT JOIN (SELECT r.minute, sum(r.message_count)::BIGINT AS pushed
                       FROM recent r GROUP BY r.minute) x ON x.minute = m.minute);
END
$$;

-- The same overview as a view, one row per tenant the session's login role
-- may see (queen.tenant_visible_v1, as the views of 011), with a 15-minute
-- throughput window; and pushes per queue and minute over the last hour as
-- rows, for BI tools that chart them. Recreated only when the COMMENT does
-- not carry the version below (CREATE OR REPLACE VIEW takes ACCESS
-- EXCLUSIVE; see 011).
DO $$
BEGIN
    IF obj_description(to_regclass('queen.status'), 'pg_class')
       IS DISTINCT FROM 'queenwire 015 v1' THEN
        CREATE OR REPLACE VIEW queen.status WITH (security_barrier) AS
        SELECT t.tenant_id, s.queues, s.partitions, s.consumer_groups, s.messages, s.pending,
               s.processing, s.dead_lettered, s.active_leases, s.pushed_last_minute, s.throughput
        FROM (SELECT DISTINCT q.tenant_id FROM queen.queues q
              WHERE queen.tenant_visible_v1(q.tenant_id)) t
        CROSS JOIN LATERAL queen.status_v1(15, t.tenant_id) s;
        COMMENT ON VIEW queen.status IS 'queenwire 015 v1';
    END IF;

    IF obj_description(to_regclass('queen.throughput_per_minute'), 'pg_class')
       IS DISTINCT FROM 'queenwire 015 v1' THEN
        CREATE OR REPLACE VIEW queen.throughput_per_minute WITH (security_barrier) AS
        SELECT q.tenant_id, q.name AS queue, date_trunc('minute', s.max_created_at) AS minute,
               sum(s.message_count)::BIGINT AS pushed
        FROM queen.queues q
        JOIN queen.log_partitions p ON p.queue_id = q.id
        JOIN queen.log_segments s ON s.partition_id = p.id
        WHERE queen.tenant_visible_v1(q.tenant_id)
          AND p.last_write_at > now() - INTERVAL '1 hour'
          AND s.max_created_at > now() - INTERVAL '1 hour'
        GROUP BY q.tenant_id, q.name, date_trunc('minute', s.max_created_at);
        COMMENT ON VIEW queen.throughput_per_minute IS 'queenwire 015 v1';
    END IF;
END
$$;
