-- 004_log_pop: the read path: log_pop_v2 (the pop, over the whole queue or
-- over the engine's hot-list candidates), log_pop_v1 (the same pop over the
-- whole queue, its original signature kept for direct SQL callers) and
-- log_hotlist_seed_v1 (what the engine seeds its hot list from; see
-- docs/internals/hotlist.md), and log_namespace_queues_v2 (the queues of a
-- wildcard POP FROM NAMESPACE, higher priority first).
--
-- log_pop_v1 changes shape only by DROP-and-CREATE: its OUT row type is part
-- of the signature and CREATE OR REPLACE refuses a return-type change, which
-- would brick the boot re-apply. The DROP runs only when the catalog's
-- signature differs from the one below, so an ordinary boot keeps the
-- function (same OID, no window in which concurrent pops of other brokers
-- find it missing) and the re-apply changes nothing in the catalog.
DO $$
DECLARE
    v_fn REGPROCEDURE := to_regprocedure(
        'queen.log_pop_v1(text, text, text, integer, integer, bigint, text, timestamptz, boolean, uuid)');
BEGIN
    IF v_fn IS NOT NULL AND (
        pg_get_function_result(v_fn) <>
            'TABLE(partition_id bigint, partition_name text, lease_token uuid, '
            'lease_expires_at timestamp with time zone, retry_count integer, '
            'from_offset bigint, to_offset bigint, base_offset bigint, blob bytea)'
        OR pg_get_function_arguments(v_fn) <>
            'p_queue text, p_partition text DEFAULT NULL::text, '
            'p_group text DEFAULT ''__QUEUE_MODE__''::text, p_limit integer DEFAULT 1, '
            'p_max_partitions integer DEFAULT 1, p_lease_ms bigint DEFAULT NULL::bigint, '
            'p_subscribe text DEFAULT ''beginning''::text, '
            'p_subscribe_at timestamp with time zone DEFAULT NULL::timestamp with time zone, '
            'p_auto_ack boolean DEFAULT false, '
            'p_tenant uuid DEFAULT ''00000000-0000-0000-0000-000000000001''::uuid')
    THEN
        EXECUTE format('DROP FUNCTION %s', v_fn);
    END IF;
END
$$;

-- log_pop_v2 took p_partition_limit as its twelfth argument (a trailing
-- default, so callers that name their arguments or pass eleven still
-- resolve). Its eleven-argument predecessor is dropped, once, before the
-- CREATE below: both at once would make every eleven-argument call
-- ambiguous.
DROP FUNCTION IF EXISTS queen.log_pop_v2(text, text, text, integer, integer, bigint, text,
                                         timestamptz, boolean, uuid, bigint[]);
-- Then p_create as its thirteenth, the same way.
DROP FUNCTION IF EXISTS queen.log_pop_v2(text, text, text, integer, integer, bigint, text,
                                         timestamptz, boolean, uuid, bigint[], integer);

