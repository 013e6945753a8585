-- 025_timers: scheduled messages. A timer is one row; at fire_at the engine
-- claims it, pushes its payload through queen.log_push_v1 and deletes it, all
-- in ONE transaction, which is what makes a fire exactly-once with several
-- queenwire processes on one database.
--
-- Global lock order (seed 000): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. log_timers is the second space:
-- nobody may acquire a timer row after a queue, partition or consumer lock.
-- Within the space, rows are taken in ascending (tenant, queue, timer_key)
-- order, COLLATE "C". The fire is T -> (advisory, queues, partitions) ->
-- delete of the T rows it already holds (re-locking a held row adds no edge).
-- Consequence for other files: a queue deleter (queen.delete_queue_v1) must
-- not delete this table's rows after locking the queue; timers of a dropped
-- queue simply fire into a re-provisioned queue (or are cancelled).

-- One row per (tenant, queue, timer key). Keyed by names, no foreign key to
-- queen.queues: a foreign key would make every schedule/fire take FOR KEY
-- SHARE on the queue row from inside this space's statements, and would tie
-- this table into the queue deleter's cascade (a timer lock after a queue
-- lock, against the order).
CREATE TABLE IF NOT EXISTS queen.log_timers (
    tenant_id      UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    queue_name     TEXT COLLATE "C" NOT NULL,
    timer_key      TEXT COLLATE "C" NOT NULL,
    -- The partition the payload is pushed into ('Default' when unnamed).
    partition_name TEXT COLLATE "C" NOT NULL,
    -- The payload as JSON text, framed by the engine at fire time.
    payload        TEXT NOT NULL,
    -- Never fired before this instant (database clock).
    fire_at        TIMESTAMPTZ NOT NULL,
    -- When this schedule (or its latest replacement) was written.
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, queue_name, timer_key)
);

-- The due scan (timer_claim_due_v1): fire_at <= now across tenants. Created
-- only when absent (CREATE INDEX IF NOT EXISTS would take SHARE on the table
-- at every boot, see schema.sql).
DO $$
BEGIN
    IF to_regclass('queen.idx_log_timers_fire_at') IS NULL THEN
        CREATE INDEX idx_log_timers_fire_at ON queen.log_timers (fire_at);
    END IF;
END
$$;

