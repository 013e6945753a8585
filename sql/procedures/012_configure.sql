-- 012_configure: CREATE QUEUE / ALTER QUEUE.

-- Creates or alters a queue's configuration. p_options is a JSON object
-- {option: value} with durations already in the column's unit (seconds,
-- except retry_delay and min_pop_wait_time in milliseconds). Integers may
-- come as JSON numbers or numeric strings, booleans as JSON booleans or the
-- strings true/false/on/off, namespace and task as strings (null clears).
-- Modes and results:
--   'create'               -> 'created'; an existing queue is 42710;
--   'create_if_not_exists' -> 'created', or 'exists' with nothing changed;
--   'alter'                -> 'altered', changing only the named options; a
--                             missing queue is 42704.
-- An unknown option, a value of the wrong kind or out of range is 22023
-- (the message names the known options). Nothing changes on an error.
-- Locks: queues, the one row (insert, or FOR NO KEY UPDATE then update).
CREATE OR REPLACE FUNCTION queen.configure_queue_v1(
    p_queue   TEXT,
    p_options JSONB DEFAULT '{}',
    p_mode    TEXT DEFAULT 'create',
    p_tenant  UUID DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS TEXT
LANGUAGE plpgsql
AS $$
DECLARE
    -- option -> minimum; INTEGER columns except max_queue_size (BIGINT).
    v_ints    CONSTANT JSONB := '{"lease_time": 1, "retry_limit": 0, "retry_delay": 0,
        "dedup_window": 0, "delayed_processing": 0, "window_buffer": 0,
        "retention_seconds": 0, "completed_retention_seconds": 0,
        "max_wait_time_seconds": 0, "max_queue_size": 0, "priority": -2147483648,
        "min_pop_wait_time": 0, "max_in_flight": 1}';
    v_bools   CONSTANT TEXT[] := ARRAY['dead_letter_queue', 'dlq_after_max_retries',
        'retention_enabled', 'encryption_enabled', 'ordered'];
    v_texts   CONSTANT TEXT[] := ARRAY['namespace', 'task'];
    v_known   TEXT;
    v_options JSONB := COALESCE(p_options, '{}');
    v_norm    JSONB := '{}';
    v_key     TEXT;
    v_value   JSONB;
    v_num     NUMERIC;
    v_text    TEXT;
    v_id      UUID;
    v_ordered BOOLEAN;
    v_group   TEXT;
