"""psycopg 3 against queenwire: server-side binding (extended protocol),
prepared statements, binary results and pipeline mode."""

import json
import uuid

import psycopg
from psycopg.types.json import Jsonb

from compatlib import (ACK_COLUMNS, DB, HOST, PG_DB, PG_PORT, PG_SOCKET_DIR, PG_USER,
                       POP_COLUMNS, PORT, PUSH_COLUMNS, USER, CheckFailed, Reporter,
                       expect, expect_eq, sqlstate_of)

r = Reporter("psycopg3")
Q = "compat_psycopg3"           # round trip
Q_IN, Q_OUT = "compat_psycopg3_in", "compat_psycopg3_out"
Q_PIPE = "compat_psycopg3_pipe"
Q_BIN = "compat_psycopg3_bin"


def connect(**kw):
    return psycopg.connect(host=HOST, port=PORT, user=USER, dbname=DB,
                           connect_timeout=10, **kw)


def columns(cur):
    return [(d.name, d.type_code) for d in cur.description]


conn = r.check("connect", lambda: connect(autocommit=True))
if conn is None:
    raise SystemExit(0)


def select_params():
    cur = conn.cursor()
    expect_eq(type(cur).__name__, "Cursor", "cursor class (server-side binding)")
    row = cur.execute("SELECT %s::int + 1, %s::text, %s::jsonb ->> 'k'",
                      (41, "héllo", Jsonb({"k": "v"}))).fetchone()
    expect_eq(row, (42, "héllo", "v"), "row")


r.check("select_params", select_params)


def create_queue():
    cur = conn.execute(f"CREATE QUEUE {Q}")
    expect_eq(cur.statusmessage, "CREATE QUEUE", "command tag")


r.check("create_queue", create_queue)

pushed = {}


def push_json_param():
    cur = conn.execute("PUSH INTO %s VALUES (%s), (%s)",
                       (Q, Jsonb({"n": 1, "s": "a"}), json.dumps({"n": 2})))
    expect_eq([(n, t) for n, t in columns(cur)], [(n, o) for n, _, o in PUSH_COLUMNS],
              "PUSH columns")
    rows = cur.fetchall()
    expect_eq(len(rows), 2, "rows")
    expect(all(isinstance(x[0], uuid.UUID) for x in rows), "message_id decoded as UUID")
    expect_eq([(x[1], x[2], x[3], x[5]) for x in rows],
              [(Q, "Default", 0, "queued"), (Q, "Default", 1, "queued")], "rows")
    expect_eq(cur.statusmessage, "SELECT 2", "command tag")
    pushed["ids"] = [x[0] for x in rows]


r.check("push_json_param", push_json_param, needs=["create_queue"])

popped = {}


def pop_limit():
    cur = conn.execute("POP FROM %s LIMIT %s", (Q, 10))
    expect_eq(columns(cur), [(n, o) for n, _, o in POP_COLUMNS], "POP columns")
    rows = cur.fetchall()
    expect_eq([x[1] for x in rows], pushed["ids"], "message ids")
    expect_eq([x[5] for x in rows], [{"n": 1, "s": "a"}, {"n": 2}], "payloads")
    popped["receipts"] = [x[0] for x in rows]


r.check("pop_limit", pop_limit, needs=["push_json_param"])


def ack_receipts():
    rc = popped["receipts"]
    cur = conn.execute("ACK %s, %s", tuple(rc))
    expect_eq(columns(cur), [(n, o) for n, _, o in ACK_COLUMNS], "ACK columns")
    expect_eq(cur.fetchall(), [(rc[0], "acked"), (rc[1], "acked")], "rows")


r.check("ack_receipt_params", ack_receipts, needs=["pop_limit"])


def pop_empty():
    cur = conn.execute("POP FROM %s LIMIT %s", (Q, 10))
    expect_eq(cur.fetchall(), [], "rows")
    expect_eq(cur.statusmessage, "SELECT 0", "command tag")


r.check("pop_again_empty", pop_empty, needs=["ack_receipt_params"])


def dialect_error():
    try:
        conn.execute("POP FROM %s LIMIT %s", (Q, 0))
    except psycopg.errors.InvalidParameterValue as e:
        expect_eq(sqlstate_of(e), "22023", "sqlstate")
        return
    raise CheckFailed("no exception for LIMIT 0")


r.check("dialect_error_sqlstate", dialect_error)
r.check("usable_after_error",
        lambda: expect_eq(conn.execute("SELECT %s::int", (7,)).fetchone(), (7,), "row"))


