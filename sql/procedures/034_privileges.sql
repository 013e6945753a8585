-- 034_privileges: who may call what, enforced by PostgreSQL. Applied last,
-- after every function exists (CREATE OR REPLACE FUNCTION resets SECURITY
-- DEFINER and its settings; this file puts them back at every boot). Not one
-- of the seed's 001-033: the seed's catalogue names no roles, so this file
-- is queenwire's own, numbered after the seed's range.
--
-- The model (docs/security.md):
--   queen_engine  NOLOGIN. queenwire's own backend role is a member (the
--                 embedded superuser is implicitly). EXECUTE on every entry
--                 point; the tenant is a parameter it vouches for.
--   queen_client  NOLOGIN. Every tenant role is a member. USAGE on the
--                 schema, EXECUTE on the tenant-facing entry points (each
--                 runs queen.tenant_guard_v1 first: a tenant role only acts
--                 for its own tenant), SELECT on the views (filtered by
--                 queen.tenant_visible_v1). No privilege on any queen table
--                 or sequence: `DELETE FROM queen.log_segments` is 42501.
--   queen_t_<tenant hex>[_ro]
--                 LOGIN, one per tenant and policy, made by
--                 queen.tenant_role_ensure_v1 and listed in
--                 queen.tenant_roles. The _ro role starts every transaction
--                 read-only (default_transaction_read_only) and is granted
--                 nothing to write.
-- Entry points are SECURITY DEFINER with a fixed search_path (pg_temp last,
-- so a caller's temporary table cannot stand in for a queen table). Pure
-- helpers stay SECURITY INVOKER, so LANGUAGE sql helpers still inline.
-- Locks: catalog rows of the functions and roles named; nothing in queen.

-- Creates (or refreshes) the login role acting for one tenant, maps it in
-- queen.tenant_roles, and returns its name. p_password is what the role
-- logs in with (queenwire passes a SCRAM verifier of its own backend
-- password, never the password itself), NULL for none (trust or peer
-- setups). Needs an owner with CREATEROLE; engine only.
-- Locks: the queen.tenant_roles row of the role.
CREATE OR REPLACE FUNCTION queen.tenant_role_ensure_v1(
    p_tenant    UUID,
    p_read_only BOOLEAN,
    p_password  TEXT
) RETURNS NAME
LANGUAGE plpgsql
AS $$
DECLARE
    v_role NAME := 'queen_t_' || replace(p_tenant::TEXT, '-', '')
                   || CASE WHEN p_read_only THEN '_ro' ELSE '' END;
BEGIN
    -- Shared catalogs are written only when something changes, so brokers
    -- booting at once (on one or several databases) rarely collide; a
    -- collision is an error the caller retries.
    IF to_regrole(v_role) IS NULL THEN
        BEGIN
            EXECUTE format('CREATE ROLE %I LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', v_role);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(v_role, 'queen_client', 'MEMBER') THEN
        EXECUTE format('GRANT queen_client TO %I', v_role);
    END IF;
    IF p_password IS NOT NULL THEN
        EXECUTE format('ALTER ROLE %I PASSWORD %L', v_role, p_password);
    END IF;
    IF p_read_only AND NOT EXISTS (
        SELECT 1 FROM pg_db_role_setting s
        WHERE s.setrole = to_regrole(v_role) AND s.setdatabase = 0
          AND 'default_transaction_read_only=on' = ANY (s.setconfig)) THEN
        EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', v_role);
    END IF;
    INSERT INTO queen.tenant_roles (role_name, tenant_id, read_only)
    VALUES (v_role, p_tenant, p_read_only)
    ON CONFLICT (role_name) DO UPDATE
        SET tenant_id = EXCLUDED.tenant_id, read_only = EXCLUDED.read_only;
    RETURN v_role;
END;
$$;

-- The two group roles. Roles are cluster-wide: a second database with its
-- own queen schema shares them. An owner without CREATEROLE cannot make
-- them: the boot goes on with a warning, and queenwire then refuses a users
-- file that needs tenant roles.
DO $$
DECLARE
    v_role TEXT;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['queen_engine', 'queen_client'] LOOP
        IF to_regrole(v_role) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- another database's boot made it just now
            END;
        END IF;
    END LOOP;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'queenwire: cannot create roles queen_engine and queen_client (%); tenant isolation by PostgreSQL is unavailable', SQLERRM;
END
$$;

-- Nothing in queen is anyone's by default (queen.ephemeral_peers among
-- them: its secrets let a queenwire act for any tenant, so no client role
-- may read it; tests/privileges.rs checks it).
REVOKE ALL ON ALL TABLES IN SCHEMA queen FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA queen FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA queen FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA queen REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- Entry points: SECURITY DEFINER, fixed search_path; EXECUTE by role.
DO $$
DECLARE
    v_client TEXT[] := ARRAY[
        'log_push_v1', 'log_pop_v1', 'log_pop_v2', 'log_hotlist_seed_v1',
        'log_ack_v1', 'log_ack_v2', 'log_renew_v1', 'log_unclaim_v1',
        'log_namespace_queues_v2', 'log_ack_shared_v1', 'log_renew_shared_v1',
        'log_unclaim_shared_v1', 'log_group_set_type_v1', 'consumer_groups_v2',
        'ephemeral_configure_v1', 'ephemeral_queues_v1', 'ephemeral_commit_mark_v1',
        'log_seek_group_v1', 'log_drop_group_v1', 'get_dlq_messages_v1',
        'log_show_queues_v1', 'log_show_partitions_v1', 'log_show_groups_v1',
        'configure_queue_v1', 'delete_queue_v1', 'kv_apply_v1',
        'timer_schedule_v1', 'timer_cancel_v1', 'timer_list_v1',
        'timer_schedule_v2', 'timer_list_v2',
        'tenant_visible_v1',
        'log_browse_v1', 'log_browse_message_v1', 'log_browse_v2', 'log_browse_message_v2',
        'consumer_groups_v1', 'consumer_group_detail_v1', 'lagging_partitions_v1',
        'consumer_group_subscribe_v1',
        'dlq_replay_take_v1', 'trace_messages_v1', 'trace_messages_v2', 'status_v1', 'queue_ops_v1',
        'stream_create_v1', 'stream_drop_v1', 'stream_set_paused_v1',
        'stream_list_v1', 'stream_show_v1'];
    v_engine TEXT[] := ARRAY[
        'receipt_secret_v1', 'log_expire_pending_v1', 'maintenance_try_lease_v1',
        'log_retention_work_v1', 'log_retention_step_v1', 'log_partition_cleanup_step_v1',
        'log_retention_record_v1', 'log_retained_bytes_step_v1',
        'kv_prune_shard_v1', 'kv_usage_rollup_v1', 'kv_quota_poll_v1',
        'timer_claim_due_v1', 'timer_delete_fired_v1', 'timer_postpone_v1',
        'tenant_role_ensure_v1', 'metrics_flush_v1', 'metrics_rollup_v1',
        'tenant_purge_step_v1',
        'ephemeral_names_v1', 'ephemeral_claim_v2', 'ephemeral_commit_take_v1',
        'ephemeral_peer_publish_v1', 'ephemeral_peer_v1', 'ephemeral_release_v1',
        'stream_active_v1', 'stream_cycle_begin_v1', 'stream_state_load_v1',
        'stream_cycle_save_v1', 'stream_idle_partitions_v1', 'stream_note_error_v1',
        'stream_extrema_v1', 'log_push_many_v1', 'log_push_ids_v1'];
    v_roles BOOLEAN := to_regrole('queen_engine') IS NOT NULL
                       AND to_regrole('queen_client') IS NOT NULL;
    v_fn REGPROCEDURE;
    v_name TEXT;
