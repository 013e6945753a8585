-- 032_log_shared: shared consumer groups, per-message leases on the log.
--
-- A group is *ordered* (the seed's model: one lease per (partition, group),
-- 004/005) or *shared*: each message is leased on its own, so any number of
-- consumers hold messages of one partition at once and a failing message
-- holds back only itself. A queue's `ordered` option is the type of every
-- group of it that does not set its own (consumer_groups_metadata.ordered,
-- ALTER GROUP ... SET (ordered = ...)).
--
-- State per (partition, shared group), bounded as Kafka's share partitions
-- are (KIP-932):
--   * log_consumers.cursor_offset, the start: every offset at or below it
--     is finished (acked or dead-lettered). Retention reads it as it reads
--     an ordered group's cursor, so it deletes nothing unfinished;
--   * log_shared_records, one row per message above the start that was
--     ever delivered: leased (token, expiry), available again (failed and
--     waiting for retry_delay, or given back), acked or dead. Offsets above
--     the highest row were never delivered. At most the queue's
--     max_in_flight offsets lie between the start and the highest row: when
--     that window is full, POP serves other partitions.
--   * Offsets below the partition's first_offset are gone: retention
--     deleted them (retention_seconds deletes what no group finished, and
--     counts it as expired). They are never delivered: POP and compaction
--     read the start as at least first_offset - 1, and compaction moves it
--     there. Rows it leaves below the start go with the purge (until then
--     a lease over a deleted message still acknowledges, as an ordered
--     group's does).
--   * The start moves over the finished prefix (log_shared_compact_v1, by
--     POP and ACK, never waiting for the consumer row). Finished rows stay
--     below it for about ten seconds more (purge_below / purge_at): an ACK
--     repeated after its reply was lost finds its row and answers acked
--     again, and a POP whose snapshot predates a row can never create it a
--     second time (its insert meets the row and does nothing).
--
-- Acquiring never waits on a lock, in or out of a transaction block: a
-- message delivered before is taken FOR UPDATE SKIP LOCKED; a message never
-- delivered is claimed by inserting its row under a transaction-scoped
-- advisory try-lock on (partition, group, offset), so a POP whose snapshot
-- cannot see another transaction's uncommitted claim skips that offset
-- instead of waiting on the row's unique index. A worker that runs
-- BEGIN; POP; ...; ACK; COMMIT holds only its own messages' rows.
--
-- state: 0 leased, 1 available, 2 acked, 3 dead (dead-lettered or skipped).

ALTER TABLE queen.queues ADD COLUMN IF NOT EXISTS ordered BOOLEAN NOT NULL DEFAULT true;
-- Large enough that 64 consumers of 100 messages a POP on one partition
-- (and the claims held for their next POP) do not meet it; a POP never
-- reads the window whole, so its width costs nothing but the rows it may
-- hold. Chosen, not measured.
ALTER TABLE queen.queues ADD COLUMN IF NOT EXISTS max_in_flight INTEGER NOT NULL DEFAULT 10000;
ALTER TABLE queen.queues ALTER COLUMN max_in_flight SET DEFAULT 10000;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'queues_max_in_flight_check'
                     AND conrelid = 'queen.queues'::regclass) THEN
        ALTER TABLE queen.queues ADD CONSTRAINT queues_max_in_flight_check CHECK (max_in_flight >= 1);
    END IF;
END
$$;
-- NULL: the queue's `ordered`.
ALTER TABLE queen.consumer_groups_metadata ADD COLUMN IF NOT EXISTS ordered BOOLEAN;
-- A shared group's purge mark: rows at or below purge_below were finished
-- at purge_at; they are deleted once that is ten seconds old.
ALTER TABLE queen.log_consumers ADD COLUMN IF NOT EXISTS purge_below BIGINT;
ALTER TABLE queen.log_consumers ADD COLUMN IF NOT EXISTS purge_at TIMESTAMPTZ;

-- No foreign key to log_consumers: its check would lock the consumer row
-- for every message a POP claims. Rows go with their consumer row through
-- the trigger below (DROP GROUP, DROP QUEUE, partition cleanup, purge).
CREATE TABLE IF NOT EXISTS queen.log_shared_records (
    partition_id     BIGINT NOT NULL,
    consumer_group   TEXT COLLATE "C" NOT NULL,
    message_offset   BIGINT NOT NULL,
    state            SMALLINT NOT NULL CHECK (state BETWEEN 0 AND 3),
    -- The lease that holds the message (state 0), or the last one that
    -- settled it (states 1-3), so a settlement repeated with the same
    -- receipt answers as the first did.
    lease_token      UUID,
    lease_expires_at TIMESTAMPTZ,
    -- Failures so far (FAILED and expired leases).
    retry_count      INTEGER NOT NULL DEFAULT 0,
    -- State 1: not delivered before this (retry_delay); NULL: at once.
    available_at     TIMESTAMPTZ,
    PRIMARY KEY (partition_id, consumer_group, message_offset)
) WITH (fillfactor = 80);

-- What a POP looks for besides new offsets, without reading the whole
-- window: leases that may have expired (state 0, by expiry) and messages
-- available again (state 1, by when).
CREATE INDEX IF NOT EXISTS idx_log_shared_records_leased
    ON queen.log_shared_records (partition_id, consumer_group, lease_expires_at)
    WHERE state = 0;
CREATE INDEX IF NOT EXISTS idx_log_shared_records_available
    ON queen.log_shared_records (partition_id, consumer_group, available_at)
    WHERE state = 1;

CREATE OR REPLACE FUNCTION queen.log_shared_records_gone_v1() RETURNS TRIGGER
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM queen.log_shared_records r
    USING gone g
    WHERE r.partition_id = g.partition_id AND r.consumer_group = g.consumer_group;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS log_consumers_shared_gone ON queen.log_consumers;
CREATE TRIGGER log_consumers_shared_gone
    AFTER DELETE ON queen.log_consumers
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION queen.log_shared_records_gone_v1();

-- Moves a shared group's start over the finished prefix of one partition,
-- and purges rows finished more than ten seconds ago. Skips (returns the
-- start it saw) when another transaction holds the consumer row: whoever
-- holds it moves the start, or the next POP or ACK does.
-- Locks: the log_consumers row, FOR NO KEY UPDATE SKIP LOCKED; then
-- log_shared_records rows below the start (delete).
DROP FUNCTION IF EXISTS queen.log_shared_compact_v1(BIGINT, TEXT);
DROP FUNCTION IF EXISTS queen.log_shared_answer_v1(TEXT[], INTEGER[], TEXT);
-- p_min_rows > 0 (an ACK): nothing is done unless the window holds that
-- many rows or every written offset was delivered, read without a lock.
CREATE OR REPLACE FUNCTION queen.log_shared_compact_v1(
    p_partition_id BIGINT,
    p_group        TEXT,
    p_min_rows     INTEGER DEFAULT 0
) RETURNS BIGINT
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
-- Index reads only: a generic plan made while the table was small scanned
-- it whole, on every call, as it grew (POPs slowed by half within seconds).
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now    TIMESTAMPTZ := clock_timestamp();
    v_c      RECORD;
    v_start  BIGINT;
BEGIN
    IF p_min_rows > 0 THEN
        SELECT c.cursor_offset, p.last_offset, p.first_offset,
               (SELECT r.message_offset FROM queen.log_shared_records r
                WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group
                ORDER BY r.message_offset DESC LIMIT 1) AS hw
        INTO v_c
        FROM queen.log_consumers c
        JOIN queen.log_partitions p ON p.id = c.partition_id
        WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group;
        IF NOT FOUND OR (v_c.hw - v_c.cursor_offset < p_min_rows AND v_c.hw < v_c.last_offset
                         AND v_c.cursor_offset >= v_c.first_offset - 1) THEN
            RETURN v_c.cursor_offset;
        END IF;
    END IF;
    -- The start, read as at least first_offset - 1 (retention deleted
    -- what lies below first_offset).
    SELECT GREATEST(c.cursor_offset, p.first_offset - 1) AS cursor_offset,
           c.cursor_offset AS stored, c.purge_below, c.purge_at INTO v_c
    FROM queen.log_consumers c
    JOIN queen.log_partitions p ON p.id = c.partition_id
    WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group
    FOR NO KEY UPDATE OF c SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The finished prefix above the start, up to 256 rows a call: it
    -- ends before the first unfinished row or the first offset without a
    -- row (never delivered, or a claim rolled back or not yet committed:
    -- it must still come). The n-th row above the start is at start + n
    -- while there is no such offset, so the new start is the offset the
    -- first row that breaks the prefix should have had, less one.
    SELECT COALESCE(min(v_c.cursor_offset + x.rn)
                        FILTER (WHERE x.state < 2 OR x.o <> v_c.cursor_offset + x.rn) - 1,
                    max(x.o))
    INTO v_start
    FROM (SELECT r.message_offset AS o, r.state,
                 row_number() OVER (ORDER BY r.message_offset) AS rn
          FROM queen.log_shared_records r
          WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group
            AND r.message_offset > v_c.cursor_offset
          ORDER BY r.message_offset
          LIMIT 256) x;
    v_start := COALESCE(v_start, v_c.cursor_offset);
    v_start := GREATEST(v_start, v_c.cursor_offset);
    IF v_c.purge_at IS NULL OR v_c.purge_at <= v_now - interval '10 seconds' THEN
        IF v_c.purge_below IS NOT NULL THEN
            DELETE FROM queen.log_shared_records r
            WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group
              AND r.message_offset <= v_c.purge_below;
        END IF;
        UPDATE queen.log_consumers c
        SET cursor_offset = v_start, purge_below = v_start, purge_at = v_now,
            last_claimed_at = v_now
        WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group;
    ELSIF v_start > v_c.stored THEN
        UPDATE queen.log_consumers c
        SET cursor_offset = v_start, last_claimed_at = v_now
        WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group;
    END IF;
    RETURN v_start;
END
$$;

