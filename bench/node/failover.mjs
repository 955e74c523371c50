#!/usr/bin/env node
// node-redlock 5.0.0-beta.2 in the failover scenarios of bench/redlock-failover.c, driven the
// way its users write leader election: the leader holds with `using` (automatic extension), the
// standby waits in `acquire` with a retry policy (retryCount -1: forever, retryDelay 200 ms,
// retryJitter 200 ms). Prints the same JSON lines.
//
//   x_failover_kill    a leader process (this script with --leader) is SIGKILLed; delay from the
//                      moment its lock expired on a quorum (PTTL of every master read right
//                      after the kill) to the standby's acquire resolving;
//   x_failover_resign  the leader (in this process, its own connections) releases; delay from
//                      the release call to the standby's acquire resolving.
// Environment: BENCH_SERVERS, BENCH_TTL_MS (1000), BENCH_KILLS (50), BENCH_RESIGNS (50),
// BENCH_SAMPLES (file for "impl scenario ttl delay_us" lines). Loopback only; every wait bounded.
import { createRequire } from 'node:module';
import { spawn } from 'node:child_process';
import { appendFileSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

const require = createRequire(import.meta.url);
const Redis = require('ioredis');
const { default: Redlock } = await import('redlock');

const KEY = 'bench-failover';
const servers = String(process.env.BENCH_SERVERS || '').split(',').filter(Boolean).map((s) => {
  const [host, port] = s.split(':');
  if (host !== '127.0.0.1' && host !== 'localhost') throw new Error(`refusing non-loopback ${s}`);
  return { host, port: Number(port) };
});
if (servers.length === 0) throw new Error('set BENCH_SERVERS');
const TTL = Number(process.env.BENCH_TTL_MS || 1000);
const KILLS = Number(process.env.BENCH_KILLS ?? 50);
const RESIGNS = Number(process.env.BENCH_RESIGNS ?? 50);
const QUORUM = Math.floor(servers.length / 2) + 1;
const IMPL = 'node-redlock-v5b';
const version = JSON.parse(readFileSync(new URL('./node_modules/redlock/package.json',
                                                import.meta.url))).version;
const now = () => Number(process.hrtime.bigint()) / 1e3;   // us, monotonic

function clients() {
  return servers.map((s) => new Redis({ host: s.host, port: s.port, lazyConnect: false,
                                         maxRetriesPerRequest: 1, enableOfflineQueue: true }));
}
const standbySettings = { retryCount: -1, retryDelay: 200, retryJitter: 200 };

// ---- the leader process: hold until killed --------------------------------------------
if (process.argv.includes('--leader')) {
  const redlock = new Redlock(clients(), { retryCount: -1, retryDelay: 200, retryJitter: 200 });
  redlock.on('error', () => {});
  await redlock.using([KEY], TTL, async (signal) => {
    process.stdout.write('held\n');
    while (!signal.aborted) await sleep(1000);
  });
  process.exit(0);
}

const watchdog = setTimeout(() => { console.error('failover.mjs: took too long'); process.exit(2); },
                            (KILLS + RESIGNS) * (TTL + 15000) + 60000);
watchdog.unref();
const admin = clients();

async function quorumExpiry() {
  const t = now();
  const pttls = await Promise.all(admin.map((r) => r.pttl(KEY)));
  const exp = pttls.filter((p) => p >= 0).map((p) => t + p * 1000).sort((a, b) => a - b);
  return exp.length >= QUORUM ? exp[exp.length - QUORUM] : t;
}

function emit(scenario, delays) {
  if (process.env.BENCH_SAMPLES)
    appendFileSync(process.env.BENCH_SAMPLES,
                   delays.map((d) => `${IMPL} ${scenario} ${TTL} ${Math.round(d)}\n`).join(''));
  const v = [...delays].sort((a, b) => a - b);
  const pct = (p) => v[Math.min(v.length, Math.max(1, Math.ceil((p / 100) * v.length))) - 1];
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  console.log(JSON.stringify({ impl: IMPL, n_servers: servers.length, scenario, concurrency: 1,
    ops: v.length, p50_us: pct(50), p90_us: pct(90), p99_us: pct(99), max_us: v[v.length - 1],
    min_us: v[0], mean_us: mean, ops_per_s: 1e6 / mean, ttl_ms: TTL, returns_at: 'quorum',
    version, runtime: `node ${process.version}` }));
  console.error(`${scenario} ttl ${TTL} ms: ${v.length} samples, p50 ${(pct(50) / 1000).toFixed(1)} ms, ` +
                `p99 ${(pct(99) / 1000).toFixed(1)} ms`);
}

async function killScenario() {
  const delays = [];
  const standbyClients = clients();
  const standby = new Redlock(standbyClients, standbySettings);
  standby.on('error', () => {});
  for (let i = 0; i < KILLS; i++) {
    const leader = spawn(process.execPath, [new URL(import.meta.url).pathname, '--leader'],
                         { stdio: ['ignore', 'pipe', 'ignore'], env: process.env });
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('leader never held')), 10000);
      leader.stdout.on('data', (d) => { if (String(d).includes('held')) { clearTimeout(t); resolve(); } });
    });
    let acquiredAt = 0;
    const pending = standby.acquire([KEY], TTL).then((lock) => { acquiredAt = now(); return lock; });
    await sleep(30);   // refused at least once: it waits in its retry loop
    if (acquiredAt) throw new Error('two leaders');
    const exited = new Promise((r) => leader.on('exit', r));
    leader.kill('SIGKILL');
    await exited;
    const expiry = await quorumExpiry();
    const lock = await Promise.race([pending,
      sleep(TTL + 15000).then(() => { throw new Error('standby never took over'); })]);
    delays.push(acquiredAt - expiry);
    await lock.release().catch(() => {});
  }
  standbyClients.forEach((c) => c.disconnect());
  emit('x_failover_kill', delays);
}

async function resignScenario() {
  const delays = [];
  const lc = clients(), sc = clients();
  const leader = new Redlock(lc, { retryCount: -1, retryDelay: 200, retryJitter: 200 });
  const standby = new Redlock(sc, standbySettings);
  leader.on('error', () => {});
  standby.on('error', () => {});
  for (let i = 0; i < RESIGNS; i++) {
    const held = await leader.acquire([KEY], TTL);
    let acquiredAt = 0;
    const pending = standby.acquire([KEY], TTL).then((lock) => { acquiredAt = now(); return lock; });
    await sleep(20);
    if (acquiredAt) throw new Error('two leaders');
    const t0 = now();
    await held.release();
    const lock = await pending;
    delays.push(acquiredAt - t0);
    await lock.release().catch(() => {});
  }
  lc.concat(sc).forEach((c) => c.disconnect());
  emit('x_failover_resign', delays);
}

if (KILLS > 0) await killScenario();
if (RESIGNS > 0) await resignScenario();
admin.forEach((c) => c.disconnect());
process.exit(0);
