-- 019_worker_metrics: the metrics tables (seed 000, "019_worker_metrics for
-- the metrics tables") and the trigger functions 020 attaches to
-- queen.log_partitions.
--
-- Two authors, two tables. queen.worker_metrics is one row per queenwire
-- process per minute: each process adds its own in-memory counters once a
-- minute (queen.metrics_flush_v1), so no request path writes SQL for
-- metrics. queen.queue_ops_metrics is one row per queue per minute: the
-- per-queue counters of every process added together, and the partition
-- lifecycle counts.
--
-- Partition lifecycle: the triggers on queen.log_partitions do not update a
-- per-queue counter row, which would be one hot row held by every
-- partition-creating push until its commit (a throughput ceiling of one
-- push per commit for a queue). They append a delta row to
-- queen.partition_counter_deltas, which nothing else locks; the elected
-- metrics rollup (queen.metrics_rollup_v1) folds the deltas into
-- queue_ops_metrics and deletes them.
--
-- Locks: these tables are leaves of the global lock order (after
-- log_partitions, which the triggers' statements already hold).

CREATE TABLE IF NOT EXISTS queen.worker_metrics (
    hostname         TEXT        NOT NULL,
    pid              INTEGER     NOT NULL,
    bucket_time      TIMESTAMPTZ NOT NULL,
    sessions         INTEGER     NOT NULL DEFAULT 0,
    pool_in_use      INTEGER     NOT NULL DEFAULT 0,
    pool_idle        INTEGER     NOT NULL DEFAULT 0,
    pool_waiting     INTEGER     NOT NULL DEFAULT 0,
    parked_pops      INTEGER     NOT NULL DEFAULT 0,
    push_requests    BIGINT      NOT NULL DEFAULT 0,
    push_messages    BIGINT      NOT NULL DEFAULT 0,
    pop_requests     BIGINT      NOT NULL DEFAULT 0,
    pop_messages     BIGINT      NOT NULL DEFAULT 0,
    pop_empty        BIGINT      NOT NULL DEFAULT 0,
    ack_success      BIGINT      NOT NULL DEFAULT 0,
    ack_failed       BIGINT      NOT NULL DEFAULT 0,
    dead_lettered    BIGINT      NOT NULL DEFAULT 0,
    passthrough      BIGINT      NOT NULL DEFAULT 0,
    errors           BIGINT      NOT NULL DEFAULT 0,
    rss_bytes        BIGINT      NOT NULL DEFAULT 0,
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (hostname, pid, bucket_time)
);
CREATE INDEX IF NOT EXISTS idx_worker_metrics_bucket ON queen.worker_metrics (bucket_time);

CREATE TABLE IF NOT EXISTS queen.queue_ops_metrics (
    queue_id           UUID        NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    bucket_time        TIMESTAMPTZ NOT NULL,
    push_requests      BIGINT      NOT NULL DEFAULT 0,
    push_messages      BIGINT      NOT NULL DEFAULT 0,
    pop_requests       BIGINT      NOT NULL DEFAULT 0,
    pop_messages       BIGINT      NOT NULL DEFAULT 0,
    pop_empty          BIGINT      NOT NULL DEFAULT 0,
    ack_success        BIGINT      NOT NULL DEFAULT 0,
    ack_failed         BIGINT      NOT NULL DEFAULT 0,
    dead_lettered      BIGINT      NOT NULL DEFAULT 0,
    partitions_created INTEGER     NOT NULL DEFAULT 0,
    partitions_deleted INTEGER     NOT NULL DEFAULT 0,
    -- A snapshot the rollup takes once per minute.
    partition_count    INTEGER,
    PRIMARY KEY (queue_id, bucket_time)
);
CREATE INDEX IF NOT EXISTS idx_queue_ops_metrics_bucket ON queen.queue_ops_metrics (bucket_time);

-- Appended by the partition triggers, folded and deleted by the rollup. No
-- foreign key: a delta of a queue deleted since is dropped by the rollup.
CREATE TABLE IF NOT EXISTS queen.partition_counter_deltas (
    queue_id  UUID        NOT NULL,
    at        TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    created   INTEGER     NOT NULL DEFAULT 0,
    deleted   INTEGER     NOT NULL DEFAULT 0
);

-- Statement-level AFTER INSERT trigger function (020 attaches it): one
-- delta row per queue the statement inserted partitions into; nothing for a
-- statement that inserted none (ON CONFLICT DO NOTHING).
CREATE OR REPLACE FUNCTION queen.trg_partitions_created_counter_v1()
RETURNS TRIGGER
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.partition_counter_deltas (queue_id, created)
    SELECT n.queue_id, count(*)::INTEGER
    FROM new_rows n
    GROUP BY n.queue_id;
    RETURN NULL;
END
$$;

-- Statement-level AFTER DELETE trigger function (020 attaches it).
CREATE OR REPLACE FUNCTION queen.trg_partitions_deleted_counter_v1()
RETURNS TRIGGER
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.partition_counter_deltas (queue_id, deleted)
    SELECT o.queue_id, count(*)::INTEGER
    FROM old_rows o
    GROUP BY o.queue_id;
    RETURN NULL;
END
$$;

-- One process's counters for one minute, added to what that process
-- already flushed for the minute (a flush retried after a lost reply may
-- count twice; metrics are not the ledger). p_worker: an object of the
-- worker_metrics columns (gauges replace, counters add); p_queues: an array
-- of {"tenant","queue", counters...} for queue_ops_metrics (a queue not
-- found, e.g. deleted since, is skipped). Engine only.
-- Locks: the worker_metrics row of (host, pid, bucket); queue_ops_metrics
-- rows of the named queues' bucket, in queue id order.
CREATE OR REPLACE FUNCTION queen.metrics_flush_v1(
    p_hostname TEXT,
    p_pid      INTEGER,
    p_bucket   TIMESTAMPTZ,
    p_worker   JSONB,
    p_queues   JSONB
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_bucket TIMESTAMPTZ := date_trunc('minute', p_bucket);
    v_n      INTEGER;
BEGIN
    INSERT INTO queen.worker_metrics AS w
        (hostname, pid, bucket_time, sessions, pool_in_use, pool_idle, pool_waiting,
         parked_pops, push_requests, push_messages, pop_requests, pop_messages, pop_empty,
         ack_success, ack_failed, dead_lettered, passthrough, errors, rss_bytes)
    SELECT p_hostname, p_pid, v_bucket,
           COALESCE((p_worker->>'sessions')::INTEGER, 0),
           COALESCE((p_worker->>'pool_in_use')::INTEGER, 0),
           COALESCE((p_worker->>'pool_idle')::INTEGER, 0),
           COALESCE((p_worker->>'pool_waiting')::INTEGER, 0),
           COALESCE((p_worker->>'parked_pops')::INTEGER, 0),
           COALESCE((p_worker->>'push_requests')::BIGINT, 0),
           COALESCE((p_worker->>'push_messages')::BIGINT, 0),
           COALESCE((p_worker->>'pop_requests')::BIGINT, 0),
           COALESCE((p_worker->>'pop_messages')::BIGINT, 0),
           COALESCE((p_worker->>'pop_empty')::BIGINT, 0),
           COALESCE((p_worker->>'ack_success')::BIGINT, 0),
           COALESCE((p_worker->>'ack_failed')::BIGINT, 0),
           COALESCE((p_worker->>'dead_lettered')::BIGINT, 0),
           COALESCE((p_worker->>'passthrough')::BIGINT, 0),
           COALESCE((p_worker->>'errors')::BIGINT, 0),
           COALESCE((p_worker->>'rss_bytes')::BIGINT, 0)
    ON CONFLICT (hostname, pid, bucket_time) DO UPDATE SET
        sessions      = EXCLUDED.sessions,
        pool_in_use   = EXCLUDED.pool_in_use,
        pool_idle     = EXCLUDED.pool_idle,
        pool_waiting  = EXCLUDED.pool_waiting,
        parked_pops   = EXCLUDED.parked_pops,
        rss_bytes     = EXCLUDED.rss_bytes,
        push_requests = w.push_requests + EXCLUDED.push_requests,
        push_messages = w.push_messages + EXCLUDED.push_messages,
        pop_requests  = w.pop_requests + EXCLUDED.pop_requests,
        pop_messages  = w.pop_messages + EXCLUDED.pop_messages,
        pop_empty     = w.pop_empty + EXCLUDED.pop_empty,
        ack_success   = w.ack_success + EXCLUDED.ack_success,
        ack_failed    = w.ack_failed + EXCLUDED.ack_failed,
        dead_lettered = w.dead_lettered + EXCLUDED.dead_lettered,
        passthrough   = w.passthrough + EXCLUDED.passthrough,
        errors        = w.errors + EXCLUDED.errors,
        updated_at    = now();

    INSERT INTO queen.queue_ops_metrics AS m
        (queue_id, bucket_time, push_requests, push_messages, pop_requests, pop_messages,
         pop_empty, ack_success, ack_failed, dead_lettered)
    SELECT q.id, v_bucket,
           COALESCE((e->>'push_requests')::BIGINT, 0),
           COALESCE((e->>'push_messages')::BIGINT, 0),
           COALESCE((e->>'pop_requests')::BIGINT, 0),
           COALESCE((e->>'pop_messages')::BIGINT, 0),
           COALESCE((e->>'pop_empty')::BIGINT, 0),
           COALESCE((e->>'ack_success')::BIGINT, 0),
           COALESCE((e->>'ack_failed')::BIGINT, 0),
           COALESCE((e->>'dead_lettered')::BIGINT, 0)
    FROM jsonb_array_elements(COALESCE(p_queues, '[]'::JSONB)) e
    JOIN queen.queues q ON q.tenant_id = (e->>'tenant')::UUID AND q.name = e->>'queue'
    ORDER BY q.id
    ON CONFLICT (queue_id, bucket_time) DO UPDATE SET
        push_requests = m.push_requests + EXCLUDED.push_requests,
        push_messages = m.push_messages + EXCLUDED.push_messages,
        pop_requests  = m.pop_requests + EXCLUDED.pop_requests,
        pop_messages  = m.pop_messages + EXCLUDED.pop_messages,
        pop_empty     = m.pop_empty + EXCLUDED.pop_empty,
        ack_success   = m.ack_success + EXCLUDED.ack_success,
        ack_failed    = m.ack_failed + EXCLUDED.ack_failed,
        dead_lettered = m.dead_lettered + EXCLUDED.dead_lettered;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- The metrics rollup (one elected queenwire per cycle, 029): folds the
-- partition deltas into queue_ops_metrics by minute, takes this minute's
-- partition_count snapshot per queue, and deletes metrics rows older than
-- p_keep. Returns the deltas folded. Bounded: at most p_batch deltas per
-- call (the rest wait for the next cycle). Engine only.
-- Locks: partition_counter_deltas rows (SKIP LOCKED), queue_ops_metrics
-- rows in (queue id, bucket) order, old metrics rows.
CREATE OR REPLACE FUNCTION queen.metrics_rollup_v1(
    p_keep  INTERVAL DEFAULT '7 days',
    p_batch INTEGER DEFAULT 10000
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_folded INTEGER;
    v_now    TIMESTAMPTZ := clock_timestamp();
BEGIN
    WITH taken AS (
        DELETE FROM queen.partition_counter_deltas d
        WHERE d.ctid IN (SELECT x.ctid FROM queen.partition_counter_deltas x
                         LIMIT p_batch FOR UPDATE SKIP LOCKED)
        RETURNING d.queue_id, d.at, d.created, d.deleted
    ), per AS (
        SELECT t.queue_id, date_trunc('minute', t.at) AS bucket,
               sum(t.created)::INTEGER AS created, sum(t.deleted)::INTEGER AS deleted,
               count(*) AS n
        FROM taken t
        GROUP BY 1, 2
    ), folded AS (
        INSERT INTO queen.queue_ops_metrics AS m (queue_id, bucket_time, partitions_created, partitions_deleted)
        SELECT per.queue_id, per.bucket, per.created, per.deleted
        FROM per
        JOIN queen.queues q ON q.id = per.queue_id
        ORDER BY per.queue_id, per.bucket
        ON CONFLICT (queue_id, bucket_time) DO UPDATE SET
            partitions_created = m.partitions_created + EXCLUDED.partitions_created,
            partitions_deleted = m.partitions_deleted + EXCLUDED.partitions_deleted
    )
    SELECT COALESCE(sum(per.n), 0)::INTEGER INTO v_folded FROM per;

    INSERT INTO queen.queue_ops_metrics AS m (queue_id, bucket_time, partition_count)
    SELECT p.queue_id, date_trunc('minute', v_now), count(*)::INTEGER
    FROM queen.log_partitions p
    GROUP BY p.queue_id
    ORDER BY p.queue_id
    ON CONFLICT (queue_id, bucket_time) DO UPDATE SET partition_count = EXCLUDED.partition_count;

    DELETE FROM queen.worker_metrics w WHERE w.bucket_time < v_now - p_keep;
    DELETE FROM queen.queue_ops_metrics m WHERE m.bucket_time < v_now - p_keep;
    RETURN v_folded;
END
$$;
