// A node-redlock (5.0.0-beta.2, from bench/node) worker of the mixed-fleet
// test (test_mixed_fleet.py), as its users drive it: retryCount 0, a new
// attempt every 5-15 ms, hold 5-15 ms, release. Each grant is appended to
// LOG as one line "node START END -" on CLOCK_MONOTONIC (ns, the clock
// of the Python and CLI workers): START when acquire resolved, END when
// the work ended, cut at the validity node-redlock gave the lock (a grant
// with under 200 ms of validity left is released unused).
//   node fleet_node.mjs BENCH_NODE_DIR SERVERS KEY LOG SECONDS TTL_MS
import { createRequire } from 'node:module';
import { appendFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';

const [benchNode, serverList, key, log, seconds, ttlArg] = process.argv.slice(2);
const require = createRequire(path.join(benchNode, 'package.json'));
const Redis = require('ioredis');
const { default: Redlock } = await import(pathToFileURL(require.resolve('redlock')).href
  .replace('/cjs/', '/esm/'));

const ttl = Number(ttlArg);
const servers = serverList.split(',').map((s) => {
  const [host, port] = s.split(':');
  if (host !== '127.0.0.1') throw new Error(`refusing non-loopback ${s}`);
  return { host, port: Number(port) };
});
const clients = servers.map((s) => {
  const c = new Redis({ host: s.host, port: s.port, maxRetriesPerRequest: 1,
                        enableOfflineQueue: false, connectTimeout: 500,
                        retryStrategy: () => 20 });
  c.on('error', () => {});
  return c;
});
const redlock = new Redlock(clients, { retryCount: 0 });
redlock.on('error', () => {});

const end = Date.now() + Number(seconds) * 1000;
let grants = 0;
const mono = () => process.hrtime.bigint();   // CLOCK_MONOTONIC, ns
while (Date.now() < end) {
  try {
    const lock = await redlock.acquire([key], ttl);
    const t0 = mono();
    const left = lock.expiration - Date.now();
    if (left > 200) {
      await sleep(5 + Math.floor(Math.random() * 10));
      let t1 = mono();
      const limit = t0 + BigInt(Math.floor(left)) * 1000000n;
      if (t1 > limit) t1 = limit;
      appendFileSync(log, `node ${t0} ${t1} -\n`);
      grants++;
    }
    await lock.release().catch(() => {});
  } catch (e) {
    // refused or failed: try again shortly
  }
  await sleep(5 + Math.floor(Math.random() * 10));
}
process.stdout.write(`node grants ${grants}\n`);
for (const c of clients) c.disconnect();
process.exit(0);