def syntax_error():
    try:
        conn.execute("POP FROM")
    except psycopg.errors.SyntaxError as e:
        expect_eq(e.sqlstate, "42601", "sqlstate")
        expect(e.diag.statement_position is not None, "syntax error has a position")
        return
    raise CheckFailed("no exception for a syntax error")


r.check("syntax_error_position", syntax_error)


def queue_state(c, queues):
    return c.execute("SELECT queue, partitions, messages, pending, dead_lettered "
                     "FROM queen.queue_depth WHERE queue = ANY(%s) ORDER BY queue",
                     (list(queues),)).fetchall()


def setup_tx_queues(c, qin, qout):
    c.execute(f"CREATE QUEUE {qin}")
    c.execute(f"CREATE QUEUE {qout}")
    mid = c.execute("PUSH INTO %s VALUES (%s)", (qin, Jsonb({"job": 1}))).fetchone()[0]
    return mid


def tx_body(c, qin, qout):
    rows = c.execute("POP FROM %s LIMIT %s", (qin, 1)).fetchall()
    expect_eq(len(rows), 1, "POP in transaction")
    c.execute("PUSH INTO %s VALUES (%s)", (qout, Jsonb({"done": rows[0][5]}))).fetchall()
    acked = c.execute("ACK %s", (rows[0][0],)).fetchall()
    expect_eq(acked[0][1], "acked", "ACK in transaction")


def verify_untouched(c, qin, qout, mid, before):
    after = queue_state(c, [qin, qout])
    expect_eq(after, before, "queue_depth after rollback")
    again = c.execute("POP FROM %s LIMIT %s", (qin, 5)).fetchall()
    expect_eq([x[1] for x in again], [mid], "message back in the input queue")
    expect_eq(c.execute("POP FROM %s LIMIT 5", (qout,)).fetchall(), [], "output queue")
    c.execute("ACK %s", (again[0][0],))


def tx_rollback_nonautocommit():
    # psycopg's default: not autocommit, the first statement opens a transaction.
    mid = setup_tx_queues(conn, Q_IN, Q_OUT)
    before = queue_state(conn, [Q_IN, Q_OUT])
    c2 = connect()
    try:
        tx_body(c2, Q_IN, Q_OUT)
        expect_eq(c2.info.transaction_status, psycopg.pq.TransactionStatus.INTRANS,
                  "transaction status")
        c2.rollback()
    finally:
        c2.close()
    verify_untouched(conn, Q_IN, Q_OUT, mid, before)


r.check("tx_rollback", tx_rollback_nonautocommit)


def tx_rollback_block():
    qin, qout = Q_IN + "2", Q_OUT + "2"
    mid = setup_tx_queues(conn, qin, qout)
    before = queue_state(conn, [qin, qout])
    with conn.transaction():
        tx_body(conn, qin, qout)
        raise psycopg.Rollback()
    verify_untouched(conn, qin, qout, mid, before)


r.check("tx_rollback_transaction_block", tx_rollback_block)


def prepared():
    conn.execute(f"CREATE QUEUE {Q}_prep")
    for i in range(3):
        conn.execute("PUSH INTO %s VALUES (%s)", (Q + "_prep", Jsonb({"i": i})), prepare=True)
    got = []
    for _ in range(4):
        rows = conn.execute("POP FROM %s LIMIT %s", (Q + "_prep", 1), prepare=True).fetchall()
        for row in rows:
            got.append(row[5]["i"])
            conn.execute("ACK %s", (row[0],), prepare=True)
    expect_eq(got, [0, 1, 2], "payloads popped with a prepared POP")


r.check("prepared_statements", prepared)


def binary_results():
    conn.execute(f"CREATE QUEUE {Q_BIN}")
    cur = conn.cursor(binary=True)
    cur.execute("PUSH INTO %b PARTITION %b (payload, transaction_id) VALUES (%b, %b)",
                (Q_BIN, "p1", Jsonb({"bin": [1, 2]}), "tx-1"))
    pushed = cur.fetchone()
    expect(all(f == 1 for f in [cur.pgresult.fformat(i) for i in range(cur.pgresult.nfields)]),
           "PUSH result in binary format")
    expect_eq((pushed[1], pushed[2], pushed[3], pushed[4], pushed[5]),
              (Q_BIN, "p1", 0, "tx-1", "queued"), "PUSH row")
    cur.execute("POP FROM %b PARTITION %b LIMIT %b", (Q_BIN, "p1", 1))
    row = cur.fetchone()
    expect_eq(row[1], pushed[0], "message_id")
    expect_eq(row[5], {"bin": [1, 2]}, "payload")
    expect(row[9] is not None and row[9].tzinfo is not None, "created_at timestamptz")
    expect_eq(row[8], 0, "retry_count")
    cur.execute("ACK %b", (row[0],))
    expect_eq(cur.fetchone()[1], "acked", "ACK status")


