-- 011_log_stats: plain views in `queen` for BI tools reading through the
-- proxy: queue depth, lag per group, DLQ counts, throughput.
--
-- Tenant scoping: every view carries tenant_id as a column and shows only
-- the rows queen.tenant_visible_v1 allows the session's login role: a
-- tenant role its own tenant, the owner and queenwire's engine role all.
-- The login role is fixed for the connection, so no SET moves the filter;
-- security_barrier keeps a caller's leaky function from seeing filtered rows.
-- queue_depth and group_lag read through the SHOW readers of 010_log_admin,
-- so a number means the same thing in SHOW and in SQL.
--
-- CREATE OR REPLACE VIEW takes ACCESS EXCLUSIVE on the view (every reader
-- queues behind it), so a view is (re)created only when its COMMENT does not
-- carry the version below: bump the version with any change to a body. A
-- change of columns other than appending needs a manual DROP VIEW, as with
-- the trigger definitions of the seed's 020.
DO $$
BEGIN
    IF obj_description(to_regclass('queen.queue_depth'), 'pg_class')
       IS DISTINCT FROM 'queenwire 011 v2' THEN
        CREATE OR REPLACE VIEW queen.queue_depth WITH (security_barrier) AS
        SELECT t.tenant_id, d.queue, d.partitions, d.messages, d.pending,
               d.dead_lettered, d.created_at
        FROM (SELECT DISTINCT q.tenant_id FROM queen.queues q
              WHERE queen.tenant_visible_v1(q.tenant_id)) t
        CROSS JOIN LATERAL queen.log_show_queues_v1(t.tenant_id) d;
        COMMENT ON VIEW queen.queue_depth IS 'queenwire 011 v2';
    END IF;

    IF obj_description(to_regclass('queen.group_lag'), 'pg_class')
       IS DISTINCT FROM 'queenwire 011 v2' THEN
        CREATE OR REPLACE VIEW queen.group_lag WITH (security_barrier) AS
        SELECT t.tenant_id, g.queue, g.consumer_group, g.partitions, g.lag,
               g.oldest_pending_at, g.leased_partitions
        FROM (SELECT DISTINCT q.tenant_id FROM queen.queues q
              WHERE queen.tenant_visible_v1(q.tenant_id)) t
        CROSS JOIN LATERAL queen.log_show_groups_v1(NULL, t.tenant_id) g;
        COMMENT ON VIEW queen.group_lag IS 'queenwire 011 v2';
    END IF;

    IF obj_description(to_regclass('queen.dlq_counts'), 'pg_class')
       IS DISTINCT FROM 'queenwire 011 v2' THEN
        CREATE OR REPLACE VIEW queen.dlq_counts WITH (security_barrier) AS
        SELECT q.tenant_id, q.name AS queue, d.consumer_group,
               count(*) AS dead_lettered, max(d.failed_at) AS last_failed_at
        FROM queen.log_dlq d
        JOIN queen.log_partitions p ON p.id = d.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
        WHERE queen.tenant_visible_v1(q.tenant_id)
        GROUP BY q.tenant_id, q.name, d.consumer_group;
        COMMENT ON VIEW queen.dlq_counts IS 'queenwire 011 v2';
    END IF;

    -- Messages written per queue over the last minute, five minutes and
    -- hour, by segment time (a fused write counts when its newest message
    -- was framed). Reads each partition's recent segments only.
    IF obj_description(to_regclass('queen.throughput'), 'pg_class')
       IS DISTINCT FROM 'queenwire 011 v2' THEN
        CREATE OR REPLACE VIEW queen.throughput WITH (security_barrier) AS
        SELECT q.tenant_id, q.name AS queue,
               COALESCE(sum(s.message_count) FILTER (
                   WHERE s.max_created_at > now() - interval '1 minute'), 0)::BIGINT AS pushed_last_minute,
               COALESCE(sum(s.message_count) FILTER (
                   WHERE s.max_created_at > now() - interval '5 minutes'), 0)::BIGINT AS pushed_last_5_minutes,
               COALESCE(sum(s.message_count), 0)::BIGINT AS pushed_last_hour
        FROM queen.queues q
        JOIN queen.log_partitions p ON p.queue_id = q.id
        LEFT JOIN queen.log_segments s
               ON s.partition_id = p.id AND s.max_created_at > now() - interval '1 hour'
        WHERE queen.tenant_visible_v1(q.tenant_id)
        GROUP BY q.tenant_id, q.name;
        COMMENT ON VIEW queen.throughput IS 'queenwire 011 v2';
    END IF;
END
$$;
