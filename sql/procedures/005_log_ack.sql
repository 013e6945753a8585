-- 005_log_ack: acknowledgement, failure, lease renewal, and the DLQ.
--
-- Global lock order (seed): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. The ack and renew paths take the
-- advisory keys of the queues they touch, SHARED, in ascending key order
-- (see 001_log_schema.sql), then log_consumers rows, (partition_id,
-- consumer_group) ascending (consumer_group is COLLATE "C", so the order is
-- the same on every host), then write leaves. They take no partition lock of
-- their own; the only one they can meet is PostgreSQL's foreign-key re-check
-- (FOR KEY SHARE on the partition) when the transaction already updated the
-- consumer row (POP then ACK in one transaction block), which only a
-- partition deleter could conflict with, and the queue key excludes it.

-- Dead-lettered messages, as snapshots: the engine decodes the message from
-- the copied segment blob (base_offset says where the blob starts), so the
-- snapshot survives retention of the segment. No foreign key, like log_txns:
-- a partition that still holds DLQ rows is not reclaimed by cleanup, and
-- queen.delete_queue_v1 deletes a queue's rows explicitly. Nothing in the
-- retention cycle purges this table.
CREATE TABLE IF NOT EXISTS queen.log_dlq (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    partition_id   BIGINT NOT NULL,
    message_offset BIGINT NOT NULL,
    consumer_group TEXT COLLATE "C" NOT NULL,
    reason         TEXT NOT NULL,
    -- Failures counted when the message was given up (retry_limit + 1).
    retry_count    INTEGER NOT NULL,
    failed_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- From log_txns, so readers have the id without decoding; NULL when the
    -- sidecar row was already pruned.
    message_id     UUID,
    -- The segment holding the message and a copy of its blob; NULL when
    -- retention had already removed the segment.
    base_offset    BIGINT,
    blob           BYTEA
);

DO $$
BEGIN
    -- SHOW DLQ and the per-partition readers: newest first.
    IF to_regclass('queen.idx_log_dlq_partition_failed_at') IS NULL THEN
        CREATE INDEX idx_log_dlq_partition_failed_at
            ON queen.log_dlq (partition_id, failed_at DESC);
    END IF;
    -- Already-compressed frames, as in log_segments; ACCESS EXCLUSIVE, so
    -- only when not yet external.
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = 'queen.log_dlq'::regclass
                 AND attname = 'blob' AND attstorage <> 'e') THEN
        ALTER TABLE queen.log_dlq ALTER COLUMN blob SET STORAGE EXTERNAL;
    END IF;
END
$$;

