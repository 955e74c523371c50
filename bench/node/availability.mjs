#!/usr/bin/env node
// node-redlock 5.0.0-beta.2 in bench/redlock-availability.c's loop: every BENCH_INTERVAL_MS (5)
// one single attempt (retryCount 0) on a fresh key with ttl BENCH_TTL_MS (1000), released when
// granted, for BENCH_SECONDS (30), while bench/faults.sh injects faults. Prints the same JSON
// line (votes: node-redlock reports which masters voted against, not why: N for those, Y for
// the others). Loopback only; the run is bounded by BENCH_SECONDS.
import { readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

const { default: Redlock } = await import('redlock');
const { servers, clients: makeClients } = await import('./servers.mjs');

const TTL = Number(process.env.BENCH_TTL_MS || 1000);
const SECONDS = Number(process.env.BENCH_SECONDS || 30);
const INTERVAL = Number(process.env.BENCH_INTERVAL_MS || 5);
const LOG = process.env.BENCH_LOG;
const version = JSON.parse(readFileSync(new URL('./node_modules/redlock/package.json',
                                                import.meta.url))).version;
const nowMs = () => Number(process.hrtime.bigint() / 1000000n);

// ioredis as node-redlock's README sets it up; commands fail fast while a master is down.
const clients = makeClients();
const redlock = new Redlock(clients, { retryCount: 0 });
redlock.on('error', () => {});

if (LOG) writeFileSync(LOG, '');
const t0 = nowMs();
const end = t0 + SECONDS * 1000;
let seq = 0, attempts = 0, failed = 0, failSince = 0;
const outages = [];
while (nowMs() < end) {
  const next = nowMs() + INTERVAL;
  let ok = false;
  let votes = 'Y'.repeat(servers.length);
  try {
    const lock = await redlock.acquire([`avail:${process.pid}:${seq++}`], TTL);
    ok = true;
    lock.release().catch(() => {});
  } catch (e) {
    const against = e.attempts?.[0] ? (await e.attempts[0]).votesAgainst : undefined;
    if (against) votes = clients.map((c) => (against.has(c) ? 'N' : 'Y')).join('');
  }
  const t = nowMs();
  attempts++;
  if (LOG) appendFileSync(LOG, `${t - t0} ${ok ? 'OK' : 'FAIL'} ${votes}\n`);
  if (ok) {
    if (failSince) outages.push(t - failSince);
    failSince = 0;
  } else {
    failed++;
    if (!failSince) failSince = t;
  }
  const wait = next - nowMs();
  if (wait > 0) await sleep(wait);
}
if (failSince) outages.push(nowMs() - failSince);
outages.sort((a, b) => a - b);
process.stdout.write(JSON.stringify({
  impl: 'node-redlock-v5b', version, n_servers: servers.length, ttl_ms: TTL, attempts, failed,
  unavailable_pct: attempts ? Number((100 * failed / attempts).toFixed(2)) : 0,
  outages: outages.length,
  outage_median_ms: outages.length ? outages[Math.floor(outages.length / 2)] : 0,
  outage_max_ms: outages.length ? outages[outages.length - 1] : 0,
}) + '\n');
for (const c of clients) c.disconnect();
process.exit(0);
