-- queenwire: schema `queen`, shared tables.
--
-- Applied at EVERY boot, one statement per transaction, before the files in
-- procedures/ (lexical order). Every statement is idempotent and a re-apply
-- leaves the catalog unchanged. Rules this file keeps (they hold for every
-- file under sql/):
--   * Tables are declared whole in CREATE TABLE IF NOT EXISTS, which takes no
--     lock on an existing table. There is no ALTER TABLE ... ADD COLUMN IF NOT
--     EXISTS here: it takes ACCESS EXCLUSIVE even when the column exists, so it
--     would stall the tables at each rolling restart. A fresh database is the
--     only supported upgrade path (see the seed's "Retired objects").
--   * Secondary indexes are created inside DO blocks that look in the catalog
--     first: CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table BEFORE
--     it checks the name, i.e. it queues behind every open write transaction
--     and every writer queues behind it, at every boot.
--   * Names that are sorted to define a lock order (partition names for
--     provisioning, consumer groups for the consumer-row order) are
--     COLLATE "C": byte order is the same on every host and libc/ICU version,
--     so two brokers can never take the same rows in opposite orders.

CREATE SCHEMA IF NOT EXISTS queen;

-- One row per queue: the single queue identity in the system; everything else
-- references queues(id). Identity is (tenant_id, name).
-- Units: every duration column is seconds except retry_delay and
-- min_pop_wait_time (milliseconds); configure_queue_v1 receives values
-- already converted to the column's unit.
CREATE TABLE IF NOT EXISTS queen.queues (
    id                          UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The default tenant, so an unscoped caller lands where pre-tenancy
    -- callers always did.
    tenant_id                   UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    name                        TEXT COLLATE "C" NOT NULL,
    -- Lease of a POP when the statement gives no LEASE (seconds).
    lease_time                  INTEGER NOT NULL DEFAULT 60 CHECK (lease_time > 0),
    -- n = at most n + 1 deliveries: the first n failures answer 'retry'.
    retry_limit                 INTEGER NOT NULL DEFAULT 3 CHECK (retry_limit >= 0),
    -- How long a FAILED ack blocks the partition for its group (ms).
    retry_delay                 INTEGER NOT NULL DEFAULT 1000 CHECK (retry_delay >= 0),
    -- Transaction-id dedup horizon (seconds); 0 = dedup off.
    dedup_window                INTEGER NOT NULL DEFAULT 3600 CHECK (dedup_window >= 0),
    -- false: an exhausted message is skipped and counted
    -- (log_consumers.failed_count) instead of stored in queen.log_dlq.
    dead_letter_queue           BOOLEAN NOT NULL DEFAULT true,
    -- Exhausting retry_limit dead-letters; false behaves like
    -- dead_letter_queue = false for retry exhaustion (skip and count).
    dlq_after_max_retries       BOOLEAN NOT NULL DEFAULT true,
    -- A message is invisible to POP until it is this old (seconds).
    delayed_processing          INTEGER NOT NULL DEFAULT 0 CHECK (delayed_processing >= 0),
    -- A partition is invisible to POP until its newest write is this old
    -- (seconds): a debounce.
    window_buffer               INTEGER NOT NULL DEFAULT 0 CHECK (window_buffer >= 0),
    -- Retention policy, applied by the elected maintainer (006; seconds,
    -- 0 = that rule is off). On by default: a disk that only grows is not a
    -- default an operator should have to discover (SEMANTICS.md).
    --   retention_seconds: a segment whose newest message is older goes,
    --     consumed or not. Off by default: unconsumed messages are never
    --     deleted by age unless the queue says so.
    --   completed_retention_seconds: a segment every group's cursor has
    --     passed goes once its newest message is this old. 7 days: long
    --     enough to replay and for a new group FROM BEGINNING, short enough
    --     that an acknowledged stream stays bounded.
    retention_seconds           INTEGER NOT NULL DEFAULT 0 CHECK (retention_seconds >= 0),
    completed_retention_seconds INTEGER NOT NULL DEFAULT 604800 CHECK (completed_retention_seconds >= 0),
    retention_enabled           BOOLEAN NOT NULL DEFAULT true,
    -- Pending messages older than this go to the DLQ by maintenance
    -- (seconds; 0 = never).
    max_wait_time_seconds       INTEGER NOT NULL DEFAULT 0 CHECK (max_wait_time_seconds >= 0),
    -- Pending messages allowed before a PUSH fails with 54000; 0 = unlimited.
    max_queue_size              BIGINT NOT NULL DEFAULT 0 CHECK (max_queue_size >= 0),
    priority                    INTEGER NOT NULL DEFAULT 0,
    namespace                   TEXT,
    task                        TEXT,
    encryption_enabled          BOOLEAN NOT NULL DEFAULT false,
    -- Shortest WAIT a POP on this queue parks for (ms); 0 = no floor.
    min_pop_wait_time           INTEGER NOT NULL DEFAULT 0 CHECK (min_pop_wait_time >= 0),
    created_at                  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at                  TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Declared with the table (no separate CREATE INDEX, see above); the
    -- ON CONFLICT (tenant_id, name) of every provisioning path infers it.
    CONSTRAINT queues_tenant_name_uk UNIQUE (tenant_id, name)
);

-- Per (queue, consumer group): the group's existence and its subscription,
-- fixed at first sight: the group's first POP is the only writer that creates
-- a row (SEEK and DROP GROUP require one). Queue-scoped only: a group
-- subscribes to the whole queue.
-- Place in the global lock order: with its queue, after queen.queues and
-- before queen.log_partitions (the seed's list does not name this table).
-- DROP GROUP takes the row FOR UPDATE and SEEK FOR KEY SHARE before any
-- partition or consumer row, which is what keeps a dropped group from
-- getting cursors back from a concurrent SEEK or POP; a POP takes it FOR
-- KEY SHARE SKIP LOCKED before creating consumer rows of the group, and
-- inserts a row only under a try-advisory lock, so it never waits here.
CREATE TABLE IF NOT EXISTS queen.consumer_groups_metadata (
    queue_id               UUID NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    consumer_group         TEXT COLLATE "C" NOT NULL,
    -- 'beginning' | 'now' | 'timestamp'.
    subscription_mode      TEXT NOT NULL DEFAULT 'beginning'
        CHECK (subscription_mode IN ('beginning', 'now', 'timestamp')),
    -- NULL for 'beginning'; for 'now' the instant of first sight. A partition
    -- the group first meets later starts after its last message older than
    -- this (queen.log_cursor_at_v1), so 'now' also holds for partitions
    -- created after the subscription.
    subscription_at        TIMESTAMPTZ,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The seed's cgm_identity_uk covers partition-scoped rows with a nullable
    -- partition column (NULLS NOT DISTINCT); this build has only queue-scoped
    -- rows, so the identity is plain (queue_id, consumer_group).
    CONSTRAINT cgm_identity_uk PRIMARY KEY (queue_id, consumer_group),
    CHECK ((subscription_mode = 'beginning') = (subscription_at IS NULL))
);

-- Secrets the proxy keeps in the database (e.g. the receipt HMAC key), so
-- every proxy sharing the database authenticates the others' receipts.
CREATE TABLE IF NOT EXISTS queen.proxy_secrets (
    name       TEXT PRIMARY KEY,
    secret     BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One row per pass of a retention or cleanup task (006), written by the
-- queenwire that held the task's lease (029) for that cycle: who ran it,
-- when, and what it deleted. The operator's record of how far retention
-- went, and the proof that one runner ran per cycle. Global, not per
-- tenant: a pass spans every tenant. A leaf of the global lock order
-- (insert-only; its writer prunes rows older than 7 days).
CREATE TABLE IF NOT EXISTS queen.retention_history (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- 'retention' (segments) or 'cleanup' (empty partitions).
    task             TEXT NOT NULL,
    -- The lease holder that ran the pass (029's holder: pid and instance).
    holder           TEXT NOT NULL,
    started_at       TIMESTAMPTZ NOT NULL,
    -- The end of the pass (database clock).
    executed_at      TIMESTAMPTZ NOT NULL,
    -- Partitions trimmed (retention) or deleted (cleanup).
    partitions       INTEGER NOT NULL,
    segments         BIGINT NOT NULL,
    messages         BIGINT NOT NULL,
    -- Compressed bytes of the deleted segments (log_segments.byte_size).
    bytes            BIGINT NOT NULL,
    -- Of messages, those the age rule deleted before every group had
    -- acknowledged them (counted, never silent).
    expired_messages BIGINT NOT NULL
);

-- ---------------------------------------------------------------------------
-- Proxy helpers
-- ---------------------------------------------------------------------------

-- The receipt secret every queenwire on this database shares: the first
-- proxy's candidate wins, every later one reads it back. Receipts signed by
-- one proxy are therefore accepted by all of them. No tenant: one secret per
-- database. Locks: the proxy_secrets row 'receipt' (a concurrent first
-- insert waits for the other proxy's boot transaction, holding nothing else).
CREATE OR REPLACE FUNCTION queen.receipt_secret_v1(p_candidate BYTEA)
RETURNS BYTEA
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO queen.proxy_secrets (name, secret) VALUES ('receipt', p_candidate)
    ON CONFLICT (name) DO NOTHING;
    RETURN (SELECT s.secret FROM queen.proxy_secrets s WHERE s.name = 'receipt');
END;
$$;

-- Fails the calling statement with the proxy's own SQLSTATE and message.
-- The proxy calls it when it rejects a dialect statement itself (a forged
-- receipt, a bad parameter), so that PostgreSQL aborts a surrounding
-- transaction block exactly as it would for an error of its own. No tenant,
-- no locks.
CREATE OR REPLACE FUNCTION queen.raise_v1(p_code TEXT, p_message TEXT)
RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message;
END;
$$;

-- ---------------------------------------------------------------------------
-- Tenancy enforced by PostgreSQL (see 034_privileges.sql and
-- docs/security.md)
-- ---------------------------------------------------------------------------

-- The backend login roles that act for one tenant. queenwire runs a user's
-- plain SQL (and the dialect statements inside the user's own transaction
-- blocks) on connections logged in as the tenant's role, so `session_user`
-- names the tenant there, and no SET can change it (SET ROLE only reaches
-- roles the session user is a member of, and a tenant role is a member of
-- queen_client alone).
CREATE TABLE IF NOT EXISTS queen.tenant_roles (
    role_name  NAME PRIMARY KEY,
    tenant_id  UUID NOT NULL,
    read_only  BOOLEAN NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The guard every tenant-facing queen.* function runs first. Those functions
-- are SECURITY DEFINER, so inside them current_user is the schema owner and
-- session_user is the role that logged in:
--   the owner itself, or a role mapped to no tenant that is a member of
--   queen_engine (queenwire's own connections): any tenant, the proxy
--   vouches for it;
--   a tenant role: only its own tenant, else 42501;
--   anything else: 42501.
-- STABLE, so in a LANGUAGE sql body it is a one-time filter evaluated before
-- any row is read. Reads queen.tenant_roles by primary key; no locks.
CREATE OR REPLACE FUNCTION queen.tenant_guard_v1(p_tenant UUID)
RETURNS BOOLEAN
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF session_user = current_user OR queen.tenant_visible_v1(p_tenant) THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'role % may not act for tenant %', session_user, p_tenant
        USING ERRCODE = '42501';
END;
$$;

-- Whether the session's login role may see rows of p_tenant: the filter of
-- the queen views (011). The owner and queenwire's engine role see every
-- tenant, a tenant role its own, any other role none. Never raises. SECURITY
-- DEFINER (034), so current_user is the owner even when a view calls it.
-- No locks.
CREATE OR REPLACE FUNCTION queen.tenant_visible_v1(p_tenant UUID)
RETURNS BOOLEAN
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_tenant UUID;
BEGIN
    IF session_user = current_user THEN
        RETURN true;
    END IF;
    SELECT r.tenant_id INTO v_tenant FROM queen.tenant_roles r WHERE r.role_name = session_user;
    IF FOUND THEN
        RETURN v_tenant = p_tenant;
    END IF;
    RETURN to_regrole('queen_engine') IS NOT NULL
       AND pg_has_role(session_user, 'queen_engine', 'MEMBER');
END;
$$;