BEGIN
    FOR v_fn, v_name IN
        SELECT p.oid::REGPROCEDURE, p.proname::TEXT
        FROM pg_proc p
        WHERE p.pronamespace = 'queen'::REGNAMESPACE
          AND p.proname = ANY (v_client || v_engine)
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, queen, pg_temp', v_fn);
        IF v_roles THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO queen_engine', v_fn);
            IF v_name = ANY (v_client) THEN
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO queen_client', v_fn);
            END IF;
        END IF;
    END LOOP;
    IF v_roles THEN
        -- raise_v1 touches nothing: invoker rights are enough.
        GRANT EXECUTE ON FUNCTION queen.raise_v1(TEXT, TEXT) TO queen_client, queen_engine;
        -- A stream's expressions run with the caller's rights, never the
        -- owner's: stream_eval_v1 stays SECURITY INVOKER (007).
        GRANT EXECUTE ON FUNCTION queen.stream_eval_v1(TEXT, JSONB) TO queen_client, queen_engine;
        GRANT USAGE ON SCHEMA queen TO queen_client, queen_engine;
        GRANT SELECT ON queen.queue_depth, queen.group_lag, queen.dlq_counts, queen.throughput
            TO queen_client, queen_engine;
        GRANT SELECT ON queen.status, queen.throughput_per_minute TO queen_client, queen_engine;
        GRANT SELECT ON queen.queue_stats, queen.namespace_stats, queen.task_stats,
                        queen.queue_lag, queen.queue_ops_per_minute
            TO queen_client, queen_engine;
        GRANT SELECT ON queen.stream_windows TO queen_client, queen_engine;
        -- Never a client's, even after a broad GRANT by hand: its secrets
        -- let a queenwire act for any tenant (030, the internal channel).
        REVOKE ALL ON queen.ephemeral_peers FROM queen_client;
    END IF;
END
$$;
