-- 024_kv: the key/value store (seed 004, "KV internals"): queen.kv, its
-- version sequence, the pure existence helpers, the one secondary index, the
-- quota/usage side tables, and queen.kv_apply_v1, the only write path.
--
-- Why 024 and not earlier: SQL-language bodies resolve tables at creation
-- time, so nothing applied before this file can name queen.kv from a
-- LANGUAGE sql body without failing the boot. That keeps the log engine's
-- per-partition procedures from ever growing a leg on this table.
--
-- Global lock order (seed 000): kv -> log_timers -> advisory -> queues ->
-- log_partitions -> log_consumers -> leaves. queen.kv is the OUTERMOST space:
-- nothing may acquire a kv row after a queue, partition or consumer lock, so a
-- caller that mixes KV with queue work in one transaction runs its KV
-- statements first. Within the space, rows are taken in ascending
-- (namespace, key) order, COLLATE "C" (byte order: the same on every host,
-- libc and ICU version, so two brokers never take two keys in opposite
-- orders). kv_quota and kv_usage are leaves: no write path touches them.

CREATE SEQUENCE IF NOT EXISTS queen.kv_version_seq AS BIGINT CACHE 1000;
-- Versions are opaque tokens compared for equality only: a sequence (not
-- version + 1) so that a key that expired, was pruned and was written again
-- can never re-issue a version some holder still carries. CACHE 1000 keeps
-- nextval from writing a WAL record per write; it makes versions
-- non-monotonic across backends, which is allowed (not measured here).

-- The table exactly as seed 004 gives it. fillfactor = 70 by analogy with
-- queen.log_partitions (NOT measured: steady state is in-place updates of
-- non-indexed columns that should stay HOT). vacuum_truncate = off is part
-- of the lock order: heap truncation takes ACCESS EXCLUSIVE, which every
-- MVCC read's ACCESS SHARE would queue behind. There is deliberately no
-- ALTER COLUMN value SET STORAGE: EXTENDED is already jsonb's default and the
-- statement would take ACCESS EXCLUSIVE at every boot. The options are part
-- of CREATE TABLE IF NOT EXISTS, which takes no lock on an existing table.
CREATE TABLE IF NOT EXISTS queen.kv (
    -- Part of the key, so a conflict target can never be cross-tenant.
    tenant_id  UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    -- Registered nowhere: a namespace exists iff a row does. Its charset is
    -- validated by kv_apply_v1 so a typo fails instead of minting a phantom.
    namespace  TEXT COLLATE "C" NOT NULL,
    key        TEXT COLLATE "C" NOT NULL,
    -- 'null'::jsonb is a legal value, and not the same as an absent key.
    value      JSONB NOT NULL,
    -- From queen.kv_version_seq: unique, equality only, not monotonic.
    version    BIGINT NOT NULL,
    -- NULL = forever (an explicit opt-in on the wire, never a default).
    expires_at TIMESTAMPTZ,
    -- A contention spreader for the sweeper, not an ownership partition.
    -- STORED and GENERATED, so no update can move a row between shards; the
    -- modulus 64 is permanent.
    shard      SMALLINT NOT NULL GENERATED ALWAYS AS ((hashtextextended(key, 0) & 63)::smallint) STORED,
    -- Reset when a write resurrects an expired key: that is a new lineage.
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Not indexed, deliberately (an index would make every update non-HOT).
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, namespace, key)
) WITH (fillfactor = 70, vacuum_truncate = off);

-- The ONLY definition of existence: live iff forever or not yet expired at
-- `now`. `now` is a parameter so that one kv_apply_v1 call judges its whole
-- batch at one instant. Not STRICT: a NULL expires_at (forever) must answer
-- true, not NULL.
CREATE OR REPLACE FUNCTION queen.kv_live_v1(TIMESTAMPTZ, TIMESTAMPTZ)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT $1 IS NULL OR $1 > $2 $$;