BEGIN
    PERFORM queen.tenant_guard_v1(p_tenant);
    IF p_queue IS NULL OR p_mode IS NULL
       OR p_mode NOT IN ('create', 'create_if_not_exists', 'alter') THEN
        RAISE EXCEPTION 'configure_queue_v1: needs a queue and a mode of create, create_if_not_exists or alter'
            USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(v_options) <> 'object' THEN
        RAISE EXCEPTION 'queue options must be a JSON object' USING ERRCODE = '22023';
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO v_known
    FROM (SELECT jsonb_object_keys(v_ints) AS k
          UNION ALL SELECT unnest(v_bools) UNION ALL SELECT unnest(v_texts)) known;

    FOR v_key, v_value IN SELECT e.key, e.value FROM jsonb_each(v_options) e LOOP
        IF v_ints ? v_key THEN
            v_text := CASE jsonb_typeof(v_value)
                          WHEN 'number' THEN v_value::TEXT
                          WHEN 'string' THEN v_value #>> '{}'
                      END;
            IF v_text IS NULL OR v_text !~ '^\s*-?[0-9]+(\.0*)?\s*$' THEN
                RAISE EXCEPTION 'queue option % needs an integer, got %', v_key, v_value
                    USING ERRCODE = '22023';
            END IF;
            v_num := v_text::NUMERIC;
            IF v_num < (v_ints ->> v_key)::NUMERIC
               OR v_num > (CASE WHEN v_key = 'max_queue_size' THEN 9223372036854775807
                                ELSE 2147483647 END) THEN
                RAISE EXCEPTION 'queue option % is out of range (% to %), got %',
                    v_key, v_ints ->> v_key,
                    CASE WHEN v_key = 'max_queue_size' THEN 9223372036854775807
                         ELSE 2147483647 END, v_value
                    USING ERRCODE = '22023';
            END IF;
            v_norm := v_norm || jsonb_build_object(v_key, trunc(v_num));
        ELSIF v_key = ANY (v_bools) THEN
            v_text := lower(CASE jsonb_typeof(v_value)
                                WHEN 'boolean' THEN v_value::TEXT
                                WHEN 'string' THEN btrim(v_value #>> '{}')
                            END);
            IF v_text IS NULL OR v_text NOT IN ('true', 'false', 'on', 'off') THEN
                RAISE EXCEPTION 'queue option % needs a boolean (true/false/on/off), got %', v_key, v_value
                    USING ERRCODE = '22023';
            END IF;
            v_norm := v_norm || jsonb_build_object(v_key, v_text IN ('true', 'on'));
        ELSIF v_key = ANY (v_texts) THEN
            IF jsonb_typeof(v_value) NOT IN ('string', 'null') THEN
                RAISE EXCEPTION 'queue option % needs a string, got %', v_key, v_value
                    USING ERRCODE = '22023';
            END IF;
            v_norm := v_norm || jsonb_build_object(v_key, v_value);
        ELSE
            RAISE EXCEPTION 'unknown queue option "%"; known options: %', v_key, v_known
                USING ERRCODE = '22023';
        END IF;
    END LOOP;

    IF p_mode = 'alter' THEN
        -- A new type converts the groups: the queue key first, before the
        -- queue row (032, log_group_convert_v1).
        IF v_norm ? 'ordered' THEN
            PERFORM pg_advisory_xact_lock(queen.log_queue_lock_key_v1(q.id))
            FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        END IF;
        SELECT q.id INTO v_id FROM queen.queues q
        WHERE q.tenant_id = p_tenant AND q.name = p_queue
        FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'queue "%" does not exist', p_queue USING ERRCODE = '42704';
        END IF;
    ELSE
        INSERT INTO queen.queues (tenant_id, name) VALUES (p_tenant, p_queue)
        ON CONFLICT (tenant_id, name) DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NULL THEN
            IF p_mode = 'create' THEN
                RAISE EXCEPTION 'queue "%" already exists', p_queue USING ERRCODE = '42710';
            END IF;
            RETURN 'exists';
        END IF;
    END IF;

    -- A new default type (`ordered`) converts every group of the queue
    -- that has none of its own (032: refused while one has anything in
    -- flight). An ephemeral queue's groups are ordered only.
    IF v_norm ? 'ordered' THEN
        IF NOT (v_norm ->> 'ordered')::BOOLEAN
           AND EXISTS (SELECT 1 FROM queen.ephemeral_queues e WHERE e.queue_id = v_id) THEN
            RAISE EXCEPTION 'queue "%" is ephemeral: its groups are ordered only', p_queue
                USING ERRCODE = '0A000';
        END IF;
        SELECT q.ordered INTO v_ordered FROM queen.queues q WHERE q.id = v_id;
        IF v_ordered IS DISTINCT FROM (v_norm ->> 'ordered')::BOOLEAN THEN
            FOR v_group IN
                SELECT m.consumer_group FROM queen.consumer_groups_metadata m
                WHERE m.queue_id = v_id AND m.ordered IS NULL
                ORDER BY m.consumer_group
            LOOP
                PERFORM queen.log_group_convert_v1(v_id, v_group, (v_norm ->> 'ordered')::BOOLEAN);
            END LOOP;
        END IF;
    END IF;

    -- jsonb_populate_record over the current row replaces exactly the keys
    -- present in v_norm and keeps every other column as it is.
    UPDATE queen.queues q
    SET (lease_time, retry_limit, retry_delay, dedup_window, dead_letter_queue,
         dlq_after_max_retries, delayed_processing, window_buffer, retention_seconds,
         completed_retention_seconds, retention_enabled, max_wait_time_seconds,
         max_queue_size, priority, namespace, task, encryption_enabled, min_pop_wait_time,
         ordered, max_in_flight)
        = (SELECT r.lease_time, r.retry_limit, r.retry_delay, r.dedup_window, r.dead_letter_queue,
                  r.dlq_after_max_retries, r.delayed_processing, r.window_buffer, r.retention_seconds,
                  r.completed_retention_seconds, r.retention_enabled, r.max_wait_time_seconds,
                  r.max_queue_size, r.priority, r.namespace, r.task, r.encryption_enabled,
                  r.min_pop_wait_time, r.ordered, r.max_in_flight
           FROM jsonb_populate_record(q, v_norm) r),
        updated_at = now()
    WHERE q.id = v_id;

    RETURN CASE WHEN p_mode = 'alter' THEN 'altered' ELSE 'created' END;
END
$$;