-- Writes the DLQ snapshot of one message. The caller holds the
-- (partition, group) consumer row and decided the message is exhausted.
-- Raises 42704 when the partition is not the tenant's.
-- Locks: inserts into the leaf log_dlq; reads log_segments, log_txns.
CREATE OR REPLACE FUNCTION queen.log_dead_letter_v1(
    p_partition_id BIGINT,
    p_group        TEXT,
    p_offset       BIGINT,
    p_reason       TEXT,
    p_retry_count  INTEGER,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1
    FROM queen.log_partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_partition_id AND q.tenant_id = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'partition % does not exist', p_partition_id USING ERRCODE = '42704';
    END IF;

    INSERT INTO queen.log_dlq
        (partition_id, message_offset, consumer_group, reason, retry_count,
         message_id, base_offset, blob)
    SELECT p_partition_id, p_offset, p_group, COALESCE(p_reason, 'failed'), p_retry_count,
           t.message_ids[p_offset - s.base_offset + 1], s.base_offset, s.blob
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (
        SELECT s.base_offset, s.blob
        FROM queen.log_segments s
        WHERE s.partition_id = p_partition_id AND s.base_offset <= p_offset
        ORDER BY s.base_offset DESC
        LIMIT 1
    ) s ON true
    LEFT JOIN queen.log_txns t
           ON t.partition_id = p_partition_id AND t.base_offset = s.base_offset;
END
$$;

-- Acknowledges receipts: (p_partition_ids[i], p_offsets[i], p_groups[i],
-- p_lease_tokens[i]); idx is the 0-based position in those arrays.
-- Statuses:
--   stale          the lease is not held (expired, released, another token)
--                  or the partition is not the tenant's, or the offset is
--                  outside the leased batch: nothing changed for it;
--   acked          (p_failed = false) recorded; the cursor advances over the
--                  contiguous acked prefix of the batch and the lease is
--                  released when the whole batch is acked; re-acking an
--                  offset its own lease already acknowledged answers acked
--                  again and changes nothing, also once that lease is gone
--                  (log_consumers.acked_lease_tokens: a client whose ACK
--                  lost its reply retries and learns the truth);
--   retry          (p_failed) the message comes back with everything after
--                  it, once the queue's retry_delay has passed;
--   dead_lettered  (p_failed) the message exhausted retry_limit: snapshot in
--                  log_dlq (or, with dead_letter_queue or
--                  dlq_after_max_retries off, skipped and counted in
--                  log_consumers.failed_count); the cursor moves past it.
-- FAILED closes the lease. Its failure is charged to the batch's first
-- unacked message (cursor + 1), the message redelivery restarts from; when
-- a client fails a later message while earlier ones are still unacked, the
-- earlier ones come back too and the failure still counts against the
-- first, which is what bounds the loop (the same rule as an expired lease).
-- retry_limit = n: the first n failures answer retry, the next
-- dead_lettered.
-- Locks: advisory queue keys SHARED, ascending; log_consumers rows named by
-- the receipts, (partition_id, consumer_group) ascending, FOR UPDATE; then
-- the leaf log_dlq.
CREATE OR REPLACE FUNCTION queen.log_ack_v1(
    p_partition_ids BIGINT[],
    p_offsets       BIGINT[],
    p_groups        TEXT[],
    p_lease_tokens  UUID[],
    p_failed        BOOLEAN DEFAULT false,
    p_reason        TEXT DEFAULT NULL,
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (idx INTEGER, status TEXT)
LANGUAGE plpgsql
-- Generic plans: custom ones are planned on every call (the receipts
-- arrive as arrays), 0.2 ms of planning for the receipt query and 0.16 ms
-- for the advisory keys per ACK of one message (pgbench, POP LIMIT 1 + ACK,
-- 1,000 partitions, C=8, pg_stat_statements). Every statement here reads
-- by primary key whatever the array sizes (the receipt query probes each
-- (partition, group) laterally), so the generic plan is the custom one.
SET plan_cache_mode = force_generic_plan
-- Index reads only, whatever the statistics (docs/internals/storage.md).
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_n         INTEGER := COALESCE(cardinality(p_partition_ids), 0);
    v_failed    BOOLEAN := COALESCE(p_failed, false);
    v_status    TEXT[];
    v_now       TIMESTAMPTZ := clock_timestamp();
    v_key       RECORD;
    v_c         queen.log_consumers%ROWTYPE;
    v_pos       INTEGER[];
    v_offs      BIGINT[];
    v_distinct  BIGINT;
    v_acked     BIGINT[];
    v_cursor    BIGINT;
    v_head      BIGINT;
    v_retries   INTEGER;
    v_any_retry BOOLEAN;
    v_i         INTEGER;
    v_j         INTEGER;
    v_h_tokens  UUID[];
    v_h_to      BIGINT[];
    v_cur       REFCURSOR;
    v_keys      INTEGER;
    v_mine      BIGINT[];
    v_done      INTEGER[] := '{}';
BEGIN
    -- The guard only for a role other than the function's owner (it would
    -- return at once for the owner), so queenwire's own calls skip it.
    IF session_user <> current_user THEN
        PERFORM queen.tenant_guard_v1(p_tenant);
    END IF;
    IF cardinality(p_offsets) IS DISTINCT FROM v_n
       OR cardinality(p_groups) IS DISTINCT FROM v_n
       OR cardinality(p_lease_tokens) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'log_ack_v1: partition ids, offsets, groups and lease tokens must be parallel arrays'
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    v_status := array_fill('stale'::TEXT, ARRAY[v_n]);

    IF p_partition_ids[1] = ALL (p_partition_ids) AND p_groups[1] = ALL (p_groups) THEN
        -- One (partition, group) named by every receipt (a batch acked by
        -- one ACK, or a lone receipt): its queue's key, taken as the row is
        -- fetched, and options in one statement, nothing to group.
        OPEN v_cur FOR
            SELECT p1.id AS partition_id, p_groups[1]::TEXT COLLATE "C" AS consumer_group,
                   q1.retry_limit, q1.retry_delay,
                   (q1.dead_letter_queue AND q1.dlq_after_max_retries) AS store_dlq,
                   ARRAY(SELECT generate_series(1, v_n)) AS positions,
                   p_offsets AS offsets, p_lease_tokens AS tokens,
                   pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(q1.id))::TEXT AS locked
            -- The queue by its key, not the tenant's queues scanned for it.
            FROM queen.log_partitions p1
            CROSS JOIN LATERAL (SELECT q.* FROM queen.queues q
                                WHERE q.id = p1.queue_id AND q.tenant_id = p_tenant
                                LIMIT 1) q1
            WHERE p1.id = p_partition_ids[1];
    ELSE
        -- Each partition named, then its queue, by their keys (LATERAL
        -- ... LIMIT 1, here and below): as joins, the generic plan went
        -- from the tenant's queues to every partition of the queue by
        -- queue_id (measured: 0.68 ms, 6,236 index entries, of a 0.9 ms
        -- ACK at 1,000 partitions), or scanned the tenant's queues per
        -- receipt. Once per partition, not per receipt: the fused ACK of
        -- sessions that each acknowledge a batch of a hundred names a few
        -- partitions in hundreds of receipts.
        PERFORM pg_advisory_xact_lock_shared(k.key)
        FROM (SELECT DISTINCT queen.log_queue_lock_key_v1(x.qid) AS key
              FROM (SELECT DISTINCT u.pid FROM unnest(p_partition_ids) AS u(pid)) AS i
              CROSS JOIN LATERAL (
                  SELECT q.id AS qid
                  FROM queen.log_partitions p
                  CROSS JOIN LATERAL (SELECT q0.id FROM queen.queues q0
                                      WHERE q0.id = p.queue_id AND q0.tenant_id = p_tenant
                                      LIMIT 1) q
                  WHERE p.id = i.pid
                  LIMIT 1) x
              ORDER BY 1) k;
        IF NOT v_failed THEN
            -- Receipts of several (partition, group) pairs, the fused ACK
            -- of sessions that pop one partition each: every consumer row
            -- of the tenant's locked first, in (partition, group) order as
            -- the loop below locks them; then, in one UPDATE, the receipts
            -- of each pair that end its lease's batch exactly as the loop
            -- would end it (its own live lease, all of the batch from the
            -- offset after the cursor to its last, nothing of it acked
            -- before nor the lease in the history). What is left goes
            -- through the loop: one statement for what would otherwise be a
            -- round of the loop per pair.
            SELECT count(*)::INTEGER, array_agg(l.pid) FILTER (WHERE l.pid IS NOT NULL)
            INTO v_keys, v_mine
            FROM (SELECT DISTINCT i.pid, i.grp::TEXT COLLATE "C" AS grp
                  FROM unnest(p_partition_ids, p_groups) AS i(pid, grp)
                  ORDER BY 1, 2) k
            LEFT JOIN LATERAL (
                SELECT c1.partition_id AS pid
                FROM queen.log_consumers c1
                WHERE c1.partition_id = k.pid AND c1.consumer_group = k.grp
                  AND EXISTS (SELECT 1 FROM queen.log_partitions p1
                              CROSS JOIN LATERAL (SELECT 1 FROM queen.queues q1
                                                  WHERE q1.id = p1.queue_id
                                                    AND q1.tenant_id = p_tenant
                                                  LIMIT 1) q1
                              WHERE p1.id = k.pid)
                LIMIT 1
                FOR UPDATE) l ON true;
            IF v_mine IS NOT NULL AND v_keys = v_n THEN
                -- One receipt a pair (popack1's fused ACK): no grouping.
                WITH u AS (
                    UPDATE queen.log_consumers c
                    SET cursor_offset = r.off, retry_count = 0, lease_token = NULL,
                        lease_expires_at = NULL, batch_from = NULL, batch_to = NULL,
                        batch_acked = NULL,
                        acked_lease_tokens = c.lease_token || c.acked_lease_tokens[1:31],
                        acked_lease_to = r.off || c.acked_lease_to[1:31]
                    FROM unnest(p_partition_ids, p_offsets, p_groups, p_lease_tokens)
                         WITH ORDINALITY AS r(pid, off, grp, tok, ord)
                    -- The ANY: an index probe of the ids whatever the
                    -- statistics (docs/internals/storage.md).
                    WHERE c.partition_id = ANY (v_mine)
                      AND c.partition_id = r.pid AND c.consumer_group = r.grp
                      AND c.lease_token = r.tok AND c.lease_expires_at > v_now
                      AND c.batch_acked IS NULL
                      AND r.off = c.cursor_offset + 1 AND r.off = c.batch_to
                      AND array_position(c.acked_lease_tokens, c.lease_token) IS NULL
                    RETURNING r.ord::INTEGER AS ord
                )
                SELECT COALESCE(array_agg(u.ord), '{}') INTO v_done FROM u;
            ELSIF v_mine IS NOT NULL THEN
                -- Per pair, its receipts end its lease's batch exactly when
                -- they carry one token, the live lease's, and their offsets
                -- are every offset from the one after the cursor to the
                -- batch's last (a receipt named twice counts once, acked
                -- twice), within the batch, nothing of it acked before:
                -- the statement above over the pair's receipts grouped.
                WITH r AS (
                    SELECT i.pid, i.grp::TEXT COLLATE "C" AS grp,
                           (array_agg(i.tok))[1] AS tok, count(DISTINCT i.tok) AS tokens,
                           min(i.off) AS lo, max(i.off) AS hi, count(DISTINCT i.off) AS offsets,
                           array_agg(i.ord::INTEGER) AS ords,
                           bool_and(i.off IS NOT NULL AND i.tok IS NOT NULL) AS whole
                    FROM unnest(p_partition_ids, p_offsets, p_groups, p_lease_tokens)
                         WITH ORDINALITY AS i(pid, off, grp, tok, ord)
                    GROUP BY 1, 2
                ), u AS (
                    UPDATE queen.log_consumers c
                    SET cursor_offset = r.hi, retry_count = 0, lease_token = NULL,
                        lease_expires_at = NULL, batch_from = NULL, batch_to = NULL, batch_acked = NULL,
                        acked_lease_tokens = c.lease_token || c.acked_lease_tokens[1:31],
                        acked_lease_to = r.hi || c.acked_lease_to[1:31]
                    FROM r
                    WHERE c.partition_id = ANY (v_mine)
                      AND c.partition_id = r.pid AND c.consumer_group = r.grp
                      AND r.whole AND r.tokens = 1 AND c.lease_token = r.tok
                      AND c.lease_expires_at > v_now AND c.batch_acked IS NULL
                      AND r.lo = c.cursor_offset + 1 AND r.lo >= c.batch_from AND r.hi = c.batch_to
                      AND r.offsets = r.hi - r.lo + 1
                      AND array_position(c.acked_lease_tokens, c.lease_token) IS NULL
                    RETURNING r.ords
                )
                SELECT COALESCE(array_agg(o.ord), '{}') INTO v_done
                FROM u CROSS JOIN LATERAL unnest(u.ords) AS o(ord);
            END IF;
            IF cardinality(v_done) = v_n THEN
                RETURN QUERY SELECT (g - 1)::INTEGER, 'acked'::TEXT FROM generate_series(1, v_n) g;
                RETURN;
            END IF;
            FOR v_i IN 1 .. cardinality(v_done) LOOP
                v_status[v_done[v_i]] := 'acked';
            END LOOP;
        END IF;
        -- One iteration per (partition, group) of the tenant's, receipts
        -- grouped once, in (partition_id, consumer_group) order; each
        -- consumer row is locked as its iteration begins, so in that order.
        -- The partition and queue are probed by primary key per key
        -- (LATERAL … LIMIT 1), never joined over the queue's partitions,
        -- whatever the generic plan's row estimate for the arrays.
        OPEN v_cur FOR
            SELECT r.pid AS partition_id, r.grp AS consumer_group, q.retry_limit, q.retry_delay,
                   q.store_dlq, r.positions, r.offsets, r.tokens, NULL::TEXT AS locked
            FROM (SELECT i.pid, i.grp::TEXT COLLATE "C" AS grp,
                         array_agg(i.ord::INTEGER) AS positions,
                         array_agg(i.off) AS offsets, array_agg(i.tok) AS tokens
                  FROM unnest(p_partition_ids, p_offsets, p_groups, p_lease_tokens)
                       WITH ORDINALITY AS i(pid, off, grp, tok, ord)
                  WHERE i.ord <> ALL (v_done)
                  GROUP BY i.pid, i.grp) r
            CROSS JOIN LATERAL (
                SELECT q1.retry_limit, q1.retry_delay,
                       (q1.dead_letter_queue AND q1.dlq_after_max_retries) AS store_dlq
                FROM queen.log_partitions p1
                CROSS JOIN LATERAL (SELECT q0.* FROM queen.queues q0
                                    WHERE q0.id = p1.queue_id AND q0.tenant_id = p_tenant
                                    LIMIT 1) q1
                WHERE p1.id = r.pid
                LIMIT 1) q
            ORDER BY r.pid, r.grp;
    END IF;
    LOOP
        FETCH v_cur INTO v_key;
        EXIT WHEN NOT FOUND;
        SELECT c.* INTO v_c FROM queen.log_consumers c
        WHERE c.partition_id = v_key.partition_id AND c.consumer_group = v_key.consumer_group
        FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        -- A receipt whose own lease already acknowledged its offset (the
        -- lease may be gone since): acked again, nothing changes. A receipt
        -- is authenticated and carries the token of the lease that
        -- delivered it, so another lease's delivery of the same offset
        -- never matches; FAILED is never idempotent (the message comes
        -- again, which is what stale says).
        -- (Only when one of the receipts' tokens is in the history: a lease's
        -- own ACK, the usual one, finds none, and the loop over a batch of
        -- a hundred receipts would cost more than the ACK.)
        IF NOT v_failed AND v_c.acked_lease_tokens && v_key.tokens THEN
            FOR v_i IN 1 .. cardinality(v_key.positions) LOOP
                v_j := array_position(v_c.acked_lease_tokens, v_key.tokens[v_i]);
                IF v_j IS NOT NULL AND v_key.offsets[v_i] <= v_c.acked_lease_to[v_j] THEN
                    v_status[v_key.positions[v_i]] := 'acked';
                END IF;
            END LOOP;
        END IF;
        CONTINUE WHEN v_c.lease_token IS NULL OR v_c.lease_expires_at <= v_now;

        -- The receipts of this lease that fall inside its batch; the others
        -- stay stale.
        IF cardinality(v_key.positions) = 1 THEN
            -- One offset of this (partition, group), the common ACK: the
            -- same test as the statement below, as plain expressions.
            IF v_key.tokens[1] = v_c.lease_token
               AND v_key.offsets[1] BETWEEN v_c.batch_from AND v_c.batch_to
               AND (NOT v_failed OR v_key.offsets[1] > v_c.cursor_offset) THEN
                v_pos := v_key.positions;
                v_offs := v_key.offsets;
                v_distinct := 1;
            ELSE
                v_pos := '{}';
                v_offs := '{}';
            END IF;
        ELSE
            SELECT COALESCE(array_agg(x.pos ORDER BY x.off), '{}'),
                   COALESCE(array_agg(x.off ORDER BY x.off), '{}'),
                   count(DISTINCT x.off)
            INTO v_pos, v_offs, v_distinct
            FROM unnest(v_key.positions, v_key.offsets, v_key.tokens) AS x(pos, off, tok)
            WHERE x.tok = v_c.lease_token AND x.off BETWEEN v_c.batch_from AND v_c.batch_to
              AND (NOT v_failed OR x.off > v_c.cursor_offset);  -- failing an acked offset: stale
        END IF;
        CONTINUE WHEN cardinality(v_pos) = 0;
        v_acked := COALESCE(v_c.batch_acked, '{}');

        IF NOT v_failed THEN
            -- Positions are distinct: as many as the call's receipts are
            -- all of them (one lease's batch acked by one ACK).
            IF cardinality(v_pos) = v_n THEN
                v_status := array_fill('acked'::TEXT, ARRAY[v_n]);
            ELSE
                FOR v_i IN 1 .. cardinality(v_pos) LOOP
                    v_status[v_pos[v_i]] := 'acked';
                END LOOP;
            END IF;
            -- The acked prefix: with nothing acked before, offsets sorted
            -- from cursor + 1 whose last is cursor + (distinct count) are
            -- exactly cursor + 1 .. that last, a loop's walk saved.
            IF v_c.batch_acked IS NULL AND v_offs[1] = v_c.cursor_offset + 1
               AND v_offs[cardinality(v_offs)] = v_c.cursor_offset + v_distinct THEN
                v_cursor := v_offs[cardinality(v_offs)];
            ELSE
                v_cursor := queen.log_acked_prefix_v1(v_c.cursor_offset, v_acked || v_offs);
            END IF;
            v_acked := v_acked || v_offs;
            -- This lease has acknowledged its batch up to the cursor: the
            -- newest entry of the history, the oldest beyond 32 forgotten.
            -- Plain array expressions, no query: this runs on every ACK.
            v_h_tokens := v_c.acked_lease_tokens;
            v_h_to := v_c.acked_lease_to;
            IF v_cursor >= v_c.batch_from THEN
                v_j := array_position(v_h_tokens, v_c.lease_token);
                IF v_j IS NOT NULL THEN
                    v_h_to[v_j] := v_cursor;
                ELSE
                    v_h_tokens := v_c.lease_token || v_h_tokens[1:31];
                    v_h_to := v_cursor || v_h_to[1:31];
                END IF;
            END IF;
            IF v_cursor >= v_c.batch_to THEN
                UPDATE queen.log_consumers c
                SET cursor_offset = v_cursor, retry_count = 0, lease_token = NULL,
                    lease_expires_at = NULL, batch_from = NULL, batch_to = NULL,
                    batch_acked = NULL, acked_lease_tokens = v_h_tokens, acked_lease_to = v_h_to
                WHERE c.partition_id = v_key.partition_id AND c.consumer_group = v_key.consumer_group;
            ELSE
                UPDATE queen.log_consumers c
                SET cursor_offset = v_cursor,
                    retry_count = CASE WHEN v_cursor > v_c.cursor_offset THEN 0 ELSE c.retry_count END,
                    batch_acked = NULLIF(ARRAY(SELECT DISTINCT o FROM unnest(v_acked) o
                                               WHERE o > v_cursor ORDER BY o), '{}'),
                    acked_lease_tokens = v_h_tokens, acked_lease_to = v_h_to
                WHERE c.partition_id = v_key.partition_id AND c.consumer_group = v_key.consumer_group;
            END IF;
            CONTINUE;
        END IF;

        v_head := v_c.cursor_offset + 1;
        v_retries := v_c.retry_count + 1;
        v_cursor := v_c.cursor_offset;
        v_any_retry := false;
        IF v_retries > v_key.retry_limit THEN
            IF v_key.store_dlq THEN
                PERFORM queen.log_dead_letter_v1(v_key.partition_id, v_key.consumer_group, v_head,
                                                 p_reason, v_retries, p_tenant);
            ELSE
                v_c.failed_count := v_c.failed_count + 1;
            END IF;
            v_cursor := queen.log_acked_prefix_v1(v_head, v_acked);
            v_retries := 0;
        END IF;
        FOR v_i IN 1 .. cardinality(v_pos) LOOP
            IF v_retries = 0 AND v_offs[v_i] = v_head THEN
                v_status[v_pos[v_i]] := 'dead_lettered';
            ELSE
                v_status[v_pos[v_i]] := 'retry';
                v_any_retry := true;
            END IF;
        END LOOP;
        UPDATE queen.log_consumers c
        SET cursor_offset = v_cursor, retry_count = v_retries, failed_count = v_c.failed_count,
            lease_token = NULL, lease_expires_at = NULL, batch_from = NULL, batch_to = NULL,
            batch_acked = NULL,
            blocked_until = CASE WHEN v_any_retry
                                 THEN v_now + make_interval(secs => v_key.retry_delay / 1000.0)
                                 ELSE c.blocked_until END
        WHERE c.partition_id = v_key.partition_id AND c.consumer_group = v_key.consumer_group;
    END LOOP;
    CLOSE v_cur;

    RETURN QUERY
    SELECT (s.ord - 1)::INTEGER, s.st
    FROM unnest(v_status) WITH ORDINALITY AS s(st, ord)
    ORDER BY s.ord;
END
$$;

-- Acknowledges runs of receipts: run i stands for the receipts of every
-- offset p_from[i] .. p_to[i] of (p_partition_ids[i], p_groups[i],
-- p_lease_tokens[i]), a plain ACK (never FAILED); idx is the 0-based run.
-- Each offset answers as log_ack_v1 would answer its receipt (statuses
-- acked and stale). queenwire sends the receipts of a multi-receipt ACK as
-- runs: a batch of a hundred acknowledged entire is one run, so the call
-- costs per (partition, group), not per receipt (log_ack_v1 costs about
-- 2 us a receipt; bench/ack_cost.sh measures both).
-- A (partition, group) named by one run that is exactly its live lease's
-- unacked batch (the run's token the lease's, from the offset after the
-- cursor to the batch's last, nothing of it acked before nor the lease in
-- the history) is settled with the other such pairs in one UPDATE and
-- answers one row (idx, NULL, 'acked') for the whole run. The other runs
-- are expanded into their receipts and go through log_ack_v1 in this call,
-- one row (idx, offset, status) each. An offset without a row is stale.
-- Locks: those of log_ack_v1, in its order: advisory queue keys SHARED,
-- ascending; then every named (partition, group)'s log_consumers row,
-- ascending, FOR UPDATE, all before anything is written; log_ack_v1 then
-- takes them again (it holds them already), nothing new.
CREATE OR REPLACE FUNCTION queen.log_ack_v2(
    p_partition_ids BIGINT[],
    p_groups        TEXT[],
    p_lease_tokens  UUID[],
    p_from          BIGINT[],
    p_to            BIGINT[],
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (idx INTEGER, message_offset BIGINT, status TEXT)
LANGUAGE plpgsql
-- As log_ack_v1: every statement reads by primary key whatever the array
-- sizes, so the generic plan is the custom one, without planning a call.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_n     INTEGER := COALESCE(cardinality(p_partition_ids), 0);
    v_now   TIMESTAMPTZ := clock_timestamp();
    v_mine  BIGINT[];
    v_done  INTEGER[] := '{}';
    v_run   INTEGER[];
    v_pid   BIGINT[];
    v_grp   TEXT[];
    v_tok   UUID[];
    v_off   BIGINT[];
BEGIN
    IF session_user <> current_user THEN
        PERFORM queen.tenant_guard_v1(p_tenant);
    END IF;
    IF cardinality(p_groups) IS DISTINCT FROM v_n
       OR cardinality(p_lease_tokens) IS DISTINCT FROM v_n
       OR cardinality(p_from) IS DISTINCT FROM v_n
       OR cardinality(p_to) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'log_ack_v2: partition ids, groups, lease tokens, firsts and lasts must be parallel arrays'
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- The queue keys, once per distinct partition, and the consumer rows
    -- below: log_ack_v1's two statements, written again rather than shared
    -- (a helper function would add a call to every ACK, the fixed part this
    -- function exists to keep small).
    PERFORM pg_advisory_xact_lock_shared(k.key)
    FROM (SELECT DISTINCT queen.log_queue_lock_key_v1(x.qid) AS key
          FROM (SELECT DISTINCT u.pid FROM unnest(p_partition_ids) AS u(pid)) AS i
          CROSS JOIN LATERAL (
              SELECT q.id AS qid
              FROM queen.log_partitions p
              CROSS JOIN LATERAL (SELECT q0.id FROM queen.queues q0
                                  WHERE q0.id = p.queue_id AND q0.tenant_id = p_tenant
                                  LIMIT 1) q
              WHERE p.id = i.pid
              LIMIT 1) x
          ORDER BY 1) k;
    -- Every consumer row of the tenant's named, in (partition, group)
    -- order, before anything is written.
    SELECT array_agg(l.pid) FILTER (WHERE l.pid IS NOT NULL)
    INTO v_mine
    FROM (SELECT DISTINCT i.pid, i.grp::TEXT COLLATE "C" AS grp
          FROM unnest(p_partition_ids, p_groups) AS i(pid, grp)
          ORDER BY 1, 2) k
    LEFT JOIN LATERAL (
        SELECT c1.partition_id AS pid
        FROM queen.log_consumers c1
        WHERE c1.partition_id = k.pid AND c1.consumer_group = k.grp
          AND EXISTS (SELECT 1 FROM queen.log_partitions p1
                      CROSS JOIN LATERAL (SELECT 1 FROM queen.queues q1
                                          WHERE q1.id = p1.queue_id
                                            AND q1.tenant_id = p_tenant
                                          LIMIT 1) q1
                      WHERE p1.id = k.pid)
        LIMIT 1
        FOR UPDATE) l ON true;
    IF v_mine IS NULL THEN
        RETURN;
    END IF;

    -- The pairs named by one run that ends its live lease's batch exactly.
    WITH r AS (
        SELECT i.pid, i.grp::TEXT COLLATE "C" AS grp, count(*) AS runs,
               min(i.ord)::INTEGER AS ord, (array_agg(i.tok))[1] AS tok,
               min(i.lo) AS lo, max(i.hi) AS hi
        FROM unnest(p_partition_ids, p_groups, p_lease_tokens, p_from, p_to)
             WITH ORDINALITY AS i(pid, grp, tok, lo, hi, ord)
        GROUP BY 1, 2
    ), u AS (
        UPDATE queen.log_consumers c
        SET cursor_offset = r.hi, retry_count = 0, lease_token = NULL,
            lease_expires_at = NULL, batch_from = NULL, batch_to = NULL, batch_acked = NULL,
            acked_lease_tokens = c.lease_token || c.acked_lease_tokens[1:31],
            acked_lease_to = r.hi || c.acked_lease_to[1:31]
        FROM r
        WHERE c.partition_id = ANY (v_mine)
          AND c.partition_id = r.pid AND c.consumer_group = r.grp
          AND r.runs = 1 AND c.lease_token = r.tok
          AND c.lease_expires_at > v_now AND c.batch_acked IS NULL
          AND r.lo = c.cursor_offset + 1 AND r.lo >= c.batch_from AND r.hi = c.batch_to
          AND array_position(c.acked_lease_tokens, c.lease_token) IS NULL
        RETURNING r.ord
    )
    SELECT COALESCE(array_agg(u.ord), '{}') INTO v_done FROM u;
    RETURN QUERY SELECT (d - 1)::INTEGER, NULL::BIGINT, 'acked'::TEXT FROM unnest(v_done) AS d;
    IF cardinality(v_done) = v_n THEN
        RETURN;
    END IF;

    -- The other runs, receipt by receipt. A run stands for as many
    -- receipts as it has offsets: no more than an ACK could name. (Checked
    -- here only: a run the UPDATE settled is its lease's batch, first to
    -- last, so every malformed run comes this way.)
    IF EXISTS (SELECT 1 FROM unnest(p_from, p_to) WITH ORDINALITY AS r(lo, hi, ord)
               WHERE r.ord::INTEGER <> ALL (v_done)
                 AND (r.hi < r.lo OR r.hi - r.lo >= 1000000)) THEN
        RAISE EXCEPTION 'log_ack_v2: a run must be 1 to 1000000 offsets, first to last'
            USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(x.ord ORDER BY x.ord, x.off), array_agg(x.pid ORDER BY x.ord, x.off),
           array_agg(x.grp ORDER BY x.ord, x.off), array_agg(x.tok ORDER BY x.ord, x.off),
           array_agg(x.off ORDER BY x.ord, x.off)
    INTO v_run, v_pid, v_grp, v_tok, v_off
    FROM (SELECT i.ord::INTEGER AS ord, i.pid, i.grp, i.tok, generate_series(i.lo, i.hi) AS off
          FROM unnest(p_partition_ids, p_groups, p_lease_tokens, p_from, p_to)
               WITH ORDINALITY AS i(pid, grp, tok, lo, hi, ord)
          WHERE i.ord::INTEGER <> ALL (v_done)) x;
    IF v_off IS NULL THEN
        RETURN;  -- runs without offsets (a NULL first or last): stale
    END IF;
    RETURN QUERY
    SELECT v_run[a.idx + 1] - 1, v_off[a.idx + 1], a.status
    FROM queen.log_ack_v1(v_pid, v_off, v_grp, v_tok, false, NULL, p_tenant) AS a
    WHERE a.status <> 'stale';
END
$$;

-- Extends leases: (p_partition_ids[i], p_groups[i], p_lease_tokens[i]); idx
-- is the 0-based position. A held lease becomes max(current expiry, now +
-- p_extend_ms), default the queue's lease_time; lease_expires_at NULL means
-- the lease is lost (expired, released, another token, or not the tenant's):
-- an expired lease is never renewed.
-- Locks: advisory queue keys SHARED, ascending; log_consumers rows named,
-- (partition_id, consumer_group) ascending, FOR UPDATE.
CREATE OR REPLACE FUNCTION queen.log_renew_v1(
    p_partition_ids BIGINT[],
    p_groups        TEXT[],
    p_lease_tokens  UUID[],
    p_extend_ms     BIGINT DEFAULT NULL,
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (idx INTEGER, lease_expires_at TIMESTAMPTZ)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_n       INTEGER := COALESCE(cardinality(p_partition_ids), 0);
    v_now     TIMESTAMPTZ := clock_timestamp();
    v_key     RECORD;
    v_new     TIMESTAMPTZ;
    -- The leases renewed: (partition, group, token) -> new expiry.
    r_pid     BIGINT[] := '{}';
    r_group   TEXT[] := '{}';
    r_token   UUID[] := '{}';
    r_expires TIMESTAMPTZ[] := '{}';
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF cardinality(p_groups) IS DISTINCT FROM v_n
       OR cardinality(p_lease_tokens) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'log_renew_v1: partition ids, groups and lease tokens must be parallel arrays'
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

    FOR v_key IN
        SELECT c.partition_id, c.consumer_group, c.lease_token, c.lease_expires_at, q.lease_time
        FROM queen.log_consumers c
        JOIN queen.log_partitions p ON p.id = c.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
        WHERE q.tenant_id = p_tenant
          AND (c.partition_id, c.consumer_group, c.lease_token) IN
              (SELECT i.pid, i.grp, i.tok
               FROM unnest(p_partition_ids, p_groups, p_lease_tokens) AS i(pid, grp, tok))
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE OF c
    LOOP
        CONTINUE WHEN v_key.lease_expires_at <= v_now;
        v_new := GREATEST(v_key.lease_expires_at,
                          v_now + make_interval(secs => COALESCE(p_extend_ms, v_key.lease_time::BIGINT * 1000) / 1000.0));
        UPDATE queen.log_consumers c
        SET lease_expires_at = v_new
        WHERE c.partition_id = v_key.partition_id AND c.consumer_group = v_key.consumer_group;
        r_pid := r_pid || v_key.partition_id;
        r_group := r_group || v_key.consumer_group::TEXT;
        r_token := r_token || v_key.lease_token;
        r_expires := r_expires || v_new;
    END LOOP;

    RETURN QUERY
    SELECT (i.ord - 1)::INTEGER, r.exp
    FROM unnest(p_partition_ids, p_groups, p_lease_tokens) WITH ORDINALITY AS i(pid, grp, tok, ord)
    LEFT JOIN unnest(r_pid, r_group, r_token, r_expires) AS r(pid, grp, tok, exp)
           ON r.pid = i.pid AND r.grp = i.grp AND r.tok = i.tok
    ORDER BY i.ord;
END
$$;
