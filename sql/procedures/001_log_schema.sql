-- 001_log_schema: the log engine's tables (log_dlq lives in 005_log_ack),
-- queen.hotlist_repairs, and the helpers every later file reads through.
--
-- Storage model in one paragraph: a partition is an append-only log of
-- offsets 0, 1, 2, ...; one log_segments row holds `message_count`
-- consecutive offsets as one opaque blob framed and zstd-compressed by the
-- engine; log_txns is the per-segment sidecar of transaction-id hashes and
-- message ids; log_consumers holds, per (partition, group), a cursor (last
-- acknowledged offset) plus at most one lease over a contiguous batch.
-- Offsets are contiguous: they are assigned only by the write step of
-- queen.log_push_v1 and by queen.log_push_one_v1
-- under the partition row lock, and an aborted push rolls its offsets back.
--
-- Storage parameters are applied by the DO block at the end, only when the
-- catalog does not already hold them, so a re-apply changes nothing.
--
-- Advisory keys (the "advisory" space of the global lock order). An actor
-- that can wait for a key takes its keys before any row lock it could be
-- waited on for, in the order below; a try-lock never waits, so a POP takes
-- its try-locks wherever it needs them. The kinds, in acquisition order:
--   1. The queue key, one-bigint form, always negative (so never the boot
--      lock 778120010): queen.log_queue_lock_key_v1(queue id). EXCLUSIVE for
--      queen.delete_queue_v1 (and any future partition deleter), SHARED for
--      every actor that writes the queue's partition or consumer rows (push,
--      ack, renew, seek, drop group; a pop only try-locks it). Why it exists:
--      PostgreSQL re-checks a foreign key when a transaction updates a row it
--      already inserted or updated (BEGIN; PUSH; PUSH; or POP then ACK in
--      one transaction), taking FOR KEY SHARE on the parent (queue or
--      partition) AFTER the child rows are held. That silent lock runs
--      against the global order and deadlocked with the deleter (which holds
--      the parent FOR UPDATE and waits for the children) in a chaos test;
--      the key keeps the deleter and those writers from ever overlapping, so
--      the re-check can only meet locks it is compatible with.
--   2. (partition_id % 2^31, hashtext(consumer_group)), two-int form: held by
--      whoever creates or deletes that log_consumers row (POP with a
--      try-lock; SEEK and DROP GROUP blocking, in ascending key order). A
--      POP's INSERT ... ON CONFLICT DO NOTHING therefore never meets an
--      in-flight insert or delete of the same key, i.e. never waits.
--   3. (-1 - (hashtext(queue_id::text) & (2^31 - 1)), hashtext(group)),
--      two-int form, negative first key (apart from 2.): the first-sight
--      insert of a consumer_groups_metadata row (POP, try-lock only).
-- Two-int and one-bigint advisory keys never collide with each other.

CREATE TABLE IF NOT EXISTS queen.log_partitions (
    -- BIGINT identity: ids only grow, so a partition recreated after cleanup
    -- never reuses the id of the one whose cursors and DLQ rows went with it.
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id      UUID NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name          TEXT COLLATE "C" NOT NULL,
    -- The offset allocator: the last offset assigned, -1 while empty. The
    -- UPDATE that bumps it is the per-partition write serializer.
    last_offset   BIGINT NOT NULL DEFAULT -1,
    -- The two retention watermarks, both raised only by
    -- queen.log_retention_step_v1 (006) under this row's lock, in the same
    -- transaction as the segment deletes they describe:
    -- first_offset, the low watermark: every offset below it is gone, every
    -- offset from it up to last_offset is still stored. Counts of retained
    -- messages (SHOW, max_queue_size) read it instead of scanning segments.
    first_offset  BIGINT NOT NULL DEFAULT 0,
    -- expired_offset: the newest offset the age rule (retention_seconds)
    -- deleted before every group had acknowledged it; -1 while none was.
    -- A group whose cursor is below it lost offsets cursor+1 ..
    -- expired_offset to age, which readers can report instead of hiding.
    expired_offset BIGINT NOT NULL DEFAULT -1,
    -- Database clock of the last segment write; NULL while never written.
    -- window_buffer compares against it; the candidate scan filters on it.
    last_write_at TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT log_partitions_queue_name_uk UNIQUE (queue_id, name)
);

