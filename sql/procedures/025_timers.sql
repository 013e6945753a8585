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
    -- Recurring timers (SCHEDULE … EVERY / CRON): a fire moves fire_at to
    -- the next occurrence instead of deleting the row. NULL: one-shot.
    every_ms       BIGINT,
    cron           TEXT,
    -- The cron expression normalised by the engine (see
    -- queen.timer_cron_next_v1); its time zone (PostgreSQL's names).
    cron_spec      TEXT,
    time_zone      TEXT,
    -- Fire every missed occurrence after downtime instead of one.
    catch_up       BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (tenant_id, queue_name, timer_key)
);

-- The recurrence columns on a table made before they existed (only when
-- absent: ALTER TABLE would lock the table at every boot).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'queen.log_timers'::regclass AND attname = 'every_ms' AND NOT attisdropped) THEN
        ALTER TABLE queen.log_timers
            ADD COLUMN every_ms BIGINT,
            ADD COLUMN cron TEXT,
            ADD COLUMN cron_spec TEXT,
            ADD COLUMN time_zone TEXT,
            ADD COLUMN catch_up BOOLEAN NOT NULL DEFAULT false;
    END IF;
END
$$;

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

-- Refuses (22008) a fire time of infinity or -infinity: a timer at
-- infinity never fires, and one at -infinity has no time to show or to
-- recur from. Takes no locks.
CREATE OR REPLACE FUNCTION queen.timer_fire_time_finite_v1(p_fire_at TIMESTAMPTZ)
RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT isfinite(p_fire_at) THEN
        RAISE EXCEPTION 'a timer''s fire time must be finite, not %', p_fire_at
            USING ERRCODE = '22008',
                  HINT = 'Give a time PostgreSQL can reach, or no timer at all.';
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
    PERFORM queen.timer_fire_time_finite_v1(p_fire_at);
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
        created_at = EXCLUDED.created_at,
        every_ms = NULL, cron = NULL, cron_spec = NULL, time_zone = NULL, catch_up = false
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

