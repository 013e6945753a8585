-- 029_maintenance_leases: one durable lease per maintenance task, which
-- elects one queenwire per cycle (the KV sweeper, ...). Global, not
-- per-tenant: a task spans every tenant. The table is a leaf of the global
-- lock order (seed 000); callers take a lease in a transaction of its own,
-- holding no other lock.

CREATE TABLE IF NOT EXISTS queen.maintenance_leases (
    task       TEXT PRIMARY KEY,
    -- Who holds it (a process identity chosen by the engine).
    holder     TEXT NOT NULL,
    -- Free again from this instant (database clock, so every holder agrees).
    expires_at TIMESTAMPTZ NOT NULL
);

-- Takes or renews the lease on p_task for p_ttl_ms from now (database clock):
-- true when p_holder holds it afterwards, i.e. it was free, expired, or
-- already p_holder's (renewed); false while another holder's lease runs.
-- A holder that stops renewing loses it at expiry; there is no release.
-- Locks: the maintenance_leases row of p_task (INSERT ... ON CONFLICT DO
-- UPDATE; the condition is re-checked on the latest row version, so two
-- contenders cannot both win).
CREATE OR REPLACE FUNCTION queen.maintenance_try_lease_v1(
    p_task   TEXT,
    p_holder TEXT,
    p_ttl_ms BIGINT
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
DECLARE
    v_now TIMESTAMPTZ := clock_timestamp();
BEGIN
    IF p_task IS NULL OR p_holder IS NULL OR p_ttl_ms IS NULL OR p_ttl_ms < 1 THEN
        RAISE EXCEPTION 'maintenance_try_lease_v1: a task, a holder and a positive ttl are required'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO queen.maintenance_leases AS l (task, holder, expires_at)
    VALUES (p_task, p_holder, v_now + p_ttl_ms * INTERVAL '1 millisecond')
    ON CONFLICT (task) DO UPDATE
    SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
    WHERE l.holder = EXCLUDED.holder OR l.expires_at <= v_now;
    RETURN FOUND;
END
$$;