-- Schedules (or replaces) the unfired timer p_key of queue p_queue: returns
-- the stored fire_at. p_partition NULL = 'Default'. p_payload must be JSON
-- text (22023 otherwise). A fire_at in the past fires at the next claim.
-- The queue row is provisioned as a push provisions it (partitions are
-- provisioned by the fire's push), so SHOW QUEUES lists it from now on.
-- Inside a transaction block the timer exists from COMMIT.
-- Locks, in order:
--   1. log_timers: the (tenant, queue, key) row, by INSERT ... ON CONFLICT DO
--      UPDATE. Waits only for a fire or cancel holding that row; when a fire
--      deleted it meanwhile, this inserts a fresh timer (a new schedule).
--   2. queues: provisioning insert of the queue row when missing (ON
--      CONFLICT DO NOTHING; waits at most for another creator or deleter of
--      the same queue, which never asks for a timer row).
CREATE OR REPLACE FUNCTION queen.timer_schedule_v1(
    p_queue     TEXT,
    p_key       TEXT,
    p_partition TEXT,
    p_payload   TEXT,
    p_fire_at   TIMESTAMPTZ,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TIMESTAMPTZ
LANGUAGE plpgsql
AS $$
DECLARE
    v_fire_at TIMESTAMPTZ;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_tenant IS NULL OR p_queue IS NULL OR p_queue = '' OR p_key IS NULL OR p_key = ''
       OR p_partition = '' OR p_payload IS NULL OR p_fire_at IS NULL THEN
        RAISE EXCEPTION 'timer_schedule_v1: a tenant, a queue, a key, a payload and a fire time are required (partition NULL = Default)'
            USING ERRCODE = '22023';
    END IF;
    BEGIN
        PERFORM p_payload::JSON;
    EXCEPTION WHEN invalid_text_representation THEN
        RAISE EXCEPTION 'timer_schedule_v1: the payload is not valid JSON' USING ERRCODE = '22023';
    END;

    -- 1. The timer row.
    INSERT INTO queen.log_timers AS t
        (tenant_id, queue_name, timer_key, partition_name, payload, fire_at, created_at)
    VALUES (p_tenant, p_queue, p_key, COALESCE(p_partition, 'Default'), p_payload, p_fire_at, clock_timestamp())
    ON CONFLICT (tenant_id, queue_name, timer_key) DO UPDATE
    SET partition_name = EXCLUDED.partition_name,
        payload = EXCLUDED.payload,
        fire_at = EXCLUDED.fire_at,
        created_at = EXCLUDED.created_at
    RETURNING t.fire_at INTO v_fire_at;

    -- 2. The queue row, as queen.log_push_v1 provisions it.
    IF NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue) THEN
        INSERT INTO queen.queues (tenant_id, name) VALUES (p_tenant, p_queue)
        ON CONFLICT (tenant_id, name) DO NOTHING;
    END IF;

    RETURN v_fire_at;
END
$$;

-- Cancels the unfired timer p_key of p_queue: true when this call deleted it,
-- false when there was none (unknown, or already fired).
-- Locks: log_timers, that one row (the DELETE). A cancel racing a fire waits
-- for the fire's transaction to end, then answers truthfully: the row is gone
-- (false) when the fire committed, still there (deleted, true) when it rolled
-- back.
CREATE OR REPLACE FUNCTION queen.timer_cancel_v1(
    p_queue  TEXT,
    p_key    TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    DELETE FROM queen.log_timers t
    WHERE t.tenant_id = p_tenant AND t.queue_name = p_queue AND t.timer_key = p_key;
    RETURN FOUND;
END
$$;

-- The tenant's unfired timers, of one queue or (p_queue NULL) of all, in
-- (queue, key) byte order. Takes no locks.
CREATE OR REPLACE FUNCTION queen.timer_list_v1(
    p_queue  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (queue TEXT, key TEXT, partition TEXT, fire_at TIMESTAMPTZ)
LANGUAGE sql STABLE
AS $$
    SELECT t.queue_name::TEXT, t.timer_key::TEXT, t.partition_name::TEXT, t.fire_at
    FROM queen.log_timers t
    WHERE queen.tenant_guard_v1(p_tenant)
      AND t.tenant_id = p_tenant AND (p_queue IS NULL OR t.queue_name = p_queue)
    ORDER BY t.queue_name COLLATE "C", t.timer_key COLLATE "C"
$$;

-- The fire's first step, across tenants (no p_tenant: the engine's fire loop
-- serves every tenant): up to p_limit due timers (fire_at <= the database
-- clock), locked FOR UPDATE SKIP LOCKED in (tenant, queue, key) COLLATE "C"
-- order. The caller must, in the SAME transaction, push each payload
-- (queen.log_push_v1 into partition) and then call timer_delete_fired_v1 with
-- exactly these rows, then commit. Two claimers get disjoint rows; a row
-- rescheduled into the future or cancelled since the scan's snapshot is not
-- returned (the lock re-checks the latest row version).
-- Locks: log_timers rows, SKIP LOCKED (never waits, so it is no edge of any
-- wait cycle); nothing else.
CREATE OR REPLACE FUNCTION queen.timer_claim_due_v1(
    p_limit INTEGER
) RETURNS TABLE (tenant_id UUID, queue TEXT, key TEXT, partition TEXT, payload TEXT, fire_at TIMESTAMPTZ)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'timer_claim_due_v1: p_limit must be positive' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT t.tenant_id, t.queue_name::TEXT, t.timer_key::TEXT, t.partition_name::TEXT, t.payload, t.fire_at
    FROM queen.log_timers t
    WHERE t.fire_at <= clock_timestamp()
    ORDER BY t.tenant_id, t.queue_name COLLATE "C", t.timer_key COLLATE "C"
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED;
END
$$;

-- The timer rows named by three parallel arrays that this transaction
-- holds (claimed by timer_claim_due_v1), locked again FOR UPDATE SKIP LOCKED
-- in (tenant, queue, key) COLLATE "C" order: a row named by mistake that
-- another transaction holds is skipped, never waited for. The fire's two
-- last steps (delete, postpone) act on exactly these rows.
-- Locks: log_timers rows already held (a re-lock, not an acquisition).
CREATE OR REPLACE FUNCTION queen.timer_held_v1(
    p_tenants UUID[],
    p_queues  TEXT[],
    p_keys    TEXT[]
) RETURNS TABLE (tenant_id UUID, queue_name TEXT, timer_key TEXT)
LANGUAGE plpgsql
AS $$
BEGIN
    IF cardinality(p_tenants) IS DISTINCT FROM cardinality(p_queues)
       OR cardinality(p_tenants) IS DISTINCT FROM cardinality(p_keys) THEN
        RAISE EXCEPTION 'timers: tenants, queues and keys must be parallel arrays'
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT t.tenant_id, t.queue_name::TEXT, t.timer_key::TEXT
    FROM queen.log_timers t
    JOIN unnest(p_tenants, p_queues, p_keys) AS f(tenant_id, queue_name, timer_key)
      ON t.tenant_id = f.tenant_id AND t.queue_name = f.queue_name AND t.timer_key = f.timer_key
    ORDER BY t.tenant_id, t.queue_name COLLATE "C", t.timer_key COLLATE "C"
    FOR UPDATE OF t SKIP LOCKED;
END
$$;

-- The fire's last step: deletes the timers named by the three parallel
-- arrays, which this transaction claimed with timer_claim_due_v1 and still
-- holds. Returns how many were deleted (the claimed count, normally).
-- Locks: log_timers rows this transaction already holds: a re-lock, not an
-- acquisition, so it may run after the push's queue and partition locks.
-- Enforced rather than trusted: the rows are taken FOR UPDATE SKIP LOCKED, so
-- a row named by mistake that another transaction holds is skipped instead
-- of waited for (never a timer wait after a partition lock).
CREATE OR REPLACE FUNCTION queen.timer_delete_fired_v1(
    p_tenants UUID[],
    p_queues  TEXT[],
    p_keys    TEXT[]
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_deleted INTEGER;
BEGIN
    DELETE FROM queen.log_timers t
    USING queen.timer_held_v1(p_tenants, p_queues, p_keys) h
    WHERE t.tenant_id = h.tenant_id AND t.queue_name = h.queue_name AND t.timer_key = h.timer_key;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- A fire whose push failed (the queue is full, say) moves those timers to
-- fire again p_delay_ms from now, so that they do not come back first in
-- every claim and hold back other tenants' due timers. Returns how many
-- moved. Called by the engine in the fire's transaction, after a rollback to
-- the savepoint before the failed push.
-- Locks: log_timers rows this transaction already holds (taken again FOR
-- UPDATE SKIP LOCKED, as timer_delete_fired_v1 does): a re-lock, never a
-- timer wait after a queue or partition lock.
CREATE OR REPLACE FUNCTION queen.timer_postpone_v1(
    p_tenants  UUID[],
    p_queues   TEXT[],
    p_keys     TEXT[],
    p_delay_ms BIGINT
) RETURNS INTEGER
LANGUAGE plpgsql
AS $$
DECLARE
    v_moved INTEGER;
BEGIN
    UPDATE queen.log_timers t
    SET fire_at = clock_timestamp() + p_delay_ms * interval '1 millisecond'
    FROM queen.timer_held_v1(p_tenants, p_queues, p_keys) h
    WHERE t.tenant_id = h.tenant_id AND t.queue_name = h.queue_name AND t.timer_key = h.timer_key;
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    RETURN v_moved;
END
$$;
