"""asyncpg against queenwire: extended protocol with binary formats both ways,
its named prepared-statement cache, and its type introspection queries."""

import asyncio
import json
import uuid

import asyncpg

from compatlib import (ACK_COLUMNS, DB, HOST, POP_COLUMNS, PORT, PUSH_COLUMNS, USER,
                       CheckFailed, Reporter, describe_exception, expect, expect_eq)

r = Reporter("asyncpg")
Q = "compat_asyncpg"
Q_IN, Q_OUT = "compat_asyncpg_in", "compat_asyncpg_out"


class AsyncChecks:
    def __init__(self, rep):
        self.r = rep

    async def check(self, name, coro_fn, needs=()):
        missing = [n for n in needs if n in self.r.failed]
        if missing:
            self.r.fail(name, f"not run: {', '.join(missing)} failed")
            return None
        try:
            value = await asyncio.wait_for(coro_fn(), timeout=30)
        except CheckFailed as e:
            self.r.fail(name, str(e))
            return None
        except asyncio.TimeoutError:
            self.r.fail(name, "timed out after 30 s")
            return None
        except Exception as e:
            self.r.fail(name, describe_exception(e))
            return None
        self.r.ok(name)
        return value


async def connect(**kw):
    return await asyncpg.connect(host=HOST, port=PORT, user=USER, database=DB,
                                 timeout=10, ssl=False, **kw)


