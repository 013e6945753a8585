'use strict';
// node-postgres (pg) against queenwire: parameterized queries (extended
// protocol, parameters sent as text with unspecified types), named prepared
// statements, and a transaction. One line per check.

const { Client } = require('pg');

const cfg = {
  host: process.env.QW_HOST || '127.0.0.1',
  port: Number(process.env.QW_PORT || 6543),
  user: process.env.QW_USER || 'compat',
  database: process.env.QW_DB || 'compat',
  connectionTimeoutMillis: 10000,
  query_timeout: 30000,
};
const CLIENT = 'node-postgres';
const Q = 'compat_node';
const Q_IN = 'compat_node_in';
const Q_OUT = 'compat_node_out';
const PUSH_COLUMNS = [['message_id', 2950], ['queue', 25], ['partition', 25], ['offset', 20],
  ['transaction_id', 25], ['status', 25]];
const POP_COLUMNS = [['receipt', 25], ['message_id', 2950], ['queue', 25], ['partition', 25],
  ['offset', 20], ['payload', 3802], ['transaction_id', 25], ['trace_id', 25],
  ['retry_count', 23], ['created_at', 1184], ['lease_expires_at', 1184]];

const failed = new Set();

class CheckFailed extends Error {}

function expect(cond, why) {
  if (!cond) throw new CheckFailed(why);
}
function expectEq(got, want, what) {
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  if (g !== w) throw new CheckFailed(`${what}: got ${g}, want ${w}`);
}
function oneLine(s) {
  s = String(s).replace(/\s+/g, ' ').trim();
  return s.length > 400 ? s.slice(0, 397) + '...' : s;
}

async function check(name, fn, needs = []) {
  const missing = needs.filter((n) => failed.has(n));
  if (missing.length) {
    failed.add(name);
    console.log(`FAIL ${CLIENT} ${name}: not run: ${missing.join(', ')} failed`);
    return undefined;
  }
  try {
    const v = await fn();
    console.log(`ok ${CLIENT} ${name}`);
    return v;
  } catch (e) {
    failed.add(name);
    const why = e instanceof CheckFailed ? e.message
      : `${e.constructor.name}${e.code ? ' SQLSTATE ' + e.code : ''} ${e.message}`;
    console.log(`FAIL ${CLIENT} ${name}: ${oneLine(why)}`);
    return undefined;
  }
}

function cols(res) {
  return res.fields.map((f) => [f.name, f.dataTypeID]);
}

async function queueState(c, queues) {
  const res = await c.query(
    'SELECT queue, partitions, messages, pending, dead_lettered FROM queen.queue_depth ' +
    'WHERE queue = ANY($1) ORDER BY queue', [queues]);
  return res.rows;
}