-- The effective version of a row at `now`: (version, expires_at, now). Total:
-- an absent row (version NULL) and an expired one are both 0, which is what
-- lets `expect 0` mean "must not exist" and keeps a compare-and-set against a
-- dead lineage from ever succeeding. Not STRICT for the same reason as above.
CREATE OR REPLACE FUNCTION queen.kv_ver_v1(BIGINT, TIMESTAMPTZ, TIMESTAMPTZ)
RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN $1 IS NOT NULL AND queen.kv_live_v1($2, $3) THEN $1 ELSE 0::BIGINT END $$;

-- The one secondary index. Its only reader is the sweeper's prune (026),
-- which filters by shard and range-scans expires_at; partial, so a forever
-- key costs nothing in it. Deliberately NOT created: an index on updated_at
-- (no reader; it would make every counter update non-HOT) and one on value
-- (no query: the read boundary is keys and prefixes). Created inside a DO
-- block that checks the catalog first, because CREATE INDEX IF NOT EXISTS
-- takes SHARE on the table before it checks the name (see schema.sql).
DO $$
BEGIN
    IF to_regclass('queen.idx_kv_shard_expires') IS NULL THEN
        CREATE INDEX idx_kv_shard_expires ON queen.kv (shard, expires_at)
            WHERE expires_at IS NOT NULL;
    END IF;
END
$$;