-- Messages, one row per write. PRIMARY KEY only: it is also the pop path
-- (the segment holding offset X is the last one with base_offset <= X).
CREATE TABLE IF NOT EXISTS queen.log_segments (
    partition_id   BIGINT NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    -- First offset in the segment; the last is base_offset + message_count - 1
    -- (not stored: derivable, and the row stays 8 bytes narrower).
    base_offset    BIGINT NOT NULL,
    -- Oldest and newest message created_at (engine clock) in the segment:
    -- delayed_processing and subscriptions by time work at segment
    -- granularity, never delivering a segment before its newest message is
    -- old enough.
    min_created_at TIMESTAMPTZ NOT NULL,
    max_created_at TIMESTAMPTZ NOT NULL,
    message_count  INTEGER NOT NULL CHECK (message_count > 0),
    -- Compressed size of blob, so byte accounting never detoasts it.
    byte_size      INTEGER NOT NULL,
    -- Length-prefixed zstd frames; opaque to SQL.
    blob           BYTEA NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);

-- The hash sidecar, one row per segment, written on every push whether
-- deduplication is on or off (the transaction wire and DLQ readers resolve
-- message ids through it). Deliberately NO foreign key to log_partitions: a
-- cascade would put this table under every partition delete's lock chain.
-- The obligation that comes with it: every deleter of a partition deletes
-- its log_txns rows itself (queen.delete_queue_v1 does; so must cleanup).
CREATE TABLE IF NOT EXISTS queen.log_txns (
    partition_id BIGINT NOT NULL,
    base_offset  BIGINT NOT NULL,
    -- Database clock at write, under the partition lock: monotonic per
    -- partition in offset order, which lets the dedup probe walk backwards
    -- from the newest row and stop at the window edge.
    created_at   TIMESTAMPTZ NOT NULL,
    -- Hashes of the transaction ids, parallel to the offsets; an element is
    -- NULL where the message has none, and the whole array is NULL when no
    -- message of the segment has one (the probe then skips the row unread).
    txn_hashes   BIGINT[],
    -- Message ids parallel to the offsets, so a duplicate reports the
    -- original's id and a DLQ snapshot records the id without decoding.
    message_ids  UUID[] NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);