r.check("binary_format", binary_results)


def pipeline():
    conn.execute(f"CREATE QUEUE {Q_PIPE}")
    with conn.pipeline():
        c1, c2, c3 = conn.cursor(), conn.cursor(), conn.cursor()
        c1.execute("PUSH INTO %s VALUES (%s)", (Q_PIPE, Jsonb({"p": 1})))
        c2.execute("PUSH INTO %s VALUES (%s), (%s)", (Q_PIPE, Jsonb({"p": 2}), Jsonb({"p": 3})))
        c3.execute("POP FROM %s LIMIT %s", (Q_PIPE, 10))
    expect_eq(len(c1.fetchall()) + len(c2.fetchall()), 3, "pushed rows")
    rows = c3.fetchall()
    expect_eq([x[5] for x in rows], [{"p": 1}, {"p": 2}, {"p": 3}], "popped payloads")
    with conn.pipeline():
        cur = conn.cursor()
        cur.executemany("ACK %s", [(x[0],) for x in rows], returning=True)
        statuses = []
        while True:
            statuses += [s for _, s in cur.fetchall()]
            if not cur.nextset():
                break
    expect_eq(statuses, ["acked"] * 3, "ACK statuses")


r.check("pipeline_mode", pipeline)


def pipeline_error():
    with conn.pipeline() as p:
        c1 = conn.cursor()
        c1.execute("SELECT 1")
        try:
            conn.execute("POP FROM %s LIMIT %s", (Q_PIPE, 0))
            p.sync()
        except psycopg.errors.InvalidParameterValue as e:
            expect_eq(e.sqlstate, "22023", "sqlstate")
        else:
            raise CheckFailed("no exception in pipeline")
        c2 = conn.execute("SELECT %s::int", (5,))
    expect_eq(c2.fetchone(), (5,), "pipeline usable after the error")


r.check("pipeline_error_recovery", pipeline_error)


def client_cursor():
    # psycopg 3's client-side binding cursor: simple protocol, values inlined.
    cur = psycopg.ClientCursor(conn)
    cur.execute("PUSH INTO %s VALUES (%s)", (Q, json.dumps({"client": True})))
    expect_eq(cur.fetchone()[5], "queued", "status")
    cur.execute("POP FROM %s", (Q,))
    row = cur.fetchone()
    expect_eq(row[5], {"client": True}, "payload")
    cur.execute("ACK %s", (row[0],))
    expect_eq(cur.fetchone()[1], "acked", "status")


r.check("client_side_cursor", client_cursor)


def client_cursor_jsonb():
    # ClientCursor inlines a Jsonb value with its cast: VALUES ('{"a": 1}'::jsonb).
    cur = psycopg.ClientCursor(conn)
    cur.execute("PUSH INTO %s VALUES (%s)", (Q, Jsonb({"cast": True})))
    expect_eq(cur.fetchone()[5], "queued", "status")
    cur.execute("POP FROM %s", (Q,))
    row = cur.fetchone()
    expect_eq(row[5], {"cast": True}, "payload")
    cur.execute("ACK %s", (row[0],))


r.check("client_side_cursor_jsonb", client_cursor_jsonb)



def cancel_waiting_pop():
    # conn.cancel() sends a CancelRequest on a new connection; a waiting POP
    # ends with 57014 and the session goes on.
    import threading
    conn.execute(f"CREATE QUEUE {Q}_wait")
    timer = threading.Timer(0.5, conn.cancel)
    timer.start()
    try:
        conn.execute("POP FROM %s WAIT '20s'", (Q + "_wait",))
        raise CheckFailed("POP WAIT was not cancelled")
    except psycopg.errors.QueryCanceled as e:
        expect_eq(e.sqlstate, "57014", "sqlstate")
    finally:
        timer.cancel()
    expect_eq(conn.execute("SELECT 1").fetchone(), (1,), "usable after the cancel")


r.check("cancel_waiting_pop", cancel_waiting_pop)