-- Recurring timers (SCHEDULE … EVERY / CRON).
--
-- The next occurrence of a normalised cron expression strictly after
-- p_after, in time zone p_tz (local wall-clock times, converted with AT TIME
-- ZONE, so PostgreSQL's time zone database does the work). p_spec is five
-- fields joined by '|', each '*' (every value) or a sorted comma list; a day
-- field written '*…' (from '*/s') counts as unrestricted for the either-day
-- rule: when neither day field is, a day matches if either matches (Vixie
-- cron). A local time that does not exist (a DST gap) maps to the instant
-- PostgreSQL gives it, one that exists twice to one of them: each local slot
-- fires once. NULL when nothing matches within 8 years (31 February).
-- Takes no locks.
CREATE OR REPLACE FUNCTION queen.timer_cron_next_v1(
    p_spec  TEXT,
    p_tz    TEXT,
    p_after TIMESTAMPTZ
) RETURNS TIMESTAMPTZ
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    f        TEXT[] := string_to_array(p_spec, '|');
    v_min    INT[];
    v_hour   INT[];
    v_dom    INT[];
    v_mon    INT[];
    v_dow    INT[];
    v_either BOOLEAN;
    v_start  DATE;
    v_day    DATE;
    v_at     TIMESTAMPTZ;
    v_h      INT;
    v_m      INT;
    v_dom_ok BOOLEAN;
    v_dow_ok BOOLEAN;
BEGIN
    IF cardinality(f) IS DISTINCT FROM 5 THEN
        RAISE EXCEPTION 'timer_cron_next_v1: a normalised cron expression has 5 fields' USING ERRCODE = '22023';
    END IF;
    v_min  := CASE WHEN f[1] = '*' THEN ARRAY(SELECT generate_series(0, 59)) ELSE string_to_array(f[1], ',')::INT[] END;
    v_hour := CASE WHEN f[2] = '*' THEN ARRAY(SELECT generate_series(0, 23)) ELSE string_to_array(f[2], ',')::INT[] END;
    v_dom  := CASE WHEN f[3] = '*' THEN NULL ELSE string_to_array(ltrim(f[3], '*'), ',')::INT[] END;
    v_mon  := CASE WHEN f[4] = '*' THEN NULL ELSE string_to_array(f[4], ',')::INT[] END;
    v_dow  := CASE WHEN f[5] = '*' THEN NULL ELSE string_to_array(ltrim(f[5], '*'), ',')::INT[] END;
    v_either := left(f[3], 1) <> '*' AND left(f[5], 1) <> '*';
    v_start := (p_after AT TIME ZONE COALESCE(p_tz, 'UTC'))::DATE;
    FOR i IN 0 .. 366 * 8 LOOP
        v_day := v_start + i;
        CONTINUE WHEN v_mon IS NOT NULL AND NOT (extract(month FROM v_day)::INT = ANY (v_mon));
        v_dom_ok := v_dom IS NULL OR extract(day FROM v_day)::INT = ANY (v_dom);
        v_dow_ok := v_dow IS NULL OR extract(dow FROM v_day)::INT = ANY (v_dow);
        CONTINUE WHEN NOT (CASE WHEN v_either THEN v_dom_ok OR v_dow_ok ELSE v_dom_ok AND v_dow_ok END);
        FOREACH v_h IN ARRAY v_hour LOOP
            FOREACH v_m IN ARRAY v_min LOOP
                v_at := (v_day + make_time(v_h, v_m, 0)) AT TIME ZONE COALESCE(p_tz, 'UTC');
                IF v_at > p_after THEN
                    RETURN v_at;
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN NULL;
END
$$;

-- The fire time after p_fire_at (the occurrence that fires now) of a
-- recurring timer: with p_catch_up the very next occurrence, so every one
-- missed while no queenwire ran fires, one per claim; without, the first
-- occurrence after the database clock, so missed ones fire once (the
-- occurrence firing now), not once each. EVERY keeps its phase: occurrences
-- are p_fire_at + k * p_every_ms. NULL for a one-shot timer. Takes no locks.
CREATE OR REPLACE FUNCTION queen.timer_next_fire_v1(
    p_fire_at   TIMESTAMPTZ,
    p_every_ms  BIGINT,
    p_cron_spec TEXT,
    p_time_zone TEXT,
    p_catch_up  BOOLEAN
) RETURNS TIMESTAMPTZ
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_now TIMESTAMPTZ := clock_timestamp();
BEGIN
    IF p_every_ms IS NOT NULL THEN
        IF p_catch_up OR p_fire_at + p_every_ms * interval '1 millisecond' > v_now THEN
            RETURN p_fire_at + p_every_ms * interval '1 millisecond';
        END IF;
        RETURN p_fire_at + (floor(extract(epoch FROM v_now - p_fire_at) * 1000 / p_every_ms) + 1)
                           * p_every_ms * interval '1 millisecond';
    END IF;
    IF p_cron_spec IS NOT NULL THEN
        RETURN queen.timer_cron_next_v1(p_cron_spec, p_time_zone,
                                        CASE WHEN p_catch_up THEN p_fire_at ELSE greatest(p_fire_at, v_now) END);
    END IF;
    RETURN NULL;
END
$$;

-- SCHEDULE with every form: one-shot as timer_schedule_v1 (p_every_ms and
-- p_cron_spec NULL), or recurring: every p_every_ms milliseconds, the first
-- at p_fire_at; or at the occurrences of p_cron (as written, for SHOW) /
-- p_cron_spec (normalised by the engine) in p_time_zone (NULL: UTC), the
-- first the next occurrence from now (p_fire_at ignored). An unknown time
-- zone or a cron expression that never fires is 22023 and changes nothing.
-- Returns the first fire time. Locks: as timer_schedule_v1 (the timer row,
-- then the queue row when it must be provisioned).
CREATE OR REPLACE FUNCTION queen.timer_schedule_v2(
    p_queue     TEXT,
    p_key       TEXT,
    p_partition TEXT,
    p_payload   TEXT,
    p_fire_at   TIMESTAMPTZ,
    p_every_ms  BIGINT DEFAULT NULL,
    p_cron      TEXT DEFAULT NULL,
    p_cron_spec TEXT DEFAULT NULL,
    p_time_zone TEXT DEFAULT NULL,
    p_catch_up  BOOLEAN DEFAULT false,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TIMESTAMPTZ
LANGUAGE plpgsql
AS $$
DECLARE
    v_fire_at TIMESTAMPTZ := p_fire_at;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_every_ms IS NULL AND p_cron_spec IS NULL THEN
        RETURN queen.timer_schedule_v1(p_queue, p_key, p_partition, p_payload, p_fire_at, p_tenant);
    END IF;
    IF p_tenant IS NULL OR p_queue IS NULL OR p_queue = '' OR p_key IS NULL OR p_key = ''
       OR p_partition = '' OR p_payload IS NULL
       OR (p_every_ms IS NOT NULL) = (p_cron_spec IS NOT NULL)
       OR (p_every_ms IS NOT NULL AND (p_every_ms < 1 OR p_fire_at IS NULL)) THEN
        RAISE EXCEPTION 'timer_schedule_v2: a tenant, a queue, a key, a payload and either a positive period with a first fire time or a cron expression are required'
            USING ERRCODE = '22023';
    END IF;
    BEGIN
        PERFORM p_payload::JSON;
    EXCEPTION WHEN invalid_text_representation THEN
        RAISE EXCEPTION 'timer_schedule_v2: the payload is not valid JSON' USING ERRCODE = '22023';
    END;
    IF p_cron_spec IS NOT NULL THEN
        BEGIN
            PERFORM clock_timestamp() AT TIME ZONE COALESCE(p_time_zone, 'UTC');
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION 'time zone "%" not recognized', p_time_zone
                USING ERRCODE = '22023',
                      HINT = 'Use a name of pg_timezone_names, such as Europe/Berlin or UTC.';
        END;
        v_fire_at := queen.timer_cron_next_v1(p_cron_spec, p_time_zone, clock_timestamp());
        IF v_fire_at IS NULL THEN
            RAISE EXCEPTION 'the cron expression "%" never fires', p_cron USING ERRCODE = '22023';
        END IF;
    END IF;

    -- 1. The timer row.
    INSERT INTO queen.log_timers AS t
        (tenant_id, queue_name, timer_key, partition_name, payload, fire_at, created_at,
         every_ms, cron, cron_spec, time_zone, catch_up)
    VALUES (p_tenant, p_queue, p_key, COALESCE(p_partition, 'Default'), p_payload, v_fire_at, clock_timestamp(),
            p_every_ms, p_cron, p_cron_spec, p_time_zone, COALESCE(p_catch_up, false))
    ON CONFLICT (tenant_id, queue_name, timer_key) DO UPDATE
    SET partition_name = EXCLUDED.partition_name,
        payload = EXCLUDED.payload,
        fire_at = EXCLUDED.fire_at,
        created_at = EXCLUDED.created_at,
        every_ms = EXCLUDED.every_ms,
        cron = EXCLUDED.cron,
        cron_spec = EXCLUDED.cron_spec,
        time_zone = EXCLUDED.time_zone,
        catch_up = EXCLUDED.catch_up
    RETURNING t.fire_at INTO v_fire_at;

    -- 2. The queue row, as queen.log_push_v1 provisions it.
    IF NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue) THEN
        INSERT INTO queen.queues (tenant_id, name) VALUES (p_tenant, p_queue)
        ON CONFLICT (tenant_id, name) DO NOTHING;
    END IF;

    RETURN v_fire_at;
END
$$;

-- timer_list_v1 with the recurrence: 'every <n> s' / 'cron <expr> <zone>',
-- NULL for a one-shot timer; fire_at is the next fire. Takes no locks.
CREATE OR REPLACE FUNCTION queen.timer_list_v2(
    p_queue  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (queue TEXT, key TEXT, partition TEXT, fire_at TIMESTAMPTZ, recurrence TEXT, catch_up BOOLEAN)
LANGUAGE sql STABLE
AS $$
    SELECT t.queue_name::TEXT, t.timer_key::TEXT, t.partition_name::TEXT, t.fire_at,
           CASE WHEN t.every_ms IS NOT NULL THEN 'every ' || trim_scale(t.every_ms / 1000.0)::TEXT || ' s'
                WHEN t.cron_spec IS NOT NULL THEN 'cron ' || t.cron || ' ' || COALESCE(t.time_zone, 'UTC')
           END,
           t.catch_up
    FROM queen.log_timers t
    WHERE queen.tenant_guard_v1(p_tenant)
      AND t.tenant_id = p_tenant AND (p_queue IS NULL OR t.queue_name = p_queue)
    ORDER BY t.queue_name COLLATE "C", t.timer_key COLLATE "C"
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
    v_moved   INTEGER;
BEGIN
    DELETE FROM queen.log_timers t
    USING queen.timer_held_v1(p_tenants, p_queues, p_keys) h
    WHERE t.tenant_id = h.tenant_id AND t.queue_name = h.queue_name AND t.timer_key = h.timer_key
      AND t.every_ms IS NULL AND t.cron_spec IS NULL;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    -- A recurring timer stays, at its next occurrence (see
    -- queen.timer_next_fire_v1): this occurrence has fired, in this
    -- transaction, so no other claimer sees it due again.
    UPDATE queen.log_timers t
    SET fire_at = COALESCE(
            queen.timer_next_fire_v1(t.fire_at, t.every_ms, t.cron_spec, t.time_zone, t.catch_up),
            'infinity')
    FROM queen.timer_held_v1(p_tenants, p_queues, p_keys) h
    WHERE t.tenant_id = h.tenant_id AND t.queue_name = h.queue_name AND t.timer_key = h.timer_key
      AND (t.every_ms IS NOT NULL OR t.cron_spec IS NOT NULL);
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    RETURN v_deleted + v_moved;
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