async function main() {
  const c = new Client(cfg);
  const ok = await check('connect', async () => { await c.connect(); });
  if (ok === undefined && failed.has('connect')) return;
  const st = {};

  await check('select_params', async () => {
    const res = await c.query('SELECT $1::int + 1 AS a, $2::text AS b, $3::jsonb AS j', [41, 'x', { k: 'v' }]);
    expectEq(res.rows, [{ a: 42, b: 'x', j: { k: 'v' } }], 'rows');
  });

  await check('create_queue', async () => {
    const res = await c.query(`CREATE QUEUE ${Q}`);
    expectEq(res.command, 'CREATE', 'command (node-postgres keeps the first word of the tag)');
  });

  await check('push_json_param', async () => {
    const res = await c.query('PUSH INTO $1 VALUES ($2), ($3)', [Q, JSON.stringify({ n: 1 }), { n: 2 }]);
    expectEq(cols(res), PUSH_COLUMNS, 'columns');
    expectEq(res.rows.map((x) => [x.queue, x.offset, x.status]),
      [[Q, '0', 'queued'], [Q, '1', 'queued']], 'rows');
    expectEq(res.command, 'SELECT', 'command');
    expectEq(res.rowCount, 2, 'rowCount');
    st.ids = res.rows.map((x) => x.message_id);
  }, ['create_queue']);

  await check('pop_limit', async () => {
    const res = await c.query('POP FROM $1 LIMIT $2', [Q, 10]);
    expectEq(cols(res), POP_COLUMNS, 'columns');
    expectEq(res.rows.map((x) => x.message_id), st.ids, 'message ids');
    expectEq(res.rows.map((x) => x.payload), [{ n: 1 }, { n: 2 }], 'payloads');
    expect(res.rows[0].created_at instanceof Date, 'created_at parsed as a Date');
    st.receipts = res.rows.map((x) => x.receipt);
  }, ['push_json_param']);

  await check('ack_receipt_params', async () => {
    const res = await c.query('ACK $1, $2', st.receipts);
    expectEq(res.rows.map((x) => x.status), ['acked', 'acked'], 'statuses');
  }, ['pop_limit']);

  await check('pop_again_empty', async () => {
    const res = await c.query('POP FROM $1 LIMIT $2', [Q, 10]);
    expectEq(res.rows, [], 'rows');
  }, ['ack_receipt_params']);

  await check('dialect_error_sqlstate', async () => {
    try {
      await c.query('POP FROM $1 LIMIT $2', [Q, 0]);
    } catch (e) {
      expectEq(e.code, '22023', 'code');
      expect(e.severity === 'ERROR', 'severity');
      return;
    }
    throw new CheckFailed('no exception for LIMIT 0');
  });

  await check('usable_after_error', async () => {
    const res = await c.query('SELECT $1::int AS v', [7]);
    expectEq(res.rows, [{ v: 7 }], 'rows');
  });

  await check('named_prepared_statements', async () => {
    await c.query(`CREATE QUEUE ${Q}_named`);
    for (let i = 0; i < 3; i++) {
      await c.query({ name: 'compat-push', text: 'PUSH INTO $1 VALUES ($2)', values: [`${Q}_named`, { i }] });
    }
    const got = [];
    for (let i = 0; i < 4; i++) {
      const res = await c.query({ name: 'compat-pop', text: 'POP FROM $1 LIMIT $2', values: [`${Q}_named`, 1] });
      for (const row of res.rows) {
        got.push(row.payload.i);
        await c.query({ name: 'compat-ack', text: 'ACK $1', values: [row.receipt] });
      }
    }
    expectEq(got, [0, 1, 2], 'payloads');
  });

  await check('row_mode_array', async () => {
    await c.query('PUSH INTO $1 VALUES ($2)', [Q, '"scalar"']);
    const res = await c.query({ text: 'POP FROM $1', values: [Q], rowMode: 'array' });
    expectEq(res.rows[0][5], 'scalar', 'payload');
    await c.query('ACK $1', [res.rows[0][0]]);
  });

  await check('tx_rollback', async () => {
    await c.query(`CREATE QUEUE ${Q_IN}`);
    await c.query(`CREATE QUEUE ${Q_OUT}`);
    const mid = (await c.query('PUSH INTO $1 VALUES ($2)', [Q_IN, { job: 1 }])).rows[0].message_id;
    const before = await queueState(c, [Q_IN, Q_OUT]);
    await c.query('BEGIN');
    const popped = await c.query('POP FROM $1 LIMIT $2', [Q_IN, 1]);
    expectEq(popped.rowCount, 1, 'POP in transaction');
    await c.query('PUSH INTO $1 VALUES ($2)', [Q_OUT, { done: 1 }]);
    const acked = await c.query('ACK $1', [popped.rows[0].receipt]);
    expectEq(acked.rows[0].status, 'acked', 'ACK in transaction');
    await c.query('ROLLBACK');
    expectEq(await queueState(c, [Q_IN, Q_OUT]), before, 'queue_depth after rollback');
    const again = await c.query('POP FROM $1 LIMIT 5', [Q_IN]);
    expectEq(again.rows.map((x) => x.message_id), [mid], 'message back in the input queue');
    expectEq((await c.query('POP FROM $1 LIMIT 5', [Q_OUT])).rows, [], 'output queue');
    await c.query('ACK $1', [again.rows[0].receipt]);
  });

  await check('tx_commit', async () => {
    await c.query('PUSH INTO $1 VALUES ($2)', [Q_IN, { job: 2 }]);
    await c.query('BEGIN');
    const popped = await c.query('POP FROM $1', [Q_IN]);
    await c.query('PUSH INTO $1 VALUES ($2)', [Q_OUT, { done: 2 }]);
    await c.query('ACK $1', [popped.rows[0].receipt]);
    await c.query('COMMIT');
    expectEq((await c.query('POP FROM $1', [Q_IN])).rows, [], 'input queue after commit');
    const out = await c.query('POP FROM $1', [Q_OUT]);
    expectEq(out.rows.map((x) => x.payload), [{ done: 2 }], 'output queue after commit');
    await c.query('ACK $1', [out.rows[0].receipt]);
  });

  await check('simple_query_multi_statement', async () => {
    // Without parameters node-postgres uses the simple query protocol.
    const res = await c.query(`PUSH INTO ${Q} VALUES ('{"m": 1}'); POP FROM ${Q} LIMIT 1`);
    expect(Array.isArray(res) && res.length === 2, 'two results');
    expectEq(res[1].rows[0].payload, { m: 1 }, 'payload');
    await c.query('ACK $1', [res[1].rows[0].receipt]);
  });

  await c.end();
}

main().catch((e) => {
  console.log(`FAIL ${CLIENT} run: ${oneLine(e.stack || e)}`);
  process.exitCode = 1;
});