-- Coordination state per (partition, consumer group).
CREATE TABLE IF NOT EXISTS queen.log_consumers (
    partition_id     BIGINT NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    consumer_group   TEXT COLLATE "C" NOT NULL,
    -- Last acknowledged offset (every offset <= it is done); -1 = nothing.
    cursor_offset    BIGINT NOT NULL DEFAULT -1,
    -- Failures of the first unacknowledged message (cursor_offset + 1);
    -- reset whenever the cursor moves.
    retry_count      INTEGER NOT NULL DEFAULT 0,
    -- The one lease of this (partition, group): a random token the receipt
    -- must carry, its expiry, and the leased batch [batch_from, batch_to].
    lease_token      UUID,
    lease_expires_at TIMESTAMPTZ,
    batch_from       BIGINT,
    batch_to         BIGINT,
    -- Offsets of the leased batch acknowledged out of order (beyond the
    -- contiguous prefix the cursor already covers).
    batch_acked      BIGINT[],
    -- After a FAILED ack: the partition is not delivered to this group
    -- before this instant (the queue's retry_delay).
    blocked_until    TIMESTAMPTZ,
    -- When a POP last claimed this (partition, group): the fairness rotation
    -- serves the least recently claimed partition first.
    last_claimed_at  TIMESTAMPTZ,
    -- Messages given up without a DLQ snapshot (dead_letter_queue = false or
    -- dlq_after_max_retries = false).
    failed_count     BIGINT NOT NULL DEFAULT 0,
    -- The leases of this row that acknowledged something, newest first
    -- (at most 32): token i acknowledged every offset of its batch up to
    -- acked_lease_to[i]. Kept so that an ACK repeated after its reply was
    -- lost answers acked although its lease is gone (queen.log_ack_v1);
    -- a receipt carries its own token, so no other lease's delivery can
    -- match. Parallel arrays on the row rather than a table: no pruning,
    -- and the row is updated by every ACK anyway.
    acked_lease_tokens UUID[],
    acked_lease_to     BIGINT[],
    PRIMARY KEY (partition_id, consumer_group),
    CONSTRAINT log_consumers_lease_ck CHECK (
        (lease_token IS NULL) = (lease_expires_at IS NULL)
        AND (lease_token IS NULL) = (batch_from IS NULL)
        AND (lease_token IS NULL) = (batch_to IS NULL))
);

-- The durable announcement of a deliberate cursor move (SEEK, DROP GROUP),
-- which the brokers' windowed reseed cannot see because nothing was written.
-- Keyed by name, no foreign key: it is a publication channel, read by every
-- broker's reconcile pass and pruned (rows older than an hour) by its
-- writers. partition_name NULL = the whole queue; two repairs naming
-- different partitions widen to NULL rather than one being lost.
CREATE TABLE IF NOT EXISTS queen.hotlist_repairs (
    tenant_id      UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    queue_name     TEXT COLLATE "C" NOT NULL,
    consumer_group TEXT COLLATE "C" NOT NULL,
    partition_name TEXT COLLATE "C",
    repair_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    reason         TEXT NOT NULL,
    PRIMARY KEY (tenant_id, queue_name, consumer_group)
);

-- Secondary indexes, created only when absent (CREATE INDEX IF NOT EXISTS
-- would take a SHARE lock on the table at every boot, see schema.sql).
DO $$
BEGIN
    -- The wildcard candidate scan: a queue's partitions, filtered by
    -- last_write_at (window_buffer, never-written partitions). The price is
    -- that a push's UPDATE of last_write_at is never HOT.
    IF to_regclass('queen.idx_log_partitions_queue_write') IS NULL THEN
        CREATE INDEX idx_log_partitions_queue_write
            ON queen.log_partitions (queue_id, last_write_at);
    END IF;
    -- The brokers' reconcile pass reads recent repairs; the prune deletes
    -- old ones.
    IF to_regclass('queen.idx_hotlist_repairs_repair_at') IS NULL THEN
        CREATE INDEX idx_hotlist_repairs_repair_at
            ON queen.hotlist_repairs (repair_at);
    END IF;
END
$$;

-- Storage parameters (values from the seed catalogue; not measured on this
-- build). Each table is altered only when its reloptions do not already
-- contain the wanted settings: ALTER TABLE ... SET (...) takes SHARE UPDATE
-- EXCLUSIVE, which waits behind a running (auto)vacuum, and rewrites the
-- pg_class row, so a re-apply must not issue it. The toast.* settings mirror
-- the heap's onto the TOAST table, where the segment blobs actually live.
--   log_partitions, log_consumers: small, update-heavy rows; fillfactor
--     leaves room for HOT updates, vacuum runs after a fixed number of dead
--     rows instead of a fraction of a tiny table, and vacuum_truncate = off
--     because truncation takes ACCESS EXCLUSIVE, which every push and pop
--     would queue behind.
--   log_segments, log_txns: insert-mostly, deleted from the front by
--     retention.
DO $$
DECLARE
    v_table   RECORD;
    v_current TEXT[];
BEGIN
    FOR v_table IN
        SELECT t.relname, t.heap, t.toast
        FROM (VALUES
            ('log_partitions',
             ARRAY['fillfactor=70', 'autovacuum_vacuum_scale_factor=0',
                   'autovacuum_vacuum_threshold=500', 'autovacuum_vacuum_cost_delay=0',
                   'vacuum_truncate=off'],
             ARRAY[]::TEXT[]),
            ('log_segments',
             ARRAY['autovacuum_vacuum_scale_factor=0.1',
                   'autovacuum_vacuum_insert_scale_factor=0.3',
                   'autovacuum_vacuum_cost_limit=4000', 'autovacuum_vacuum_cost_delay=0'],
             ARRAY['autovacuum_vacuum_scale_factor=0.1',
                   'autovacuum_vacuum_insert_scale_factor=0.3',
                   'autovacuum_vacuum_cost_limit=4000', 'autovacuum_vacuum_cost_delay=0']),
            ('log_txns',
             ARRAY['autovacuum_vacuum_scale_factor=0.1',
                   'autovacuum_vacuum_insert_scale_factor=0.3',
                   'autovacuum_vacuum_cost_delay=0'],
             ARRAY[]::TEXT[]),
            ('log_consumers',
             ARRAY['fillfactor=50', 'autovacuum_vacuum_scale_factor=0',
                   'autovacuum_vacuum_threshold=500', 'autovacuum_vacuum_cost_delay=0',
                   'vacuum_truncate=off'],
             ARRAY[]::TEXT[])
        ) AS t(relname, heap, toast)
    LOOP
        SELECT COALESCE(c.reloptions, '{}') INTO v_current
        FROM pg_class c
        WHERE c.oid = format('queen.%I', v_table.relname)::regclass;
        IF NOT v_current @> v_table.heap THEN
            EXECUTE format('ALTER TABLE queen.%I SET (%s)',
                           v_table.relname, array_to_string(v_table.heap, ', '));
        END IF;

        IF cardinality(v_table.toast) > 0 THEN
            SELECT COALESCE(tc.reloptions, '{}') INTO v_current
            FROM pg_class c
            JOIN pg_class tc ON tc.oid = c.reltoastrelid
            WHERE c.oid = format('queen.%I', v_table.relname)::regclass;
            IF NOT v_current @> v_table.toast THEN
                EXECUTE format('ALTER TABLE queen.%I SET (%s)', v_table.relname,
                               (SELECT string_agg('toast.' || o, ', ') FROM unnest(v_table.toast) o));
            END IF;
        END IF;
    END LOOP;
END
$$;

-- The blobs are zstd-compressed already: EXTERNAL keeps TOAST from spending
-- CPU on a second compression that cannot win. SET STORAGE takes ACCESS
-- EXCLUSIVE on the table, so it runs only when the column is not already
-- external (i.e. on the first boot).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = 'queen.log_segments'::regclass
                 AND attname = 'blob' AND attstorage <> 'e') THEN
        ALTER TABLE queen.log_segments ALTER COLUMN blob SET STORAGE EXTERNAL;
    END IF;
    -- Random UUIDs do not compress: without this, pglz tries (and fails)
    -- on every fused segment's id array over the 2 kB TOAST threshold
    -- (measured: 4.8 % of PostgreSQL's CPU on push100).
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = 'queen.log_txns'::regclass
                 AND attname = 'message_ids' AND attstorage <> 'e') THEN
        ALTER TABLE queen.log_txns ALTER COLUMN message_ids SET STORAGE EXTERNAL;
    END IF;