def options_startup_parameter():
    # libpq's "options" startup parameter (PGOPTIONS), the documented way to give
    # a session settings at connect time (SQLAlchemy's recipe for search_path too).
    with connect(autocommit=True, options="-c search_path=queen,public -c application_name=compat_opts") as c2:
        expect_eq(c2.execute("SELECT current_schemas(false)").fetchone()[0], ["queen", "public"],
                  "current_schemas(false)")
        expect_eq(c2.execute("SHOW application_name").fetchone()[0], "compat_opts", "application_name")
        expect(c2.execute("SELECT count(*) FROM queue_depth").fetchone()[0] >= 1, "unqualified view")


r.check("options_startup_parameter", options_startup_parameter)


def listen_in_transaction():
    # psycopg's default (autocommit off) runs LISTEN inside a transaction
    # block: it takes effect at commit() and not after rollback(), and
    # notifies() gets the notification while waiting on its socket.
    with connect() as listener, connect(autocommit=True) as sender:
        listener.execute("LISTEN compat_psycopg3_ch")
        listener.execute("LISTEN compat_psycopg3_undone")
        listener.rollback()
        listener.execute("LISTEN compat_psycopg3_ch")
        listener.commit()
        sender.execute("NOTIFY compat_psycopg3_undone, 'no'")
        sender.execute("NOTIFY compat_psycopg3_ch, 'yes'")
        got = [(n.channel, n.payload) for n in listener.notifies(timeout=10, stop_after=1)]
        expect_eq(got, [("compat_psycopg3_ch", "yes")], "notifications after commit")
        more = [(n.channel, n.payload) for n in listener.notifies(timeout=1)]
        expect_eq(more, [], "nothing of the rolled-back LISTEN")


r.check("listen_in_transaction", listen_in_transaction)


def pipeline_statuses(dsn, name, prepared_before):
    """libpq pipeline mode as psycopg's pq exposes it: five INSERTs through
    one prepared statement, the third a unique violation, then commit and a
    Sync; the result statuses up to the PIPELINE_SYNC, read without
    blocking (a reply that never comes fails)."""
    import select
    import time
    from psycopg import pq
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS compat_pipe_ins")
        c.execute("CREATE TABLE compat_pipe_ins (id int PRIMARY KEY)")
        c.execute("INSERT INTO compat_pipe_ins VALUES (3)")
    pg = pq.PGconn.connect(dsn.encode())
    sql = b"insert into compat_pipe_ins values ($1)"
    statuses = []

    def until_sync():
        deadline = time.monotonic() + 20
        while True:
            if pg.is_busy():
                ready, _, _ = select.select([pg.socket], [], [], max(0, deadline - time.monotonic()))
                if not ready:
                    raise CheckFailed(f"no PIPELINE_SYNC after {statuses}")
                pg.consume_input()
                continue
            res = pg.get_result()
            if res is None:
                continue
            statuses.append(pq.ExecStatus(res.status).name)
            if res.status == pq.ExecStatus.PIPELINE_SYNC:
                return

    try:
        pg.enter_pipeline_mode()
        if prepared_before:
            pg.send_prepare(name, sql)
            pg.pipeline_sync()
            until_sync()
        else:
            pg.send_prepare(name, sql)
        for i in range(1, 6):
            pg.send_query_prepared(name, [str(i).encode()])
        pg.send_query_params(b"commit", None)
        pg.pipeline_sync()
        until_sync()
        pg.exit_pipeline_mode()
        count = pg.exec_(b"SELECT count(*) FROM compat_pipe_ins").get_value(0, 0)
        return statuses, count
    finally:
        pg.finish()


def pipeline_violation_as_postgresql():
    expect(PG_SOCKET_DIR, "QW_PG_SOCKET_DIR is set (PostgreSQL reached directly)")
    proxy = f"host={HOST} port={PORT} user={USER} dbname={DB} connect_timeout=10"
    direct = f"host={PG_SOCKET_DIR} port={PG_PORT} user={PG_USER} dbname={PG_DB} connect_timeout=10"
    for name in (b"ins", b""):
        for prepared_before in (False, True):
            want = pipeline_statuses(direct, name, prepared_before)
            expect("FATAL_ERROR" in want[0] and "PIPELINE_ABORTED" in want[0],
                   f"PostgreSQL failed the pipeline: {want}")
            got = pipeline_statuses(proxy, name, prepared_before)
            expect_eq(got, want, f"statuses (name {name!r}, prepared before: {prepared_before})")


r.check("pipeline_violation_as_postgresql", pipeline_violation_as_postgresql)

conn.close()
