-- 020_log_partition_counters: attaches the partition lifecycle triggers of
-- 019_worker_metrics to queen.log_partitions. Defines no functions (seed
-- 000). It runs after 001 (the table) and 019 (the functions), so a fresh
-- database has the triggers from its first boot; and it attaches each only
-- when absent: DROP TRIGGER takes ACCESS EXCLUSIVE and CREATE TRIGGER SHARE
-- ROW EXCLUSIVE on the engine's hottest table, so re-creating them at every
-- boot would stall every PUSH and POP behind each restart. Changing a
-- trigger's definition therefore needs a manual DROP TRIGGER; a changed
-- function body takes effect at the next boot (CREATE OR REPLACE FUNCTION
-- rebinds it without touching the table).
-- Locks: SHARE ROW EXCLUSIVE on queen.log_partitions, only on the boot that
-- attaches a trigger.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger t
                   WHERE t.tgrelid = 'queen.log_partitions'::REGCLASS
                     AND t.tgname = 'trg_partitions_created_counter') THEN
        CREATE TRIGGER trg_partitions_created_counter
            AFTER INSERT ON queen.log_partitions
            REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT
            EXECUTE FUNCTION queen.trg_partitions_created_counter_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger t
                   WHERE t.tgrelid = 'queen.log_partitions'::REGCLASS
                     AND t.tgname = 'trg_partitions_deleted_counter') THEN
        CREATE TRIGGER trg_partitions_deleted_counter
            AFTER DELETE ON queen.log_partitions
            REFERENCING OLD TABLE AS old_rows
            FOR EACH STATEMENT
            EXECUTE FUNCTION queen.trg_partitions_deleted_counter_v1();
    END IF;
END
$$;
