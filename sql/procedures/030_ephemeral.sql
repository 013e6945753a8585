-- 030_ephemeral: the whole database footprint of the ephemeral queue class
-- (seed 000: "its declarations and quota, never its messages"). An
-- ephemeral queue is a queen.queues row (its name, tenant, lease_time,
-- retry_limit, namespace, ...) plus a queen.ephemeral_queues row (its
-- quota); its messages live only in the memory of the one queenwire that
-- owns it, elected through 029's lease table (task 'ephemeral:<ref>'), and
-- are lost when that process stops (docs/internals/ephemeral.md).
--
-- Lock order (seed 000): queen.queues (012's configure, FOR NO KEY UPDATE)
-- → queen.ephemeral_queues (with its queue, like consumer_groups_metadata)
-- → leaves (queen.maintenance_leases, queen.ephemeral_commits,
-- queen.ephemeral_peers). The lease is
-- taken only by the engine's own connection in a transaction of its own,
-- holding nothing else, as 029 requires.

CREATE TABLE IF NOT EXISTS queen.ephemeral_queues (
    queue_id   UUID PRIMARY KEY REFERENCES queen.queues(id) ON DELETE CASCADE,
    -- The number receipts carry (as a negative partition id) so an ACK
    -- finds its queue without the queue's name.
    ref        BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    -- Messages held at most (NULL: no limit).
    max_length BIGINT CHECK (max_length >= 1),
    -- Payload bytes held at most (NULL: no limit).
    max_bytes  BIGINT CHECK (max_bytes >= 1),
    -- A message older than this is dropped (milliseconds; 0: never).
    ttl_ms     BIGINT NOT NULL DEFAULT 0 CHECK (ttl_ms >= 0),
    -- What a PUSH that does not fit does: fail whole (54000), or drop the
    -- oldest messages until it fits.
    overflow   TEXT NOT NULL DEFAULT 'reject' CHECK (overflow IN ('reject', 'drop_oldest')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- An ephemeral PUSH inside a transaction block writes one token here in the
-- client's transaction and nothing else: the owner applies the messages it
-- holds for the token only once it finds the token committed (it deletes
-- it then). A rolled-back block leaves no token, so its messages are
-- dropped. Leaf of the lock order; tokens left by a process that died are
-- pruned after an hour by the taker.
CREATE TABLE IF NOT EXISTS queen.ephemeral_commits (
    token      UUID PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Where each queenwire serves forwarded ephemeral statements: its lease
-- holder name (as in maintenance_leases), the host:port of its internal
-- channel, and the random secret a forwarding queenwire proves it knows
-- (an HMAC over both sides' nonces; the secret itself never travels). Made
-- at each start (a new holder, a new secret). Engine only: no tenant role
-- may read it (034 grants nothing on queen tables), since the secret lets a
-- statement act for any tenant. Leaf of the lock order.
CREATE TABLE IF NOT EXISTS queen.ephemeral_peers (
    holder     TEXT PRIMARY KEY,
    address    TEXT NOT NULL,
    secret     BYTEA NOT NULL CHECK (length(secret) >= 16),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- CREATE QUEUE / ALTER QUEUE with an ephemeral option (class, max_length,
-- max_bytes, ttl, overflow), in one transaction: the queen.queues part goes
-- through configure_queue_v1 (012) with the other options, the quota to
-- queen.ephemeral_queues. p_options as configure_queue_v1's, ttl already in
-- milliseconds. Results as configure_queue_v1's. Errors, nothing changed:
--   22023  an unknown class, max_length / max_bytes below 1, a negative ttl,
--          an unknown overflow, a quota option without class = ephemeral
--          (CREATE) or on a durable queue (ALTER), any error of 012;
--   0A000  ALTER of a queue's class (it is fixed at creation); ordered =
--          false with class = ephemeral.
-- Locks: those of configure_queue_v1, then the queue's ephemeral_queues row.
CREATE OR REPLACE FUNCTION queen.ephemeral_configure_v1(
    p_queue   TEXT,
    p_options JSONB DEFAULT '{}',
    p_mode    TEXT DEFAULT 'create',
    p_tenant  UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TEXT
LANGUAGE plpgsql
AS $$
DECLARE
    v_keys    CONSTANT TEXT[] := ARRAY['class', 'max_length', 'max_bytes', 'ttl', 'overflow'];
    v_options JSONB := COALESCE(p_options, '{}');
    v_class   TEXT;
    v_len     BIGINT;
    v_bytes   BIGINT;
    v_ttl     BIGINT;
    v_over    TEXT;
    v_result  TEXT;
    v_id      UUID;
    v_is_eph  BOOLEAN;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF jsonb_typeof(v_options) <> 'object' THEN
        RAISE EXCEPTION 'queue options must be a JSON object' USING ERRCODE = '22023';
    END IF;
    v_class := v_options ->> 'class';
    IF v_class IS NOT NULL AND v_class NOT IN ('ephemeral', 'durable') THEN
        RAISE EXCEPTION 'class must be ephemeral or durable, got "%"', v_class
            USING ERRCODE = '22023';
    END IF;
    BEGIN
        v_len := (v_options ->> 'max_length')::BIGINT;
        v_bytes := (v_options ->> 'max_bytes')::BIGINT;
        v_ttl := (v_options ->> 'ttl')::BIGINT;
    EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
        RAISE EXCEPTION 'max_length, max_bytes and ttl take integers (ttl: a duration)'
            USING ERRCODE = '22023';
    END;
    IF v_len < 1 OR v_bytes < 1 THEN
        RAISE EXCEPTION 'max_length and max_bytes must be at least 1' USING ERRCODE = '22023';
    END IF;
    IF v_ttl < 0 THEN
        RAISE EXCEPTION 'ttl must not be negative' USING ERRCODE = '22023';
    END IF;
    v_over := v_options ->> 'overflow';
    IF v_over IS NOT NULL AND v_over NOT IN ('reject', 'drop_oldest') THEN
        RAISE EXCEPTION 'overflow must be reject or drop_oldest, got "%"', v_over
            USING ERRCODE = '22023';
    END IF;
    v_options := v_options - v_keys;

    IF p_mode = 'alter' THEN
        SELECT q.id, e.queue_id IS NOT NULL INTO v_id, v_is_eph
        FROM queen.queues q LEFT JOIN queen.ephemeral_queues e ON e.queue_id = q.id
        WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        IF v_class IS NOT NULL AND v_class <> (CASE WHEN v_is_eph THEN 'ephemeral' ELSE 'durable' END) THEN
            RAISE EXCEPTION 'a queue''s class is fixed when it is created' USING ERRCODE = '0A000';
        END IF;
        IF v_id IS NOT NULL AND NOT v_is_eph
           AND (v_len IS NOT NULL OR v_bytes IS NOT NULL OR v_ttl IS NOT NULL OR v_over IS NOT NULL) THEN
            RAISE EXCEPTION 'max_length, max_bytes, ttl and overflow apply only to queues of class ephemeral'
                USING ERRCODE = '22023';
        END IF;
        -- 42704 for a missing queue, and the other options.
        v_result := queen.configure_queue_v1(p_queue, v_options, 'alter', p_tenant);
        UPDATE queen.ephemeral_queues e
        SET max_length = COALESCE(v_len, e.max_length),
            max_bytes = COALESCE(v_bytes, e.max_bytes),
            ttl_ms = COALESCE(v_ttl, e.ttl_ms),
            overflow = COALESCE(v_over, e.overflow)
        WHERE e.queue_id = v_id;
        RETURN v_result;
    END IF;

    IF COALESCE(v_class, 'durable') = 'durable'
       AND (v_len IS NOT NULL OR v_bytes IS NOT NULL OR v_ttl IS NOT NULL OR v_over IS NOT NULL) THEN
        RAISE EXCEPTION 'max_length, max_bytes, ttl and overflow need class = ephemeral'
            USING ERRCODE = '22023';
    END IF;
    v_result := queen.configure_queue_v1(p_queue, v_options, p_mode, p_tenant);
    IF v_result = 'created' AND v_class = 'ephemeral' THEN
        -- As ALTER: an ephemeral queue's groups are ordered only.
        IF EXISTS (SELECT 1 FROM queen.queues q
                   WHERE q.tenant_id = p_tenant AND q.name = p_queue AND NOT q.ordered) THEN
            RAISE EXCEPTION 'queue "%" is ephemeral: its groups are ordered only', p_queue
                USING ERRCODE = '0A000';
        END IF;
        INSERT INTO queen.ephemeral_queues (queue_id, max_length, max_bytes, ttl_ms, overflow)
        SELECT q.id, v_len, v_bytes, COALESCE(v_ttl, 0), COALESCE(v_over, 'reject')
        FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    END IF;
    RETURN v_result;
END
$$;

-- The tenant's ephemeral queues with their quota and their owner: the
-- holder of the lease 'ephemeral:<ref>' and until when it holds it (NULL
-- when no lease is live: the next statement on the queue elects one).
-- Reads only.
CREATE OR REPLACE FUNCTION queen.ephemeral_queues_v1(
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    queue_name TEXT,
    ref        BIGINT,
    max_length BIGINT,
    max_bytes  BIGINT,
    ttl_ms     BIGINT,
    overflow   TEXT,
    holder     TEXT,
    held_until TIMESTAMPTZ
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    RETURN QUERY
    SELECT q.name::TEXT, e.ref, e.max_length, e.max_bytes, e.ttl_ms, e.overflow,
           l.holder, l.expires_at
    FROM queen.ephemeral_queues e
    JOIN queen.queues q ON q.id = e.queue_id
    LEFT JOIN queen.maintenance_leases l
           ON l.task = 'ephemeral:' || e.ref AND l.expires_at > clock_timestamp()
    WHERE q.tenant_id = p_tenant
    ORDER BY q.name COLLATE "C";
END
$$;

-- Every ephemeral queue of every tenant: (tenant, name, ref), what each
-- queenwire keeps in memory to tell an ephemeral statement from a durable
-- one without a call per statement. Engine only. Reads only.
CREATE OR REPLACE FUNCTION queen.ephemeral_names_v1()
RETURNS TABLE (tenant_id UUID, queue_name TEXT, ref BIGINT)
LANGUAGE sql
STABLE
AS $$
    SELECT q.tenant_id, q.name::TEXT, e.ref
    FROM queen.ephemeral_queues e JOIN queen.queues q ON q.id = e.queue_id;
$$;

-- Takes or renews the ownership of ephemeral queue p_ref for p_holder (029's
-- maintenance_try_lease_v1 on task 'ephemeral:<ref>') and returns the
-- queue's declaration with the holder afterwards: p_holder when it won or
-- renewed, the other holder otherwise. No row: the queue is gone. Engine
-- only, on a connection of its own, in a transaction of its own.
-- Locks: the maintenance_leases row (leaf); reads queues and
-- ephemeral_queues.
-- v2: with the delivery options the owner applies (retry_delay,
-- delayed_processing, window_buffer, dedup_window).
DROP FUNCTION IF EXISTS queen.ephemeral_claim_v1(BIGINT, TEXT, BIGINT);
CREATE OR REPLACE FUNCTION queen.ephemeral_claim_v2(
    p_ref    BIGINT,
    p_holder TEXT,
    p_ttl_ms BIGINT
) RETURNS TABLE (
    tenant_id          UUID,
    queue_name         TEXT,
    max_length         BIGINT,
    max_bytes          BIGINT,
    ttl_ms             BIGINT,
    overflow           TEXT,
    lease_time         INTEGER,
    retry_limit        INTEGER,
    retry_delay        INTEGER,
    delayed_processing INTEGER,
    window_buffer      INTEGER,
    dedup_window       INTEGER,
    holder             TEXT,
    held_until         TIMESTAMPTZ
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT 1 FROM queen.ephemeral_queues e WHERE e.ref = p_ref) THEN
        RETURN;
    END IF;
    PERFORM queen.maintenance_try_lease_v1('ephemeral:' || p_ref, p_holder, p_ttl_ms);
    RETURN QUERY
    SELECT q.tenant_id, q.name::TEXT, e.max_length, e.max_bytes, e.ttl_ms, e.overflow,
           q.lease_time, q.retry_limit, q.retry_delay, q.delayed_processing, q.window_buffer,
           q.dedup_window, l.holder, l.expires_at
    FROM queen.ephemeral_queues e
    JOIN queen.queues q ON q.id = e.queue_id
    JOIN queen.maintenance_leases l ON l.task = 'ephemeral:' || e.ref
    WHERE e.ref = p_ref;
END
$$;

-- Publishes (or refreshes) where p_holder serves forwarded statements;
-- rows not refreshed for an hour (their process is gone) are pruned on the
-- way. Engine only, on its own connection. Locks: the ephemeral_peers rows
-- written or deleted (leaf).
CREATE OR REPLACE FUNCTION queen.ephemeral_peer_publish_v1(
    p_holder  TEXT,
    p_address TEXT,
    p_secret  BYTEA
) RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_holder IS NULL OR p_address IS NULL OR p_secret IS NULL OR length(p_secret) < 16 THEN
        RAISE EXCEPTION 'ephemeral_peer_publish_v1: a holder, an address and a secret of 16 bytes or more are required'
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM queen.ephemeral_peers p
    WHERE p.updated_at < now() - INTERVAL '1 hour' AND p.holder <> p_holder;
    INSERT INTO queen.ephemeral_peers (holder, address, secret)
    VALUES (p_holder, p_address, p_secret)
    ON CONFLICT (holder) DO UPDATE
    SET address = EXCLUDED.address, secret = EXCLUDED.secret, updated_at = now();
END
$$;

-- Where p_holder serves forwarded statements, and its secret; no row when
-- it published none (a queenwire without forwarding). Engine only. Reads
-- only.
CREATE OR REPLACE FUNCTION queen.ephemeral_peer_v1(
    p_holder TEXT
) RETURNS TABLE (address TEXT, secret BYTEA)
LANGUAGE sql
STABLE
AS $$
    SELECT p.address, p.secret FROM queen.ephemeral_peers p WHERE p.holder = p_holder;
$$;

-- A stopping queenwire hands its ephemeral queues over at once: its leases
-- 'ephemeral:<ref>' end now (the next statement through any queenwire
-- elects a new owner without waiting for them to run out) and its peer row
-- goes. The caller has stopped serving the queues first. Returns how many
-- leases ended. Engine only. Locks: those maintenance_leases and
-- ephemeral_peers rows (leaves).
CREATE OR REPLACE FUNCTION queen.ephemeral_release_v1(
    p_holder TEXT
) RETURNS BIGINT
LANGUAGE plpgsql
AS $$
DECLARE
    v_ended BIGINT;
BEGIN
    UPDATE queen.maintenance_leases l SET expires_at = clock_timestamp()
    WHERE l.holder = p_holder AND l.task LIKE 'ephemeral:%' AND l.expires_at > clock_timestamp();
    GET DIAGNOSTICS v_ended = ROW_COUNT;
    DELETE FROM queen.ephemeral_peers p WHERE p.holder = p_holder;
    RETURN v_ended;
END
$$;

-- An ephemeral PUSH inside a transaction block: the token its messages
-- wait under until the block commits. Runs in the client's transaction.
-- Locks: the new ephemeral_commits row (leaf).
CREATE OR REPLACE FUNCTION queen.ephemeral_commit_mark_v1(
    p_token  UUID,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    INSERT INTO queen.ephemeral_commits (token) VALUES (p_token);
END
$$;

-- The tokens of p_tokens whose blocks committed, deleted as they are
-- returned (the messages they stand for are applied once); tokens older
-- than an hour (their process died) are pruned on the way. Engine only.
-- Locks: the ephemeral_commits rows deleted (leaf).
CREATE OR REPLACE FUNCTION queen.ephemeral_commit_take_v1(
    p_tokens UUID[]
) RETURNS TABLE (token UUID)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    DELETE FROM queen.ephemeral_commits c WHERE c.created_at < now() - INTERVAL '1 hour';
    RETURN QUERY
    DELETE FROM queen.ephemeral_commits c WHERE c.token = ANY (p_tokens) RETURNING c.token;
END
$$;

-- Messages of an ephemeral queue never reach queen.log_segments: a
-- partition of one is refused, so a PUSH that reached the durable path (a
-- queenwire that has not yet learnt the queue's class, within about a
-- second of its CREATE QUEUE elsewhere) fails with 55000 instead of storing.
-- Once a statement, over the partitions it inserted (AFTER INSERT, with
-- the transition table the counter trigger of 020 also reads: PostgreSQL
-- keeps one for both): a fused push creates up to hundreds of partitions in
-- one statement, and a check per row cost each new partition a trigger call
-- and a probe (about 6.5 µs each, measured).
CREATE OR REPLACE FUNCTION queen.ephemeral_guard_partitions_v2()
RETURNS TRIGGER
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows n
               JOIN queen.ephemeral_queues e ON e.queue_id = n.queue_id) THEN
        RAISE EXCEPTION 'the queue is ephemeral: its messages are kept in memory by its owning queenwire only; retry the statement'
            USING ERRCODE = '55000';
    END IF;
    RETURN NULL;
END
$$;

-- Attached only when absent (as 020: CREATE TRIGGER takes SHARE ROW
-- EXCLUSIVE on the hottest table, so not at every boot). A database that
-- has the earlier per-row guard (BEFORE INSERT FOR EACH ROW, function
-- ephemeral_guard_partition_v1) has it replaced once: DROP TRIGGER takes
-- ACCESS EXCLUSIVE, so it waits at most 2 s for the pushes in flight and
-- otherwise leaves the row guard (which refuses the same partitions) for a
-- later boot.
-- Locks: SHARE ROW EXCLUSIVE / ACCESS EXCLUSIVE on queen.log_partitions,
-- only on the boot that attaches or replaces the trigger.
DO $$
DECLARE
    v_row_level BOOLEAN;
    v_timeout   TEXT := current_setting('lock_timeout');
BEGIN
    SELECT (t.tgtype & 1) = 1 INTO v_row_level
    FROM pg_trigger t
    WHERE t.tgrelid = 'queen.log_partitions'::REGCLASS
      AND t.tgname = 'trg_partitions_ephemeral_guard';
    IF v_row_level THEN
        BEGIN
            PERFORM set_config('lock_timeout', '2s', true);
            DROP TRIGGER trg_partitions_ephemeral_guard ON queen.log_partitions;
            DROP FUNCTION IF EXISTS queen.ephemeral_guard_partition_v1();
            v_row_level := NULL;
        EXCEPTION WHEN lock_not_available THEN
            RAISE NOTICE 'queen.log_partitions is busy: its per-row ephemeral guard stays until a later boot';
        END;
        PERFORM set_config('lock_timeout', v_timeout, true);
    END IF;
    -- Absent, or the row guard just dropped (its ACCESS EXCLUSIVE is held).
    IF v_row_level IS NULL THEN
        CREATE TRIGGER trg_partitions_ephemeral_guard
            AFTER INSERT ON queen.log_partitions
            REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT
            EXECUTE FUNCTION queen.ephemeral_guard_partitions_v2();
    END IF;
END
$$;