END
$$;

-- The cursor that makes a group's next delivery in a partition start at the
-- messages created at or after p_at: the end of the newest segment whose
-- newest message is older than p_at, or -1 when there is none (deliver from
-- the oldest retained segment). p_at NULL means "from the beginning" (-1).
-- Used for a group's first sight of a partition ('now' and 'timestamp'
-- subscriptions) and by SEEK ... TO TIMESTAMP. The backward scan over the
-- primary key stops at the first older segment, so 'now' costs only the
-- segments written since. Created_at order is the engine's stamp order; a
-- segment that straddles p_at is delivered whole (segment granularity).
-- NULL when the partition is not the tenant's. Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_cursor_at_v1(
    p_partition_id BIGINT,
    p_at           TIMESTAMPTZ,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS BIGINT
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_at IS NULL THEN -1::BIGINT
        ELSE COALESCE(
            (SELECT s.base_offset + s.message_count - 1
             FROM queen.log_segments s
             WHERE s.partition_id = p.id AND s.max_created_at < p_at
             ORDER BY s.base_offset DESC
             LIMIT 1),
            -1)
    END
    FROM queen.log_partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_partition_id AND q.tenant_id = p_tenant
$$;

-- The queue's advisory key (see the top of this file). Pure: no table, no
-- tenant, no lock of its own.
CREATE OR REPLACE FUNCTION queen.log_queue_lock_key_v1(
    p_queue_id UUID
) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT hashtextextended(p_queue_id::TEXT, 778120010) | (-9223372036854775808)::BIGINT
$$;