-- log_pop_v2 claims up to p_max_partitions partitions of a queue (or the one
-- named, or among p_candidates, partition ids) for
-- a consumer group and returns at most p_limit messages in total, and at
-- most p_partition_limit of one partition when that is given (the engine's
-- fused POPs: several sessions' POPs in one call, one claimed partition
-- each), oldest first per partition: one row per segment overlapping the
-- claimed range
-- [from_offset, to_offset] of each partition, in claim order then offset
-- order; the engine decodes blob and keeps offsets from_offset..to_offset.
-- lease_token and lease_expires_at are per partition (NULL with auto ack);
-- retry_count is the failures so far of the range's first message. Those
-- rows have state 'claimed'.
--
-- p_candidates (the engine's hot list): when not NULL, only these partition
-- ids are considered, each by its primary key, so the pop's cost does not
-- depend on how many partitions the queue has. The database still decides
-- (leases, SKIP LOCKED, try-locks): a stale candidate costs a look, never a
-- wrong delivery. Every candidate judged is reported in one row without
-- segment columns: 'empty' (nothing pending for the group, or not a
-- partition of this queue), 'leased' / 'blocked' / 'window' / 'delayed'
-- (pending, but not before retry_at), 'locked' (another pop holds it right
-- now). Those come first; candidates not reached once p_max_partitions
-- partitions are claimed or p_limit messages taken are not reported. A
-- claimed candidate whose claim reached the partition's last offset (as the
-- candidate query saw it) is followed by one more row without segment
-- columns, 'drained': nothing was left for the group beyond that claim, so
-- the engine's ring need not look at it again until something is written
-- (a push after that snapshot wakes the ring, which reseeds).
-- Without candidates no such rows are returned, exactly as log_pop_v1.
--
-- Behaviour:
--   * queue missing: no rows. With a named group the queue row and the
--     group's metadata row are created first (subscribe-before-first-push is
--     legitimate and the metadata row's foreign key needs the queue);
--     queue mode creates nothing;
--   * the group's subscription (p_subscribe, p_subscribe_at) is recorded at
--     its first sight and ignored afterwards;
--   * per (partition, group) one lease at a time; a partition whose lease is
--     live, or that is blocked by a retry delay, is not a candidate;
--   * fairness: candidates are served least recently claimed first (by this
--     group), new partitions first: a rotation equivalent to resuming after
--     the last partition served, so with P busy partitions each is served
--     within about P claims, and it needs no shared rotation row that every
--     pop would have to write;
--   * a lease that expired unacknowledged is settled when its partition is
--     next claimed: a failure of its first unacked message (retry_count + 1;
--     past retry_limit that message is dead-lettered or, without a DLQ,
--     skipped and counted, and the cursor moves past it). No retry_delay is
--     added: the lease time already elapsed;
--   * window_buffer: a partition is a candidate only once its last write is
--     that old. delayed_processing: a segment is delivered only once its
--     newest message is that old, and nothing after it before it (segment
--     granularity: never early, never out of order);
--   * auto ack: the cursor moves to to_offset at delivery; no lease.
--
-- Locks: a pop never waits on a lock, with one exception: creating a
-- missing queue row waits for a concurrent uncommitted creator of the same
-- queue while the pop holds nothing. Everything else is a try-lock or SKIP
-- LOCKED, so a pop is never an edge of the wait-for graph and the order
-- among its own locks cannot close a cycle. In the order taken:
--   1. advisory: the queue key SHARED, try (a pop during a DROP QUEUE
--      returns nothing; holding it also keeps a deleter away from the
--      partitions while a foreign-key re-check could lock them);
--   2. first sight of the group: its advisory key (try), the queue row FOR
--      KEY SHARE SKIP LOCKED (the insert's foreign key), then the leaf
--      consumer_groups_metadata insert;
--   3. per candidate partition, in fairness order: on first sight the
--      group's consumer_groups_metadata row FOR KEY SHARE SKIP LOCKED (once
--      per pop; a DROP GROUP in flight holds it), the (partition, group)
--      advisory key (try) and the partition row FOR KEY SHARE SKIP LOCKED
--      (the consumer-row insert's foreign key; a push's FOR NO KEY UPDATE
--      does not conflict); then the log_consumers row FOR UPDATE SKIP
--      LOCKED;
--   4. leaf log_dlq insert (expired lease past the retry limit).
CREATE OR REPLACE FUNCTION queen.log_pop_v2(
    p_queue          TEXT,
    p_partition      TEXT DEFAULT NULL,
    p_group          TEXT DEFAULT '__QUEUE_MODE__',
    p_limit          INTEGER DEFAULT 1,
    p_max_partitions INTEGER DEFAULT 1,
    p_lease_ms       BIGINT DEFAULT NULL,
    p_subscribe      TEXT DEFAULT 'beginning',
    p_subscribe_at   TIMESTAMPTZ DEFAULT NULL,
    p_auto_ack       BOOLEAN DEFAULT false,
    p_tenant         UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_candidates     BIGINT[] DEFAULT NULL,
    p_partition_limit INTEGER DEFAULT NULL,
    -- Whether a named group's POP of a queue that does not exist makes it
    -- (false: a wildcard POP's, whose queue was listed in its namespace
    -- and dropped since; making it again would bring it back outside).
    p_create         BOOLEAN DEFAULT true
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
-- Generic plans: with custom ones the candidate query and the claim were
-- planned again on every call (0.2 ms and 0.13 ms per POP LIMIT 1 at 1,000
-- partitions); every statement here is written so that its plan does not
-- depend on the values (candidates probed by id, LIMITs on every range
-- read).
SET plan_cache_mode = force_generic_plan
-- Index reads only, whatever the statistics (docs/internals/storage.md).
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_group       TEXT := COALESCE(p_group, '__QUEUE_MODE__');
    v_mode        TEXT := COALESCE(p_subscribe, 'beginning');
    -- clock_timestamp, not now(): inside a client transaction block now() is
    -- the block's start, which would misjudge lease expiry.
    v_now         TIMESTAMPTZ := clock_timestamp();
    -- The queue's row with sub_at and has_group (its group's metadata).
    v_queue       RECORD;
    v_sub_at      TIMESTAMPTZ;
    v_lease       INTERVAL;
    v_ready_until TIMESTAMPTZ;
    v_budget      BIGINT := p_limit;
    -- What the partition being claimed may still give (p_partition_limit).
    v_part        BIGINT;
    v_claimed     INTEGER := 0;
    v_cand        RECORD;
    v_cur         REFCURSOR;
    v_c           queen.log_consumers%ROWTYPE;
    v_expired     BOOLEAN;
    v_group_held  BOOLEAN;
    v_fresh       BOOLEAN;
    v_seg         RECORD;
    v_next        BIGINT;
    v_first       BIGINT;
    v_last        BIGINT;
    v_seg_from    BIGINT;
    v_seg_to      BIGINT;
    v_token       UUID;
    v_expires     TIMESTAMPTZ;
    v_held_until  TIMESTAMPTZ;
    -- The claimed ranges; their blobs are read once, by the final query.
    o_pid         BIGINT[] := '{}';
    o_pname       TEXT[] := '{}';
    o_token       UUID[] := '{}';
    o_expires     TIMESTAMPTZ[] := '{}';
    o_retry       INTEGER[] := '{}';
    o_from        BIGINT[] := '{}';
    o_to          BIGINT[] := '{}';
    o_base        BIGINT[] := '{}';
    o_state       TEXT[] := '{}';
    o_retry_at    TIMESTAMPTZ[] := '{}';
    -- Per row: its place in the per-segment arrays (NULL: not claimed).
    o_seg         INTEGER[] := '{}';
