"""SQLAlchemy 2 against queenwire, through its psycopg (3) and psycopg2
dialects: engine connect (with the dialect's first-connect queries),
inspect() of the queen views, reading a view, and queue statements in text()."""

import json

import sqlalchemy as sa
from sqlalchemy import exc, text

from compatlib import (DB, HOST, PORT, QUEEN_VIEWS, QUEUE_DEPTH_COLUMNS, USER, CheckFailed,
                       Reporter, expect, expect_eq, sqlstate_of)

r = Reporter("sqlalchemy")


def run_dialect(driver, tag):
    url = f"postgresql+{driver}://{USER}@{HOST}:{PORT}/{DB}"
    engine = sa.create_engine(url, connect_args={"connect_timeout": 10}, pool_size=2)
    Q = f"compat_sqlalchemy_{tag}"
    Q_IN, Q_OUT = Q + "_in", Q + "_out"
    p = f"{tag}_"

    def connect():
        with engine.connect() as c:
            expect_eq(c.execute(text("SELECT 1")).scalar(), 1, "select 1")
        expect(engine.dialect.server_version_info[0] >= 15, "server_version_info")

    r.check(p + "connect", connect)

    def select_params():
        with engine.connect() as c:
            row = c.execute(text("SELECT CAST(:a AS int) + 1, CAST(:b AS text)"),
                            {"a": 41, "b": "x"}).one()
            expect_eq(tuple(row), (42, "x"), "row")

    r.check(p + "select_params", select_params, needs=[p + "connect"])

    def views():
        names = set(sa.inspect(engine).get_view_names(schema="queen"))
        expect(QUEEN_VIEWS <= names, f"views {sorted(names)} lack {sorted(QUEEN_VIEWS - names)}")

    r.check(p + "inspect_view_names", views, needs=[p + "connect"])

    def view_columns():
        cols = sa.inspect(engine).get_columns("queue_depth", schema="queen")
        expect_eq([c["name"] for c in cols], QUEUE_DEPTH_COLUMNS, "columns")
        expect_eq(type(cols[1]["type"]).__name__, "TEXT", "queue column type")

    r.check(p + "inspect_view_columns", view_columns, needs=[p + "connect"])

    st = {}

    def round_trip():
        with engine.begin() as c:
            c.execute(text(f"CREATE QUEUE {Q}"))
        with engine.begin() as c:
            rows = c.execute(text("PUSH INTO :q VALUES (:p1), (:p2)"),
                             {"q": Q, "p1": json.dumps({"n": 1}), "p2": json.dumps({"n": 2})}).all()
            expect_eq([x.status for x in rows], ["queued", "queued"], "PUSH statuses")
        with engine.begin() as c:
            rows = c.execute(text("POP FROM :q LIMIT :n"), {"q": Q, "n": 5}).mappings().all()
            expect_eq([x["payload"] for x in rows], [{"n": 1}, {"n": 2}], "payloads")
            st["receipts"] = [x["receipt"] for x in rows]
        with engine.begin() as c:
            rows = c.execute(text("ACK :a, :b"), {"a": st["receipts"][0], "b": st["receipts"][1]}).all()
            expect_eq([x.status for x in rows], ["acked", "acked"], "ACK statuses")
        with engine.begin() as c:
            expect_eq(c.execute(text("POP FROM :q LIMIT 5"), {"q": Q}).all(), [], "POP again")

    r.check(p + "queue_round_trip", round_trip, needs=[p + "connect"])

    def read_view():
        md = sa.MetaData()
        depth = sa.Table("queue_depth", md, schema="queen", autoload_with=engine)
        with engine.connect() as c:
            row = c.execute(sa.select(depth.c.queue, depth.c.messages, depth.c.pending)
                            .where(depth.c.queue == Q)).one()
        expect_eq(tuple(row), (Q, 2, 0), "queue_depth row")

    r.check(p + "read_view", read_view, needs=[p + "queue_round_trip"])

    def dialect_error():
        with engine.connect() as c:
            try:
                c.execute(text("POP FROM :q LIMIT 0"), {"q": Q})
            except exc.DBAPIError as e:
                expect_eq(sqlstate_of(e), "22023", "sqlstate")
                c.rollback()
                expect_eq(c.execute(text("SELECT 7")).scalar(), 7, "usable after the error")
                return
        raise CheckFailed("no exception for LIMIT 0")

    r.check(p + "dialect_error_sqlstate", dialect_error, needs=[p + "connect"])

    def queue_state(c):
        return [tuple(x) for x in c.execute(
            text("SELECT queue, partitions, messages, pending, dead_lettered FROM queen.queue_depth "
                 "WHERE queue IN (:a, :b) ORDER BY queue"), {"a": Q_IN, "b": Q_OUT}).all()]

    def tx_rollback():
        with engine.begin() as c:
            c.execute(text(f"CREATE QUEUE {Q_IN}"))
            c.execute(text(f"CREATE QUEUE {Q_OUT}"))
            mid = c.execute(text("PUSH INTO :q VALUES (:p)"),
                            {"q": Q_IN, "p": json.dumps({"job": 1})}).one().message_id
        with engine.connect() as c:
            before = queue_state(c)
            c.commit()
            # SQLAlchemy's autobegin: one transaction around all three statements.
            row = c.execute(text("POP FROM :q"), {"q": Q_IN}).one()
            c.execute(text("PUSH INTO :q VALUES (:p)"), {"q": Q_OUT, "p": json.dumps({"done": 1})})
            expect_eq(c.execute(text("ACK :r"), {"r": row.receipt}).one().status, "acked", "ACK")
            c.rollback()
            expect_eq(queue_state(c), before, "queue_depth after rollback")
            again = c.execute(text("POP FROM :q LIMIT 5"), {"q": Q_IN}).all()
            expect_eq([x.message_id for x in again], [mid], "message back in the input queue")
            expect_eq(c.execute(text("POP FROM :q LIMIT 5"), {"q": Q_OUT}).all(), [], "output queue")
            c.execute(text("ACK :r"), {"r": again[0].receipt})
            c.commit()

    r.check(p + "tx_rollback", tx_rollback, needs=[p + "connect"])
    engine.dispose()


run_dialect("psycopg", "psycopg")
run_dialect("psycopg2", "psycopg2")
