-- 003_log_push: the write path.
--
-- Global lock order (seed): kv -> log_timers -> advisory -> queues (a
-- queue's consumer_groups_metadata rows sit with it, see schema.sql) ->
-- log_partitions -> log_consumers -> leaves (log_segments, log_txns, log_dlq,
-- hotlist_repairs). Within log_partitions: name
-- ascending for provisioning inserts, then id ascending for row locks. The
-- advisory keys are described at the top of 001_log_schema.sql.
--
-- Partition rows are locked FOR NO KEY UPDATE, not FOR UPDATE: it serializes
-- writers of a partition exactly as well (it conflicts with itself and with
-- the allocator's UPDATE), but it does not conflict with the FOR KEY SHARE
-- that a foreign-key check takes, so a POP creating a consumer row, or a
-- segment insert, never waits behind a push holding its partition.

-- Transaction ids already stored in a partition within the dedup window:
-- for each input hash found, the newest stored offset carrying it and that
-- message's id. Walks log_txns backwards from the newest segment and stops
-- at the first row older than the window, so the cost is the rows written
-- within the window (log_txns has no secondary index by design). The caller
-- holds the partition lock, which makes probe-then-insert race-free.
-- Nothing when the partition is not the tenant's. Takes no locks.
CREATE OR REPLACE FUNCTION queen.log_dedup_probe_v1(
    p_partition_id BIGINT,
    p_txn_hashes   BIGINT[],
    p_dedup_window INTEGER,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (txn_hash BIGINT, original_offset BIGINT, original_message_id UUID)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_hashes BIGINT[];
    v_cutoff TIMESTAMPTZ := clock_timestamp() - make_interval(secs => p_dedup_window);
    v_found  BIGINT[] := '{}';
    v_row    RECORD;
    v_ids    UUID[];
    v_k      INTEGER;
BEGIN
    SELECT array_agg(DISTINCT h) INTO v_hashes
    FROM unnest(p_txn_hashes) h
    WHERE h IS NOT NULL;
    IF v_hashes IS NULL OR p_dedup_window IS NULL OR p_dedup_window <= 0 THEN
        RETURN;
    END IF;
    PERFORM 1
    FROM queen.log_partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_partition_id AND q.tenant_id = p_tenant;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    -- message_ids is read only for a row that matches.
    FOR v_row IN
        SELECT t.base_offset, t.created_at, t.txn_hashes
        FROM queen.log_txns t
        WHERE t.partition_id = p_partition_id
        ORDER BY t.base_offset DESC
    LOOP
        EXIT WHEN v_row.created_at < v_cutoff;
        CONTINUE WHEN v_row.txn_hashes IS NULL OR NOT (v_row.txn_hashes && v_hashes);
        SELECT t.message_ids INTO v_ids
        FROM queen.log_txns t
        WHERE t.partition_id = p_partition_id AND t.base_offset = v_row.base_offset;
        FOR v_k IN REVERSE cardinality(v_row.txn_hashes) .. 1 LOOP
            IF v_row.txn_hashes[v_k] = ANY (v_hashes) AND NOT v_row.txn_hashes[v_k] = ANY (v_found) THEN
                v_found := v_found || v_row.txn_hashes[v_k];
                txn_hash := v_row.txn_hashes[v_k];
                original_offset := v_row.base_offset + v_k - 1;
                original_message_id := v_ids[v_k];
                RETURN NEXT;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(v_found) = cardinality(v_hashes);
    END LOOP;
END
$$;

-- Appends one segment to a partition: the ONLY place an offset is assigned.
-- Every writer calls it: queen.log_push_v1 here, and the seed's transaction
-- wire and streams cycle when they land.
-- Returns the segment's base_offset; its messages get base_offset ..
-- base_offset + p_count - 1 in array order.
-- p_dedup_window > 0 makes this call check the transaction-id hashes itself
-- (within the input and against the window) and fail with 23505 on a
-- duplicate, for callers that did not probe first; log_push_v1 probes under
-- the same lock to report per-message statuses and passes 0.
-- Locks: log_partitions row p_partition_id (FOR NO KEY UPDATE, by the
-- allocator UPDATE; normally already held by the caller, which then acquires
-- nothing new), then inserts into the leaves log_segments and log_txns.
-- Obligation of every caller: hold the queue's advisory key SHARED
-- (queen.log_queue_lock_key_v1) before the partition lock. A second append to
-- the same partition in one transaction makes PostgreSQL re-check the
-- partition's foreign key with FOR KEY SHARE on the queue row; the key is
-- what keeps queen.delete_queue_v1 from holding that row meanwhile.
CREATE OR REPLACE FUNCTION queen.log_push_one_v1(
    p_partition_id   BIGINT,
    p_count          INTEGER,
    p_blob           BYTEA,
    p_txn_hashes     BIGINT[],
    p_message_ids    UUID[],
    p_min_created_at TIMESTAMPTZ,
    p_max_created_at TIMESTAMPTZ,
    p_dedup_window   INTEGER,
    p_tenant         UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS BIGINT
LANGUAGE plpgsql
-- Generic plans: the statements' plans do not depend on the array values,
-- and planning them on every call costs 14 % of PostgreSQL's CPU on
-- push100 (2 cores, C=8: 305k msg/s with custom plans against 399k with
-- generic ones; push1 8.3k against 8.9k).
SET plan_cache_mode = force_generic_plan
-- Index reads only, whatever the statistics (docs/internals/storage.md).
SET enable_seqscan = off
AS $$
DECLARE
    v_now    TIMESTAMPTZ := clock_timestamp();
    v_base   BIGINT;
    v_hashes BIGINT[];
    v_sealed BOOLEAN;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_blob IS NULL
       OR p_min_created_at IS NULL OR p_max_created_at IS NULL
       OR p_min_created_at > p_max_created_at THEN
        RAISE EXCEPTION 'log_push_one_v1: a segment needs count >= 1, a blob and min_created_at <= max_created_at'
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_message_ids) IS DISTINCT FROM p_count
       OR (p_txn_hashes IS NOT NULL AND cardinality(p_txn_hashes) <> p_count)
       OR array_position(p_message_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'log_push_one_v1: % messages need % message ids and % transaction hashes (or NULL)',
            p_count, p_count, p_count
            USING ERRCODE = '22023';
    END IF;

    -- last_write_at to the second (see log_push_v1, step 4).
    UPDATE queen.log_partitions p
    SET last_offset = p.last_offset + p_count,
        last_write_at = CASE WHEN q.window_buffer = 0
                              AND p.last_write_at > v_now - interval '1 second'
                             THEN p.last_write_at ELSE v_now END
    FROM queen.queues q
    WHERE p.id = p_partition_id AND q.id = p.queue_id AND q.tenant_id = p_tenant
    RETURNING p.last_offset - p_count + 1, q.encryption_enabled INTO v_base, v_sealed;
    IF v_base IS NULL THEN
        RAISE EXCEPTION 'partition % does not exist', p_partition_id
            USING ERRCODE = '42704';
    END IF;
    -- As in log_push_v1: an encrypted queue takes only sealed blobs (the
    -- raise undoes the UPDATE above with the caller's transaction).
    IF (CASE WHEN octet_length(p_blob) > 0 THEN get_byte(p_blob, 0) = 2 ELSE false END)
       IS DISTINCT FROM v_sealed THEN
        RAISE EXCEPTION 'partition %: the segment''s encryption does not match the queue''s encryption_enabled', p_partition_id
            USING ERRCODE = '55000';
    END IF;

    -- Store NULL rather than an array of NULLs: the dedup probe then skips
    -- the row without reading it.
    IF EXISTS (SELECT 1 FROM unnest(p_txn_hashes) h WHERE h IS NOT NULL) THEN
        v_hashes := p_txn_hashes;
    END IF;

    IF p_dedup_window > 0 AND v_hashes IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM unnest(v_hashes) h WHERE h IS NOT NULL
                   GROUP BY h HAVING count(*) > 1)
           OR EXISTS (SELECT 1 FROM queen.log_dedup_probe_v1(p_partition_id, v_hashes,
                                                             p_dedup_window, p_tenant)) THEN
            RAISE EXCEPTION 'duplicate transaction id in partition %', p_partition_id
                USING ERRCODE = '23505';
        END IF;
    END IF;

    INSERT INTO queen.log_segments
        (partition_id, base_offset, min_created_at, max_created_at, message_count, byte_size, blob)
    VALUES
        (p_partition_id, v_base, p_min_created_at, p_max_created_at, p_count,
         octet_length(p_blob), p_blob);
    INSERT INTO queen.log_txns (partition_id, base_offset, created_at, txn_hashes, message_ids)
    VALUES (p_partition_id, v_base, v_now, v_hashes, p_message_ids);

    RETURN v_base;
END
$$;

-- One PUSH statement: several segments (one per partition normally; a
-- partition may appear more than once, its segments are written in input
-- order), one round trip. Messages are flattened over the segments in input
-- order: segment i owns the next p_counts[i] entries of p_txn_hashes
-- (NULL = no transaction ids at all; a NULL element = that message has none)
-- and p_message_ids. msg_index is the 0-based position in that flattening.
--
-- Outcomes:
--   * every message 'queued' with its offset and its partition's id
--     (partition_id, NULL in the other outcomes);
--   * or, when any message is a duplicate (its transaction id hash is
--     already in its partition within the queue's dedup_window, or repeats
--     an earlier message of this same call in the same partition), NOTHING
--     is written: duplicates come back 'duplicate' with the original's
--     offset and message id, every other message 'retry' (offset NULL, its
--     own id). The engine re-frames without the duplicates and calls again.
--     A duplicate of an earlier message of the same call reports that
--     message's id and offset NULL (it has no offset yet);
--   * or an error: 54000 when max_queue_size would be exceeded (nothing
--     written), 22023 on malformed input, 40001 when the queue or a
--     partition kept vanishing under the call (dropped concurrently: retry).
-- Provisioning (queue row, partition rows) is kept even when nothing else
-- is written.
--
-- Locks, in order:
--   0. queues: provisioning insert of the queue row when missing (a new row
--      nobody else can see; another creator of the same queue waits for it
--      holding nothing, so it is no edge of a cycle);
--   1. advisory: the queue key, SHARED (excludes a concurrent DROP QUEUE);
--      queues: when max_queue_size > 0, the queue row FOR NO KEY UPDATE,
--      which serializes the pushes of a size-limited queue so the size check
--      cannot be raced;
--   2. log_partitions: provisioning inserts, name ascending (COLLATE "C"),
--      then every named partition FOR NO KEY UPDATE in id ascending order
--      (a partition inserted in step 2 is re-locked, not acquired; a push
--      into one partition takes that lock with the UPDATE of step 4);
--   3. leaves: log_segments and log_txns inserts (step 4, one statement),
--      then log_traces (its foreign key re-locks the partitions held).
-- The order holds per call. A client transaction block can still invert it
-- across statements, as on plain PostgreSQL: two blocks pushing into the
-- same partitions in opposite orders, or a block whose first PUSH ran while
-- max_queue_size was 0 and whose second PUSH, after an ALTER QUEUE set it,
-- asks for the queue row while holding partitions. Either ends in 40P01 for
-- one block (seen in a chaos run that toggled max_queue_size under load;
-- none without the toggle), never in a lost or duplicated message.
-- p_trace_ids (017_traces) runs parallel to p_message_ids: a message with
-- a trace id gets a queen.log_traces row in the same statement. NULL (no
-- message has one) writes nothing there: the gate is a one-time filter, so
-- an untraced push costs what it did before the column existed.
-- p_per_segment (the engine passes true): every message queued is then
-- answered by one row per segment instead of one per message: msg_index
-- and offset are the segment's first message's, message_id its id; the
-- caller, which sent the counts, spreads them (message k of the segment is
-- at offset + k). The other outcomes (duplicate, retry, encrypt, plain)
-- stay per message. A fused push of 400 messages answered 400 rows, each
-- made, sorted and sent by PostgreSQL and decoded by the queue's one writer.
-- The signatures before p_trace_ids and before p_per_segment are dropped so
-- no ambiguous overload survives (calls name their arguments).
DROP FUNCTION IF EXISTS queen.log_push_v1(
    TEXT, TEXT[], INTEGER[], BYTEA[], BIGINT[], UUID[], TIMESTAMPTZ[], TIMESTAMPTZ[], UUID);
DROP FUNCTION IF EXISTS queen.log_push_v1(
    TEXT, TEXT[], INTEGER[], BYTEA[], BIGINT[], UUID[], TIMESTAMPTZ[], TIMESTAMPTZ[], TEXT[], UUID);
-- The result gained partition_id (the engine feeds its hot list the
-- partitions a push wrote): CREATE OR REPLACE refuses a change of the OUT
-- row, so the function is dropped first, but only when the catalog's
-- differs, so that an ordinary boot keeps it (same OID, no window in which
-- other brokers' pushes find it missing).
DO $$
DECLARE
    v_fn REGPROCEDURE := to_regprocedure(
        'queen.log_push_v1(text, text[], integer[], bytea[], bigint[], uuid[], timestamptz[], timestamptz[], text[], uuid, boolean)');
BEGIN
    IF v_fn IS NOT NULL AND pg_get_function_result(v_fn) <>
        'TABLE(msg_index integer, status text, partition_name text, "offset" bigint, message_id uuid, partition_id bigint)'
    THEN
        EXECUTE format('DROP FUNCTION %s', v_fn);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION queen.log_push_v1(
    p_queue          TEXT,
    p_partitions     TEXT[],
    p_counts         INTEGER[],
    p_blobs          BYTEA[],
    p_txn_hashes     BIGINT[],
    p_message_ids    UUID[],
    p_min_created_at TIMESTAMPTZ[],
    p_max_created_at TIMESTAMPTZ[],
    p_trace_ids      TEXT[] DEFAULT NULL,
    p_tenant         UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_per_segment    BOOLEAN DEFAULT false
) RETURNS TABLE (msg_index INTEGER, status TEXT, partition_name TEXT, "offset" BIGINT, message_id UUID,
                partition_id BIGINT)
LANGUAGE plpgsql
-- Generic plans: the statements' plans do not depend on the array values,
-- and planning them on every call costs 14 % of PostgreSQL's CPU on
-- push100 (2 cores, C=8: 305k msg/s with custom plans against 399k with
-- generic ones; push1 8.3k against 8.9k).
SET plan_cache_mode = force_generic_plan
-- Index reads only, whatever the statistics (docs/internals/storage.md).
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_segments  INTEGER := COALESCE(cardinality(p_partitions), 0);
    v_total     BIGINT;
    v_qid       UUID;
    v_max_size  BIGINT;
    v_dedup     INTEGER;
    v_window    INTEGER;
    v_sealed    BOOLEAN;
    v_ids       BIGINT[];
    v_void      TEXT;
    v_malformed BOOLEAN;
    v_any_sealed BOOLEAN;
    v_any_plain BOOLEAN;
    v_names     TEXT[];
    v_pids      BIGINT[] := '{}';
    v_pnames    TEXT[] := '{}';
    v_priors    BIGINT[] := '{}';
    v_allocated BOOLEAN := false;
    v_fast      BOOLEAN;
    v_new_ids   BIGINT[] := '{}';
    v_new_names TEXT[] := '{}';
    v_pending   BIGINT;
    -- Per segment, its partition's place in v_pnames (many partitions).
    v_seg_k     INTEGER[];
    -- Per entry of v_pnames, its messages in this call (many partitions).
    v_totals    BIGINT[];
    v_dup_idx   INTEGER[] := '{}';
    v_dup_off   BIGINT[] := '{}';
    v_dup_id    UUID[] := '{}';
    v_attempt   INTEGER;
    v_now       TIMESTAMPTZ;
    v_any_hash  BOOLEAN := COALESCE(cardinality(array_remove(p_txn_hashes, NULL)) > 0, false);
BEGIN
    -- Every statement of this function costs its executor start-up and its
    -- plan's lock checks whatever it does, so the checks and summaries of
    -- the input are one statement (none for one segment), the queue's
    -- lookup takes its key, its second read returns the partitions' ids,
    -- the common push (one partition, no size limit, no transaction ids)
    -- needs no lock statement, and a partition it creates no UPDATE
    -- (step 2).
    -- The guard only for a role other than the function's owner (it would
    -- return at once for the owner), so queenwire's own calls skip it.
    IF session_user <> current_user THEN
        PERFORM queen.tenant_guard_v1(p_tenant);
    END IF;
    IF v_segments = 1 THEN
        -- One segment (a push of one statement): plain expressions, which
        -- PL/pgSQL evaluates without starting a plan.
        v_malformed := p_counts[1] IS NULL OR p_counts[1] < 1 OR p_blobs[1] IS NULL
                       OR p_min_created_at[1] IS NULL OR p_max_created_at[1] IS NULL
                       OR p_min_created_at[1] > p_max_created_at[1];
        v_total := p_counts[1];
        v_names := p_partitions;
        v_any_sealed := CASE WHEN octet_length(p_blobs[1]) > 0 THEN get_byte(p_blobs[1], 0) = 2 ELSE false END;
        v_any_plain := NOT v_any_sealed;
    ELSE
        SELECT EXISTS (SELECT 1 FROM unnest(p_counts, p_blobs, p_min_created_at, p_max_created_at) x(c, b, lo, hi)
                       WHERE c IS NULL OR c < 1 OR b IS NULL OR lo IS NULL OR hi IS NULL OR lo > hi),
               (SELECT sum(c) FROM unnest(p_counts) c),
               (SELECT array_agg(DISTINCT n COLLATE "C" ORDER BY n COLLATE "C") FROM unnest(p_partitions) n),
               EXISTS (SELECT 1 FROM unnest(p_blobs) b
                       WHERE CASE WHEN octet_length(b) > 0 THEN get_byte(b, 0) = 2 ELSE false END),
               EXISTS (SELECT 1 FROM unnest(p_blobs) b
                       WHERE NOT CASE WHEN octet_length(b) > 0 THEN get_byte(b, 0) = 2 ELSE false END)
        INTO v_malformed, v_total, v_names, v_any_sealed, v_any_plain;
    END IF;
    IF p_queue IS NULL OR v_segments = 0 THEN
        RAISE EXCEPTION 'log_push_v1: a queue name and at least one segment are required'
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_counts) IS DISTINCT FROM v_segments
       OR cardinality(p_blobs) IS DISTINCT FROM v_segments
       OR cardinality(p_min_created_at) IS DISTINCT FROM v_segments
       OR cardinality(p_max_created_at) IS DISTINCT FROM v_segments
       OR array_position(p_partitions, NULL) IS NOT NULL
       OR v_malformed THEN
        RAISE EXCEPTION 'log_push_v1: partitions, counts, blobs and created_at bounds must be parallel arrays of % non-null entries, counts >= 1, min_created_at <= max_created_at',
            v_segments
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_message_ids) IS DISTINCT FROM v_total::INTEGER
       OR (p_txn_hashes IS NOT NULL AND cardinality(p_txn_hashes) <> v_total)
       OR (p_trace_ids IS NOT NULL AND cardinality(p_trace_ids) <> v_total)
       OR array_position(p_message_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'log_push_v1: % messages need % message ids and % transaction hashes and trace ids (or NULL)',
            v_total, v_total, v_total
            USING ERRCODE = '22023';
    END IF;

    -- 1. The queue, then its key (one statement), then the queue's row again
    -- under the key, with the ids of the named partitions that exist. A DROP
    -- QUEUE that committed while this call waited for the key leaves nothing
    -- to push into: provision again, as a push arriving a moment later would
    -- have.
    FOR v_attempt IN 1 .. 3 LOOP
        SELECT q.id, q.max_queue_size,
               pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(q.id))::TEXT
        INTO v_qid, v_max_size, v_void
        FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        IF NOT FOUND THEN
            INSERT INTO queen.queues (tenant_id, name) VALUES (p_tenant, p_queue)
            ON CONFLICT (tenant_id, name) DO NOTHING;
            SELECT q.id, q.max_queue_size,
                   pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(q.id))::TEXT
            INTO v_qid, v_max_size, v_void
            FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        END IF;
        CONTINUE WHEN v_qid IS NULL;
        -- The partitions by name, each a probe of (queue_id, name) (LATERAL
        -- ... LIMIT 1, here and below): as name = ANY, the generic plan
        -- read every partition of the queue by queue_id and filtered them.
        IF v_max_size > 0 THEN
            SELECT q.max_queue_size, q.dedup_window, q.window_buffer, q.encryption_enabled,
                   (SELECT array_agg(p.id ORDER BY p.id)
                    FROM unnest(v_names) AS n(name)
                    CROSS JOIN LATERAL (SELECT p1.id FROM queen.log_partitions p1
                                        WHERE p1.queue_id = q.id AND p1.name = n.name
                                        LIMIT 1) p)
            INTO v_max_size, v_dedup, v_window, v_sealed, v_ids
            FROM queen.queues q WHERE q.id = v_qid FOR NO KEY UPDATE;
        ELSE
            SELECT q.max_queue_size, q.dedup_window, q.window_buffer, q.encryption_enabled,
                   (SELECT array_agg(p.id ORDER BY p.id)
                    FROM unnest(v_names) AS n(name)
                    CROSS JOIN LATERAL (SELECT p1.id FROM queen.log_partitions p1
                                        WHERE p1.queue_id = q.id AND p1.name = n.name
                                        LIMIT 1) p)
            INTO v_max_size, v_dedup, v_window, v_sealed, v_ids
            FROM queen.queues q WHERE q.id = v_qid;
        END IF;
        EXIT WHEN FOUND;
        v_qid := NULL;
    END LOOP;
    IF v_qid IS NULL THEN
        RAISE EXCEPTION 'queue "%" was dropped while being pushed to; retry', p_queue
            USING ERRCODE = '40001';
    END IF;

    -- Encryption at rest (src/engine/sealing.rs): a queue with
    -- encryption_enabled stores only sealed blobs (version byte 2), any
    -- other queue only plain ones. A push framed the other way writes
    -- nothing and answers one row, 'encrypt' or 'plain', and the engine
    -- frames it again: the queue's row, read under the queue key, decides,
    -- so no stale guess of a queenwire's stores plaintext in an encrypted
    -- queue. A push that read the row before an ALTER QUEUE committed is
    -- ordered before it, as for every other option.
    IF (CASE WHEN v_sealed THEN v_any_plain ELSE v_any_sealed END) THEN
        RETURN QUERY
        SELECT 0, CASE WHEN v_sealed THEN 'encrypt' ELSE 'plain' END,
               NULL::TEXT, NULL::BIGINT, NULL::UUID, NULL::BIGINT;
        RETURN;
    END IF;

    -- 2. Provision the partitions (name ascending), then lock them (id
    -- ascending). The FOR loop fetches, and so locks, in ORDER BY order.
    -- Only when one is missing: the INSERT statement fires the partition
    -- counter trigger (020) even when it inserts nothing.
    --
    -- Without a size limit or a transaction id to check, nothing after this
    -- can refuse the push, so a partition this call creates is born with its
    -- offsets allocated (last_offset, last_write_at): no lock, no UPDATE and
    -- no second version of the row, whose index entries and foreign-key
    -- re-check (the row is this transaction's) an UPDATE after the INSERT
    -- would cost. Nobody sees it before the commit. With a check to make, the
    -- partitions are created empty and allocated below, after the checks,
    -- so that a refused push leaves them empty.
    v_now := clock_timestamp();
    v_fast := v_max_size = 0 AND (NOT v_any_hash OR v_dedup = 0);
    IF COALESCE(cardinality(v_ids), 0) < cardinality(v_names) THEN
        IF v_fast THEN
            -- Each name's messages summed once (GROUP BY), not by a sum
            -- over every segment per name: with 2,000 new partitions in
            -- one call that was 612 of its 791 ms.
            WITH ins AS (
                INSERT INTO queen.log_partitions (queue_id, name, last_offset, last_write_at)
                SELECT v_qid, t.n, t.total - 1, v_now
                FROM (SELECT x.pn AS n, sum(x.c) AS total
                      FROM unnest(p_partitions, p_counts) AS x(pn, c)
                      GROUP BY x.pn) t
                -- A probe per name, not an anti-join over the queue's
                -- partitions (see the lookup above).
                LEFT JOIN LATERAL (SELECT p.id FROM queen.log_partitions p
                                   WHERE p.queue_id = v_qid AND p.name = t.n
                                   LIMIT 1) e ON true
                WHERE e.id IS NULL
                ORDER BY t.n COLLATE "C"
                ON CONFLICT (queue_id, name) DO NOTHING
                RETURNING id, name
            )
            SELECT COALESCE(array_agg(ins.id), '{}'), COALESCE(array_agg(ins.name), '{}')
            INTO v_new_ids, v_new_names
            FROM ins;
        ELSE
            INSERT INTO queen.log_partitions (queue_id, name)
            SELECT v_qid, n
            FROM unnest(v_names) n
            LEFT JOIN LATERAL (SELECT p.id FROM queen.log_partitions p
                               WHERE p.queue_id = v_qid AND p.name = n
                               LIMIT 1) e ON true
            WHERE e.id IS NULL
            ORDER BY n COLLATE "C"
            ON CONFLICT (queue_id, name) DO NOTHING;
        END IF;
        -- The partitions to allocate below: all but those born allocated
        -- (none when every name was new, the usual provisioning push).
        IF cardinality(v_new_ids) = cardinality(v_names) THEN
            v_ids := '{}';
        ELSE
            SELECT array_agg(p.id ORDER BY p.id) INTO v_ids
            FROM unnest(v_names) AS n(name)
            CROSS JOIN LATERAL (SELECT p1.id FROM queen.log_partitions p1
                                WHERE p1.queue_id = v_qid AND p1.name = n.name
                                LIMIT 1) p
            WHERE p.id <> ALL (v_new_ids);
        END IF;
    END IF;
    v_ids := COALESCE(v_ids, '{}');

    -- The common push: one partition, no size limit, no transaction id to
    -- check. The UPDATE that allocates the offsets takes the partition's
    -- row lock itself (FOR NO KEY UPDATE, as the lock below would: no key
    -- column changes) and there is no other partition to order it against,
    -- so no statement locks it first; a partition removed since its id was
    -- read above is not found (40001, as below). Several partitions are
    -- locked first, in id order: measured, an UPDATE each in id order
    -- instead (4 partitions) cost no less.
    IF v_fast AND cardinality(v_ids) = 0 THEN
        -- Every partition was created above.
        v_allocated := true;
    ELSIF v_fast AND cardinality(v_names) = 1 THEN
        -- last_write_at to the second: see step 4.
        UPDATE queen.log_partitions p
        SET last_offset = p.last_offset + v_total,
            last_write_at = CASE WHEN v_window = 0
                                  AND p.last_write_at > v_now - interval '1 second'
                                 THEN p.last_write_at ELSE v_now END
        WHERE p.id = v_ids[1]
        RETURNING ARRAY[p.id], ARRAY[p.name], ARRAY[p.last_offset - v_total]
        INTO v_pids, v_pnames, v_priors;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'a partition of queue "%" was removed while being pushed to; retry', p_queue
                USING ERRCODE = '40001';
        END IF;
        v_allocated := true;
    ELSE
        -- Locked in id order: the row locks are taken above the sort.
        SELECT COALESCE(array_agg(l.id ORDER BY l.id), '{}'),
               COALESCE(array_agg(l.name ORDER BY l.id), '{}')
        INTO v_pids, v_pnames
        FROM (SELECT p.id, p.name
              FROM queen.log_partitions p
              WHERE p.id = ANY (v_ids)
              ORDER BY p.id
              FOR NO KEY UPDATE) l;
        IF cardinality(v_pids) <> cardinality(v_ids) THEN
            RAISE EXCEPTION 'a partition of queue "%" was removed while being pushed to; retry', p_queue
                USING ERRCODE = '40001';
        END IF;
    END IF;

    -- max_queue_size: the queue row lock above makes this count stable.
    IF v_max_size > 0 THEN
        v_pending := queen.log_queue_pending_v1(v_qid, p_tenant);
        IF v_pending + v_total > v_max_size THEN
            RAISE EXCEPTION 'queue "%" is full: % pending + % new > max_queue_size %',
                p_queue, v_pending, v_total, v_max_size
                USING ERRCODE = '54000';
        END IF;
    END IF;

    -- 3. Dedup (dedup_window = 0 turns it off entirely), under the partition
    -- locks. A stored message within the window makes an input message a
    -- duplicate; so does an earlier message of this call in the same
    -- partition with the same hash.
    -- (Only with a transaction id to check: a push without one has
    -- already allocated its offsets above.)
    IF v_any_hash AND v_dedup > 0 THEN
        WITH seg AS (
            SELECT s.pname, s.cnt, s.ord,
                   (sum(s.cnt) OVER (ORDER BY s.ord) - s.cnt)::INTEGER AS first_idx
            FROM unnest(p_partitions, p_counts) WITH ORDINALITY AS s(pname, cnt, ord)
        ), msg AS (
            SELECT seg.pname, (seg.first_idx + g)::INTEGER AS idx,
                   p_txn_hashes[seg.first_idx + g + 1] AS h,
                   p_message_ids[seg.first_idx + g + 1] AS mid
            FROM seg, generate_series(0, seg.cnt - 1) AS g
        ), firsts AS (
            SELECT DISTINCT ON (m.pname, m.h) m.pname, m.h, m.idx, m.mid
            FROM msg m
            WHERE m.h IS NOT NULL
            ORDER BY m.pname, m.h, m.idx
        ), stored AS (
            SELECT pp.pname, d.txn_hash, d.original_offset, d.original_message_id
            FROM unnest(v_pids, v_pnames) AS pp(pid, pname)
            CROSS JOIN LATERAL queen.log_dedup_probe_v1(
                pp.pid,
                (SELECT array_agg(m.h) FROM msg m WHERE m.pname = pp.pname AND m.h IS NOT NULL),
                v_dedup, p_tenant) d
        ), dups AS (
            SELECT m.idx, s.original_offset AS off, s.original_message_id AS mid
            FROM msg m
            JOIN stored s ON s.pname = m.pname AND s.txn_hash = m.h
            UNION ALL
            SELECT m.idx, NULL::BIGINT, f.mid
            FROM msg m
            JOIN firsts f ON f.pname = m.pname AND f.h = m.h AND f.idx < m.idx
            WHERE NOT EXISTS (SELECT 1 FROM stored s WHERE s.pname = m.pname AND s.txn_hash = m.h)
        )
        SELECT COALESCE(array_agg(d.idx ORDER BY d.idx), '{}'),
               COALESCE(array_agg(d.off ORDER BY d.idx), '{}'),
               COALESCE(array_agg(d.mid ORDER BY d.idx), '{}')
        INTO v_dup_idx, v_dup_off, v_dup_id
        FROM dups d;
    END IF;

    IF cardinality(v_dup_idx) > 0 THEN
        RETURN QUERY
        WITH seg AS (
            SELECT s.pname, s.cnt, s.ord,
                   (sum(s.cnt) OVER (ORDER BY s.ord) - s.cnt)::INTEGER AS first_idx
            FROM unnest(p_partitions, p_counts) WITH ORDINALITY AS s(pname, cnt, ord)
        )
        SELECT (seg.first_idx + g)::INTEGER,
               CASE WHEN d.idx IS NULL THEN 'retry' ELSE 'duplicate' END,
               seg.pname,
               d.off,
               CASE WHEN d.idx IS NULL THEN p_message_ids[seg.first_idx + g + 1] ELSE d.mid END,
               NULL::BIGINT
        FROM seg
        CROSS JOIN generate_series(0, seg.cnt - 1) AS g
        LEFT JOIN unnest(v_dup_idx, v_dup_off, v_dup_id) AS d(idx, off, mid)
               ON d.idx = seg.first_idx + g
        ORDER BY 1;
        RETURN;
    END IF;

    -- 4. Write every segment: the partitions' UPDATE allocates the offsets
    -- (each partition advanced by all its segments; done above for a
    -- single partition), then one statement inserts into log_segments and
    -- log_txns and returns the rows (log_traces after it), each segment finding
    -- its partition's id and prior last offset by its name's position in
    -- the arrays (found by one hash join first when the call names more
    -- than 32 partitions). Within a partition, segments take offsets
    -- in input order (the running sum of the counts before them).
    --
    -- last_write_at is indexed (the hot list's reseed window, 001), so an
    -- UPDATE that changes it is never HOT: each one adds a heap version
    -- off the page and an entry to every index of the table, and a
    -- partition pushed to a few hundred times a second bloats until
    -- autovacuum comes (measured: 32,388 updates, 500 HOT; push p50 1.2 ->
    -- 4 ms within two minutes). So it is stamped to the second: kept while
    -- less than a second old, and the UPDATE that leaves it is HOT. Readers
    -- allow for it: the reseed window reaches back a second more (hotlist
    -- SKEW_MARGIN), cleanup ages are days. A queue with a window_buffer is
    -- stamped exactly, since its POP holds a partition until that long
    -- after its last write.
    --
    -- Measured against two other shapes, this one is the cheapest: one
    -- statement whose CTEs join the input to the UPDATE by hash joins, and
    -- separate statements for the guard, each check, the queue, its key,
    -- the partition count and the lock.
    IF NOT v_allocated THEN
        -- Each partition's messages: a sum over the segments per name is
        -- the cheapest for a few partitions and quadratic for many (one
        -- call into 2,000 existing partitions spent 572 of its 649 ms
        -- there), where one GROUP BY and hash join sum them all first.
        IF cardinality(v_pnames) > 32 THEN
            SELECT array_agg(t.total ORDER BY pp.k) INTO v_totals
            FROM unnest(v_pnames) WITH ORDINALITY AS pp(pname, k)
            JOIN (SELECT x.n, sum(x.c) AS total
                  FROM unnest(p_partitions, p_counts) AS x(n, c)
                  GROUP BY x.n) t ON t.n = pp.pname;
        END IF;
        WITH t AS (
            SELECT pp.pid, pp.pname,
                   COALESCE(v_totals[pp.k::INTEGER],
                            (SELECT sum(x.c) FROM unnest(p_partitions, p_counts) AS x(n, c)
                             WHERE x.n = pp.pname)) AS total
            FROM unnest(v_pids, v_pnames) WITH ORDINALITY AS pp(pid, pname, k)
        ), u AS (
            UPDATE queen.log_partitions p
            SET last_offset = p.last_offset + t.total,
                last_write_at = CASE WHEN v_window = 0
                                      AND p.last_write_at > v_now - interval '1 second'
                                     THEN p.last_write_at ELSE v_now END
            FROM t
            -- The ANY keeps the partitions an index probe of their ids
            -- whatever the statistics the generic plan was built on (the
            -- join alone was hashed over every partition once the table
            -- had grown past them).
            WHERE p.id = t.pid AND p.id = ANY (v_pids)
            RETURNING p.id AS pid, t.pname, p.last_offset - t.total AS prior
        )
        SELECT COALESCE(array_agg(u.pid), '{}'), COALESCE(array_agg(u.pname), '{}'),
               COALESCE(array_agg(u.prior), '{}')
        INTO v_pids, v_pnames, v_priors
        FROM u;
    END IF;
    -- With the partitions born allocated: their offsets start at 0.
    IF cardinality(v_new_ids) > 0 THEN
        v_pids := v_pids || v_new_ids;
        v_pnames := v_pnames || v_new_names;
        v_priors := v_priors || array_fill(-1::BIGINT, ARRAY[cardinality(v_new_ids)]);
    END IF;
    IF v_segments = 1 THEN
        -- One segment (a lone push, or fused statements that all went to
        -- one partition): its two rows by one plain statement and its
        -- answer by one series, without the numbering statement below
        -- (its window sums and unnests were 0.17-0.26 ms of a lone
        -- one-message call of about 1 ms under auto_explain). The partition is v_pids[1], its prior
        -- last offset v_priors[1], the messages all of the arrays.
        WITH segs AS (
            INSERT INTO queen.log_segments
                (partition_id, base_offset, min_created_at, max_created_at, message_count,
                 byte_size, blob)
            VALUES (v_pids[1], v_priors[1] + 1, p_min_created_at[1], p_max_created_at[1],
                    p_counts[1], octet_length(p_blobs[1]), p_blobs[1])
        )
        INSERT INTO queen.log_txns (partition_id, base_offset, created_at, txn_hashes, message_ids)
        VALUES (v_pids[1], v_priors[1] + 1, v_now, CASE WHEN v_any_hash THEN p_txn_hashes END,
                p_message_ids);
        RETURN QUERY
        SELECT g::INTEGER, 'queued'::TEXT, p_partitions[1]::TEXT, v_priors[1] + 1 + g,
               p_message_ids[g + 1], v_pids[1]
        FROM generate_series(0, CASE WHEN p_per_segment THEN 0 ELSE p_counts[1] - 1 END) AS g;
    ELSE
        -- Each segment's partition is found by its name's place in v_pnames:
        -- array_position, a scan of the names per segment, is the cheapest
        -- way for a few partitions and quadratic for many (one call into
        -- 2,000 partitions), where one hash join finds them all first.
        IF cardinality(v_pnames) > 32 THEN
            SELECT array_agg(pp.k::INTEGER ORDER BY s.ord) INTO v_seg_k
            FROM unnest(p_partitions) WITH ORDINALITY AS s(pname, ord)
            JOIN unnest(v_pnames) WITH ORDINALITY AS pp(pname, k) ON pp.pname = s.pname;
        END IF;
        RETURN QUERY
        WITH seg AS (
            SELECT s.pname, s.cnt, s.blob, s.min_at, s.max_at,
                   (sum(s.cnt) OVER (ORDER BY s.ord) - s.cnt)::INTEGER AS first_idx,
                   COALESCE(v_seg_k[s.ord::INTEGER], array_position(v_pnames, s.pname)) AS k,
                   sum(s.cnt) OVER (PARTITION BY s.pname ORDER BY s.ord) - s.cnt AS earlier
            FROM unnest(p_partitions, p_counts, p_blobs, p_min_created_at, p_max_created_at)
                 WITH ORDINALITY AS s(pname, cnt, blob, min_at, max_at, ord)
        ), placed AS (
            SELECT seg.pname, seg.cnt, seg.blob, seg.min_at, seg.max_at, seg.first_idx,
                   v_pids[seg.k] AS pid, v_priors[seg.k] + seg.earlier + 1 AS base
            FROM seg
        ), segs AS (
            INSERT INTO queen.log_segments
                (partition_id, base_offset, min_created_at, max_created_at, message_count, byte_size, blob)
            SELECT pl.pid, pl.base, pl.min_at, pl.max_at, pl.cnt, octet_length(pl.blob), pl.blob
            FROM placed pl
        ), txns AS (
            INSERT INTO queen.log_txns (partition_id, base_offset, created_at, txn_hashes, message_ids)
            SELECT pl.pid, pl.base, v_now,
                   CASE WHEN v_any_hash
                             AND cardinality(array_remove(
                                     p_txn_hashes[pl.first_idx + 1 : pl.first_idx + pl.cnt], NULL)) > 0
                        THEN p_txn_hashes[pl.first_idx + 1 : pl.first_idx + pl.cnt] END,
                   p_message_ids[pl.first_idx + 1 : pl.first_idx + pl.cnt]
            FROM placed pl
        )
        SELECT (pl.first_idx + g)::INTEGER, 'queued'::TEXT, pl.pname::TEXT,
               pl.base + g, p_message_ids[pl.first_idx + g + 1], pl.pid
        FROM placed pl
        CROSS JOIN generate_series(0, CASE WHEN p_per_segment THEN 0 ELSE pl.cnt - 1 END) AS g
        ORDER BY 1;
    END IF;
    -- Traces in their own statement, run only when a message has one: a
    -- statement's plan is set up whole, its filtered-out parts too.
    IF p_trace_ids IS NOT NULL THEN
        INSERT INTO queen.log_traces
            (tenant_id, trace_id, message_id, partition_id, message_offset, base_offset, created_at)
        SELECT p_tenant, p_trace_ids[pl.first_idx + g + 1], p_message_ids[pl.first_idx + g + 1],
               v_pids[pl.k], v_priors[pl.k] + pl.earlier + 1 + g, v_priors[pl.k] + pl.earlier + 1, pl.min_at
        FROM (SELECT s.min_at, s.cnt,
                     (sum(s.cnt) OVER (ORDER BY s.ord) - s.cnt)::INTEGER AS first_idx,
                     COALESCE(v_seg_k[s.ord::INTEGER], array_position(v_pnames, s.pname)) AS k,
                     sum(s.cnt) OVER (PARTITION BY s.pname ORDER BY s.ord) - s.cnt AS earlier
              FROM unnest(p_partitions, p_counts, p_min_created_at) WITH ORDINALITY AS s(pname, cnt, min_at, ord)) pl
        CROSS JOIN generate_series(0, pl.cnt - 1) AS g
        WHERE p_trace_ids[pl.first_idx + g + 1] IS NOT NULL;
    END IF;
END
$$;

-- The fused pushes of several queues of one tenant in one call and one
-- commit (src/engine/fusion/push.rs): the segments of each queue are
-- contiguous in the arrays (p_queues names each segment's queue), the
-- message arrays run over every segment in order, and each queue's run is
-- written by log_push_v1, so every rule of a push (provisioning, size
-- limit, dedup, encryption, traces, a queue dropped meanwhile) is that
-- function's. msg_index counts over the whole call; a queue's 'encrypt' or
-- 'plain' row (nothing of that queue written) carries the index of its
-- first message, so the caller knows which queue to frame again; its
-- duplicate and retry rows likewise stand for that queue alone, whose
-- other messages are then not written either. Answers are per segment, as
-- log_push_v1's with p_per_segment.
--
-- Locks: every named queue's key SHARED first, ascending (advisory keys
-- before any row, as the global order says; log_push_v1 takes each again,
-- which adds nothing); then each queue's rows as log_push_v1 takes them,
-- queue after queue in the order of the arrays (the engine sends them by
-- name, so two such calls take them in one order). A queue created by
-- this call takes its key after the earlier queues' rows; the only holder
-- of a key in EXCLUSIVE mode that waits for rows (DROP QUEUE, the tenant
-- purge) waits for that queue's rows alone, and none exist yet.
--
-- lock_timeout: the engine fuses every queue of a tenant into one write at
-- a time, so a wait here (a client's transaction block holding a
-- partition it pushed to, an ALTER or DROP QUEUE in progress) would hold
-- up the tenant's other queues. It waits at most 100 ms, then fails with
-- 55P03 and the engine writes those pushes again queue by queue, each
-- queue on its own, where a wait holds up that queue alone.
CREATE OR REPLACE FUNCTION queen.log_push_many_v1(
    p_queues         TEXT[],
    p_partitions     TEXT[],
    p_counts         INTEGER[],
    p_blobs          BYTEA[],
    p_txn_hashes     BIGINT[],
    p_message_ids    UUID[],
    p_min_created_at TIMESTAMPTZ[],
    p_max_created_at TIMESTAMPTZ[],
    p_trace_ids      TEXT[] DEFAULT NULL,
    p_tenant         UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (msg_index INTEGER, status TEXT, "offset" BIGINT, message_id UUID, partition_id BIGINT)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
-- Index reads only, whatever the statistics (docs/internals/storage.md).
SET enable_seqscan = off
SET lock_timeout = '100ms'
AS $$
#variable_conflict use_column
DECLARE
    v_segments INTEGER := COALESCE(cardinality(p_partitions), 0);
    v_from     INTEGER := 1;
    v_to       INTEGER;
    v_before   INTEGER := 0;
    v_n        INTEGER;
    v_any_hash BOOLEAN := COALESCE(cardinality(array_remove(p_txn_hashes, NULL)) > 0, false);
    v_qids     UUID[];
    v_fast     BOOLEAN;
    v_pids     BIGINT[];
    v_seg_qids UUID[];
    v_existing INTEGER;
    v_missing  INTEGER;
    v_new_ids  BIGINT[] := '{}';
    v_windows  INTEGER[];
    v_upids    BIGINT[];
    v_priors   BIGINT[];
    v_now      TIMESTAMPTZ;
BEGIN
    IF cardinality(p_queues) IS DISTINCT FROM v_segments OR v_segments = 0
       OR cardinality(p_counts) IS DISTINCT FROM v_segments
       OR array_position(p_queues, NULL) IS NOT NULL
       OR array_position(p_counts, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'log_push_many_v1: queues, partitions and counts must be parallel arrays of at least one non-null entry'
            USING ERRCODE = '22023';
    END IF;
    IF session_user <> current_user THEN
        PERFORM queen.tenant_guard_v1(p_tenant);
    END IF;
    -- The queues' keys, ascending (a subquery's ORDER BY is kept under
    -- the aggregate that takes them).
    -- Each name probed by (tenant, name): as name = ANY, the generic plan
    -- read every queue of the tenant and filtered them (20,002 rows a call
    -- with 20,000 queues).
    SELECT array_agg(k.id), count(pg_advisory_xact_lock_shared(k.key)::TEXT)
    INTO v_qids, v_n
    FROM (SELECT q.id, queen.log_queue_lock_key_v1(q.id) AS key
          FROM (SELECT DISTINCT n.name FROM unnest(p_queues) AS n(name)) n
          CROSS JOIN LATERAL (SELECT q1.id FROM queen.queues q1
                              WHERE q1.tenant_id = p_tenant AND q1.name = n.name
                              LIMIT 1) q
          ORDER BY 2) k;

    -- The common fused push, set-based: every queue existed when its key
    -- was taken and still does, none has a size limit or a transaction id
    -- to check, each segment's blob is sealed exactly when its queue is
    -- encrypted and no message has a trace id.
    -- Then the whole call is four to six statements, however many queues
    -- it names, where a queue's log_push_v1 is five of its own (measured:
    -- a call of 7 one-message queues spent 0.11 ms in each of them and
    -- 0.2 ms around them; set-based, 0.54 ms for 8 queues in all).
    -- Anything else takes the loop below.
    IF p_trace_ids IS NULL THEN
        SELECT bool_and(COALESCE(
                   q.id = ANY (v_qids) AND q.max_queue_size = 0
                   AND (NOT v_any_hash OR q.dedup_window = 0)
                   AND s.c >= 1 AND s.lo IS NOT NULL AND s.hi IS NOT NULL AND s.lo <= s.hi
                   AND q.encryption_enabled = (CASE WHEN octet_length(s.b) > 0
                                                    THEN get_byte(s.b, 0) = 2 ELSE false END),
                   false)),
               array_agg(p.id ORDER BY s.ord), array_agg(q.id ORDER BY s.ord),
               array_agg(q.window_buffer ORDER BY s.ord), sum(s.c),
               count(DISTINCT p.id), count(*) FILTER (WHERE p.id IS NULL)
        INTO v_fast, v_pids, v_seg_qids, v_windows, v_n, v_existing, v_missing
        FROM unnest(p_queues, p_partitions, p_counts, p_blobs, p_min_created_at, p_max_created_at)
             WITH ORDINALITY AS s(qn, pn, c, b, lo, hi, ord)
        -- The queues keyed above, read again by id (the ANY: as a join on
        -- the tenant and the name, the generic plan hashed every queue of
        -- the tenant on each call); a name not among them has no queue.
        LEFT JOIN queen.queues q ON q.id = ANY (v_qids) AND q.name = s.qn
        -- LATERAL with LIMIT, so not flattened into a join: a lookup by
        -- the unique key per segment, whatever the statistics. A join was
        -- hashed over every partition of the table on each call under the
        -- generic plan a fresh cluster's empty table gave (measured:
        -- provisioning fell from 2,100 to 460 partitions/s over 50,000
        -- partitions, until autoanalyze).
        LEFT JOIN LATERAL (SELECT p.id FROM queen.log_partitions p
                           WHERE p.queue_id = q.id AND p.name = s.pn LIMIT 1) p ON true;
        v_fast := v_fast AND cardinality(p_blobs) = v_segments
                  AND cardinality(p_min_created_at) = v_segments
                  AND cardinality(p_max_created_at) = v_segments
                  AND cardinality(p_message_ids) = v_n
                  AND array_position(p_message_ids, NULL) IS NULL
                  AND (p_txn_hashes IS NULL OR cardinality(p_txn_hashes) = v_n);
    END IF;
    IF v_fast THEN
        v_now := clock_timestamp();
        -- Missing partitions (by name, as log_push_v1 provisions): born
        -- with their offsets allocated, since nothing after this refuses
        -- the push. A name another push created meanwhile is found again
        -- and allocated below like any existing partition.
        IF v_missing > 0 THEN
            -- The inserted rows give the segments their partitions in the
            -- same statement; a name another transaction created meanwhile
            -- (the insert waited for it) is not among them and is read
            -- again.
            WITH ins AS (
                INSERT INTO queen.log_partitions (queue_id, name, last_offset, last_write_at)
                SELECT t.qid, t.pn, t.total - 1, v_now
                FROM (SELECT x.qid, x.pn, sum(x.c) AS total
                      FROM unnest(v_seg_qids, p_partitions, p_counts, v_pids) AS x(qid, pn, c, pid)
                      WHERE x.pid IS NULL
                      GROUP BY x.qid, x.pn) t
                ORDER BY t.qid, t.pn COLLATE "C"
                ON CONFLICT (queue_id, name) DO NOTHING
                RETURNING id, queue_id, name
            )
            SELECT COALESCE((SELECT array_agg(i.id) FROM ins i), '{}'),
                   array_agg(COALESCE(x.pid, n.id) ORDER BY x.ord),
                   count(*) FILTER (WHERE x.pid IS NULL AND n.id IS NULL)
            INTO v_new_ids, v_pids, v_missing
            FROM unnest(v_pids, v_seg_qids, p_partitions) WITH ORDINALITY AS x(pid, qid, pn, ord)
            LEFT JOIN ins n ON x.pid IS NULL AND n.queue_id = x.qid AND n.name = x.pn;
            IF v_missing > 0 THEN
                SELECT array_agg(COALESCE(x.pid, p.id) ORDER BY x.ord),
                       count(DISTINCT COALESCE(x.pid, p.id))
                           FILTER (WHERE COALESCE(x.pid, p.id) <> ALL (v_new_ids))
                INTO v_pids, v_existing
                FROM unnest(v_pids, v_seg_qids, p_partitions) WITH ORDINALITY AS x(pid, qid, pn, ord)
                LEFT JOIN LATERAL (SELECT p.id FROM queen.log_partitions p
                                   WHERE x.pid IS NULL AND p.queue_id = x.qid AND p.name = x.pn
                                   LIMIT 1) p ON true;
            END IF;
        END IF;
        -- Existing partitions locked by id, ascending (one partition: its
        -- UPDATE takes the lock).
        IF v_existing > 1 THEN
            PERFORM 1
            FROM (SELECT p.id FROM queen.log_partitions p
                  WHERE p.id = ANY (v_pids) AND p.id <> ALL (v_new_ids)
                  ORDER BY p.id FOR NO KEY UPDATE) l;
        END IF;
        -- Offsets allocated; last_write_at stamped to the second as in
        -- log_push_v1 (exactly with a window_buffer).
        IF v_existing > 0 THEN
            WITH t AS (
                SELECT x.pid, sum(x.c) AS total, max(x.w) AS w
                FROM unnest(v_pids, p_counts, v_windows) AS x(pid, c, w)
                WHERE x.pid <> ALL (v_new_ids)
                GROUP BY x.pid
            ), u AS (
                UPDATE queen.log_partitions p
                SET last_offset = p.last_offset + t.total,
                    last_write_at = CASE WHEN t.w = 0 AND p.last_write_at > v_now - interval '1 second'
                                         THEN p.last_write_at ELSE v_now END
                FROM t
                -- The ANY: an index probe of the ids whatever the
                -- statistics (see the lookup above).
                WHERE p.id = t.pid AND p.id = ANY (v_pids)
                RETURNING p.id AS pid, p.last_offset - t.total AS prior
            )
            SELECT array_agg(u.pid), array_agg(u.prior) INTO v_upids, v_priors FROM u;
        END IF;
        IF COALESCE(cardinality(v_upids), 0) <> v_existing THEN
            RAISE EXCEPTION 'a partition was removed while being pushed to; retry'
                USING ERRCODE = '40001';
        END IF;
        -- Partitions born here start at offset 0.
        v_upids := COALESCE(v_upids, '{}') || v_new_ids;
        v_priors := COALESCE(v_priors, '{}') || array_fill(-1::BIGINT, ARRAY[cardinality(v_new_ids)]);
        RETURN QUERY
        WITH seg AS (
            SELECT s.cnt, s.blob, s.min_at, s.max_at, v_pids[s.ord::INTEGER] AS pid,
                   (sum(s.cnt) OVER (ORDER BY s.ord) - s.cnt)::INTEGER AS first_idx,
                   sum(s.cnt) OVER (PARTITION BY v_pids[s.ord::INTEGER] ORDER BY s.ord) - s.cnt AS earlier
            FROM unnest(p_counts, p_blobs, p_min_created_at, p_max_created_at)
                 WITH ORDINALITY AS s(cnt, blob, min_at, max_at, ord)
        ), placed AS (
            SELECT seg.*, v_priors[array_position(v_upids, seg.pid)] + seg.earlier + 1 AS base
            FROM seg
        ), segs AS (
            INSERT INTO queen.log_segments
                (partition_id, base_offset, min_created_at, max_created_at, message_count, byte_size, blob)
            SELECT pl.pid, pl.base, pl.min_at, pl.max_at, pl.cnt, octet_length(pl.blob), pl.blob
            FROM placed pl
        ), txns AS (
            INSERT INTO queen.log_txns (partition_id, base_offset, created_at, txn_hashes, message_ids)
            SELECT pl.pid, pl.base, v_now,
                   CASE WHEN v_any_hash
                             AND cardinality(array_remove(
                                     p_txn_hashes[pl.first_idx + 1 : pl.first_idx + pl.cnt], NULL)) > 0
                        THEN p_txn_hashes[pl.first_idx + 1 : pl.first_idx + pl.cnt] END,
                   p_message_ids[pl.first_idx + 1 : pl.first_idx + pl.cnt]
            FROM placed pl
        )
        SELECT pl.first_idx, 'queued'::TEXT, pl.base, p_message_ids[pl.first_idx + 1], pl.pid
        FROM placed pl
        ORDER BY 1;
        RETURN;
    END IF;
    WHILE v_from <= v_segments LOOP
        v_to := v_from;
        v_n := p_counts[v_from];
        WHILE v_to < v_segments AND p_queues[v_to + 1] = p_queues[v_from] LOOP
            v_to := v_to + 1;
            v_n := v_n + p_counts[v_to];
        END LOOP;
        RETURN QUERY
        SELECT r.msg_index + v_before, r.status, r."offset", r.message_id, r.partition_id
        FROM queen.log_push_v1(
            p_queue => p_queues[v_from],
            p_partitions => p_partitions[v_from : v_to],
            p_counts => p_counts[v_from : v_to],
            p_blobs => p_blobs[v_from : v_to],
            p_txn_hashes => p_txn_hashes[v_before + 1 : v_before + v_n],
            p_message_ids => p_message_ids[v_before + 1 : v_before + v_n],
            p_min_created_at => p_min_created_at[v_from : v_to],
            p_max_created_at => p_max_created_at[v_from : v_to],
            p_trace_ids => p_trace_ids[v_before + 1 : v_before + v_n],
            p_tenant => p_tenant,
            p_per_segment => true) r;
        v_before := v_before + v_n;
        v_from := v_to + 1;
    END LOOP;
END
$$;

-- A fused push into partitions of one queue the engine has written to
-- before, named by the ids earlier pushes answered (the engine's cache,
-- src/engine/queues/placed.rs): the common write in a few statements, where
-- log_push_many_v1 finds each partition by name and checks the call with
-- aggregates over its arrays (measured on one backend: a one-segment call
-- 150-170 µs of CPU against 200-215, six segments 220-270 against
-- 290-320). Nothing is written, and one row with status 'stale' answers,
-- when the queue is not as the fast path needs it (gone, a size limit, a
-- dedup window with transaction ids, an encryption the blobs do not
-- match), a segment is empty or its times are reversed, or a partition is
-- not that id of that queue under that name any more: the engine then
-- forgets the queue's ids and writes the same statements by
-- log_push_many_v1. Rows otherwise as log_push_many_v1's, one per segment.
--
-- One segment (the common fused write: every statement into one
-- partition) is checked, locked and allocated by one plain UPDATE and
-- written by one INSERT of its segment and txn rows, without the
-- set-based statement's aggregates and window functions, whose executor
-- set-up was most of the call (measured on one backend without the
-- commit, eight messages: 0.20-0.24 ms a call against 0.25-0.30). Several
-- segments take the set-based statement: a loop of the same small
-- statements per segment was no faster there.
--
-- Locks: the queue's key SHARED, then the partitions FOR NO KEY UPDATE by
-- id ascending (one partition: its UPDATE takes the lock), as
-- log_push_many_v1 takes them; lock_timeout likewise.
CREATE OR REPLACE FUNCTION queen.log_push_ids_v1(
    p_queue          TEXT,
    p_partitions     TEXT[],
    p_partition_ids  BIGINT[],
    p_counts         INTEGER[],
    p_blobs          BYTEA[],
    p_txn_hashes     BIGINT[],
    p_message_ids    UUID[],
    p_min_created_at TIMESTAMPTZ[],
    p_max_created_at TIMESTAMPTZ[],
    p_tenant         UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (msg_index INTEGER, status TEXT, "offset" BIGINT, message_id UUID, partition_id BIGINT)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
-- Index reads only, whatever the statistics (docs/internals/storage.md).
SET enable_seqscan = off
SET lock_timeout = '100ms'
AS $$
#variable_conflict use_column
DECLARE
    v_segments INTEGER := COALESCE(cardinality(p_partition_ids), 0);
    v_any_hash BOOLEAN := COALESCE(cardinality(array_remove(p_txn_hashes, NULL)) > 0, false);
    v_qid      UUID;
    v_now      TIMESTAMPTZ;
    v_n        INTEGER;
    v_sealed   BOOLEAN;
    v_prior    BIGINT;
BEGIN
    -- The messages the counts say (one segment: no query for the sum).
    IF v_segments = 1 THEN
        v_n := p_counts[1];
    ELSE
        v_n := (SELECT sum(c) FROM unnest(p_counts) AS c);
    END IF;
    IF v_segments = 0
       OR cardinality(p_partitions) IS DISTINCT FROM v_segments
       OR cardinality(p_counts) IS DISTINCT FROM v_segments
       OR cardinality(p_blobs) IS DISTINCT FROM v_segments
       OR cardinality(p_min_created_at) IS DISTINCT FROM v_segments
       OR cardinality(p_max_created_at) IS DISTINCT FROM v_segments
       OR array_position(p_partition_ids, NULL) IS NOT NULL
       OR array_position(p_counts, NULL) IS NOT NULL
       OR array_position(p_message_ids, NULL) IS NOT NULL
       OR cardinality(p_message_ids) IS DISTINCT FROM v_n
       OR (p_txn_hashes IS NOT NULL AND cardinality(p_txn_hashes) IS DISTINCT FROM cardinality(p_message_ids)) THEN
        RAISE EXCEPTION 'log_push_ids_v1: partitions, ids, counts, blobs and times must be parallel arrays of at least one non-null entry, with a message id per message'
            USING ERRCODE = '22023';
    END IF;
    IF session_user <> current_user THEN
        PERFORM queen.tenant_guard_v1(p_tenant);
    END IF;
    SELECT q.id INTO v_qid FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF v_qid IS NULL THEN
        RETURN QUERY SELECT 0, 'stale'::TEXT, NULL::BIGINT, NULL::UUID, NULL::BIGINT;
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(v_qid));
    v_now := clock_timestamp();
    IF v_segments = 1 THEN
        v_sealed := CASE WHEN octet_length(p_blobs[1]) > 0 THEN get_byte(p_blobs[1], 0) = 2 ELSE false END;
        -- The queue read again after the key (an ALTER QUEUE that committed
        -- while it was awaited is seen), the partition checked, locked and
        -- allocated; last_write_at stamped as log_push_v1 does.
        UPDATE queen.log_partitions p
        SET last_offset = p.last_offset + p_counts[1],
            last_write_at = CASE WHEN q.window_buffer = 0 AND p.last_write_at > v_now - interval '1 second'
                                 THEN p.last_write_at ELSE v_now END
        FROM queen.queues q
        WHERE p.id = p_partition_ids[1] AND p.queue_id = v_qid AND p.name = p_partitions[1]
          AND p_counts[1] >= 1 AND p_min_created_at[1] <= p_max_created_at[1]
          AND q.id = v_qid AND q.max_queue_size = 0 AND (NOT v_any_hash OR q.dedup_window = 0)
          AND q.encryption_enabled = v_sealed
        RETURNING p.last_offset - p_counts[1] INTO v_prior;
        IF v_prior IS NULL THEN
            RETURN QUERY SELECT 0, 'stale'::TEXT, NULL::BIGINT, NULL::UUID, NULL::BIGINT;
            RETURN;
        END IF;
        WITH seg AS (
            INSERT INTO queen.log_segments
                (partition_id, base_offset, min_created_at, max_created_at, message_count, byte_size, blob)
            VALUES (p_partition_ids[1], v_prior + 1, p_min_created_at[1], p_max_created_at[1],
                    p_counts[1], octet_length(p_blobs[1]), p_blobs[1])
        )
        INSERT INTO queen.log_txns (partition_id, base_offset, created_at, txn_hashes, message_ids)
        VALUES (p_partition_ids[1], v_prior + 1, v_now,
                CASE WHEN v_any_hash THEN p_txn_hashes END, p_message_ids);
        -- The row by assignment: no statement to run for it.
        msg_index := 0;
        status := 'queued';
        "offset" := v_prior + 1;
        message_id := p_message_ids[1];
        partition_id := p_partition_ids[1];
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT (p_partition_ids[1] = ALL (p_partition_ids)) THEN
        PERFORM 1
        FROM (SELECT p.id FROM queen.log_partitions p
              WHERE p.id = ANY (p_partition_ids)
              ORDER BY p.id FOR NO KEY UPDATE) l;
    END IF;
    -- Checked, allocated and written in one statement (read after the key:
    -- an ALTER QUEUE that committed meanwhile is seen); a check that fails
    -- writes nothing. last_write_at stamped as log_push_v1 does. Its
    -- inserts are log_push_many_v1's, written again rather than shared: a
    -- helper function would add the call this function exists to save.
    RETURN QUERY
    WITH q AS (
        SELECT q.window_buffer AS w
        FROM queen.queues q
        WHERE q.id = v_qid AND q.max_queue_size = 0
          AND (NOT v_any_hash OR q.dedup_window = 0)
          AND NOT EXISTS (
              SELECT 1
              FROM unnest(p_partitions, p_partition_ids, p_counts, p_blobs, p_min_created_at, p_max_created_at)
                   AS s(pn, pid, c, b, lo, hi)
              LEFT JOIN queen.log_partitions p ON p.id = s.pid
              WHERE NOT COALESCE(
                  p.queue_id = v_qid AND p.name = s.pn
                  AND s.c >= 1 AND s.lo <= s.hi
                  AND q.encryption_enabled = (CASE WHEN octet_length(s.b) > 0
                                                   THEN get_byte(s.b, 0) = 2 ELSE false END),
                  false))
    ), s AS (
        SELECT s.pid, s.cnt, s.blob, s.min_at, s.max_at,
               (sum(s.cnt) OVER (ORDER BY s.ord) - s.cnt)::INTEGER AS first_idx,
               sum(s.cnt) OVER (PARTITION BY s.pid ORDER BY s.ord) - s.cnt AS earlier
        FROM unnest(p_partition_ids, p_counts, p_blobs, p_min_created_at, p_max_created_at)
             WITH ORDINALITY AS s(pid, cnt, blob, min_at, max_at, ord)
    ), t AS (
        SELECT s.pid, sum(s.cnt) AS total, min(q.w) AS w
        FROM s CROSS JOIN q
        GROUP BY s.pid
    ), u AS (
        UPDATE queen.log_partitions p
        SET last_offset = p.last_offset + t.total,
            last_write_at = CASE WHEN t.w = 0 AND p.last_write_at > v_now - interval '1 second'
                                 THEN p.last_write_at ELSE v_now END
        FROM t
        -- The ANY: an index probe of the ids whatever the statistics.
        WHERE p.id = t.pid AND p.id = ANY (p_partition_ids)
        RETURNING p.id AS pid, p.last_offset - t.total AS prior
    ), placed AS (
        SELECT s.*, u.prior + s.earlier + 1 AS base
        FROM s JOIN u ON u.pid = s.pid
    ), segs AS (
        INSERT INTO queen.log_segments
            (partition_id, base_offset, min_created_at, max_created_at, message_count, byte_size, blob)
        SELECT pl.pid, pl.base, pl.min_at, pl.max_at, pl.cnt, octet_length(pl.blob), pl.blob
        FROM placed pl
    ), txns AS (
        INSERT INTO queen.log_txns (partition_id, base_offset, created_at, txn_hashes, message_ids)
        SELECT pl.pid, pl.base, v_now,
               CASE WHEN v_any_hash
                         AND cardinality(array_remove(
                                 p_txn_hashes[pl.first_idx + 1 : pl.first_idx + pl.cnt], NULL)) > 0
                    THEN p_txn_hashes[pl.first_idx + 1 : pl.first_idx + pl.cnt] END,
               p_message_ids[pl.first_idx + 1 : pl.first_idx + pl.cnt]
        FROM placed pl
    )
    SELECT pl.first_idx, 'queued'::TEXT, pl.base, p_message_ids[pl.first_idx + 1], pl.pid
    FROM placed pl
    ORDER BY 1;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n = 0 THEN
        RETURN QUERY SELECT 0, 'stale'::TEXT, NULL::BIGINT, NULL::UUID, NULL::BIGINT;
    ELSIF v_n <> v_segments THEN
        -- A partition removed between its check and its update (a single
        -- partition is not locked ahead).
        RAISE EXCEPTION 'a partition was removed while being pushed to; retry'
            USING ERRCODE = '40001';
    END IF;
END
$$;