-- A group's lag on one partition, the one definition SHOW GROUPS, SHOW
-- GROUP, SHOW QUEUES, the views and max_queue_size read: the retained
-- messages after its cursor (p_cursor, read as at least first_offset - 1),
-- less those a shared group finished above its start though the start has
-- not moved over them yet (it moves every 64 ACKs or so, and with the next
-- POP); and whether a live lease holds a shared group's message there. An
-- ordered group has no rows: its lag is last - cursor, leased false (its
-- lease is on log_consumers). Takes no locks.
DROP FUNCTION IF EXISTS queen.log_shared_window_v1(BIGINT, TEXT, BIGINT, BIGINT);
CREATE OR REPLACE FUNCTION queen.log_group_lag_v1(
    p_partition_id BIGINT,
    p_group        TEXT,
    p_cursor       BIGINT,
    p_first_offset BIGINT,
    p_last_offset  BIGINT
) RETURNS TABLE (lag BIGINT, leased BOOLEAN)
LANGUAGE sql STABLE
AS $$
    SELECT GREATEST(p_last_offset - b.above
                    - (SELECT count(*) FROM queen.log_shared_records r
                       WHERE r.partition_id = p_partition_id
                         AND r.consumer_group = p_group COLLATE "C"
                         AND r.message_offset > b.above AND r.message_offset <= p_last_offset
                         AND r.state >= 2), 0)::BIGINT,
           EXISTS (SELECT 1 FROM queen.log_shared_records r
                   WHERE r.partition_id = p_partition_id
                     AND r.consumer_group = p_group COLLATE "C"
                     AND r.state = 0 AND r.lease_expires_at > now())
    FROM (SELECT GREATEST(p_first_offset - 1, p_cursor) AS above) b
$$;

-- Dead-letters (or, without a DLQ, counts) one shared message that
-- exhausted retry_limit; the caller set its row's state to 3.
CREATE OR REPLACE FUNCTION queen.log_shared_give_up_v1(
    p_partition_id BIGINT,
    p_group        TEXT,
    p_offset       BIGINT,
    p_reason       TEXT,
    p_retry_count  INTEGER,
    p_store_dlq    BOOLEAN,
    p_tenant       UUID
) RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_store_dlq THEN
        PERFORM queen.log_dead_letter_v1(p_partition_id, p_group, p_offset, p_reason,
                                         p_retry_count, p_tenant);
    ELSE
        UPDATE queen.log_consumers c SET failed_count = c.failed_count + 1
        WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group;
    END IF;
END
$$;