async def main():
    a = AsyncChecks(r)
    conn = await a.check("connect", connect)
    if conn is None:
        return
    st = {}

    async def select_params():
        row = await conn.fetchrow("SELECT $1::int + 1 AS a, $2::text AS b, $3::uuid AS c",
                                  41, "x", uuid.UUID(int=5))
        expect_eq(tuple(row), (42, "x", uuid.UUID(int=5)), "row")

    await a.check("select_params", select_params)

    async def create_queue():
        expect_eq(await conn.execute(f"CREATE QUEUE {Q}"), "CREATE QUEUE", "command tag")

    await a.check("create_queue", create_queue)

    async def push():
        # asyncpg asks Describe for the parameter types: the payload is jsonb, so
        # it is sent in binary (version byte 1 + JSON text).
        rows = await conn.fetch("PUSH INTO $1 VALUES ($2), ($3)", Q,
                                json.dumps({"n": 1}), json.dumps({"n": 2}))
        expect_eq([(x["queue"], x["offset"], x["status"]) for x in rows],
                  [(Q, 0, "queued"), (Q, 1, "queued")], "rows")
        expect(isinstance(rows[0]["message_id"], uuid.UUID), "message_id decoded as UUID")
        st["ids"] = [x["message_id"] for x in rows]

    await a.check("push_json_param", push, needs=["create_queue"])

    async def pop():
        rows = await conn.fetch("POP FROM $1 LIMIT $2", Q, 10)
        expect_eq([x["message_id"] for x in rows], st["ids"], "message ids")
        expect_eq([json.loads(x["payload"]) for x in rows], [{"n": 1}, {"n": 2}], "payloads")
        expect(rows[0]["created_at"].tzinfo is not None, "created_at is timestamptz")
        expect_eq(rows[0]["retry_count"], 0, "retry_count")
        st["receipts"] = [x["receipt"] for x in rows]

    await a.check("pop_limit", pop, needs=["push_json_param"])

    async def ack():
        rc = st["receipts"]
        rows = await conn.fetch("ACK $1, $2", *rc)
        expect_eq([tuple(x) for x in rows], [(rc[0], "acked"), (rc[1], "acked")], "rows")

    await a.check("ack_receipt_params", ack, needs=["pop_limit"])
    await a.check("pop_again_empty",
                  lambda: _expect_rows(conn.fetch("POP FROM $1 LIMIT $2", Q, 10), []),
                  needs=["ack_receipt_params"])

    async def dialect_error():
        try:
            await conn.fetch("POP FROM $1 LIMIT $2", Q, 0)
        except asyncpg.exceptions.InvalidParameterValueError as e:
            expect_eq(e.sqlstate, "22023", "sqlstate")
            return
        raise CheckFailed("no exception for LIMIT 0")

    await a.check("dialect_error_sqlstate", dialect_error)
    await a.check("usable_after_error",
                  lambda: _expect_val(conn.fetchval("SELECT $1::int", 7), 7))

    async def describe():
        # A prepared statement's attributes come from Describe before execution.
        for sql, want in (("PUSH INTO $1 VALUES ($2)", PUSH_COLUMNS),
                          ("POP FROM $1 LIMIT $2", POP_COLUMNS),
                          ("ACK $1", ACK_COLUMNS)):
            stmt = await conn.prepare(sql)
            got = [(att.name, att.type.name) for att in stmt.get_attributes()]
            expect_eq(got, [(n, t) for n, t, _ in want], f"columns of {sql!r}")
        stmt = await conn.prepare("POP FROM $1 LIMIT $2")
        expect_eq([t.name for t in stmt.get_parameters()], ["text", "int4"], "POP parameter types")
        stmt = await conn.prepare("PUSH INTO $1 VALUES ($2)")
        expect_eq([t.name for t in stmt.get_parameters()], ["text", "jsonb"], "PUSH parameter types")

    await a.check("describe_columns_and_params", describe)

    async def stmt_cache():
        # The same text five times: asyncpg's statement cache reuses one named
        # server-side statement (Parse once, Bind/Execute each time).
        await conn.execute(f"CREATE QUEUE {Q}_cache")
        for i in range(5):
            await conn.fetch("PUSH INTO $1 VALUES ($2)", Q + "_cache", json.dumps({"i": i}))
        got = []
        for _ in range(6):
            for row in await conn.fetch("POP FROM $1 LIMIT $2", Q + "_cache", 1):
                got.append(json.loads(row["payload"])["i"])
                await conn.fetch("ACK $1", row["receipt"])
        expect_eq(got, [0, 1, 2, 3, 4], "payloads popped through the cache")
        cached = conn._stmt_cache  # asyncpg's LRU of named statements
        expect(len(cached) >= 3, f"statement cache holds the statements ({len(cached)})")

    await a.check("statement_cache", stmt_cache)

    async def prepared_explicit():
        stmt = await conn.prepare("PUSH INTO $1 VALUES ($2)")
        await stmt.fetch(Q, json.dumps({"prep": 1}))
        await stmt.fetch(Q, json.dumps({"prep": 2}))
        pop = await conn.prepare("POP FROM $1 LIMIT $2")
        rows = await pop.fetch(Q, 5)
        expect_eq([json.loads(x["payload"]) for x in rows], [{"prep": 1}, {"prep": 2}], "payloads")
        ackst = await conn.prepare("ACK $1")
        for x in rows:
            expect_eq((await ackst.fetchrow(x["receipt"]))["status"], "acked", "status")

    await a.check("prepared_statement_reuse", prepared_explicit)

    async def introspection():
        # set_type_codec runs asyncpg's type introspection query (a recursive
        # catalog query) through the proxy; then jsonb is decoded by it.
        c2 = await connect()
        try:
            await c2.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads,
                                    schema="pg_catalog")
            await c2.execute(f"CREATE QUEUE {Q}_codec")
            await c2.fetch("PUSH INTO $1 VALUES ($2)", Q + "_codec", {"codec": [1, 2]})
            row = await c2.fetchrow("POP FROM $1", Q + "_codec")
            expect_eq(row["payload"], {"codec": [1, 2]}, "payload decoded by the custom codec")
            await c2.fetch("ACK $1", row["receipt"])
            # A user-defined type forces introspection of an unknown OID.
            await c2.execute("DROP TYPE IF EXISTS compat_asyncpg_mood; "
                             "CREATE TYPE compat_asyncpg_mood AS ENUM ('happy', 'sad')")
            v = await c2.fetchval("SELECT $1::compat_asyncpg_mood", "sad")
            expect_eq(v, "sad", "enum value")
            arr = await c2.fetchval("SELECT ARRAY['happy', 'sad']::compat_asyncpg_mood[]")
            expect_eq(arr, ["happy", "sad"], "enum array")
            await c2.execute("DROP TYPE compat_asyncpg_mood")
        finally:
            await c2.close()

    await a.check("type_introspection", introspection)

    async def queue_state(c, queues):
        rows = await c.fetch("SELECT queue, partitions, messages, pending, dead_lettered "
                             "FROM queen.queue_depth WHERE queue = ANY($1::text[]) ORDER BY queue",
                             list(queues))
        return [tuple(x) for x in rows]

    async def tx_rollback():
        await conn.execute(f"CREATE QUEUE {Q_IN}")
        await conn.execute(f"CREATE QUEUE {Q_OUT}")
        mid = (await conn.fetchrow("PUSH INTO $1 VALUES ($2)", Q_IN, json.dumps({"job": 1})))[0]
        before = await queue_state(conn, [Q_IN, Q_OUT])

        class Rollback(Exception):
            pass

        try:
            async with conn.transaction():
                row = await conn.fetchrow("POP FROM $1 LIMIT $2", Q_IN, 1)
                expect(row is not None, "POP in transaction returned a row")
                await conn.fetch("PUSH INTO $1 VALUES ($2)", Q_OUT, json.dumps({"done": 1}))
                status = await conn.fetchval("ACK $1", row["receipt"], column=1)
                expect_eq(status, "acked", "ACK in transaction")
                expect(conn.is_in_transaction(), "in transaction")
                raise Rollback()
        except Rollback:
            pass
        expect_eq(await queue_state(conn, [Q_IN, Q_OUT]), before, "queue_depth after rollback")
        again = await conn.fetch("POP FROM $1 LIMIT 5", Q_IN)
        expect_eq([x["message_id"] for x in again], [mid], "message back in the input queue")
        expect_eq(await conn.fetch("POP FROM $1 LIMIT 5", Q_OUT), [], "output queue")
        await conn.fetch("ACK $1", again[0]["receipt"])

    await a.check("tx_rollback", tx_rollback)

    async def binary_timestamp_param():
        # SUBSCRIBE FROM takes a timestamptz parameter; asyncpg sends it binary.
        import datetime
        await conn.execute(f"CREATE QUEUE {Q}_ts")
        await conn.fetch("PUSH INTO $1 VALUES ($2)", Q + "_ts", json.dumps({"t": 1}))
        since = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
        rows = await conn.fetch("POP FROM $1 GROUP g1 SUBSCRIBE FROM $2", Q + "_ts", since)
        expect_eq(len(rows), 1, "rows")
        await conn.fetch("ACK $1", rows[0]["receipt"])

    await a.check("binary_timestamptz_param", binary_timestamp_param)

    async def pool_reuse():
        # A pool resets each connection on release (asyncpg's reset query:
        # advisory unlock, CLOSE ALL, UNLISTEN, RESET ALL) before reusing it.
        pool = await asyncpg.create_pool(host=HOST, port=PORT, user=USER, database=DB, ssl=False,
                                         min_size=1, max_size=1, timeout=10)
        try:
            async with pool.acquire() as c:
                await c.execute(f"CREATE QUEUE {Q}_pool")
                await c.fetch("PUSH INTO $1 VALUES ($2)", Q + "_pool", json.dumps({"pool": 1}))
            async with pool.acquire() as c:
                row = await c.fetchrow("POP FROM $1", Q + "_pool")
                expect_eq(json.loads(row["payload"]), {"pool": 1}, "payload")
            async with pool.acquire() as c:
                expect_eq(await c.fetchval("ACK $1", row["receipt"], column=1), "acked", "ACK")
        finally:
            await pool.close()

    await a.check("pool_reset_reuse", pool_reuse)

    async def timeout_cancel():
        # A query timeout makes asyncpg send a CancelRequest for the waiting POP.
        await conn.execute(f"CREATE QUEUE {Q}_wait")
        try:
            await conn.fetch("POP FROM $1 WAIT '20s'", Q + "_wait", timeout=0.5)
            raise CheckFailed("no timeout")
        except asyncio.TimeoutError:
            pass
        expect_eq(await conn.fetchval("SELECT 1"), 1, "usable after the cancel")

    await a.check("timeout_cancels_pop_wait", timeout_cancel)

    async def copy_out():
        chunks = []

        async def sink(b):
            chunks.append(b)

        await conn.execute(f"CREATE QUEUE {Q}_copy")
        await conn.fetch("PUSH INTO $1 VALUES ($2), ($3), ($4)", Q + "_copy", "1", "2", "3")
        await conn.copy_from_query("SELECT queue, messages FROM queen.queue_depth WHERE queue = $1",
                                   Q + "_copy", output=sink, format="csv")
        expect_eq(b"".join(chunks), f"{Q}_copy,3\n".encode(), "COPY output")

    await a.check("copy_from_view", copy_out)

    async def server_settings():
        # server_settings are sent as startup parameters; search_path is a list.
        c2 = await connect(server_settings={"search_path": "queen,public",
                                            "application_name": "compat_asyncpg"})
        try:
            expect_eq(await c2.fetchval("SELECT current_schemas(false)"), ["queen", "public"],
                      "current_schemas(false)")
            expect_eq(await c2.fetchval("SHOW application_name"), "compat_asyncpg", "application_name")
        finally:
            await c2.close()

    await a.check("server_settings_search_path", server_settings)

    await conn.close()


async def _expect_rows(aw, want):
    got = await aw
    expect_eq([tuple(x) for x in got], want, "rows")


async def _expect_val(aw, want):
    expect_eq(await aw, want, "value")


asyncio.run(main())
