-- 027_kv_quota: the read-only quota poll every queenwire runs (elected or
-- not). Enforcement is in-process, soft and late: the proxy holds the last
-- measured usage plus its own writes since, and answers 54000 to a tenant's
-- KV writes while it is over; no SQL runs on the write path for it.

-- Every tenant with a queen.kv_quota row: its limits (NULL = no limit) and
-- its last measured usage (NULL used_* and computed_at: never measured yet,
-- i.e. no rollup has seen a live key of the tenant). Across tenants (no
-- p_tenant): the poll serves them all. Takes no locks (an MVCC read of two
-- leaves).
CREATE OR REPLACE FUNCTION queen.kv_quota_poll_v1()
RETURNS TABLE (
    tenant_id   UUID,
    max_keys    BIGINT,
    max_bytes   BIGINT,
    used_keys   BIGINT,
    used_bytes  BIGINT,
    computed_at TIMESTAMPTZ
)
LANGUAGE sql STABLE
AS $$
    SELECT q.tenant_id, q.max_keys, q.max_bytes, u.keys, u.bytes, u.computed_at
    FROM queen.kv_quota q
    LEFT JOIN queen.kv_usage u ON u.tenant_id = q.tenant_id
    ORDER BY q.tenant_id
$$;
