"""psycopg2 against queenwire: client-side binding, everything over the simple
query protocol, implicit BEGIN (psycopg2 is not autocommit by default)."""

import json

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from compatlib import (DB, HOST, POP_COLUMNS, PORT, PUSH_COLUMNS, USER, CheckFailed,
                       Reporter, expect, expect_eq)

r = Reporter("psycopg2")
Q = "compat_psycopg2"
Q_IN, Q_OUT = "compat_psycopg2_in", "compat_psycopg2_out"


def connect():
    return psycopg2.connect(host=HOST, port=PORT, user=USER, dbname=DB, connect_timeout=10)


conn = r.check("connect", connect)
if conn is None:
    raise SystemExit(0)
conn.autocommit = True


def q(sql, args=None):
    cur = conn.cursor()
    cur.execute(sql, args)
    return cur


def select_params():
    cur = q("SELECT %s::int + 1, %s, %s::jsonb ->> 'k'", (41, "it's", psycopg2.extras.Json({"k": "v"})))
    expect_eq(cur.fetchone(), (42, "it's", "v"), "row")
    expect(b"'it''s'" in cur.query, f"client-side binding inlines values: {cur.query!r}")


r.check("select_params", select_params)
r.check("create_queue", lambda: expect_eq(q(f"CREATE QUEUE {Q}").statusmessage, "CREATE QUEUE", "tag"))

state = {}


def push():
    cur = q("PUSH INTO %s VALUES (%s), (%s)",
            (Q, psycopg2.extras.Json({"n": 1}), json.dumps({"n": 2, "q": "it's"})))
    expect_eq([d.name for d in cur.description], [n for n, _, _ in PUSH_COLUMNS], "columns")
    expect_eq([d.type_code for d in cur.description], [o for _, _, o in PUSH_COLUMNS], "types")
    rows = cur.fetchall()
    expect_eq([(x[1], x[3], x[5]) for x in rows], [(Q, 0, "queued"), (Q, 1, "queued")], "rows")
    state["ids"] = [x[0] for x in rows]


r.check("push_json_param", push, needs=["create_queue"])


def pop():
    cur = q("POP FROM %s LIMIT %s", (Q, 10))
    expect_eq([d.name for d in cur.description], [n for n, _, _ in POP_COLUMNS], "columns")
    expect_eq([d.type_code for d in cur.description], [o for _, _, o in POP_COLUMNS], "types")
    rows = cur.fetchall()
    expect_eq([x[1] for x in rows], state["ids"], "message ids")
    expect_eq([x[5] for x in rows], [{"n": 1}, {"n": 2, "q": "it's"}], "payloads")
    state["receipts"] = [x[0] for x in rows]


r.check("pop_limit", pop, needs=["push_json_param"])


def ack():
    rc = state["receipts"]
    cur = q("ACK %s, %s", tuple(rc))
    expect_eq(cur.fetchall(), [(rc[0], "acked"), (rc[1], "acked")], "rows")


r.check("ack_receipt_params", ack, needs=["pop_limit"])
r.check("pop_again_empty", lambda: expect_eq(q("POP FROM %s LIMIT %s", (Q, 10)).fetchall(), [], "rows"),
        needs=["ack_receipt_params"])


def dialect_error():
    try:
        q("POP FROM %s LIMIT %s", (Q, 0))
    except psycopg2.errors.InvalidParameterValue as e:
        expect_eq(e.pgcode, "22023", "pgcode")
        return
    raise CheckFailed("no exception for LIMIT 0")


r.check("dialect_error_sqlstate", dialect_error)
r.check("usable_after_error", lambda: expect_eq(q("SELECT %s", (7,)).fetchone(), (7,), "row"))


def queue_state(c, queues):
    cur = c.cursor()
    cur.execute("SELECT queue, partitions, messages, pending, dead_lettered FROM queen.queue_depth "
                "WHERE queue = ANY(%s) ORDER BY queue", (list(queues),))
    return cur.fetchall()


def tx_rollback():
    q(f"CREATE QUEUE {Q_IN}; CREATE QUEUE {Q_OUT}")
    mid = q("PUSH INTO %s VALUES (%s)", (Q_IN, json.dumps({"job": 1}))).fetchone()[0]
    before = queue_state(conn, [Q_IN, Q_OUT])
    c2 = connect()  # not autocommit: psycopg2 sends BEGIN before the first statement
    try:
        cur = c2.cursor()
        cur.execute("POP FROM %s LIMIT 1", (Q_IN,))
        row = cur.fetchone()
        expect(row is not None, "POP in transaction returned a row")
        expect_eq(c2.get_transaction_status(), psycopg2.extensions.TRANSACTION_STATUS_INTRANS,
                  "transaction status")
        cur.execute("PUSH INTO %s VALUES (%s)", (Q_OUT, json.dumps({"done": 1})))
        cur.execute("ACK %s", (row[0],))
        expect_eq(cur.fetchone()[1], "acked", "ACK in transaction")
        c2.rollback()
    finally:
        c2.close()
    expect_eq(queue_state(conn, [Q_IN, Q_OUT]), before, "queue_depth after rollback")
    again = q("POP FROM %s LIMIT 5", (Q_IN,)).fetchall()
    expect_eq([x[1] for x in again], [mid], "message back in the input queue")
    expect_eq(q("POP FROM %s LIMIT 5", (Q_OUT,)).fetchall(), [], "output queue")
    q("ACK %s", (again[0][0],))


r.check("tx_rollback", tx_rollback)


def tx_error_in_block():
    # A failed queue statement aborts the block like failed SQL (25P02 after it).
    c2 = connect()
    try:
        cur = c2.cursor()
        cur.execute("SELECT 1")
        try:
            cur.execute("POP FROM %s LIMIT 0", (Q,))
            raise CheckFailed("no exception")
        except psycopg2.errors.InvalidParameterValue:
            pass
        try:
            cur.execute("SELECT 2")
            raise CheckFailed("statement after the error was run")
        except psycopg2.errors.InFailedSqlTransaction as e:
            expect_eq(e.pgcode, "25P02", "pgcode")
        c2.rollback()
        cur.execute("SELECT 3")
        expect_eq(cur.fetchone(), (3,), "row after rollback")
        c2.rollback()
    finally:
        c2.close()


r.check("tx_error_aborts_block", tx_error_in_block)


def multi_statement():
    cur = q(f"PUSH INTO {Q} VALUES ('{{\"m\": 1}}'); SELECT 1 AS one; POP FROM {Q} LIMIT 1")
    row = cur.fetchone()  # psycopg2 keeps the last result
    expect_eq(row[5], {"m": 1}, "payload of the last statement")
    q("ACK %s", (row[0],))


r.check("multi_statement_query", multi_statement)


def subscribe_from_datetime():
    # psycopg2 inlines a datetime with its cast: SUBSCRIBE FROM '2000-01-01T00:00:00+00:00'::timestamptz
    import datetime
    q(f"CREATE QUEUE {Q}_sub")
    q("PUSH INTO %s VALUES (%s)", (Q + "_sub", json.dumps({"t": 1})))
    since = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    rows = q("POP FROM %s GROUP g1 SUBSCRIBE FROM %s", (Q + "_sub", since)).fetchall()
    expect_eq([x[5] for x in rows], [{"t": 1}], "payloads")
    q("ACK %s", (rows[0][0],))


r.check("subscribe_from_datetime_param", subscribe_from_datetime)
conn.close()