-- max_wait_time_seconds for a shared group: log_expire_pending_v1 (006)
-- calls it for offsets p_from + 1 .. p_to (above the start, in segments
-- older than the queue allows) while it holds the group's consumer row.
-- Only pending messages go, one by one: those never delivered (no row;
-- claimed under the advisory try-lock a POP claims them under, so an
-- offset a POP is claiming now is left to it) and those available again
-- (state 1: waiting for retry_delay, or given back). A leased message is
-- its holder's until the lease ends (an expired one is settled by the
-- next POP, which counts the failure), and a finished one stays finished.
-- Each goes to the DLQ (reason 'max_wait_time exceeded', its failures so
-- far), or without one is counted as failed, and becomes a dead row
-- (state 3): the start moves over it as over any finished message.
-- Returns how many went.
-- Locks: log_shared_records rows FOR UPDATE SKIP LOCKED and advisory
-- try-locks per offset (never waits); leaf log_dlq; the log_consumers row
-- (already the caller's) through log_shared_compact_v1.
CREATE OR REPLACE FUNCTION queen.log_shared_expire_v1(
    p_partition_id BIGINT,
    p_group        TEXT,
    p_from         BIGINT,
    p_to           BIGINT,
    p_store_dlq    BOOLEAN
) RETURNS INTEGER
LANGUAGE plpgsql
-- Index reads only, one key at a time, as the POP's.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_lock_text TEXT := p_group || ':' || p_partition_id;
    v_offs      BIGINT[];
    v_retries   INTEGER[];
    v_n         INTEGER;
    v_start     BIGINT;
    v_prev      BIGINT;
    v_tenant    UUID;
    v_i         INTEGER;
BEGIN
    WITH avail AS (
        SELECT r.ctid AS tid
        FROM queen.log_shared_records r
        WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group
          AND r.message_offset > p_from AND r.message_offset <= p_to
          AND r.state = 1
        ORDER BY r.message_offset
        FOR UPDATE SKIP LOCKED
    ), upd AS (
        UPDATE queen.log_shared_records r
        SET state = 3, available_at = NULL
        WHERE r.ctid = ANY (ARRAY(SELECT a.tid FROM avail a))
        RETURNING r.message_offset, r.retry_count
    ), ins AS (
        INSERT INTO queen.log_shared_records AS r
            (partition_id, consumer_group, message_offset, state, retry_count)
        SELECT p_partition_id, p_group, g.o, 3, 0
        FROM generate_series(p_from + 1, p_to) AS g(o)
        WHERE NOT EXISTS (SELECT 1 FROM queen.log_shared_records r2
                          WHERE r2.partition_id = p_partition_id
                            AND r2.consumer_group = p_group
                            AND r2.message_offset = g.o)
          AND pg_try_advisory_xact_lock(hashtextextended(v_lock_text, g.o))
        ON CONFLICT DO NOTHING
        RETURNING r.message_offset, r.retry_count
    )
    SELECT array_agg(x.message_offset ORDER BY x.message_offset),
           array_agg(x.retry_count ORDER BY x.message_offset)
    INTO v_offs, v_retries
    FROM (SELECT u.message_offset, u.retry_count FROM upd u
          UNION ALL
          SELECT i.message_offset, i.retry_count FROM ins i) x;
    v_n := COALESCE(cardinality(v_offs), 0);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    -- The DLQ snapshot (or the failure count) as every give-up writes it;
    -- maintenance knows no tenant: the partition's own.
    SELECT q.tenant_id INTO v_tenant
    FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_partition_id;
    FOR v_i IN 1 .. v_n LOOP
        PERFORM queen.log_shared_give_up_v1(p_partition_id, p_group, v_offs[v_i],
                                            'max_wait_time exceeded', v_retries[v_i],
                                            p_store_dlq, v_tenant);
    END LOOP;
    -- A call moves the start over at most 256 rows.
    LOOP
        v_start := queen.log_shared_compact_v1(p_partition_id, p_group);
        EXIT WHEN v_start IS NOT DISTINCT FROM v_prev OR v_start >= p_to;
        v_prev := v_start;
    END LOOP;
    RETURN v_n;
END
$$;

-- The segments of a partition that hold offsets p_from..p_to, in offset
-- order: the one p_from falls in and those after it up to p_to. LANGUAGE
-- sql and one SELECT, so a caller's LATERAL inlines it (its probes stay
-- index reads in the caller's plan). Judged rows (NULL offsets) get none.
CREATE OR REPLACE FUNCTION queen.log_run_segments_v1(
    p_partition_id BIGINT,
    p_from         BIGINT,
    p_to           BIGINT
) RETURNS TABLE (base_offset BIGINT, message_count INTEGER, blob BYTEA)
LANGUAGE sql STABLE
AS $$
    SELECT s1.base_offset, s1.message_count, s1.blob
    FROM queen.log_segments s1
    WHERE s1.partition_id = p_partition_id
      AND s1.base_offset >= COALESCE(
              (SELECT s2.base_offset FROM queen.log_segments s2
               WHERE s2.partition_id = p_partition_id AND s2.base_offset <= p_from
               ORDER BY s2.base_offset DESC LIMIT 1),
              p_from)
      AND s1.base_offset <= p_to
    ORDER BY s1.base_offset
    LIMIT (p_to - p_from + 1)
$$;

-- log_pop_shared_new_v1: the common shared claim in one statement (each
-- statement of log_pop_shared_v1 costs its executor start-up: one
-- candidate LIMIT 1 claim there ran 0.30 ms in PostgreSQL, here 0.19).
-- It claims never-delivered offsets of one partition whose group already
-- has its consumer row, and only when nothing else needs doing there:
-- nothing due again (a retry or an expired lease), no gap at the head (a
-- claim rolled back), no finished head to move over, nothing above the
-- start deleted by retention. Otherwise, or when it claims nothing, it
-- returns no row and log_pop_v2 calls log_pop_shared_v1, which does all
-- of that. The rows and the claims are log_pop_shared_v1's: runs of one
-- segment, cut into claims of p_partition_limit offsets when given, a
-- claim's first row 'shared'.
-- Locks: advisory try-locks per new offset (as log_pop_shared_v1).
CREATE OR REPLACE FUNCTION queen.log_pop_shared_new_v1(
    p_queue_id        UUID,
    p_group           TEXT,
    p_limit           INTEGER,
    p_max_partitions  INTEGER,
    p_lease           INTERVAL,
    p_auto_ack        BOOLEAN,
    p_partition_id    BIGINT,
    p_max_in_flight   INTEGER,
    p_partition_limit INTEGER
) RETURNS TABLE (
    partition_id     BIGINT,
    partition_name   TEXT,
    state            TEXT,
    retry_at         TIMESTAMPTZ,
    lease_token      UUID,
    lease_expires_at TIMESTAMPTZ,
    retry_count      INTEGER,
    from_offset      BIGINT,
    to_offset        BIGINT,
    base_offset      BIGINT,
    blob             BYTEA
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
-- Index reads only, one key at a time, as log_pop_shared_v1.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_now     TIMESTAMPTZ := clock_timestamp();
    v_token   UUID := gen_random_uuid();
    v_expires TIMESTAMPTZ := CASE WHEN p_auto_ack THEN NULL ELSE v_now + p_lease END;
    -- A claim's size, and the offsets all claims may take together.
    v_part    INTEGER := LEAST(p_limit, COALESCE(p_partition_limit, p_limit));
    v_want    BIGINT := CASE WHEN p_partition_limit IS NULL THEN p_limit
                             ELSE LEAST(p_limit, p_partition_limit::BIGINT * p_max_partitions) END;
BEGIN
    RETURN QUERY
    WITH c AS (
        SELECT p.id, p.name, p.last_offset, c1.cursor_offset AS cur,
               (SELECT r.state FROM queen.log_shared_records r
                WHERE r.partition_id = p.id AND r.consumer_group = p_group
                  AND r.message_offset = c1.cursor_offset + 1) AS head,
               GREATEST(c1.cursor_offset,
                        (SELECT r.message_offset FROM queen.log_shared_records r
                         WHERE r.partition_id = p.id AND r.consumer_group = p_group
                         ORDER BY r.message_offset DESC LIMIT 1)) AS hw
        FROM queen.log_partitions p
        JOIN queen.log_consumers c1
          ON c1.partition_id = p.id AND c1.consumer_group = p_group
        WHERE p.id = p_partition_id AND p.queue_id = p_queue_id
          AND p.last_write_at IS NOT NULL AND c1.cursor_offset < p.last_offset
          -- Retention deleted offsets above the start: the start moves
          -- first (log_pop_shared_v1).
          AND c1.cursor_offset >= p.first_offset - 1
          -- Still shared (log_group_convert_v1): evaluated once a call.
          AND NOT COALESCE((SELECT m.ordered FROM queen.consumer_groups_metadata m
                            WHERE m.queue_id = p_queue_id AND m.consumer_group = p_group),
                           (SELECT q.ordered FROM queen.queues q WHERE q.id = p_queue_id))
          AND NOT EXISTS (SELECT 1 FROM queen.log_shared_records r
                          WHERE r.partition_id = p.id AND r.consumer_group = p_group
                            AND r.state = 1 AND r.available_at <= v_now)
          AND NOT EXISTS (SELECT 1 FROM queen.log_shared_records r
                          WHERE r.partition_id = p.id AND r.consumer_group = p_group
                            AND r.state = 0 AND r.lease_expires_at <= v_now)
    ), ok AS (
        -- log_pop_shared_v1's reasons to do more than claim new offsets.
        SELECT c.* FROM c
        WHERE NOT (c.head >= 2 AND (c.hw - c.cur >= LEAST(64, p_max_in_flight)
                                    OR c.hw >= c.last_offset))
          AND NOT (c.head IS NULL AND c.hw > c.cur)
          AND c.hw < LEAST(c.last_offset, c.cur + p_max_in_flight)
    ), ins AS (
        INSERT INTO queen.log_shared_records AS r
            (partition_id, consumer_group, message_offset, state, lease_token,
             lease_expires_at, retry_count)
        SELECT g.id, p_group, g.o, CASE WHEN p_auto_ack THEN 2 ELSE 0 END,
               v_token, v_expires, 0
        -- The series in the target list stops with the LIMIT.
        FROM (SELECT ok.id,
                     generate_series(ok.hw + 1, LEAST(ok.last_offset, ok.cur + p_max_in_flight)) AS o
              FROM ok) g
        WHERE pg_try_advisory_xact_lock(hashtextextended(p_group || ':' || g.id, g.o))
        LIMIT v_want
        ON CONFLICT DO NOTHING
        RETURNING r.message_offset
    ), numbered AS (
        SELECT i.message_offset AS o,
               row_number() OVER (ORDER BY i.message_offset) AS rn
        FROM ins i
    ), runs AS (
        -- Consecutive offsets of one claim (every v_part offsets).
        SELECT min(n.o) AS f, max(n.o) AS t, (n.rn - 1) / v_part AS k
        FROM numbered n
        GROUP BY (n.rn - 1) / v_part, n.o - n.rn
    )
    SELECT ok.id, ok.name::TEXT,
           CASE WHEN s.base_offset > x.f
                     OR x.f > (SELECT min(r2.f) FROM runs r2 WHERE r2.k = x.k)
                THEN 'shared+' ELSE 'shared' END,
           NULL::TIMESTAMPTZ, v_token, v_expires, 0,
           GREATEST(x.f, s.base_offset), LEAST(x.t, s.base_offset + s.message_count - 1),
           s.base_offset, s.blob
    FROM runs x
    CROSS JOIN ok
    CROSS JOIN LATERAL queen.log_run_segments_v1(ok.id, x.f, x.t) s
    ORDER BY x.f, s.base_offset;
END
$$;

-- log_pop_shared_v1: log_pop_v2 for a shared group (log_pop_v2 calls it
-- once it has the queue and the group's first sight; its arguments are
-- log_pop_v2's, resolved). Rows as log_pop_v2's, with state 'shared' or
-- 'shared+' for what was claimed: one row per run of consecutive offsets
-- of one segment with one retry count; a claim's first row is 'shared',
-- its others 'shared+'. lease_token is the call's (also with AUTO ACK; the
-- engine issues no receipts then).
-- p_max_partitions counts claims: a fused POP's sessions may each claim
-- from the same partition (at most p_partition_limit messages a claim).
-- Judged candidates: 'empty', 'window', 'delayed', 'locked', and 'leased'
-- (nothing available now; retry_at: the earliest lease expiry or retry).
-- Locks: per candidate partition, on first sight exactly as log_pop_v2;
-- then log_shared_records rows FOR UPDATE SKIP LOCKED (redeliveries) and
-- advisory try-locks per new offset; log_consumers through
-- log_shared_compact_v1 (SKIP LOCKED); leaf log_dlq.
CREATE OR REPLACE FUNCTION queen.log_pop_shared_v1(
    p_queue_id        UUID,
    p_partition       TEXT,
    p_group           TEXT,
    p_limit           INTEGER,
    p_max_partitions  INTEGER,
    p_lease           INTERVAL,
    p_sub_at          TIMESTAMPTZ,
    p_auto_ack        BOOLEAN,
    p_tenant          UUID,
    p_candidates      BIGINT[],
    p_partition_limit INTEGER
) RETURNS TABLE (
    partition_id     BIGINT,
    partition_name   TEXT,
    state            TEXT,
    retry_at         TIMESTAMPTZ,
    lease_token      UUID,
    lease_expires_at TIMESTAMPTZ,
    retry_count      INTEGER,
    from_offset      BIGINT,
    to_offset        BIGINT,
    base_offset      BIGINT,
    blob             BYTEA
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
-- Index reads only, one key at a time: with bitmap or hash plans the
-- generic plan joined a receipt or a claimed offset to every row of its
-- (partition, group) (measured: 5,835 rows read to update one).
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_now        TIMESTAMPTZ := clock_timestamp();
    v_q          RECORD;
    v_budget     BIGINT := p_limit;
    v_claims     INTEGER := 0;
    v_part       BIGINT;
    v_cand       RECORD;
    v_cur        REFCURSOR;
    v_cursor     BIGINT;
    v_group_held BOOLEAN;
    v_token      UUID;
    v_expires    TIMESTAMPTZ;
    v_top        BIGINT;
    v_ready_last BIGINT;
    v_until      TIMESTAMPTZ;
    v_lock_text  TEXT;
    v_offs       BIGINT[];
    v_retries    INTEGER[];
    v_dead       BIGINT[];
    v_dead_n     INTEGER[];
    v_got        INTEGER;
    v_here       BIGINT;
    v_head       SMALLINT;
    v_hw         BIGINT;
    v_due        BOOLEAN;
    v_gap_to     BIGINT;
    v_i          INTEGER;
    v_run_from   BIGINT;
    v_run_retry  INTEGER;
    v_run_first  INTEGER;
    v_want       BIGINT;
    v_behind     BOOLEAN;
    o_pid        BIGINT[] := '{}';
    o_pname      TEXT[] := '{}';
    o_state      TEXT[] := '{}';
    o_until      TIMESTAMPTZ[] := '{}';
    o_token      UUID[] := '{}';
    o_expires    TIMESTAMPTZ[] := '{}';
    o_retry      INTEGER[] := '{}';
    o_from       BIGINT[] := '{}';
    o_to         BIGINT[] := '{}';
BEGIN
    SELECT q.retry_limit, q.delayed_processing, q.window_buffer, q.max_in_flight,
           (q.dead_letter_queue AND q.dlq_after_max_retries) AS store_dlq,
           COALESCE((SELECT m.ordered FROM queen.consumer_groups_metadata m
                     WHERE m.queue_id = q.id AND m.consumer_group = p_group),
                    q.ordered) AS ordered
    INTO v_q FROM queen.queues q WHERE q.id = p_queue_id;
    -- The group became ordered after log_pop_v2 read its type: this POP
    -- claims nothing (log_group_convert_v1 explains why it cannot race).
    IF v_q.ordered THEN
        RETURN;
    END IF;

    IF p_candidates IS NULL THEN
        OPEN v_cur FOR
            SELECT p.id, p.name, (c.partition_id IS NOT NULL) AS has_row, c.cursor_offset,
                   'ready'::TEXT AS st, NULL::TIMESTAMPTZ AS st_until, p.last_offset,
                   p.first_offset
            FROM queen.log_partitions p
            LEFT JOIN queen.log_consumers c
                   ON c.partition_id = p.id AND c.consumer_group = p_group
            WHERE p.queue_id = p_queue_id
              AND p.last_write_at IS NOT NULL
              AND (v_q.window_buffer = 0
                   OR p.last_write_at <= v_now - make_interval(secs => v_q.window_buffer))
              AND (p_partition IS NULL OR p.name = p_partition)
              AND (c.partition_id IS NULL OR c.cursor_offset < p.last_offset)
            ORDER BY c.last_claimed_at NULLS FIRST, p.id;
    ELSE
        OPEN v_cur FOR
        SELECT u.* FROM (
            SELECT k.id, p.name, (c.partition_id IS NOT NULL) AS has_row, c.cursor_offset,
                   CASE
                       WHEN p.id IS NULL OR p.last_write_at IS NULL
                            OR (p_partition IS NOT NULL AND p.name <> p_partition) THEN 'empty'
                       WHEN c.partition_id IS NOT NULL AND c.cursor_offset >= p.last_offset THEN 'empty'
                       WHEN v_q.window_buffer > 0
                            AND p.last_write_at > v_now - make_interval(secs => v_q.window_buffer)
                            THEN 'window'
                       ELSE 'ready'
                   END AS st,
                   CASE WHEN v_q.window_buffer > 0 AND p.last_write_at IS NOT NULL
                        THEN p.last_write_at + make_interval(secs => v_q.window_buffer)
                   END AS st_until,
                   p.last_offset, p.first_offset
            FROM (SELECT DISTINCT u.id FROM unnest(p_candidates) AS u(id) WHERE u.id IS NOT NULL) AS k
            LEFT JOIN LATERAL (
                SELECT p1.id, p1.name, p1.last_write_at, p1.last_offset, p1.first_offset
                FROM queen.log_partitions p1
                WHERE p1.id = k.id AND p1.queue_id = p_queue_id
                LIMIT 1) AS p ON true
            LEFT JOIN LATERAL (
                SELECT c1.partition_id, c1.cursor_offset, c1.last_claimed_at
                FROM queen.log_consumers c1
                WHERE c1.partition_id = p.id AND c1.consumer_group = p_group
                LIMIT 1) AS c ON true
        ) AS u
        ORDER BY u.st = 'ready', u.id;
    END IF;
    LOOP
        FETCH v_cur INTO v_cand;
        EXIT WHEN NOT FOUND;
        IF v_cand.st <> 'ready' THEN
            o_pid := o_pid || v_cand.id;
            o_pname := o_pname || v_cand.name::TEXT;
            o_state := o_state || v_cand.st;
            o_until := o_until || v_cand.st_until;
            o_token := o_token || NULL::UUID;
            o_expires := o_expires || NULL::TIMESTAMPTZ;
            o_retry := o_retry || NULL::INTEGER;
            o_from := o_from || NULL::BIGINT;
            o_to := o_to || NULL::BIGINT;
            CONTINUE;
        END IF;
        EXIT WHEN v_claims >= p_max_partitions OR v_budget <= 0;

        v_cursor := v_cand.cursor_offset;
        IF NOT v_cand.has_row THEN
            -- First sight of this partition by the group, as in log_pop_v2.
            IF v_group_held IS NULL THEN
                PERFORM 1 FROM queen.consumer_groups_metadata m
                WHERE m.queue_id = p_queue_id AND m.consumer_group = p_group
                FOR KEY SHARE SKIP LOCKED;
                v_group_held := FOUND;
            END IF;
            IF v_group_held
               AND pg_try_advisory_xact_lock((v_cand.id % 2147483648)::INTEGER, hashtext(p_group)) THEN
                PERFORM 1 FROM queen.log_partitions p WHERE p.id = v_cand.id FOR KEY SHARE SKIP LOCKED;
                IF FOUND THEN
                    INSERT INTO queen.log_consumers (partition_id, consumer_group, cursor_offset)
                    VALUES (v_cand.id, p_group,
                            CASE WHEN p_sub_at IS NULL THEN -1
                                 ELSE COALESCE(queen.log_cursor_at_v1(v_cand.id, p_sub_at, p_tenant), -1) END)
                    ON CONFLICT (partition_id, consumer_group) DO NOTHING;
                END IF;
            END IF;
            SELECT c.cursor_offset INTO v_cursor FROM queen.log_consumers c
            WHERE c.partition_id = v_cand.id AND c.consumer_group = p_group;
            IF NOT FOUND THEN
                -- Another transaction is creating the row (a worker's
                -- first POP inside a transaction block): claim from the
                -- subscription's start without it rather than wait. Its
                -- creator has not moved the start (compaction purges only
                -- what was finished ten seconds before), and the messages
                -- it claimed meanwhile are under its advisory try-locks.
                v_cursor := CASE WHEN p_sub_at IS NULL THEN -1
                                 ELSE COALESCE(queen.log_cursor_at_v1(v_cand.id, p_sub_at, p_tenant), -1) END;
            END IF;
        END IF;
        -- Retention deleted what lies below first_offset: expired, never
        -- delivered. The start is read as at least first_offset - 1, and
        -- moved there below.
        v_behind := v_cursor < v_cand.first_offset - 1;
        v_cursor := GREATEST(v_cursor, v_cand.first_offset - 1);

        -- The head, the highest row (offsets above it were never
        -- delivered) and whether anything delivered before is due again,
        -- in one statement (each costs its executor start-up): most POPs
        -- find nothing due and skip the redelivery statement below. What
        -- becomes due after this look is served by the next POP.
        -- ORDER BY ... LIMIT 1, not max(): a generic plan made while the
        -- table was small aggregated every row of the (partition, group)
        -- for it, on every call, as the table grew.
        SELECT (SELECT r.state FROM queen.log_shared_records r
                WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                  AND r.message_offset = v_cursor + 1),
               (SELECT r.message_offset FROM queen.log_shared_records r
                WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                ORDER BY r.message_offset DESC LIMIT 1),
               EXISTS (SELECT 1 FROM queen.log_shared_records r
                       WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                         AND r.state = 1 AND r.available_at <= v_now)
               OR EXISTS (SELECT 1 FROM queen.log_shared_records r
                          WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                            AND r.state = 0 AND r.lease_expires_at <= v_now)
        INTO v_head, v_hw, v_due;
        v_hw := GREATEST(v_hw, v_cursor);
        -- A finished head is moved over once the window holds 64 rows (or
        -- is full), or when everything written was delivered (the last
        -- rows of a drained partition): the move writes the consumer row,
        -- so not for every message. A start retention left behind
        -- first_offset is moved there at once.
        IF v_behind OR (v_head >= 2 AND (v_hw - v_cursor >= LEAST(64, v_q.max_in_flight)
                                         OR v_hw >= v_cand.last_offset)) THEN
            v_cursor := GREATEST(v_cursor,
                                 COALESCE(queen.log_shared_compact_v1(v_cand.id, p_group), v_cursor));
        END IF;
        -- Without a row at the head and rows above it: a claim rolled back
        -- (or still uncommitted) left a gap there, looked at first, up to
        -- 32 offsets (gaps further up are reached as the start moves).
        v_gap_to := CASE WHEN v_head IS NULL AND v_hw > v_cursor
                         THEN LEAST(v_hw, v_cursor + 32) END;

        -- Never delivered offsets may be claimed up to the last message
        -- old enough for delayed_processing (segment granularity, as 004).
        v_ready_last := v_cand.last_offset;
        IF v_q.delayed_processing > 0 THEN
            SELECT s.base_offset - 1, s.max_created_at + make_interval(secs => v_q.delayed_processing)
            INTO v_ready_last, v_until
            FROM queen.log_segments s
            WHERE s.partition_id = v_cand.id AND s.base_offset + s.message_count - 1 > v_cursor
              AND s.max_created_at > v_now - make_interval(secs => v_q.delayed_processing)
            ORDER BY s.base_offset LIMIT 1;
            IF NOT FOUND THEN
                v_ready_last := v_cand.last_offset;
                v_until := NULL;
            END IF;
        END IF;
        v_top := LEAST(v_ready_last, v_cursor + v_q.max_in_flight);
        v_here := 0;
        v_lock_text := p_group || ':' || v_cand.id;

        -- Claims on this partition: one, or, for a fused POP, one for each
        -- session still without one, at most p_partition_limit messages
        -- each: taken together (one statement for the redeliveries, one
        -- for the new offsets, one token), then cut into claims in offset
        -- order. A claim's first row says 'shared', its other rows
        -- 'shared+', so the engine tells the claims apart.
        LOOP
            EXIT WHEN v_claims >= p_max_partitions OR v_budget <= 0;
            v_part := LEAST(v_budget, COALESCE(p_partition_limit, v_budget));
            v_want := CASE WHEN p_partition_limit IS NULL THEN v_part
                           ELSE LEAST(v_budget, v_part * (p_max_partitions - v_claims)) END;
            v_token := gen_random_uuid();
            v_expires := CASE WHEN p_auto_ack THEN NULL ELSE v_now + p_lease END;

            -- Messages delivered before and due again (failed past their
            -- retry delay, given back, or whose lease expired), oldest first.
            -- An expired lease counts as a failure; past retry_limit the
            -- message is given up instead of delivered.
            -- Oldest is by offset, not by when a row fell due (a claim
            -- given back falls due at once, a failure after its
            -- retry_delay): each kind's due rows are read by its partial
            -- index (by time: due rows only, no more than the window
            -- holds), and the oldest offsets of them taken.
            -- Each candidate probed by its key and locked there (LATERAL
            -- ... LIMIT 1), then updated by its tuple id: plans that read
            -- rows by key whatever the statistics say.
            v_offs := NULL;
            v_retries := NULL;
            v_dead := NULL;
            v_dead_n := NULL;
            IF v_due THEN
                WITH cand AS (
                    SELECT DISTINCT d.message_offset
                    FROM (
                        (SELECT a.message_offset
                         FROM (SELECT r.message_offset
                               FROM queen.log_shared_records r
                               WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                                 AND r.state = 1 AND r.available_at <= v_now
                                 AND r.message_offset > v_cursor
                               ORDER BY r.available_at
                               LIMIT v_q.max_in_flight) a
                         ORDER BY a.message_offset
                         LIMIT v_want)
                        UNION ALL
                        (SELECT e.message_offset
                         FROM (SELECT r.message_offset
                               FROM queen.log_shared_records r
                               WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                                 AND r.state = 0 AND r.lease_expires_at <= v_now
                                 AND r.message_offset > v_cursor
                               ORDER BY r.lease_expires_at
                               LIMIT v_q.max_in_flight) e
                         ORDER BY e.message_offset
                         LIMIT v_want)
                    ) d
                    ORDER BY d.message_offset
                    LIMIT v_want
                ), due AS (
                    SELECT l.tid
                    FROM cand c
                    CROSS JOIN LATERAL (
                        SELECT r.ctid AS tid
                        FROM queen.log_shared_records r
                        WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                          AND r.message_offset = c.message_offset
                          AND ((r.state = 1 AND r.available_at <= v_now)
                               OR (r.state = 0 AND r.lease_expires_at <= v_now))
                        LIMIT 1
                        FOR UPDATE SKIP LOCKED) l
                ), upd AS (
                    UPDATE queen.log_shared_records r
                    SET retry_count = r.retry_count + (r.state = 0)::INTEGER,
                        state = CASE WHEN r.state = 0 AND r.retry_count + 1 > v_q.retry_limit THEN 3
                                     WHEN p_auto_ack THEN 2 ELSE 0 END,
                        lease_token = v_token, lease_expires_at = v_expires, available_at = NULL
                    WHERE r.ctid = ANY (ARRAY(SELECT d.tid FROM due d))
                    RETURNING r.message_offset, r.retry_count, r.state
                )
                SELECT array_agg(u.message_offset ORDER BY u.message_offset) FILTER (WHERE u.state <> 3),
                       array_agg(u.retry_count ORDER BY u.message_offset) FILTER (WHERE u.state <> 3),
                       array_agg(u.message_offset ORDER BY u.message_offset) FILTER (WHERE u.state = 3),
                       array_agg(u.retry_count ORDER BY u.message_offset) FILTER (WHERE u.state = 3)
                INTO v_offs, v_retries, v_dead, v_dead_n
                FROM upd u;
            END IF;
            IF v_dead IS NOT NULL THEN
                FOR v_i IN 1 .. cardinality(v_dead) LOOP
                    PERFORM queen.log_shared_give_up_v1(v_cand.id, p_group, v_dead[v_i],
                                                        'lease expired', v_dead_n[v_i],
                                                        v_q.store_dlq, p_tenant);
                END LOOP;
                -- Dead-lettered is finished: the start moves over it as
                -- after an ACK ... FAILED that dead-letters (same test).
                PERFORM queen.log_shared_compact_v1(v_cand.id, p_group, 64);
            END IF;
            v_offs := COALESCE(v_offs, '{}');
            v_retries := COALESCE(v_retries, '{}');
            v_got := cardinality(v_offs);

            -- Offsets never delivered: above the start and without a row
            -- this snapshot sees (beyond the highest row, or a gap a
            -- rolled-back claim left), each under its advisory try-lock, so
            -- an uncommitted claim of another transaction is skipped, not
            -- waited for. The start is read again here, in the snapshot
            -- that judges the rows.
            IF v_got < v_want THEN
                WITH ins AS (
                    INSERT INTO queen.log_shared_records AS r
                        (partition_id, consumer_group, message_offset, state, lease_token,
                         lease_expires_at, retry_count)
                    SELECT v_cand.id, p_group, o.o, CASE WHEN p_auto_ack THEN 2 ELSE 0 END,
                           v_token, v_expires, 0
                    FROM (SELECT g.o FROM generate_series(v_cursor + 1, v_gap_to) AS g(o)
                          WHERE NOT EXISTS (SELECT 1 FROM queen.log_shared_records r2
                                            WHERE r2.partition_id = v_cand.id
                                              AND r2.consumer_group = p_group
                                              AND r2.message_offset = g.o)
                          UNION ALL
                          -- In the target list, not FROM: a series in FROM is
                          -- materialised whole before the first row (0.9 ms
                          -- for a window of 10,000), here it stops with the
                          -- LIMIT.
                          SELECT generate_series(b.lo, v_top) AS o
                          FROM (SELECT GREATEST(v_hw,
                                                (SELECT r3.message_offset
                                                 FROM queen.log_shared_records r3
                                                 WHERE r3.partition_id = v_cand.id
                                                   AND r3.consumer_group = p_group
                                                 ORDER BY r3.message_offset DESC LIMIT 1),
                                                (SELECT c.cursor_offset FROM queen.log_consumers c
                                                 WHERE c.partition_id = v_cand.id
                                                   AND c.consumer_group = p_group)) + 1 AS lo) b
                         ) AS o(o)
                    WHERE o.o <= v_top
                      AND pg_try_advisory_xact_lock(hashtextextended(v_lock_text, o.o))
                    LIMIT v_want - v_got
                    ON CONFLICT DO NOTHING
                    RETURNING r.message_offset
                )
                SELECT v_offs || COALESCE(array_agg(i.message_offset ORDER BY i.message_offset), '{}'),
                       v_retries || array_fill(0, ARRAY[count(*)::INTEGER])
                INTO v_offs, v_retries
                FROM ins i;
                IF cardinality(v_offs) > v_got AND v_got > 0 THEN
                    -- Redeliveries and new offsets together, oldest first.
                    SELECT array_agg(u.o ORDER BY u.o), array_agg(u.r ORDER BY u.o)
                    INTO v_offs, v_retries
                    FROM unnest(v_offs, v_retries) AS u(o, r);
                END IF;
                v_got := cardinality(v_offs);
            END IF;
            EXIT WHEN v_got = 0;

            -- Runs of consecutive offsets with one retry count, never across
            -- two claims (every v_part offsets).
            v_run_from := v_offs[1];
            v_run_retry := v_retries[1];
            v_run_first := 1;
            FOR v_i IN 2 .. v_got + 1 LOOP
                IF v_i > v_got OR v_offs[v_i] <> v_offs[v_i - 1] + 1
                   OR v_retries[v_i] <> v_run_retry OR (v_i - 1) % v_part = 0 THEN
                    o_pid := o_pid || v_cand.id;
                    o_pname := o_pname || v_cand.name::TEXT;
                    o_state := o_state || CASE WHEN (v_run_first - 1) % v_part = 0
                                               THEN 'shared' ELSE 'shared+' END;
                    o_until := o_until || NULL::TIMESTAMPTZ;
                    o_token := o_token || v_token;
                    o_expires := o_expires || v_expires;
                    o_retry := o_retry || v_run_retry;
                    o_from := o_from || v_run_from;
                    o_to := o_to || v_offs[v_i - 1];
                    IF v_i <= v_got THEN
                        v_run_from := v_offs[v_i];
                        v_run_retry := v_retries[v_i];
                        v_run_first := v_i;
                    END IF;
                END IF;
            END LOOP;
            v_claims := v_claims + (v_got + v_part - 1) / v_part;
            v_budget := v_budget - v_got;
            v_here := v_here + v_got;
            EXIT;
        END LOOP;

        IF v_here = 0 THEN
            -- Nothing claimable here now: when it may be.
            SELECT LEAST(
                       (SELECT r.lease_expires_at FROM queen.log_shared_records r
                        WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                          AND r.state = 0
                        ORDER BY r.lease_expires_at LIMIT 1),
                       (SELECT r.available_at FROM queen.log_shared_records r
                        WHERE r.partition_id = v_cand.id AND r.consumer_group = p_group
                          AND r.state = 1
                        ORDER BY r.available_at LIMIT 1))
            INTO v_until;
            o_pid := o_pid || v_cand.id;
            o_pname := o_pname || v_cand.name::TEXT;
            -- Offsets never delivered that this POP could not take (a full
            -- window, or another transaction claiming them right now):
            -- 'locked', looked at again soon. Only when every written
            -- offset was delivered does it wait for a lease or a retry.
            o_state := o_state || CASE WHEN v_ready_last > v_hw THEN 'locked'
                                       WHEN v_until IS NOT NULL THEN 'leased'
                                       WHEN v_ready_last < v_cand.last_offset THEN 'delayed'
                                       ELSE 'locked' END;
            o_until := o_until || COALESCE(v_until,
                                           (SELECT s.max_created_at + make_interval(secs => v_q.delayed_processing)
                                            FROM queen.log_segments s
                                            WHERE s.partition_id = v_cand.id
                                              AND s.base_offset = v_ready_last + 1));
            o_token := o_token || NULL::UUID;
            o_expires := o_expires || NULL::TIMESTAMPTZ;
            o_retry := o_retry || NULL::INTEGER;
            o_from := o_from || NULL::BIGINT;
            o_to := o_to || NULL::BIGINT;
        END IF;
    END LOOP;
    CLOSE v_cur;

    -- Judged rows first (their arrays are shorter: pad), then each run with
    -- the segments it overlaps.
    RETURN QUERY
    SELECT x.pid, x.pname,
           -- A run over two segments starts its claim once.
           CASE WHEN x.st = 'shared' AND s.base_offset > x.f THEN 'shared+' ELSE x.st END,
           x.until, x.tok, x.exp, x.retry,
           GREATEST(x.f, s.base_offset), LEAST(x.t, s.base_offset + s.message_count - 1),
           s.base_offset, s.blob
    FROM unnest(o_pid, o_pname, o_state, o_until, o_token, o_expires, o_retry, o_from, o_to)
         WITH ORDINALITY AS x(pid, pname, st, until, tok, exp, retry, f, t, ord)
    LEFT JOIN LATERAL queen.log_run_segments_v1(x.pid, x.f, x.t) s
           ON x.st IN ('shared', 'shared+')
    WHERE x.st NOT IN ('shared', 'shared+') OR s.blob IS NOT NULL
    ORDER BY x.ord, s.base_offset;
END
$$;

-- ACK and ACK ... FAILED of shared receipts: (p_partition_ids[i],
-- p_offsets[i], p_groups[i], p_lease_tokens[i]); idx is the 0-based
-- position. Each message alone:
--   acked          its own live lease: finished; repeated with the same
--                  receipt, acked again and nothing changes;
--   retry          (p_failed) available again after the queue's
--                  retry_delay, retry_count + 1; the messages behind it
--                  keep flowing;
--   dead_lettered  (p_failed) past retry_limit: snapshot in log_dlq (or,
--                  without a DLQ, skipped and counted);
--   stale          the lease is gone (expired, the message delivered again,
--                  another token, not the tenant's): nothing changed.
-- A FAILED repeated with the same receipt answers as the first did.
-- Locks: advisory queue keys SHARED, ascending; log_shared_records rows
-- named, (partition_id, consumer_group, message_offset) ascending, FOR
-- UPDATE; leaf log_dlq; then log_consumers through log_shared_compact_v1
-- (SKIP LOCKED).
CREATE OR REPLACE FUNCTION queen.log_ack_shared_v1(
    p_partition_ids BIGINT[],
    p_offsets       BIGINT[],
    p_groups        TEXT[],
    p_lease_tokens  UUID[],
    p_failed        BOOLEAN DEFAULT false,
    p_reason        TEXT DEFAULT NULL,
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (idx INTEGER, status TEXT)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
-- Index reads only, one key at a time: with bitmap or hash plans the
-- generic plan joined a receipt or a claimed offset to every row of its
-- (partition, group) (measured: 5,835 rows read to update one).
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_n      INTEGER := COALESCE(cardinality(p_partition_ids), 0);
    v_failed BOOLEAN := COALESCE(p_failed, false);
    v_now    TIMESTAMPTZ := clock_timestamp();
    -- The rows the receipts name (their own token), locked, in key order,
    -- and what each answers.
    l_pid    BIGINT[];
    l_grp    TEXT[];
    l_off    BIGINT[];
    l_tok    UUID[];
    l_answer TEXT[];
    l_retry  INTEGER[];
    l_dlq    BOOLEAN[];
    l_tid    TID[];
    -- Each row's first position among the receipts, and the answers by
    -- position.
    l_first  INTEGER[];
    v_answer TEXT[];
    v_i      INTEGER;
    v_pair   RECORD;
    -- One receipt: its (partition, group) window after the ACK.
    v_cursor BIGINT;
    v_last   BIGINT;
    v_hw     BIGINT;
BEGIN
    IF session_user <> current_user THEN
        PERFORM queen.tenant_guard_v1(p_tenant);
    END IF;
    IF COALESCE(cardinality(p_offsets), 0) <> v_n
       OR COALESCE(cardinality(p_groups), 0) <> v_n
       OR COALESCE(cardinality(p_lease_tokens), 0) <> v_n THEN
        RAISE EXCEPTION 'log_ack_shared_v1: partition ids, offsets, groups and lease tokens must be parallel arrays'
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    -- One plain ACK of one receipt (a worker's ACK of its job): the same
    -- answers in two statements, not five and a call (each costs its
    -- executor start-up). The UPDATE judges the row itself, so a
    -- concurrent change to it (a RENEW, another ACK) is judged on the
    -- version it leaves; its RETURNING reads the window the start moves
    -- over (log_shared_compact_v1's own test, without the call).
    IF v_n = 1 AND NOT v_failed THEN
        idx := 0;
        PERFORM pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(q.id))
        FROM queen.log_partitions p
        JOIN queen.queues q ON q.id = p.queue_id AND q.tenant_id = p_tenant
        WHERE p.id = p_partition_ids[1];
        IF NOT FOUND THEN
            status := 'stale';
            RETURN NEXT;
            RETURN;
        END IF;
        UPDATE queen.log_shared_records r SET state = 2
        WHERE r.partition_id = p_partition_ids[1]
          AND r.consumer_group = p_groups[1]::TEXT COLLATE "C"
          AND r.message_offset = p_offsets[1]
          AND r.lease_token = p_lease_tokens[1]
          AND r.state = 0 AND r.lease_expires_at > v_now
        RETURNING (SELECT c.cursor_offset FROM queen.log_consumers c
                   WHERE c.partition_id = r.partition_id
                     AND c.consumer_group = r.consumer_group),
                  (SELECT p.last_offset FROM queen.log_partitions p
                   WHERE p.id = r.partition_id),
                  (SELECT r2.message_offset FROM queen.log_shared_records r2
                   WHERE r2.partition_id = r.partition_id
                     AND r2.consumer_group = r.consumer_group
                   ORDER BY r2.message_offset DESC LIMIT 1)
        INTO v_cursor, v_last, v_hw;
        IF FOUND THEN
            IF v_hw - v_cursor >= 64 OR v_hw >= v_last THEN
                PERFORM queen.log_shared_compact_v1(p_partition_ids[1], p_groups[1], 0);
            END IF;
            status := 'acked';
        ELSIF EXISTS (SELECT 1 FROM queen.log_shared_records r
                      WHERE r.partition_id = p_partition_ids[1]
                        AND r.consumer_group = p_groups[1]::TEXT COLLATE "C"
                        AND r.message_offset = p_offsets[1]
                        AND r.lease_token = p_lease_tokens[1]
                        AND r.state = 2 AND r.lease_expires_at IS NOT NULL) THEN
            -- Acknowledged before with this receipt: acked again.
            status := 'acked';
        ELSE
            status := 'stale';
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;

    PERFORM pg_advisory_xact_lock_shared(k.key)
    FROM (SELECT DISTINCT queen.log_queue_lock_key_v1(x.qid) AS key
          FROM (SELECT DISTINCT u.pid FROM unnest(p_partition_ids) AS u(pid)) AS i
          CROSS JOIN LATERAL (
              SELECT q.id AS qid FROM queen.log_partitions p
              JOIN queen.queues q ON q.id = p.queue_id AND q.tenant_id = p_tenant
              WHERE p.id = i.pid LIMIT 1) x
          ORDER BY 1) k;

    -- One statement locks every named row (by its key, in key order) and
    -- decides its answer: a live lease of its own token is settled now
    -- (acked; retry or, past the limit, dead_lettered); a row this token
    -- already settled answers as then; anything else is stale.
    SELECT array_agg(l.partition_id ORDER BY l.partition_id, l.consumer_group, l.message_offset),
           array_agg(l.consumer_group::TEXT ORDER BY l.partition_id, l.consumer_group, l.message_offset),
           array_agg(l.message_offset ORDER BY l.partition_id, l.consumer_group, l.message_offset),
           array_agg(l.lease_token ORDER BY l.partition_id, l.consumer_group, l.message_offset),
           array_agg(l.answer ORDER BY l.partition_id, l.consumer_group, l.message_offset),
           array_agg(l.retry_count ORDER BY l.partition_id, l.consumer_group, l.message_offset),
           array_agg(l.store_dlq ORDER BY l.partition_id, l.consumer_group, l.message_offset),
           array_agg(l.tid ORDER BY l.partition_id, l.consumer_group, l.message_offset),
           array_agg(l.first ORDER BY l.partition_id, l.consumer_group, l.message_offset)
    INTO l_pid, l_grp, l_off, l_tok, l_answer, l_retry, l_dlq, l_tid, l_first
    FROM (
        SELECT r.partition_id, r.consumer_group, r.message_offset, r.lease_token,
               r.retry_count, q.store_dlq, r.tid, n.first,
               CASE
                   WHEN r.state = 0 AND r.lease_expires_at > v_now THEN
                       CASE WHEN NOT v_failed THEN 'acked'
                            WHEN r.retry_count + 1 > q.retry_limit THEN 'dead_lettered'
                            ELSE 'retry' END
                   WHEN NOT v_failed AND r.state = 2 AND r.lease_expires_at IS NOT NULL THEN 'acked!'
                   WHEN v_failed AND r.state = 1 AND r.lease_expires_at IS NULL
                        AND r.available_at IS NOT NULL THEN 'retry!'
                   WHEN v_failed AND r.state = 3 AND r.lease_expires_at IS NULL THEN 'dead_lettered!'
               END AS answer
        FROM (SELECT u.pid, u.grp::TEXT COLLATE "C" AS grp, u.off, u.tok, min(u.ord)::INTEGER AS first
              FROM unnest(p_partition_ids, p_groups, p_offsets, p_lease_tokens)
                   WITH ORDINALITY AS u(pid, grp, off, tok, ord)
              GROUP BY 1, 2, 3, 4
              ORDER BY 1, 2, 3, 4) n
        CROSS JOIN LATERAL (
            SELECT q1.id AS qid, q1.retry_limit,
                   (q1.dead_letter_queue AND q1.dlq_after_max_retries) AS store_dlq
            FROM queen.log_partitions p1
            JOIN queen.queues q1 ON q1.id = p1.queue_id AND q1.tenant_id = p_tenant
            WHERE p1.id = n.pid LIMIT 1) q
        CROSS JOIN LATERAL (
            SELECT r1.ctid AS tid, r1.*
            FROM queen.log_shared_records r1
            WHERE r1.partition_id = n.pid AND r1.consumer_group = n.grp
              AND r1.message_offset = n.off AND r1.lease_token = n.tok
              AND q.qid IS NOT NULL
            LIMIT 1
            FOR UPDATE) r
    ) l;

    IF l_pid IS NOT NULL THEN
        -- The settlements now, by tuple id (the rows are held): an ACK
        -- only acknowledges, a FAILED only fails (each statement not run
        -- costs its executor start-up).
        IF NOT v_failed THEN
            UPDATE queen.log_shared_records r SET state = 2
            WHERE r.ctid = ANY (ARRAY(SELECT a.tid FROM unnest(l_tid, l_answer) AS a(tid, answer)
                                      WHERE a.answer = 'acked'));
        ELSE
            UPDATE queen.log_shared_records r
            SET retry_count = r.retry_count + 1, lease_expires_at = NULL,
                state = CASE WHEN r.retry_count + 1 > q.retry_limit THEN 3 ELSE 1 END,
                available_at = CASE WHEN r.retry_count + 1 > q.retry_limit THEN NULL
                                    ELSE v_now + make_interval(secs => q.retry_delay / 1000.0) END
            FROM queen.log_partitions p
            JOIN queen.queues q ON q.id = p.queue_id
            WHERE r.ctid = ANY (ARRAY(SELECT a.tid FROM unnest(l_tid, l_answer) AS a(tid, answer)
                                      WHERE a.answer IN ('retry', 'dead_lettered')))
              AND p.id = r.partition_id;
            FOR v_i IN 1 .. cardinality(l_pid) LOOP
                CONTINUE WHEN l_answer[v_i] IS DISTINCT FROM 'dead_lettered';
                PERFORM queen.log_shared_give_up_v1(l_pid[v_i], l_grp[v_i], l_off[v_i],
                                                    COALESCE(p_reason, 'failed'),
                                                    l_retry[v_i] + 1, l_dlq[v_i], p_tenant);
            END LOOP;
        END IF;

        -- The start moves over what was finished (never waiting for it);
        -- one row (a worker's ACK of its job) needs no list of pairs.
        IF cardinality(l_pid) = 1 THEN
            IF l_answer[1] IN ('acked', 'dead_lettered') THEN
                PERFORM queen.log_shared_compact_v1(l_pid[1], l_grp[1], 64);
            END IF;
        ELSE
            FOR v_pair IN
                SELECT DISTINCT a.pid, a.grp
                FROM unnest(l_pid, l_grp, l_answer) AS a(pid, grp, answer)
                WHERE a.answer IN ('acked', 'dead_lettered')
                ORDER BY 1, 2
            LOOP
                PERFORM queen.log_shared_compact_v1(v_pair.pid, v_pair.grp, 64);
            END LOOP;
        END IF;
    END IF;

    -- Answers by position: a receipt named twice answers as its first
    -- naming (not a join of the receipts with the rows: without hash or
    -- merge joins that compares every receipt with every row).
    v_answer := array_fill(NULL::TEXT, ARRAY[v_n]);
    FOR v_i IN 1 .. COALESCE(cardinality(l_first), 0) LOOP
        v_answer[l_first[v_i]] := l_answer[v_i];
    END LOOP;
    IF v_n = 1 THEN
        -- One receipt (a worker's ACK of its job): no statement needed.
        idx := 0;
        status := COALESCE(rtrim(v_answer[1], '!'), 'stale');
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT (n.ord - 1)::INTEGER, COALESCE(rtrim(v_answer[n.first], '!'), 'stale')
    FROM (SELECT u.ord, min(u.ord) OVER (PARTITION BY u.pid, u.grp, u.off, u.tok)::INTEGER AS first
          FROM unnest(p_partition_ids, p_groups, p_offsets, p_lease_tokens)
               WITH ORDINALITY AS u(pid, grp, off, tok, ord)) n
    ORDER BY n.ord;
END
$$;

-- RENEW of shared receipts: each message's lease becomes max(current
-- expiry, now + p_extend_ms), default the queue's lease_time; NULL when the
-- lease is lost (expired, settled, another token, not the tenant's).
-- Locks: advisory queue keys SHARED, ascending; log_shared_records rows
-- named, in key order, FOR UPDATE.
CREATE OR REPLACE FUNCTION queen.log_renew_shared_v1(
    p_partition_ids BIGINT[],
    p_offsets       BIGINT[],
    p_groups        TEXT[],
    p_lease_tokens  UUID[],
    p_extend_ms     BIGINT DEFAULT NULL,
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (idx INTEGER, lease_expires_at TIMESTAMPTZ)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_n   INTEGER := COALESCE(cardinality(p_partition_ids), 0);
    v_now TIMESTAMPTZ := clock_timestamp();
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF cardinality(p_offsets) IS DISTINCT FROM v_n
       OR cardinality(p_groups) IS DISTINCT FROM v_n
       OR cardinality(p_lease_tokens) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'log_renew_shared_v1: partition ids, offsets, groups and lease tokens must be parallel arrays'
            USING ERRCODE = '22023';
    END IF;
    IF p_extend_ms <= 0 THEN
        RAISE EXCEPTION 'RENEW needs a positive FOR duration' USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(k.key)
    FROM (SELECT DISTINCT queen.log_queue_lock_key_v1(q.id) AS key
          FROM queen.log_partitions p
          JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = ANY (p_partition_ids) AND q.tenant_id = p_tenant
          ORDER BY 1) k;
    RETURN QUERY
    WITH named AS (
        SELECT i.pid, i.grp::TEXT COLLATE "C" AS grp, i.off, i.tok, i.ord
        FROM unnest(p_partition_ids, p_groups, p_offsets, p_lease_tokens)
             WITH ORDINALITY AS i(pid, grp, off, tok, ord)
    ), held AS (
        -- Each row probed by its key and locked there, in key order.
        SELECT r.tid, r.partition_id, r.consumer_group, r.message_offset, r.lease_token,
               GREATEST(r.lease_expires_at,
                        v_now + make_interval(secs => COALESCE(p_extend_ms, q.lease_time::BIGINT * 1000) / 1000.0))
                   AS new_expiry
        FROM (SELECT DISTINCT n.pid, n.grp, n.off, n.tok FROM named n ORDER BY 1, 2, 3, 4) k
        CROSS JOIN LATERAL (
            SELECT q1.id, q1.lease_time FROM queen.log_partitions p1
            JOIN queen.queues q1 ON q1.id = p1.queue_id AND q1.tenant_id = p_tenant
            WHERE p1.id = k.pid LIMIT 1) q
        CROSS JOIN LATERAL (
            SELECT r1.ctid AS tid, r1.partition_id, r1.consumer_group, r1.message_offset,
                   r1.lease_token, r1.lease_expires_at
            FROM queen.log_shared_records r1
            WHERE r1.partition_id = k.pid AND r1.consumer_group = k.grp
              AND r1.message_offset = k.off AND r1.lease_token = k.tok
              AND r1.state = 0 AND r1.lease_expires_at > v_now AND q.id IS NOT NULL
            LIMIT 1
            FOR UPDATE) r
    ), upd AS (
        UPDATE queen.log_shared_records r SET lease_expires_at = h.new_expiry
        FROM held h
        WHERE r.ctid = h.tid
        RETURNING r.partition_id, r.consumer_group, r.message_offset, r.lease_token, r.lease_expires_at
    )
    SELECT (n.ord - 1)::INTEGER, u.lease_expires_at
    FROM named n
    LEFT JOIN upd u ON u.partition_id = n.pid AND u.consumer_group = n.grp
                   AND u.message_offset = n.off AND u.lease_token = n.tok
    ORDER BY n.ord;
END
$$;

-- Gives back a shared claim the engine cannot hand out (a held claim its
-- session did not take, a sealed segment it cannot open): the messages of
-- each (partition, group, token), within the claim's offsets, still leased
-- by it are available again at once, no failure counted. Returns the
-- messages given back.
-- Locks: log_shared_records rows of the claims, in key order.
DROP FUNCTION IF EXISTS queen.log_unclaim_shared_v1(BIGINT[], TEXT, UUID[], UUID);
CREATE OR REPLACE FUNCTION queen.log_unclaim_shared_v1(
    p_partition_ids BIGINT[],
    p_group         TEXT,
    p_lease_tokens  UUID[],
    p_from_offsets  BIGINT[],
    p_to_offsets    BIGINT[],
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS INTEGER
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_n INTEGER;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    WITH claim AS (
        SELECT c.pid, c.tok, min(c.f) AS f, max(c.t) AS t
        FROM unnest(p_partition_ids, p_lease_tokens, p_from_offsets, p_to_offsets) AS c(pid, tok, f, t)
        GROUP BY c.pid, c.tok
        ORDER BY c.pid
    ), locked AS (
        -- The claim's offset range of its partition, by key, in key order.
        SELECT l.tid
        FROM claim cl
        CROSS JOIN LATERAL (
            SELECT q1.id FROM queen.log_partitions p1
            JOIN queen.queues q1 ON q1.id = p1.queue_id AND q1.tenant_id = p_tenant
            WHERE p1.id = cl.pid LIMIT 1) q
        CROSS JOIN LATERAL (
            SELECT r.ctid AS tid
            FROM queen.log_shared_records r
            WHERE r.partition_id = cl.pid AND r.consumer_group = p_group
              AND r.message_offset BETWEEN cl.f AND cl.t
              AND r.lease_token = cl.tok AND r.state IN (0, 2) AND q.id IS NOT NULL
            ORDER BY r.message_offset
            FOR UPDATE) l
    )
    UPDATE queen.log_shared_records r
    SET state = 1, lease_token = NULL, lease_expires_at = NULL, available_at = clock_timestamp()
    WHERE r.ctid = ANY (ARRAY(SELECT l.tid FROM locked l));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- Changes one group's type on one queue (p_ordered true: ordered, false:
-- shared). Allowed when the group has nothing in flight; otherwise 55000
-- naming what is: an ordered group's live leases, or a shared group's
-- messages leased or awaiting redelivery (after its start moved over the
-- finished prefix). What the other type then starts from:
--   ordered -> shared: the start is the cursor (expired, unsettled leases
--     are dropped with no failure counted: their messages come again);
--   shared -> ordered: the cursor is the start; the finished rows go.
-- No POP claims under the old type once this commits: the caller holds the
-- queue key EXCLUSIVE (taken before the queue row), so every transaction
-- that popped the queue has ended and what it claimed is counted above,
-- and a POP can claim only while it holds the key SHARED; the statements
-- that claim (log_pop_v2's candidate queries, log_pop_shared_new_v1,
-- log_pop_shared_v1) read the group's type after taking it, and claim
-- nothing when it is no longer theirs.
-- The caller holds the queue row.
-- Locks: log_consumers rows of the group, partition order, FOR UPDATE;
-- log_shared_records rows of the group (delete).
CREATE OR REPLACE FUNCTION queen.log_group_convert_v1(
    p_queue_id UUID,
    p_group    TEXT,
    p_ordered  BOOLEAN
) RETURNS VOID
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   TIMESTAMPTZ := clock_timestamp();
    v_name  TEXT;
    v_count BIGINT;
    v_blocking BIGINT;
    v_pid   BIGINT;
    v_start BIGINT;
    v_prev  BIGINT;
BEGIN
    SELECT q.name INTO v_name FROM queen.queues q WHERE q.id = p_queue_id;
    PERFORM 1 FROM queen.log_consumers c
    JOIN queen.log_partitions p ON p.id = c.partition_id
    WHERE p.queue_id = p_queue_id AND c.consumer_group = p_group
    ORDER BY c.partition_id
    FOR UPDATE OF c;
    IF p_ordered THEN
        -- Shared -> ordered: settle the finished prefixes first.
        FOR v_pid IN
            SELECT c.partition_id FROM queen.log_consumers c
            JOIN queen.log_partitions p ON p.id = c.partition_id
            WHERE p.queue_id = p_queue_id AND c.consumer_group = p_group
            ORDER BY c.partition_id
        LOOP
            -- A call moves the start over at most 256 rows.
            v_prev := NULL;
            LOOP
                v_start := queen.log_shared_compact_v1(v_pid, p_group);
                EXIT WHEN v_start IS NOT DISTINCT FROM v_prev;
                v_prev := v_start;
            END LOOP;
        END LOOP;
        -- Rows above a start that no longer moves mean an offset there is
        -- unfinished: leased, waiting for its retry, or without a row (a
        -- claim rolled back). Those are what the refusal counts. It is
        -- refused when the ordered group would not deliver them as the
        -- shared one would: a lease would be held twice, a retry count
        -- forgotten, a finished message above them delivered again. Rows
        -- given back undelivered (state 1, no failure: a claim held for a
        -- consumer's next POP, say) are new messages to either type.
        SELECT COALESCE(sum(x.open), 0), COALESCE(sum(x.blocking), 0)
        INTO v_count, v_blocking
        FROM (SELECT max(r.message_offset) - c.cursor_offset
                     - count(*) FILTER (WHERE r.state >= 2) AS open,
                     count(*) FILTER (WHERE r.state <> 1 OR r.retry_count > 0) AS blocking
              FROM queen.log_shared_records r
              JOIN queen.log_consumers c
                ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
              JOIN queen.log_partitions p ON p.id = c.partition_id
              WHERE p.queue_id = p_queue_id AND r.consumer_group = p_group
                AND r.message_offset > c.cursor_offset
              GROUP BY c.partition_id, c.cursor_offset) x;
        IF v_blocking > 0 THEN
            RAISE EXCEPTION 'group "%" on queue "%" has % message(s) leased or awaiting redelivery; its type can change once they are acknowledged or dead-lettered',
                p_group, v_name, v_count USING ERRCODE = '55000';
        END IF;
        DELETE FROM queen.log_shared_records r
        USING queen.log_partitions p
        WHERE p.queue_id = p_queue_id AND r.partition_id = p.id AND r.consumer_group = p_group;
        UPDATE queen.log_consumers c SET purge_below = NULL, purge_at = NULL
        FROM queen.log_partitions p
        WHERE p.queue_id = p_queue_id AND c.partition_id = p.id AND c.consumer_group = p_group;
    ELSE
        SELECT count(*) INTO v_count
        FROM queen.log_consumers c
        JOIN queen.log_partitions p ON p.id = c.partition_id
        WHERE p.queue_id = p_queue_id AND c.consumer_group = p_group
          AND c.lease_token IS NOT NULL AND c.lease_expires_at > v_now;
        IF v_count > 0 THEN
            RAISE EXCEPTION 'group "%" on queue "%" holds % lease(s); its type can change once they are acknowledged or expire',
                p_group, v_name, v_count USING ERRCODE = '55000';
        END IF;
        UPDATE queen.log_consumers c
        SET lease_token = NULL, lease_expires_at = NULL, batch_from = NULL, batch_to = NULL,
            batch_acked = NULL, blocked_until = NULL, retry_count = 0
        FROM queen.log_partitions p
        WHERE p.queue_id = p_queue_id AND c.partition_id = p.id AND c.consumer_group = p_group;
    END IF;
END
$$;

-- ALTER GROUP g ON q SET (ordered = ...): sets one group's own type (the
-- queue's `ordered` stays the default of the others). The group is
-- registered when the queue has not seen it yet (subscribed from the
-- beginning, as a first POP without SUBSCRIBE FROM would). A missing queue
-- is 42704; a shared group on an ephemeral queue is 0A000.
-- Locks: the queue key EXCLUSIVE; the queue row FOR NO KEY UPDATE; the
-- group's metadata row; then as log_group_convert_v1.
CREATE OR REPLACE FUNCTION queen.log_group_set_type_v1(
    p_queue   TEXT,
    p_group   TEXT,
    p_ordered BOOLEAN,
    p_tenant  UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TEXT
LANGUAGE plpgsql
AS $$
DECLARE
    v_q   RECORD;
    v_was BOOLEAN;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_queue IS NULL OR p_group IS NULL OR p_ordered IS NULL THEN
        RAISE EXCEPTION 'log_group_set_type_v1: needs a queue, a group and a type'
            USING ERRCODE = '22023';
    END IF;
    -- The queue key before the queue row (001's order): it waits for the
    -- transactions popping the queue (log_group_convert_v1).
    PERFORM pg_advisory_xact_lock(queen.log_queue_lock_key_v1(q.id))
    FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    SELECT q.id, q.ordered INTO v_q FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.name = p_queue
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
    END IF;
    IF NOT p_ordered AND EXISTS (SELECT 1 FROM queen.ephemeral_queues e WHERE e.queue_id = v_q.id) THEN
        RAISE EXCEPTION 'queue "%" is ephemeral: its groups are ordered only', p_queue
            USING ERRCODE = '0A000';
    END IF;
    INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group, subscription_mode)
    VALUES (v_q.id, p_group, 'beginning')
    ON CONFLICT (queue_id, consumer_group) DO NOTHING;
    SELECT COALESCE(m.ordered, v_q.ordered) INTO v_was
    FROM queen.consumer_groups_metadata m
    WHERE m.queue_id = v_q.id AND m.consumer_group = p_group
    FOR UPDATE;
    IF v_was IS DISTINCT FROM p_ordered THEN
        PERFORM queen.log_group_convert_v1(v_q.id, p_group, p_ordered);
    END IF;
    UPDATE queen.consumer_groups_metadata m SET ordered = p_ordered
    WHERE m.queue_id = v_q.id AND m.consumer_group = p_group;
    RETURN 'altered';
END
$$;

-- SHOW GROUPS: consumer_groups_v1's rows with each group's type appended
-- ('ordered' | 'shared'). A shared group's lag counts its available and
-- in-flight messages (log_group_lag_v1).
-- Errors: 42704 unknown queue (when named). Takes no locks.
CREATE OR REPLACE FUNCTION queen.consumer_groups_v2(
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
    state             TEXT,
    group_type        TEXT
)
LANGUAGE sql STABLE
AS $$
    SELECT g.queue, g.consumer_group, g.partitions, g.lag, g.oldest_pending_at,
           g.leased_partitions, g.time_lag_seconds, g.last_claimed_at, g.state,
           CASE WHEN COALESCE(m.ordered, q.ordered) THEN 'ordered' ELSE 'shared' END
    FROM queen.consumer_groups_v1(p_queue, p_tenant) g
    JOIN queen.queues q ON q.tenant_id = p_tenant AND q.name = g.queue
    JOIN queen.consumer_groups_metadata m
      ON m.queue_id = q.id AND m.consumer_group = g.consumer_group
    ORDER BY g.queue, g.consumer_group
$$;

-- The consumer state of one (partition, group) as the browse rows carry it:
-- the cursor (-1 when the group has no row there), the batch of a live lease
-- and the offsets of it acked so far, and the offsets dead-lettered by the
-- group; for a shared group there is no batch: lease_from and
-- lease_to are NULL, lease_acked holds the offsets above the start that are
-- finished (acked, or dead without a DLQ row), and leased the offsets held
-- by a live lease (NULL for an ordered group). Takes no locks.
DROP FUNCTION IF EXISTS queen.log_browse_state_v1(BIGINT, TEXT);
CREATE OR REPLACE FUNCTION queen.log_browse_state_v2(
    p_partition_id BIGINT,
    p_group        TEXT,
    OUT cursor_offset  BIGINT,
    OUT lease_from     BIGINT,
    OUT lease_to       BIGINT,
    OUT lease_acked    BIGINT[],
    OUT dead_lettered  BIGINT[],
    OUT leased         BIGINT[]
)
LANGUAGE sql STABLE
AS $$
    SELECT COALESCE(c.cursor_offset, -1),
           CASE WHEN NOT g.shared AND c.lease_expires_at > now() THEN c.batch_from END,
           CASE WHEN NOT g.shared AND c.lease_expires_at > now() THEN c.batch_to END,
           CASE WHEN g.shared
                THEN ARRAY(SELECT r.message_offset FROM queen.log_shared_records r
                           WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group
                             AND r.message_offset > COALESCE(c.cursor_offset, -1)
                             AND r.state >= 2
                           ORDER BY r.message_offset)
                WHEN c.lease_expires_at > now() THEN c.batch_acked END,
           (SELECT array_agg(d.message_offset) FROM queen.log_dlq d
            WHERE d.partition_id = p_partition_id AND d.consumer_group = p_group),
           CASE WHEN g.shared
                THEN ARRAY(SELECT r.message_offset FROM queen.log_shared_records r
                           WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group
                             AND r.message_offset > COALESCE(c.cursor_offset, -1)
                             AND r.state = 0 AND r.lease_expires_at > now()
                           ORDER BY r.message_offset) END
    FROM (SELECT 1) one
    LEFT JOIN queen.log_consumers c
           ON c.partition_id = p_partition_id AND c.consumer_group = p_group
    CROSS JOIN LATERAL (
        SELECT NOT COALESCE(
                   (SELECT m.ordered FROM queen.consumer_groups_metadata m
                    JOIN queen.log_partitions p ON p.queue_id = m.queue_id
                    WHERE p.id = p_partition_id AND m.consumer_group = p_group),
                   (SELECT q.ordered FROM queen.log_partitions p
                    JOIN queen.queues q ON q.id = p.queue_id
                    WHERE p.id = p_partition_id),
                   true) AS shared) g
$$;