-- The cursor after advancing p_cursor over the contiguous run of offsets
-- p_cursor + 1, p_cursor + 2, ... found in p_acked (out-of-order acks of a
-- batch). Pure: touches no table, so it has no tenant to scope and takes no
-- locks. plpgsql, not SQL: a SQL function's query was planned again on every
-- call (every ACK), and the common cases (the next offset alone, or not
-- there at all) need no query.
CREATE OR REPLACE FUNCTION queen.log_acked_prefix_v1(
    p_cursor BIGINT,
    p_acked  BIGINT[]
) RETURNS BIGINT
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    v_cursor BIGINT := p_cursor;
    v_o      BIGINT;
BEGIN
    IF p_cursor IS NULL OR (p_cursor + 1 = ANY (p_acked)) IS NOT TRUE THEN
        RETURN p_cursor;
    END IF;
    IF cardinality(p_acked) = 1 THEN
        RETURN p_cursor + 1;
    END IF;
    FOR v_o IN SELECT DISTINCT o FROM unnest(p_acked) o WHERE o > p_cursor ORDER BY o LOOP
        EXIT WHEN v_o <> v_cursor + 1;
        v_cursor := v_o;
    END LOOP;
    RETURN v_cursor;
END
$$;

-- Pending messages of a queue: per partition, the retained messages its
-- furthest-behind group has not finished: after the group's cursor, less
-- a shared group's finished messages above its start
-- (log_group_lag_v1, 032). A group the queue knows
-- (consumer_groups_metadata) without a cursor on a partition counts as not
-- having started there, and a queue with no group yet counts everything
-- retained, so this never under-reports. One definition, read by
-- max_queue_size (003) and SHOW QUEUES (010). 0 when the queue is not the
-- tenant's. Takes no locks. PL/pgSQL: it reads a function defined later.
CREATE OR REPLACE FUNCTION queen.log_queue_pending_v1(
    p_queue_id UUID,
    p_tenant   UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS BIGINT
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (
        SELECT COALESCE(sum(f.pending), 0)::BIGINT
        FROM queen.queues q
        CROSS JOIN LATERAL (
            SELECT count(*) AS n FROM queen.consumer_groups_metadata m WHERE m.queue_id = q.id
        ) g
        JOIN queen.log_partitions p ON p.queue_id = q.id
        CROSS JOIN LATERAL (
            SELECT CASE WHEN count(*) < g.n OR count(*) = 0
                        THEN GREATEST(p.last_offset - GREATEST(p.first_offset - 1, -1), 0)
                        ELSE max(l.lag)
                   END AS pending
            FROM queen.log_consumers c
            CROSS JOIN LATERAL queen.log_group_lag_v1(
                c.partition_id, c.consumer_group, c.cursor_offset,
                p.first_offset, p.last_offset) l
            WHERE c.partition_id = p.id
        ) f
        WHERE q.id = p_queue_id AND q.tenant_id = p_tenant);
END
$$;