BEGIN
    -- The guard only for a role other than the function's owner (it would
    -- return at once for the owner), so queenwire's own calls skip it.
    IF session_user <> current_user THEN
        PERFORM queen.tenant_guard_v1(p_tenant);
    END IF;
    IF p_queue IS NULL OR p_limit IS NULL OR p_limit < 1
       OR p_max_partitions IS NULL OR p_max_partitions < 1
       OR p_lease_ms <= 0 OR p_partition_limit < 1 THEN
        RAISE EXCEPTION 'log_pop_v2: needs a queue, limit >= 1, max partitions >= 1, a positive lease and a partition limit >= 1'
            USING ERRCODE = '22023';
    END IF;
    IF v_mode NOT IN ('beginning', 'now', 'timestamp')
       OR (v_mode = 'timestamp' AND p_subscribe_at IS NULL) THEN
        RAISE EXCEPTION 'log_pop_v2: subscribe must be beginning, now or timestamp (with a time), got %', v_mode
            USING ERRCODE = '22023';
    END IF;

    -- The queue and the group's metadata row in one statement (each
    -- statement costs its executor start-up, whatever it reads).
    SELECT q.*, m.subscription_at AS sub_at, (m.queue_id IS NOT NULL) AS has_group,
           m.ordered AS group_ordered INTO v_queue
    FROM queen.queues q
    LEFT JOIN queen.consumer_groups_metadata m
           ON m.queue_id = q.id AND m.consumer_group = v_group
    WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        IF v_group = '__QUEUE_MODE__' OR NOT p_create THEN
            RETURN;
        END IF;
        INSERT INTO queen.queues (tenant_id, name) VALUES (p_tenant, p_queue)
        ON CONFLICT (tenant_id, name) DO NOTHING;
        SELECT q.*, m.subscription_at AS sub_at, (m.queue_id IS NOT NULL) AS has_group,
           m.ordered AS group_ordered INTO v_queue
        FROM queen.queues q
        LEFT JOIN queen.consumer_groups_metadata m
               ON m.queue_id = q.id AND m.consumer_group = v_group
        WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;

    IF NOT pg_try_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(v_queue.id)) THEN
        RETURN;
    END IF;

    -- The group: its subscription is fixed by the first pop that sees it.
    -- A pop losing the first-sight race returns nothing rather than wait.
    v_sub_at := v_queue.sub_at;
    IF NOT v_queue.has_group
       AND NOT pg_try_advisory_xact_lock(-1 - (hashtext(v_queue.id::TEXT) & 2147483647),
                                         hashtext(v_group)) THEN
        -- Another transaction is registering the group. An ordered
        -- group's POP returns nothing this time; a shared one (the queue's default type, 032) is
        -- served at once, from the subscription this POP asks for, so a
        -- worker's first POP inside a transaction block holds back no
        -- other worker.
        IF v_queue.ordered THEN
            RETURN;
        END IF;
        v_sub_at := CASE v_mode WHEN 'now' THEN v_now WHEN 'timestamp' THEN p_subscribe_at END;
    ELSIF NOT v_queue.has_group THEN
        PERFORM 1 FROM queen.queues q WHERE q.id = v_queue.id FOR KEY SHARE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        INSERT INTO queen.consumer_groups_metadata
            (queue_id, consumer_group, subscription_mode, subscription_at)
        VALUES (v_queue.id, v_group, v_mode,
                CASE v_mode WHEN 'now' THEN v_now WHEN 'timestamp' THEN p_subscribe_at END)
        ON CONFLICT (queue_id, consumer_group) DO NOTHING;
        SELECT m.subscription_at INTO v_sub_at
        FROM queen.consumer_groups_metadata m
        WHERE m.queue_id = v_queue.id AND m.consumer_group = v_group;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;

    v_lease := make_interval(secs => COALESCE(p_lease_ms, v_queue.lease_time::BIGINT * 1000) / 1000.0);
    v_ready_until := v_now - make_interval(secs => v_queue.delayed_processing);

    -- A shared group (032): each message leased on its own.
    IF NOT COALESCE(v_queue.group_ordered, v_queue.ordered) THEN
        -- One candidate and nothing but new offsets to claim: one
        -- statement (032, log_pop_shared_new_v1); anything else, or
        -- nothing claimed there, the whole judgement.
        IF cardinality(p_candidates) = 1 AND p_partition IS NULL
           AND v_queue.window_buffer = 0 AND v_queue.delayed_processing = 0 THEN
            RETURN QUERY
            SELECT * FROM queen.log_pop_shared_new_v1(v_queue.id, v_group, p_limit,
                                                      p_max_partitions, v_lease, p_auto_ack,
                                                      p_candidates[1], v_queue.max_in_flight,
                                                      p_partition_limit);
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        RETURN QUERY
        SELECT * FROM queen.log_pop_shared_v1(v_queue.id, p_partition, v_group, p_limit,
                                              p_max_partitions, v_lease, v_sub_at, p_auto_ack,
                                              p_tenant, p_candidates, p_partition_limit);
        RETURN;
    END IF;

    -- Two queries, one opened: a FOR over their UNION ALL starts both plans
    -- on every call (executor start-up is then 21 % of PostgreSQL's CPU
    -- under POP ... WAIT traffic, the sort over the union 10 %). pgbench
    -- against PostgreSQL, one client, 1,000 partitions, LIMIT 1 AUTO ACK:
    -- with three candidates 0.53-0.60 ms a call against the union's
    -- 0.61-0.85; over the whole queue 2.94-3.25 ms against 3.96-4.07.
    IF p_candidates IS NULL THEN
        OPEN v_cur FOR
            -- The whole queue (no candidates): every partition with something
            -- pending for the group, least recently claimed first.
            SELECT p.id, p.name, (c.partition_id IS NOT NULL) AS has_row,
                   'ready'::TEXT AS st, NULL::TIMESTAMPTZ AS st_until, c.last_claimed_at,
                   p.last_offset
            FROM queen.log_partitions p
            LEFT JOIN queen.log_consumers c
                   ON c.partition_id = p.id AND c.consumer_group = v_group
            WHERE p.queue_id = v_queue.id
              AND p.last_write_at IS NOT NULL
              AND (v_queue.window_buffer = 0
                   OR p.last_write_at <= v_now - make_interval(secs => v_queue.window_buffer))
              AND (p_partition IS NULL OR p.name = p_partition)
              -- Still ordered (032, log_group_convert_v1): once a call.
              AND COALESCE((SELECT m.ordered FROM queen.consumer_groups_metadata m
                            WHERE m.queue_id = v_queue.id AND m.consumer_group = v_group),
                           (SELECT q.ordered FROM queen.queues q WHERE q.id = v_queue.id))
              AND (c.partition_id IS NULL
                   OR ((c.lease_token IS NULL OR c.lease_expires_at <= v_now)
                       AND (c.blocked_until IS NULL OR c.blocked_until <= v_now)
                       AND c.cursor_offset < p.last_offset))
            ORDER BY c.last_claimed_at NULLS FIRST, p.id;
    ELSE
        OPEN v_cur FOR
        SELECT u.* FROM (
            -- The candidates (the engine's hot list), by id: each is judged,
            -- and those that cannot be claimed now come first, so each of them
            -- is reported whatever the claims that follow. The claimable ones
            -- in the order given: the ring's rotation is the turn, and it
            -- knows what last_claimed_at cannot tell (a claim given back
            -- unused, its partition's turn not taken).
            SELECT k.id, p.name, (c.partition_id IS NOT NULL) AS has_row,
                   CASE
                       WHEN p.id IS NULL OR p.last_write_at IS NULL
                            OR (p_partition IS NOT NULL AND p.name <> p_partition) THEN 'empty'
                       WHEN c.lease_token IS NOT NULL AND c.lease_expires_at > v_now THEN 'leased'
                       WHEN c.blocked_until > v_now THEN 'blocked'
                       WHEN c.partition_id IS NOT NULL AND c.lease_token IS NULL
                            AND c.cursor_offset >= p.last_offset THEN 'empty'
                       WHEN v_queue.window_buffer > 0
                            AND p.last_write_at > v_now - make_interval(secs => v_queue.window_buffer)
                            THEN 'window'
                       ELSE 'ready'
                   END AS st,
                   CASE
                       WHEN c.lease_token IS NOT NULL AND c.lease_expires_at > v_now THEN c.lease_expires_at
                       WHEN c.blocked_until > v_now THEN c.blocked_until
                       WHEN v_queue.window_buffer > 0 AND p.last_write_at IS NOT NULL
                            THEN p.last_write_at + make_interval(secs => v_queue.window_buffer)
                   END AS st_until,
                   c.last_claimed_at, p.last_offset, k.ord
            -- LATERAL ... LIMIT 1: one primary-key probe per candidate, never a
            -- join over the queue's partitions, whatever the row estimates.
            FROM (SELECT u.id, min(u.ord) AS ord
                  FROM unnest(p_candidates) WITH ORDINALITY AS u(id, ord)
                  WHERE u.id IS NOT NULL GROUP BY u.id) AS k
            LEFT JOIN LATERAL (
                SELECT p1.id, p1.name, p1.last_write_at, p1.last_offset
                FROM queen.log_partitions p1
                WHERE p1.id = k.id AND p1.queue_id = v_queue.id
                LIMIT 1) AS p ON true
            LEFT JOIN LATERAL (
                SELECT c1.partition_id, c1.lease_token, c1.lease_expires_at, c1.blocked_until,
                       c1.cursor_offset, c1.last_claimed_at
                FROM queen.log_consumers c1
                WHERE c1.partition_id = p.id AND c1.consumer_group = v_group
                LIMIT 1) AS c ON true
            -- Still ordered (032, log_group_convert_v1): once a call.
            WHERE COALESCE((SELECT m.ordered FROM queen.consumer_groups_metadata m
                            WHERE m.queue_id = v_queue.id AND m.consumer_group = v_group),
                           (SELECT q.ordered FROM queen.queues q WHERE q.id = v_queue.id))
        ) AS u
        ORDER BY u.st = 'ready', u.ord;
    END IF;
    LOOP
        FETCH v_cur INTO v_cand;
        EXIT WHEN NOT FOUND;
        IF v_cand.st <> 'ready' THEN
            o_pid := o_pid || v_cand.id;
            o_pname := o_pname || v_cand.name::TEXT;
            o_state := o_state || v_cand.st;
            o_retry_at := o_retry_at || v_cand.st_until;
            o_seg := o_seg || NULL::INTEGER;
            CONTINUE;
        END IF;
        EXIT WHEN v_claimed >= p_max_partitions OR v_budget <= 0;

        IF NOT v_cand.has_row THEN
            -- First sight of this partition by the group: its cursor starts
            -- where the group's subscription says.
            -- The group's row, once per pop: a DROP GROUP in flight holds
            -- it, and must not find a cursor created behind its back.
            IF v_group_held IS NULL THEN
                PERFORM 1 FROM queen.consumer_groups_metadata m
                WHERE m.queue_id = v_queue.id AND m.consumer_group = v_group
                FOR KEY SHARE SKIP LOCKED;
                v_group_held := FOUND;
            END IF;
            IF NOT v_group_held
               OR NOT pg_try_advisory_xact_lock((v_cand.id % 2147483648)::INTEGER,
                                                hashtext(v_group)) THEN
                o_pid := o_pid || v_cand.id;
                o_pname := o_pname || v_cand.name::TEXT;
                o_state := o_state || 'locked'::TEXT;
                o_retry_at := o_retry_at || NULL::TIMESTAMPTZ;
                o_seg := o_seg || NULL::INTEGER;
                CONTINUE;
            END IF;
            PERFORM 1 FROM queen.log_partitions p WHERE p.id = v_cand.id FOR KEY SHARE SKIP LOCKED;
            IF NOT FOUND THEN
                o_pid := o_pid || v_cand.id;
                o_pname := o_pname || v_cand.name::TEXT;
                o_state := o_state || 'locked'::TEXT;
                o_retry_at := o_retry_at || NULL::TIMESTAMPTZ;
                o_seg := o_seg || NULL::INTEGER;
                CONTINUE;
            END IF;
            -- A subscription from the beginning starts before offset 0
            -- without a look at the segments. The row this insert makes is
            -- this transaction's, free and unleased: it is the row to claim
            -- (no lock to take on it; another pop would have needed the
            -- (partition, group) key held here). A row another transaction
            -- made meanwhile is locked below like any other.
            INSERT INTO queen.log_consumers (partition_id, consumer_group, cursor_offset)
            VALUES (v_cand.id, v_group,
                    CASE WHEN v_sub_at IS NULL THEN -1
                         ELSE COALESCE(queen.log_cursor_at_v1(v_cand.id, v_sub_at, p_tenant), -1) END)
            ON CONFLICT (partition_id, consumer_group) DO NOTHING
            RETURNING * INTO v_c;
            v_fresh := FOUND;
        ELSE
            v_fresh := false;
        END IF;

        IF NOT v_fresh THEN
            SELECT c.* INTO v_c
            FROM queen.log_consumers c
            WHERE c.partition_id = v_cand.id AND c.consumer_group = v_group
              AND (c.lease_token IS NULL OR c.lease_expires_at <= v_now)
              AND (c.blocked_until IS NULL OR c.blocked_until <= v_now)
            FOR UPDATE SKIP LOCKED;
        END IF;
        IF NOT v_fresh AND NOT FOUND THEN
            o_pid := o_pid || v_cand.id;
            o_pname := o_pname || v_cand.name::TEXT;
            o_state := o_state || 'locked'::TEXT;
            o_retry_at := o_retry_at || NULL::TIMESTAMPTZ;
            o_seg := o_seg || NULL::INTEGER;
            CONTINUE;
        END IF;

        v_expired := v_c.lease_token IS NOT NULL;
        IF v_expired THEN
            v_c.retry_count := v_c.retry_count + 1;
            IF v_c.retry_count > v_queue.retry_limit THEN
                IF v_queue.dead_letter_queue AND v_queue.dlq_after_max_retries THEN
                    -- log_dead_letter_v1 and log_dlq come with 005_log_ack;
                    -- plpgsql resolves them at run time.
                    PERFORM queen.log_dead_letter_v1(v_cand.id, v_group, v_c.cursor_offset + 1,
                                                     'lease expired', v_c.retry_count, p_tenant);
                ELSE
                    v_c.failed_count := v_c.failed_count + 1;
                END IF;
                v_c.cursor_offset := queen.log_acked_prefix_v1(v_c.cursor_offset + 1, v_c.batch_acked);
                v_c.retry_count := 0;
            END IF;
        END IF;

        v_token := CASE WHEN p_auto_ack THEN NULL ELSE gen_random_uuid() END;
        v_expires := CASE WHEN p_auto_ack THEN NULL ELSE v_now + v_lease END;
        v_next := v_c.cursor_offset + 1;
        v_first := NULL;
        v_held_until := NULL;
        v_part := LEAST(v_budget, COALESCE(p_partition_limit, v_budget));
        -- Start at the segment holding v_next (the last one based at or
        -- below it); when retention removed it, at the oldest one left.
        -- At most v_part + 1 segments are read (each gives at least one
        -- message but the first), and the LIMIT says so to the planner:
        -- without it, the cached generic plan read "a third of the
        -- partition's segments" and, once retention had emptied the front
        -- of the table, chose a sequential scan and a sort of all of them
        -- (measured: 2 ms of a 3.5 ms POP, 3,727 pages, after 100,000
        -- segments were deleted and vacuumed).
        -- (One statement: the start is its sub-select.)
        FOR v_seg IN
            SELECT s.base_offset, s.message_count, s.max_created_at
            FROM queen.log_segments s
            WHERE s.partition_id = v_cand.id
              AND s.base_offset >= COALESCE(
                      (SELECT max(s2.base_offset) FROM queen.log_segments s2
                       WHERE s2.partition_id = v_cand.id AND s2.base_offset <= v_next),
                      v_next)
            ORDER BY s.base_offset
            LIMIT v_part + 1
        LOOP
            CONTINUE WHEN v_seg.base_offset + v_seg.message_count - 1 < v_next;
            IF v_queue.delayed_processing > 0 AND v_seg.max_created_at > v_ready_until THEN
                v_held_until := v_seg.max_created_at
                                + make_interval(secs => v_queue.delayed_processing);
                EXIT;
            END IF;
            v_seg_from := GREATEST(v_next, v_seg.base_offset);
            v_seg_to := LEAST(v_seg.base_offset + v_seg.message_count - 1, v_seg_from + v_part - 1);
            IF v_first IS NULL AND v_seg_from > v_c.cursor_offset + 1 THEN
                -- Retention removed the head: the retry budget was its.
                v_c.retry_count := 0;
            END IF;
            v_first := COALESCE(v_first, v_seg_from);
            v_last := v_seg_to;
            o_pid := o_pid || v_cand.id;
            o_pname := o_pname || v_cand.name::TEXT;
            o_token := o_token || v_token;
            o_expires := o_expires || v_expires;
            o_retry := o_retry || v_c.retry_count;
            o_from := o_from || v_seg_from;
            o_to := o_to || v_seg_to;
            o_base := o_base || v_seg.base_offset;
            o_state := o_state || 'claimed'::TEXT;
            o_retry_at := o_retry_at || NULL::TIMESTAMPTZ;
            o_seg := o_seg || cardinality(o_base);
            v_budget := v_budget - (v_seg_to - v_seg_from + 1);
            v_part := v_part - (v_seg_to - v_seg_from + 1);
            v_next := v_seg_to + 1;
            EXIT WHEN v_part <= 0;
        END LOOP;

        IF v_first IS NULL THEN
            -- Nothing deliverable yet (delayed_processing): keep only the
            -- settlement of an expired lease.
            IF v_expired THEN
                UPDATE queen.log_consumers c
                SET cursor_offset = v_c.cursor_offset, retry_count = v_c.retry_count,
                    failed_count = v_c.failed_count, lease_token = NULL,
                    lease_expires_at = NULL, batch_from = NULL, batch_to = NULL,
                    batch_acked = NULL
                WHERE c.partition_id = v_cand.id AND c.consumer_group = v_group;
            END IF;
            o_pid := o_pid || v_cand.id;
            o_pname := o_pname || v_cand.name::TEXT;
            o_state := o_state || CASE WHEN v_held_until IS NULL THEN 'empty' ELSE 'delayed' END;
            o_retry_at := o_retry_at || v_held_until;
            o_seg := o_seg || NULL::INTEGER;
            CONTINUE;
        END IF;

        IF p_auto_ack THEN
            UPDATE queen.log_consumers c
            SET cursor_offset = v_last, retry_count = 0, failed_count = v_c.failed_count,
                lease_token = NULL, lease_expires_at = NULL, batch_from = NULL,
                batch_to = NULL, batch_acked = NULL, blocked_until = NULL,
                last_claimed_at = v_now
            WHERE c.partition_id = v_cand.id AND c.consumer_group = v_group;
        ELSE
            UPDATE queen.log_consumers c
            SET cursor_offset = v_first - 1, retry_count = v_c.retry_count,
                failed_count = v_c.failed_count, lease_token = v_token,
                lease_expires_at = v_expires, batch_from = v_first, batch_to = v_last,
                batch_acked = NULL, blocked_until = NULL, last_claimed_at = v_now
            WHERE c.partition_id = v_cand.id AND c.consumer_group = v_group;
        END IF;
        v_claimed := v_claimed + 1;
        IF p_candidates IS NOT NULL AND v_last >= v_cand.last_offset THEN
            o_pid := o_pid || v_cand.id;
            o_pname := o_pname || v_cand.name::TEXT;
            o_state := o_state || 'drained'::TEXT;
            o_retry_at := o_retry_at || NULL::TIMESTAMPTZ;
            o_seg := o_seg || NULL::INTEGER;
        END IF;
    END LOOP;
    CLOSE v_cur;

    -- The per-segment arrays hold only the claimed rows; the state arrays
    -- hold every row in order, claimed or judged, and o_seg says which
    -- segment a claimed row is (subscripts, not a window over a second
    -- unnest: this statement starts on every call).
    RETURN QUERY
    SELECT x.pid, x.pname, x.st, x.until, o_token[x.seg], o_expires[x.seg], o_retry[x.seg],
           o_from[x.seg], o_to[x.seg], o_base[x.seg], s.blob
    FROM unnest(o_pid, o_pname, o_state, o_retry_at, o_seg)
         WITH ORDINALITY AS x(pid, pname, st, until, seg, ord)
    -- LATERAL with LIMIT, so not flattened into a join: each segment read
    -- by its key whatever the statistics. As a join, the generic plan a
    -- session built while log_segments was small hashed it over every
    -- segment of the table on each call, and kept doing so as the table
    -- grew (measured: POP LIMIT 1 at 100,000 partitions 1.6 -> 21.8 ms).
    LEFT JOIN LATERAL (SELECT s.blob FROM queen.log_segments s
                       WHERE s.partition_id = x.pid AND s.base_offset = o_base[x.seg]
                       LIMIT 1) s ON true
    WHERE x.st <> 'claimed' OR s.blob IS NOT NULL
    ORDER BY x.ord;
END
$$;


-- log_pop_v1: log_pop_v2 over the whole queue (no candidates), its rows
-- without the state columns. Kept with its signature for direct SQL callers;
-- the engine calls log_pop_v2.
CREATE OR REPLACE FUNCTION queen.log_pop_v1(
    p_queue          TEXT,
    p_partition      TEXT DEFAULT NULL,
    p_group          TEXT DEFAULT '__QUEUE_MODE__',
    p_limit          INTEGER DEFAULT 1,
    p_max_partitions INTEGER DEFAULT 1,
    p_lease_ms       BIGINT DEFAULT NULL,
    p_subscribe      TEXT DEFAULT 'beginning',
    p_subscribe_at   TIMESTAMPTZ DEFAULT NULL,
    p_auto_ack       BOOLEAN DEFAULT false,
    p_tenant         UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    partition_id     BIGINT,
    partition_name   TEXT,
    lease_token      UUID,
    lease_expires_at TIMESTAMPTZ,
    retry_count      INTEGER,
    from_offset      BIGINT,
    to_offset        BIGINT,
    base_offset      BIGINT,
    blob             BYTEA
)
LANGUAGE sql
AS $$
    SELECT v.partition_id, v.partition_name, v.lease_token, v.lease_expires_at,
           v.retry_count, v.from_offset, v.to_offset, v.base_offset, v.blob
    FROM queen.log_pop_v2(p_queue, p_partition, p_group, p_limit, p_max_partitions,
                          p_lease_ms, p_subscribe, p_subscribe_at, p_auto_ack,
                          p_tenant, NULL) AS v
    WHERE v.state IN ('claimed', 'shared');
$$;

-- log_hotlist_seed_v1: the partitions a broker's hot list for (queue, group)
-- starts from or catches up with (docs/internals/hotlist.md).
--   * p_written_since NULL (the full seed, and the periodic reconcile): every
--     partition of the queue with something pending for the group (never
--     claimed by it, or its cursor behind the last offset, leased or not),
--     least recently claimed first: the fairness order;
--   * p_written_since given (the windowed reseed): the partitions written at
--     or after it, still pending for the group, oldest write first, at most
--     p_limit; written_to is then the last_write_at of the last one returned
--     when the limit cut the window short (the next window starts there),
--     NULL when it did not (the next window starts at seen_at);
--   * seen_at: the database clock when the scan began;
--   * repair_at, repair_partition_id, repair_whole: the group's
--     queen.hotlist_repairs row (SEEK, DROP GROUP), NULL when there is none;
--     the engine repairs its ring when repair_at differs from the one it
--     last saw (whole queue, or the one partition named).
-- An unknown queue returns no ids. Reads only; takes no locks. Its cost is
-- the index range (queue_id, last_write_at) of the window, or one pass over
-- the queue's partitions for the full seed.
CREATE OR REPLACE FUNCTION queen.log_hotlist_seed_v1(
    p_queue         TEXT,
    p_group         TEXT DEFAULT '__QUEUE_MODE__',
    p_written_since TIMESTAMPTZ DEFAULT NULL,
    p_limit         INTEGER DEFAULT 10000,
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    partition_ids       BIGINT[],
    seen_at             TIMESTAMPTZ,
    written_to          TIMESTAMPTZ,
    repair_at           TIMESTAMPTZ,
    repair_partition_id BIGINT,
    repair_whole        BOOLEAN
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_group    TEXT := COALESCE(p_group, '__QUEUE_MODE__');
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_queue_id UUID;
    v_ids      BIGINT[];
    v_to       TIMESTAMPTZ;
    v_n        BIGINT;
    v_rep_at   TIMESTAMPTZ;
    v_rep_name TEXT;
    v_rep_id   BIGINT;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_queue IS NULL OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'log_hotlist_seed_v1: needs a queue and a limit >= 1'
            USING ERRCODE = '22023';
    END IF;
    SELECT q.id INTO v_queue_id FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF v_queue_id IS NULL THEN
        RETURN QUERY SELECT '{}'::BIGINT[], v_now, NULL::TIMESTAMPTZ, NULL::TIMESTAMPTZ,
                            NULL::BIGINT, NULL::BOOLEAN;
        RETURN;
    END IF;

    SELECT h.repair_at, h.partition_name INTO v_rep_at, v_rep_name
    FROM queen.hotlist_repairs h
    WHERE h.tenant_id = p_tenant AND h.queue_name = p_queue AND h.consumer_group = v_group;
    IF v_rep_name IS NOT NULL THEN
        SELECT p.id INTO v_rep_id FROM queen.log_partitions p
        WHERE p.queue_id = v_queue_id AND p.name = v_rep_name;
    END IF;

    IF p_written_since IS NULL THEN
        SELECT array_agg(p.id ORDER BY c.last_claimed_at NULLS FIRST, p.id) INTO v_ids
        FROM queen.log_partitions p
        LEFT JOIN queen.log_consumers c
               ON c.partition_id = p.id AND c.consumer_group = v_group
        WHERE p.queue_id = v_queue_id
          AND p.last_write_at IS NOT NULL
          AND (c.partition_id IS NULL OR c.cursor_offset < p.last_offset);
    ELSE
        SELECT array_agg(w.id ORDER BY w.last_write_at, w.id), max(w.last_write_at), count(*)
        INTO v_ids, v_to, v_n
        FROM (SELECT p.id, p.last_write_at
              FROM queen.log_partitions p
              LEFT JOIN LATERAL (
                  SELECT c1.partition_id, c1.cursor_offset
                  FROM queen.log_consumers c1
                  WHERE c1.partition_id = p.id AND c1.consumer_group = v_group
                  LIMIT 1) AS c ON true
              WHERE p.queue_id = v_queue_id
                AND p.last_write_at >= p_written_since
                AND (c.partition_id IS NULL OR c.cursor_offset < p.last_offset)
              ORDER BY p.last_write_at
              LIMIT p_limit) AS w;
        IF v_n < p_limit THEN
            v_to := NULL;
        END IF;
    END IF;

    RETURN QUERY SELECT COALESCE(v_ids, '{}'::BIGINT[]), v_now, v_to, v_rep_at, v_rep_id,
                        CASE WHEN v_rep_at IS NULL THEN NULL ELSE v_rep_name IS NULL END;
END
$$;

-- log_namespace_queues_v2: the queues of a wildcard POP (POP FROM NAMESPACE
-- ns [TASK t]): every queue of the tenant whose namespace is p_namespace
-- (and whose task is p_task, when given), higher priority first, then by
-- name (COLLATE "C"); the engine rotates among the queues of one priority
-- (fairness) and pops each through its hot list with log_pop_v2. Ephemeral
-- queues (030) are listed with `ephemeral` true: the engine pops them from
-- their owner's memory.
--
-- The group is registered durably here, on every such queue that has not
-- seen it yet (seed 000's "deliberate widening": a wildcard pop writes the
-- queue-scoped consumer_groups_metadata row), with one subscription for the
-- whole namespace: the one the group's earliest registration on a queue of
-- the namespace (and task) recorded, or, at the group's first sight in the
-- namespace, the POP's SUBSCRIBE FROM. So a queue that joins the namespace
-- later gets the group's original subscription at the group's next wildcard
-- POP, and messages pushed to it in between are not skipped by a NOW
-- subscription. (A namespace with no queue at all records nothing: there is
-- no queue row to hang the subscription on.)
--
-- Locks, per unregistered queue and exactly as log_pop_v2's first sight,
-- all tried, never waited for: the queue key SHARED (a DROP QUEUE in
-- flight skips the queue), the group's advisory key, the queue row FOR KEY
-- SHARE SKIP LOCKED, then the leaf consumer_groups_metadata insert. A queue
-- skipped that way is still listed; its log_pop_v2 registers the group at
-- first sight as for any POP.
-- v2: ephemeral queues (030) are listed too, marked, for the engine to pop
-- from their owner's memory; the group is registered only on the others
-- (an ephemeral queue's groups live in its owner's memory).
DROP FUNCTION IF EXISTS queen.log_namespace_queues_v1(TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID);
CREATE OR REPLACE FUNCTION queen.log_namespace_queues_v2(
    p_namespace    TEXT,
    p_task         TEXT DEFAULT NULL,
    p_group        TEXT DEFAULT '__QUEUE_MODE__',
    p_subscribe    TEXT DEFAULT 'beginning',
    p_subscribe_at TIMESTAMPTZ DEFAULT NULL,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queue_name TEXT,
    priority   INTEGER,
    ephemeral  BOOLEAN
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_group TEXT := COALESCE(p_group, '__QUEUE_MODE__');
    v_mode  TEXT := COALESCE(p_subscribe, 'beginning');
    v_at    TIMESTAMPTZ;
    v_found BOOLEAN;
    v_q     RECORD;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_namespace IS NULL THEN
        RAISE EXCEPTION 'log_namespace_queues_v2: needs a namespace' USING ERRCODE = '22023';
    END IF;
    IF v_mode NOT IN ('beginning', 'now', 'timestamp')
       OR (v_mode = 'timestamp' AND p_subscribe_at IS NULL) THEN
        RAISE EXCEPTION 'log_namespace_queues_v2: subscribe must be beginning, now or timestamp (with a time), got %', v_mode
            USING ERRCODE = '22023';
    END IF;

    SELECT m.subscription_mode, m.subscription_at INTO v_mode, v_at
    FROM queen.consumer_groups_metadata m
    JOIN queen.queues q ON q.id = m.queue_id
    WHERE q.tenant_id = p_tenant AND q.namespace = p_namespace
      AND (p_task IS NULL OR q.task = p_task)
      -- 030: an ephemeral queue's messages are in its owner's memory only.
      AND NOT EXISTS (SELECT 1 FROM queen.ephemeral_queues e WHERE e.queue_id = q.id)
      AND m.consumer_group = v_group
    ORDER BY m.created_at, q.name COLLATE "C"
    LIMIT 1;
    v_found := FOUND;
    IF NOT v_found THEN
        v_mode := COALESCE(p_subscribe, 'beginning');
        v_at := CASE v_mode WHEN 'now' THEN clock_timestamp()
                            WHEN 'timestamp' THEN p_subscribe_at END;
    END IF;

    FOR v_q IN
        SELECT q.id FROM queen.queues q
        WHERE q.tenant_id = p_tenant AND q.namespace = p_namespace
          AND (p_task IS NULL OR q.task = p_task)
          AND NOT EXISTS (SELECT 1 FROM queen.ephemeral_queues e WHERE e.queue_id = q.id)
          AND NOT EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
                          WHERE m.queue_id = q.id AND m.consumer_group = v_group)
        ORDER BY q.name COLLATE "C"
    LOOP
        CONTINUE WHEN NOT pg_try_advisory_xact_lock_shared(queen.log_queue_lock_key_v1(v_q.id));
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(-1 - (hashtext(v_q.id::TEXT) & 2147483647),
                                                    hashtext(v_group));
        PERFORM 1 FROM queen.queues q WHERE q.id = v_q.id FOR KEY SHARE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO queen.consumer_groups_metadata
            (queue_id, consumer_group, subscription_mode, subscription_at)
        VALUES (v_q.id, v_group, v_mode, v_at)
        ON CONFLICT (queue_id, consumer_group) DO NOTHING;
    END LOOP;

    RETURN QUERY
    SELECT q.name::TEXT, q.priority,
           EXISTS (SELECT 1 FROM queen.ephemeral_queues e WHERE e.queue_id = q.id)
    FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.namespace = p_namespace
      AND (p_task IS NULL OR q.task = p_task)
    ORDER BY q.priority DESC, q.name COLLATE "C";
END
$$;

-- Gives back what one POP claimed when the engine cannot hand it out: an
-- encrypted segment whose key this queenwire lacks, or one that does not
-- authenticate (src/engine/sealing.rs). The messages stay for a consumer
-- that can read them and no failure is counted: a leased claim (token
-- given) releases its lease, the cursor staying where the claim left it;
-- an AUTO ACK claim (token NULL) moves the cursor back before the batch,
-- unless something moved it since. Inside a transaction block or a
-- pipeline the engine's error rolls this back with the claim itself.
-- Returns the rows given back.
-- Locks: log_consumers rows of the claims, (partition_id, group)
-- ascending; nothing else.
CREATE OR REPLACE FUNCTION queen.log_unclaim_v1(
    p_partition_ids BIGINT[],
    p_group         TEXT,
    p_lease_tokens  UUID[],
    p_from_offsets  BIGINT[],
    p_to_offsets    BIGINT[],
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_n INTEGER;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    WITH claim AS (
        SELECT c.pid, min(c.f) AS f, max(c.t) AS t, (array_agg(c.tok))[1] AS tok
        FROM unnest(p_partition_ids, p_lease_tokens, p_from_offsets, p_to_offsets) AS c(pid, tok, f, t)
        GROUP BY c.pid
    ), locked AS (
        SELECT lc.partition_id, cl.f, cl.tok
        FROM queen.log_consumers lc
        JOIN claim cl ON cl.pid = lc.partition_id
        JOIN queen.log_partitions p ON p.id = lc.partition_id
        JOIN queen.queues q ON q.id = p.queue_id AND q.tenant_id = p_tenant
        WHERE lc.consumer_group = p_group
          AND CASE WHEN cl.tok IS NOT NULL THEN lc.lease_token = cl.tok
                   ELSE lc.lease_token IS NULL AND lc.cursor_offset = cl.t END
        ORDER BY lc.partition_id
        FOR UPDATE OF lc
    )
    UPDATE queen.log_consumers c
    SET cursor_offset = CASE WHEN l.tok IS NULL THEN l.f - 1 ELSE c.cursor_offset END,
        lease_token = NULL, lease_expires_at = NULL, batch_from = NULL, batch_to = NULL,
        batch_acked = NULL
    FROM locked l
    WHERE c.partition_id = l.partition_id AND c.consumer_group = p_group;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
