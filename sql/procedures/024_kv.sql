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

-- A JSON member that must be an integer (or JSON null / absent -> NULL).
-- Accepts any integral JSON number within BIGINT (5, 5.0, 1e3); anything
-- else is 22023 naming p_what. Pure.
CREATE OR REPLACE FUNCTION queen.kv_json_bigint_v1(p_value JSONB, p_what TEXT)
RETURNS BIGINT
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    v_num NUMERIC;
BEGIN
    IF p_value IS NULL OR jsonb_typeof(p_value) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_value) = 'number' THEN
        v_num := p_value::NUMERIC;
        IF v_num = trunc(v_num)
           AND v_num BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
            RETURN v_num::BIGINT;
        END IF;
    END IF;
    RAISE EXCEPTION '%: expected an integer within bigint, got %', p_what, p_value
        USING ERRCODE = '22023';
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
-- from the snapshot and not locked. No other space is touched.
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
AS $$
#variable_conflict use_column
DECLARE
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_count    INTEGER;
    v_op       JSONB;
    v_kind     TEXT;
    v_ns       TEXT;
    v_key      TEXT;
    v_ttl      BIGINT;
    v_expect   BIGINT;
    v_by       BIGINT;
    v_limit    BIGINT;
    -- Validated point operations, parallel arrays.
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
    l_n        INTEGER := 0;
    -- Results of the point operations.
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
    v_target   RECORD;
    v_keyop    RECORD;
    v_writes   BOOLEAN;
    v_row      RECORD;
    v_phys     BOOLEAN;   -- the row exists physically (and is locked when v_writes)
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
    IF p_tenant IS NULL THEN
        RAISE EXCEPTION 'kv_apply_v1: a tenant is required' USING ERRCODE = '22023';
    END IF;
    IF p_ops IS NULL OR jsonb_typeof(p_ops) <> 'array' THEN
        RAISE EXCEPTION 'kv_apply_v1: p_ops must be a JSON array of operations' USING ERRCODE = '22023';
    END IF;

    -- 1. Validate everything before touching a row.
    FOR v_op, v_count IN
        SELECT e.op, (e.ord - 1)::INTEGER FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS e(op, ord)
        ORDER BY e.ord
    LOOP
        IF jsonb_typeof(v_op) <> 'object' OR jsonb_typeof(v_op -> 'op') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'kv_apply_v1: operation % is not an object with an "op" string', v_count
                USING ERRCODE = '22023';
        END IF;
        v_kind := v_op ->> 'op';
        IF v_kind NOT IN ('get', 'put', 'incr', 'delete', 'list') THEN
            RAISE EXCEPTION 'kv_apply_v1: operation %: unknown op "%" (expected get, put, incr, delete or list)',
                v_count, v_kind USING ERRCODE = '22023';
        END IF;
        v_ns := CASE WHEN jsonb_typeof(v_op -> 'ns') = 'string' THEN v_op ->> 'ns' END;
        IF NOT queen.kv_namespace_ok_v1(v_ns) THEN
            RAISE EXCEPTION 'invalid KV namespace %: expected 1 to 128 characters of A-Z a-z 0-9 _ . : -',
                COALESCE(quote_literal(v_ns), 'NULL') USING ERRCODE = '22023';
        END IF;

        IF v_kind = 'list' THEN
            IF (v_op ? 'prefix' AND jsonb_typeof(v_op -> 'prefix') NOT IN ('string', 'null'))
               OR (v_op ? 'after' AND jsonb_typeof(v_op -> 'after') NOT IN ('string', 'null'))
               OR octet_length(v_op ->> 'prefix') > 1024 OR octet_length(v_op ->> 'after') > 1024 THEN
                RAISE EXCEPTION 'kv_apply_v1: operation %: prefix and after must be strings of at most 1024 bytes, or null',
                    v_count USING ERRCODE = '22023';
            END IF;
            v_limit := COALESCE(queen.kv_json_bigint_v1(v_op -> 'limit', 'KV LIST limit'), 100);
            IF v_limit < 0 OR v_limit > 10000 THEN
                RAISE EXCEPTION 'kv_apply_v1: operation %: limit % is out of range 0..10000', v_count, v_limit
                    USING ERRCODE = '22023';
            END IF;
            l_n := l_n + 1;
            l_idx[l_n] := v_count;
            l_ns[l_n] := v_ns;
            l_prefix[l_n] := v_op ->> 'prefix';
            l_after[l_n] := v_op ->> 'after';
            l_limit[l_n] := v_limit;
            CONTINUE;
        END IF;

        v_key := CASE WHEN jsonb_typeof(v_op -> 'key') = 'string' THEN v_op ->> 'key' END;
        IF v_key IS NULL OR octet_length(v_key) NOT BETWEEN 1 AND 1024 THEN
            RAISE EXCEPTION 'invalid KV key %: expected 1 to 1024 bytes without NUL',
                COALESCE(quote_literal(left(v_key, 64)), 'NULL') USING ERRCODE = '22023';
        END IF;

        IF v_kind = 'put' THEN
            IF NOT v_op ? 'value' THEN
                RAISE EXCEPTION 'kv_apply_v1: operation %: put needs a "value" (JSON null is a value)', v_count
                    USING ERRCODE = '22023';
            END IF;
            -- Forever is an explicit opt-in: the member must be there.
            IF NOT v_op ? 'ttl_ms' THEN
                RAISE EXCEPTION 'kv_apply_v1: operation %: put needs "ttl_ms" (a positive integer, or null for forever)',
                    v_count USING ERRCODE = '22023';
            END IF;
            v_ttl := queen.kv_json_bigint_v1(v_op -> 'ttl_ms', 'KV PUT ttl_ms');
            IF v_ttl IS NOT NULL AND v_ttl <= 0 THEN
                RAISE EXCEPTION 'kv_apply_v1: operation %: ttl_ms must be positive, got %', v_count, v_ttl
                    USING ERRCODE = '22023';
            END IF;
            v_expect := queen.kv_json_bigint_v1(v_op -> 'expect', 'KV PUT expect');
            IF v_op ? 'if_absent' AND jsonb_typeof(v_op -> 'if_absent') NOT IN ('boolean', 'null') THEN
                RAISE EXCEPTION 'kv_apply_v1: operation %: if_absent must be a boolean', v_count
                    USING ERRCODE = '22023';
            END IF;
            IF COALESCE((v_op ->> 'if_absent')::BOOLEAN, false) AND v_expect <> 0 THEN
                RAISE EXCEPTION 'kv_apply_v1: operation %: if_absent contradicts expect %', v_count, v_expect
                    USING ERRCODE = '22023';
            END IF;
        ELSIF v_kind = 'incr' THEN
            PERFORM queen.kv_json_bigint_v1(v_op -> 'by', 'KV INCR by');
            v_expiry := v_op -> 'expiry';
            IF NOT (v_expiry IS NULL OR jsonb_typeof(v_expiry) = 'null'
                    OR v_expiry IN ('"keep"'::JSONB, '"forever"'::JSONB)) THEN
                v_ttl := queen.kv_json_bigint_v1(v_expiry, 'KV INCR expiry (keep, forever or ttl_ms)');
                IF v_ttl <= 0 THEN
                    RAISE EXCEPTION 'kv_apply_v1: operation %: ttl_ms must be positive, got %', v_count, v_ttl
                        USING ERRCODE = '22023';
                END IF;
            END IF;
        ELSIF v_kind = 'delete' THEN
            PERFORM queen.kv_json_bigint_v1(v_op -> 'expect', 'KV DELETE expect');
        END IF;

        o_n := o_n + 1;
        o_idx[o_n] := v_count;
        o_kind[o_n] := v_kind;
        o_ns[o_n] := v_ns;
        o_key[o_n] := v_key;
        o_op[o_n] := v_op;
    END LOOP;

    -- 2. Point operations, key by key in the lock order.
    FOR v_target IN
        SELECT t.ns, t.key, bool_or(t.kind <> 'get') AS writes
        FROM unnest(o_ns, o_key, o_kind) AS t(ns, key, kind)
        GROUP BY t.ns, t.key
        ORDER BY t.ns COLLATE "C", t.key COLLATE "C"
    LOOP
        v_writes := v_target.writes;
        r_mark := r_n;
        LOOP
            r_n := r_mark;   -- a retry discards the key's simulated results
            IF v_writes THEN
                SELECT k.value, k.version, k.expires_at, k.created_at INTO v_row
                FROM queen.kv k
                WHERE k.tenant_id = p_tenant AND k.namespace = v_target.ns AND k.key = v_target.key
                FOR UPDATE;
            ELSE
                SELECT k.value, k.version, k.expires_at, k.created_at INTO v_row
                FROM queen.kv k
                WHERE k.tenant_id = p_tenant AND k.namespace = v_target.ns AND k.key = v_target.key;
            END IF;
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

            FOR v_keyop IN
                SELECT t.idx, t.kind, t.op
                FROM unnest(o_idx, o_ns, o_key, o_kind, o_op) AS t(idx, ns, key, kind, op)
                WHERE t.ns = v_target.ns AND t.key COLLATE "C" = v_target.key
                ORDER BY t.idx
            LOOP
                v_op := v_keyop.op;
                v_cur := queen.kv_ver_v1(CASE WHEN v_live THEN v_version END, v_expires, v_now);
                IF v_keyop.kind = 'get' THEN
                    CONTINUE WHEN NOT v_live;
                    v_ok := true;
                ELSIF v_keyop.kind = 'put' THEN
                    v_expect := queen.kv_json_bigint_v1(v_op -> 'expect', 'KV PUT expect');
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
                        v_ttl := queen.kv_json_bigint_v1(v_op -> 'ttl_ms', 'KV PUT ttl_ms');
                        v_expires := CASE WHEN v_ttl IS NOT NULL THEN v_now + v_ttl * INTERVAL '1 millisecond' END;
                        v_dirty := true;
                    END IF;
                ELSIF v_keyop.kind = 'incr' THEN
                    v_by := COALESCE(queen.kv_json_bigint_v1(v_op -> 'by', 'KV INCR by'), 1);
                    v_expiry := COALESCE(v_op -> 'expiry', '"keep"'::JSONB);
                    IF jsonb_typeof(v_expiry) = 'null' THEN
                        v_expiry := '"keep"'::JSONB;
                    END IF;
                    IF v_live THEN
                        v_value := to_jsonb(queen.kv_json_bigint_v1(v_value,
                                       format('KV INCR of %s/%s: the stored value', v_target.ns, v_target.key)) + v_by);
                    ELSE
                        IF v_expiry = '"keep"'::JSONB THEN
                            RAISE EXCEPTION 'KV INCR of %/% creates the key: it needs TTL or FOREVER', v_target.ns, v_target.key
                                USING ERRCODE = '22023';
                        END IF;
                        v_live := true;
                        v_created := v_now;
                        v_value := to_jsonb(v_by);
                    END IF;
                    IF v_expiry = '"forever"'::JSONB THEN
                        v_expires := NULL;
                    ELSIF jsonb_typeof(v_expiry) = 'number' THEN
                        v_expires := v_now + queen.kv_json_bigint_v1(v_expiry, 'KV INCR expiry') * INTERVAL '1 millisecond';
                    END IF;
                    v_version := nextval('queen.kv_version_seq');
                    v_ok := true;
                    v_dirty := true;
                ELSE  -- delete
                    v_expect := queen.kv_json_bigint_v1(v_op -> 'expect', 'KV DELETE expect');
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
                r_idx[r_n] := v_keyop.idx;
                r_ns[r_n] := v_target.ns;
                r_key[r_n] := v_target.key;
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
                WHERE k.tenant_id = p_tenant AND k.namespace = v_target.ns AND k.key = v_target.key;
                EXIT;
            ELSIF v_phys THEN
                DELETE FROM queen.kv k
                WHERE k.tenant_id = p_tenant AND k.namespace = v_target.ns AND k.key = v_target.key;
                EXIT;
            ELSIF v_live THEN
                INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
                VALUES (p_tenant, v_target.ns, v_target.key, v_value, v_version, v_expires, v_created, v_now)
                ON CONFLICT (tenant_id, namespace, key) DO NOTHING;
                -- Not inserted: a concurrent writer created the key first
                -- (we waited for it). Re-read it locked and re-run.
                EXIT WHEN FOUND;
            ELSE
                EXIT;   -- created and deleted within the batch: nothing to write
            END IF;
        END LOOP;
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