-- Operator configuration: per-tenant limits (NULL = no limit). Two tables,
-- not one, because they have two authors (operator here, sweeper below).
CREATE TABLE IF NOT EXISTS queen.kv_quota (
    tenant_id  UUID PRIMARY KEY,
    max_keys   BIGINT CHECK (max_keys IS NULL OR max_keys >= 0),
    max_bytes  BIGINT CHECK (max_bytes IS NULL OR max_bytes >= 0),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Sweeper measurement (queen.kv_usage_rollup_v1), last-writer-wins on
-- computed_at. Keyed by tenant alone: any broker may measure any shard, so a
-- per-shard key would only add contention. No write path touches it: a
-- counter row updated by every write would serialize a tenant's writers on
-- one row held in the outermost lock space. bytes = octet_length(namespace)
-- + octet_length(key) + pg_column_size(value) over live rows (the stored,
-- possibly compressed, size of the value: read without detoasting).
CREATE TABLE IF NOT EXISTS queen.kv_usage (
    tenant_id   UUID PRIMARY KEY,
    keys        BIGINT NOT NULL,
    bytes       BIGINT NOT NULL,
    computed_at TIMESTAMPTZ NOT NULL
);

-- A namespace is 1-128 bytes of A-Z a-z 0-9 _ . : - (the Rust parser checks
-- the same; this is the one check every caller passes through). The match is
-- COLLATE "C" so the bracket ranges are byte ranges on every host. Pure.
CREATE OR REPLACE FUNCTION queen.kv_namespace_ok_v1(p_namespace TEXT)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT COALESCE(p_namespace COLLATE "C" ~ '^[A-Za-z0-9_.:-]{1,128}$', false) $$;

-- True when a JSON member is absent, JSON null, or an integral number within
-- BIGINT (5, 5.0 and 1e3 all count). LANGUAGE sql so it inlines into
-- kv_apply_v1's validation query. Pure.
CREATE OR REPLACE FUNCTION queen.kv_is_int_v1(p_value JSONB)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_value IS NULL OR jsonb_typeof(p_value) = 'null' THEN true
        WHEN jsonb_typeof(p_value) <> 'number' THEN false
        ELSE p_value::NUMERIC = trunc(p_value::NUMERIC)
             AND p_value::NUMERIC BETWEEN -9223372036854775808 AND 9223372036854775807
    END
$$;

-- The exclusive upper bound of the keys that start with p_prefix in byte
-- (COLLATE "C") order: p_prefix with its last character replaced by the next
-- code point (UTF-8 byte order is code point order, and no character lies
-- between the two). NULL when there is none (the prefix is all U+10FFFF, or
-- empty). Lets a prefix scan be a bounded range of the primary key even in a
-- generic plan, where `LIKE $1 || '%'` could not be. Pure.
CREATE OR REPLACE FUNCTION queen.kv_prefix_end_v1(p_prefix TEXT)
RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    v_prefix TEXT := p_prefix;
    v_last   INTEGER;
BEGIN
    WHILE v_prefix IS NOT NULL AND v_prefix <> '' LOOP
        v_last := ascii(right(v_prefix, 1));
        v_prefix := left(v_prefix, -1);
        IF v_last < 1114111 THEN
            -- Surrogates (U+D800..U+DFFF) are not characters; skip them.
            RETURN v_prefix || chr(CASE WHEN v_last = 55295 THEN 57344 ELSE v_last + 1 END);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Applies a batch of KV operations at ONE instant (clock_timestamp() read
-- once). p_ops is a JSON array; op_index is an operation's 0-based position.
--   {"op":"get","ns":N,"key":K}
--       one row (applied true) when live, none when absent or expired.
--   {"op":"put","ns":N,"key":K,"value":V,"ttl_ms":T,"expect":E,"if_absent":B}
--       V: any JSON, null included (the member must be present). T: a
--       positive integer, or JSON null for forever; the member must be
--       present, so forever is never a default. E: integer or null; compared
--       for equality with the effective version (0 = must not exist).
--       if_absent true = must not exist (with a non-zero expect: 22023).
--       A put over an expired row starts a new lineage (created_at reset).
--   {"op":"incr","ns":N,"key":K,"by":I,"expiry":"keep"|"forever"|T}
--       I defaults to 1; expiry defaults to "keep". Creating the key (absent
--       or expired) needs "forever" or a ttl, else 22023; on a live key
--       "keep" keeps its expiry. A live non-integer value is 22023; bigint
--       overflow is 22003. Always applied.
--   {"op":"delete","ns":N,"key":K,"expect":E}
--       applied when a live row was deleted (and expect, if given, matched).
--   {"op":"list","ns":N,"prefix":P,"after":A,"limit":L}
--       live rows whose key starts with P (null/absent = all), key > A
--       (keyset cursor; null/absent = from the start), in byte order, at most
--       L (default 100, 0..10000).
-- Every point operation returns exactly one row, except a get of a dead key
-- (none). A row carries the key's state AFTER its operation: value (SQL NULL
-- when absent; JSON null is 'null'), version (the new one when applied, the
-- current one when a precondition failed; 0 when absent), expires_at.
-- Rows come back ordered by op_index (a list's rows in key order).
-- Versions always come from queen.kv_version_seq.
--
-- Order of application: point operations on one key apply in array order.
-- Keys are processed in ascending (namespace, key) COLLATE "C" order, which
-- is the lock order; operations on different keys commute, so the result is
-- the array order's. A list sees the state after every point operation of
-- its batch (it is evaluated last; it takes no locks).
--
-- Errors: 22023 for a malformed batch, bad namespace (1-128 bytes of
-- A-Z a-z 0-9 _ . : -), bad key (1-1024 bytes; text cannot hold NUL) or a
-- rule above; nothing of the batch is applied then (the statement fails).
-- Never touches kv_quota or kv_usage.
--
-- Locks (kv space only): for each key with at least one put/incr/delete, in
-- ascending (namespace, key) COLLATE "C" order: the row FOR UPDATE when it
-- exists; when it does not and the batch creates it, the INSERT ... ON
-- CONFLICT DO NOTHING, which waits only for a concurrent inserter of the
-- same key (the same position in the order), after which the key is
-- re-read and its operations re-run. Keys only read (get, list) are read
-- without a lock. No other space is touched.
CREATE OR REPLACE FUNCTION queen.kv_apply_v1(
    p_ops    JSONB,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TABLE (
    op_index   INTEGER,
    namespace  TEXT,
    key        TEXT,
    applied    BOOLEAN,
    value      JSONB,
    version    BIGINT,
    expires_at TIMESTAMPTZ
)
LANGUAGE plpgsql
-- Generic plans: with custom plans PostgreSQL re-planned the batch queries on
-- every call (array and jsonb parameters make each custom plan look cheaper).
-- Measured on a loaded 2-CPU dev box, 1,000 single-key calls: GET 1.0 ms ->
-- 0.22 ms each; a 10,000-key GET was unchanged (~0.35 s).
SET plan_cache_mode = force_generic_plan
-- Index reads only, whatever the statistics (docs/internals/storage.md).
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_op       JSONB;
    v_kind     TEXT;
    v_ttl      BIGINT;
    v_expect   BIGINT;
    v_by       BIGINT;
    v_problem  TEXT;
    -- Point operations, parallel arrays sorted in the lock order.
    o_idx      INTEGER[] := '{}';
    o_kind     TEXT[] := '{}';
    o_ns       TEXT[] := '{}';
    o_key      TEXT[] := '{}';
    o_op       JSONB[] := '{}';
    o_n        INTEGER := 0;
    -- Validated list operations.
    l_idx      INTEGER[] := '{}';
    l_ns       TEXT[] := '{}';
    l_prefix   TEXT[] := '{}';
    l_after    TEXT[] := '{}';
    l_limit    INTEGER[] := '{}';
    -- Gets of keys the batch does not write (answered in step 3).
    g_idx      INTEGER[] := '{}';
    g_ns       TEXT[] := '{}';
    g_key      TEXT[] := '{}';
    g_n        INTEGER := 0;
    -- Results of the other point operations.
    r_idx      INTEGER[] := '{}';
    r_ns       TEXT[] := '{}';
    r_key      TEXT[] := '{}';
    r_applied  BOOLEAN[] := '{}';
    r_value    JSONB[] := '{}';
    r_version  BIGINT[] := '{}';
    r_expires  TIMESTAMPTZ[] := '{}';
    r_n        INTEGER := 0;
    r_mark     INTEGER;
    -- One key at a time.
    v_first    INTEGER;   -- the current key's group in the sorted arrays
    v_last     INTEGER;
    v_pos      INTEGER;
    v_tns      TEXT;
    v_tkey     TEXT;
    v_writes   BOOLEAN;
    v_row      RECORD;
    v_phys     BOOLEAN;   -- the row exists physically (and is locked)
    v_live     BOOLEAN;   -- the key exists in the simulated state
    v_value    JSONB;
    v_version  BIGINT;
    v_expires  TIMESTAMPTZ;
    v_created  TIMESTAMPTZ;
    v_dirty    BOOLEAN;
    v_ok       BOOLEAN;
    v_cur      BIGINT;
    v_expiry   JSONB;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_tenant IS NULL THEN
        RAISE EXCEPTION 'kv_apply_v1: a tenant is required' USING ERRCODE = '22023';
    END IF;
    IF p_ops IS NULL OR jsonb_typeof(p_ops) <> 'array' THEN
        RAISE EXCEPTION 'kv_apply_v1: p_ops must be a JSON array of operations' USING ERRCODE = '22023';
    END IF;

    -- 1. Validate the whole batch before touching a row, in one query rather
    -- than several plpgsql statements per operation; the first problem in
    -- array order is the error. Branches are CASE, not OR/AND, so a cast is
    -- only evaluated after the type check guarding it.
    SELECT v.problem INTO v_problem
    FROM (
        SELECT e.idx, CASE
            WHEN e.kind IS NULL OR e.kind NOT IN ('get', 'put', 'incr', 'delete', 'list') THEN
                format('kv_apply_v1: operation %s: expected an object whose "op" is get, put, incr, delete or list', e.idx)
            WHEN NOT queen.kv_namespace_ok_v1(e.ns) THEN
                format('invalid KV namespace %s: expected 1 to 128 characters of A-Z a-z 0-9 _ . : -',
                       COALESCE(quote_literal(e.ns), 'NULL'))
            WHEN e.kind = 'list' THEN CASE
                WHEN jsonb_typeof(e.op -> 'prefix') NOT IN ('string', 'null')
                  OR jsonb_typeof(e.op -> 'after') NOT IN ('string', 'null') THEN
                    format('kv_apply_v1: operation %s: prefix and after must be strings or null', e.idx)
                WHEN octet_length(e.op ->> 'prefix') > 1024 OR octet_length(e.op ->> 'after') > 1024 THEN
                    format('kv_apply_v1: operation %s: prefix and after are at most 1024 bytes', e.idx)
                WHEN NOT queen.kv_is_int_v1(e.op -> 'limit') THEN
                    format('kv_apply_v1: operation %s: limit must be an integer', e.idx)
                WHEN (e.op ->> 'limit')::NUMERIC NOT BETWEEN 0 AND 10000 THEN
                    format('kv_apply_v1: operation %s: limit %s is out of range 0..10000', e.idx, e.op ->> 'limit')
                END
            WHEN e.key IS NULL OR octet_length(e.key) NOT BETWEEN 1 AND 1024 THEN
                -- Text cannot hold NUL (nor can jsonb decode \u0000 to text).
                format('invalid KV key %s: expected 1 to 1024 bytes without NUL',
                       COALESCE(quote_literal(left(e.key, 64)), 'NULL'))
            WHEN e.kind = 'put' THEN CASE
                WHEN NOT e.op ? 'value' THEN
                    format('kv_apply_v1: operation %s: put needs a "value" (JSON null is a value)', e.idx)
                -- Forever is an explicit opt-in: the member must be there.
                WHEN NOT e.op ? 'ttl_ms' THEN
                    format('kv_apply_v1: operation %s: put needs "ttl_ms" (a positive integer, or null for forever)', e.idx)
                WHEN NOT queen.kv_is_int_v1(e.op -> 'ttl_ms') THEN
                    format('kv_apply_v1: operation %s: ttl_ms must be an integer or null', e.idx)
                WHEN (e.op ->> 'ttl_ms')::NUMERIC <= 0 THEN
                    format('kv_apply_v1: operation %s: ttl_ms must be positive, got %s', e.idx, e.op ->> 'ttl_ms')
                WHEN NOT queen.kv_is_int_v1(e.op -> 'expect') THEN
                    format('kv_apply_v1: operation %s: expect must be an integer or null', e.idx)
                WHEN jsonb_typeof(e.op -> 'if_absent') NOT IN ('boolean', 'null') THEN
                    format('kv_apply_v1: operation %s: if_absent must be a boolean', e.idx)
                WHEN (e.op ->> 'if_absent')::BOOLEAN AND (e.op ->> 'expect')::NUMERIC <> 0 THEN
                    format('kv_apply_v1: operation %s: if_absent contradicts expect %s', e.idx, e.op ->> 'expect')
                END
            WHEN e.kind = 'incr' THEN CASE
                WHEN NOT queen.kv_is_int_v1(e.op -> 'by') THEN
                    format('kv_apply_v1: operation %s: by must be an integer', e.idx)
                WHEN NOT (jsonb_typeof(e.op -> 'expiry') IS NULL
                          OR jsonb_typeof(e.op -> 'expiry') = 'null'
                          OR e.op -> 'expiry' IN ('"keep"'::JSONB, '"forever"'::JSONB)
                          OR (jsonb_typeof(e.op -> 'expiry') = 'number' AND queen.kv_is_int_v1(e.op -> 'expiry'))) THEN
                    format('kv_apply_v1: operation %s: expiry must be "keep", "forever" or a ttl in ms', e.idx)
                WHEN CASE WHEN jsonb_typeof(e.op -> 'expiry') = 'number'
                          THEN (e.op ->> 'expiry')::NUMERIC <= 0 ELSE false END THEN
                    format('kv_apply_v1: operation %s: ttl_ms must be positive, got %s', e.idx, e.op ->> 'expiry')
                END
            WHEN e.kind = 'delete' AND NOT queen.kv_is_int_v1(e.op -> 'expect') THEN
                format('kv_apply_v1: operation %s: expect must be an integer or null', e.idx)
            END AS problem
        FROM (
            SELECT (x.ord - 1)::INTEGER AS idx, x.op,
                   CASE WHEN jsonb_typeof(x.op) = 'object' AND jsonb_typeof(x.op -> 'op') = 'string'
                        THEN x.op ->> 'op' END AS kind,
                   CASE WHEN jsonb_typeof(x.op -> 'ns') = 'string' THEN x.op ->> 'ns' END AS ns,
                   CASE WHEN jsonb_typeof(x.op -> 'key') = 'string' THEN x.op ->> 'key' END AS key
            FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS x(op, ord)
        ) e
    ) v
    WHERE v.problem IS NOT NULL
    ORDER BY v.idx
    LIMIT 1;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = '22023';
    END IF;

    -- The point operations sorted by (namespace, key) COLLATE "C", then
    -- op_index (the lock order, and the array order within a key), and the
    -- list operations.
    SELECT COALESCE(array_agg(e.idx ORDER BY e.ns COLLATE "C", e.key COLLATE "C", e.idx), '{}')
    INTO o_idx
    FROM (SELECT (x.ord - 1)::INTEGER AS idx, x.op ->> 'ns' AS ns, x.op ->> 'key' AS key
          FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS x(op, ord)
          WHERE x.op ->> 'op' <> 'list') e;
    -- One sort above; the other arrays follow its permutation.
    SELECT array_agg(p_ops -> s.idx ->> 'op' ORDER BY s.n),
           array_agg(p_ops -> s.idx ->> 'ns' ORDER BY s.n),
           array_agg(p_ops -> s.idx ->> 'key' ORDER BY s.n),
           array_agg(p_ops -> s.idx ORDER BY s.n)
    INTO o_kind, o_ns, o_key, o_op
    FROM unnest(o_idx) WITH ORDINALITY AS s(idx, n);
    o_n := cardinality(o_idx);

    SELECT COALESCE(array_agg(e.idx ORDER BY e.idx), '{}'),
           array_agg(e.op ->> 'ns' ORDER BY e.idx),
           array_agg(e.op ->> 'prefix' ORDER BY e.idx),
           array_agg(e.op ->> 'after' ORDER BY e.idx),
           array_agg(COALESCE((e.op ->> 'limit')::NUMERIC, 100)::INTEGER ORDER BY e.idx)
    INTO l_idx, l_ns, l_prefix, l_after, l_limit
    FROM (SELECT (x.ord - 1)::INTEGER AS idx, x.op
          FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS x(op, ord)) e
    WHERE e.op ->> 'op' = 'list';

    -- 2. Point operations, key by key in the lock order: walk the sorted
    -- arrays group by group (one group = one key).
    v_first := 1;
    WHILE v_first <= o_n LOOP
        v_tns := o_ns[v_first];
        v_tkey := o_key[v_first];
        v_last := v_first;
        v_writes := o_kind[v_first] <> 'get';
        WHILE v_last < o_n AND o_ns[v_last + 1] = v_tns COLLATE "C"
                           AND o_key[v_last + 1] = v_tkey COLLATE "C" LOOP
            v_last := v_last + 1;
            v_writes := v_writes OR o_kind[v_last] <> 'get';
        END LOOP;
        -- A key only read is not locked: its gets are answered by one join
        -- in step 3 (the same answer as here, since nothing in the batch
        -- writes it, and no per-key statement).
        IF NOT v_writes THEN
            FOR v_pos IN v_first .. v_last LOOP
                g_n := g_n + 1;
                g_idx[g_n] := o_idx[v_pos];
                g_ns[g_n] := v_tns;
                g_key[g_n] := v_tkey;
            END LOOP;
            v_first := v_last + 1;
            CONTINUE;
        END IF;
        r_mark := r_n;
        LOOP
            r_n := r_mark;   -- a retry discards the key's simulated results
            SELECT k.value, k.version, k.expires_at, k.created_at INTO v_row
            FROM queen.kv k
            WHERE k.tenant_id = p_tenant AND k.namespace = v_tns AND k.key = v_tkey
            FOR UPDATE;
            v_phys := FOUND;
            v_live := v_phys AND queen.kv_live_v1(v_row.expires_at, v_now);
            IF v_live THEN
                v_value := v_row.value;
                v_version := v_row.version;
                v_expires := v_row.expires_at;
                v_created := v_row.created_at;
            ELSE
                v_value := NULL;
                v_version := NULL;
                v_expires := NULL;
                v_created := NULL;
            END IF;
            v_dirty := false;

            FOR v_pos IN v_first .. v_last LOOP
                v_op := o_op[v_pos];
                v_kind := o_kind[v_pos];
                v_cur := queen.kv_ver_v1(CASE WHEN v_live THEN v_version END, v_expires, v_now);
                IF v_kind = 'get' THEN
                    CONTINUE WHEN NOT v_live;
                    v_ok := true;
                ELSIF v_kind = 'put' THEN
                    v_expect := (v_op ->> 'expect')::NUMERIC::BIGINT;
                    IF COALESCE((v_op ->> 'if_absent')::BOOLEAN, false) THEN
                        v_expect := 0;
                    END IF;
                    v_ok := v_expect IS NULL OR v_expect = v_cur;
                    IF v_ok THEN
                        IF NOT v_live THEN
                            v_created := v_now;   -- a new lineage
                        END IF;
                        v_live := true;
                        v_value := v_op -> 'value';
                        v_version := nextval('queen.kv_version_seq');
                        v_ttl := (v_op ->> 'ttl_ms')::NUMERIC::BIGINT;
                        v_expires := CASE WHEN v_ttl IS NOT NULL THEN v_now + v_ttl * INTERVAL '1 millisecond' END;
                        v_dirty := true;
                    END IF;
                ELSIF v_kind = 'incr' THEN
                    v_by := COALESCE((v_op ->> 'by')::NUMERIC::BIGINT, 1);
                    v_expiry := COALESCE(v_op -> 'expiry', '"keep"'::JSONB);
                    IF jsonb_typeof(v_expiry) = 'null' THEN
                        v_expiry := '"keep"'::JSONB;
                    END IF;
                    IF v_live THEN
                        IF jsonb_typeof(v_value) <> 'number' OR NOT queen.kv_is_int_v1(v_value) THEN
                            RAISE EXCEPTION 'KV INCR of %/%: the stored value % is not an integer', v_tns, v_tkey, left(v_value::TEXT, 64)
                                USING ERRCODE = '22023';
                        END IF;
                        -- bigint overflow raises 22003 here.
                        v_value := to_jsonb(v_value::NUMERIC::BIGINT + v_by);
                    ELSE
                        IF v_expiry = '"keep"'::JSONB THEN
                            RAISE EXCEPTION 'KV INCR of %/% creates the key: it needs TTL or FOREVER', v_tns, v_tkey
                                USING ERRCODE = '22023';
                        END IF;
                        v_live := true;
                        v_created := v_now;
                        v_value := to_jsonb(v_by);
                    END IF;
                    IF v_expiry = '"forever"'::JSONB THEN
                        v_expires := NULL;
                    ELSIF jsonb_typeof(v_expiry) = 'number' THEN
                        v_expires := v_now + (v_expiry #>> '{}')::NUMERIC::BIGINT * INTERVAL '1 millisecond';
                    END IF;
                    v_version := nextval('queen.kv_version_seq');
                    v_ok := true;
                    v_dirty := true;
                ELSE  -- delete
                    v_expect := (v_op ->> 'expect')::NUMERIC::BIGINT;
                    v_ok := v_live AND (v_expect IS NULL OR v_expect = v_cur);
                    IF v_ok THEN
                        v_live := false;
                        v_value := NULL;
                        v_version := NULL;
                        v_expires := NULL;
                        v_created := NULL;
                        v_dirty := true;
                    END IF;
                END IF;
                r_n := r_n + 1;
                r_idx[r_n] := o_idx[v_pos];
                r_ns[r_n] := v_tns;
                r_key[r_n] := v_tkey;
                r_applied[r_n] := v_ok;
                r_value[r_n] := CASE WHEN v_live THEN v_value END;
                r_version[r_n] := CASE WHEN v_live THEN v_version ELSE 0 END;
                r_expires[r_n] := CASE WHEN v_live THEN v_expires END;
            END LOOP;

            -- Write the key's final state once.
            EXIT WHEN NOT v_dirty;
            IF v_phys AND v_live THEN
                UPDATE queen.kv k
                SET value = v_value, version = v_version, expires_at = v_expires,
                    created_at = v_created, updated_at = v_now
                WHERE k.tenant_id = p_tenant AND k.namespace = v_tns AND k.key = v_tkey;
                EXIT;
            ELSIF v_phys THEN
                DELETE FROM queen.kv k
                WHERE k.tenant_id = p_tenant AND k.namespace = v_tns AND k.key = v_tkey;
                EXIT;
            ELSIF v_live THEN
                INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
                VALUES (p_tenant, v_tns, v_tkey, v_value, v_version, v_expires, v_created, v_now)
                ON CONFLICT (tenant_id, namespace, key) DO NOTHING;
                -- Not inserted: a concurrent writer created the key first
                -- (we waited for it). Re-read it locked and re-run.
                EXIT WHEN FOUND;
            ELSE
                EXIT;   -- created and deleted within the batch: nothing to write
            END IF;
        END LOOP;
        v_first := v_last + 1;
    END LOOP;

    -- 3. Results in op_index order; lists last-evaluated, in key order.
    RETURN QUERY
    SELECT x.op_index, x.namespace, x.key, x.applied, x.value, x.version, x.expires_at
    FROM (
        SELECT r.idx AS op_index, r.ns AS namespace, r.key AS key, r.applied, r.value,
               r.version, r.expires_at
        FROM unnest(r_idx[1:r_n], r_ns[1:r_n], r_key[1:r_n], r_applied[1:r_n],
                    r_value[1:r_n], r_version[1:r_n], r_expires[1:r_n])
             AS r(idx, ns, key, applied, value, version, expires_at)
        UNION ALL
        SELECT g.idx, k.namespace::TEXT, k.key::TEXT, true, k.value, k.version, k.expires_at
        FROM unnest(g_idx[1:g_n], g_ns[1:g_n], g_key[1:g_n]) AS g(idx, ns, key)
        -- LATERAL with LIMIT, so not flattened into a join: a primary-key
        -- probe per key whatever the statistics. As a join, the generic
        -- plan of a session that planned while queen.kv was small (300
        -- rows) hashed it over every row of the table on each GET, and
        -- kept doing so as the table grew.
        CROSS JOIN LATERAL (
            SELECT k.namespace, k.key, k.value, k.version, k.expires_at
            FROM queen.kv k
            WHERE k.tenant_id = p_tenant AND k.namespace = g.ns AND k.key = g.key
            LIMIT 1) k
        WHERE queen.kv_live_v1(k.expires_at, v_now)
        UNION ALL
        SELECT l.idx, m.namespace::TEXT, m.key::TEXT, true, m.value, m.version, m.expires_at
        FROM unnest(l_idx, l_ns, l_prefix, l_after, l_limit) AS l(idx, ns, prefix, after, lim)
        CROSS JOIN LATERAL (
            SELECT k.namespace, k.key, k.value, k.version, k.expires_at
            FROM queen.kv k
            WHERE k.tenant_id = p_tenant
              AND k.namespace = l.ns
              AND k.key >= COALESCE(l.prefix, '') COLLATE "C"
              AND (l.after IS NULL OR k.key > l.after COLLATE "C")
              AND (l.prefix IS NULL OR queen.kv_prefix_end_v1(l.prefix) IS NULL
                   OR k.key < queen.kv_prefix_end_v1(l.prefix) COLLATE "C")
              AND (l.prefix IS NULL OR starts_with(k.key, l.prefix))
              AND queen.kv_live_v1(k.expires_at, v_now)
            ORDER BY k.key COLLATE "C"
            LIMIT l.lim
        ) m
    ) x
    ORDER BY x.op_index, x.key COLLATE "C";
END
$$;
