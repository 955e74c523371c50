// The masters of a bench run (BENCH_SERVERS, loopback only) and ioredis clients for them, as
// node-redlock's README sets them up; shared by availability.mjs and safety.mjs.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const Redis = require('ioredis');

export const servers = String(process.env.BENCH_SERVERS || '').split(',').filter(Boolean)
  .map((s) => {
    const [host, port] = s.split(':');
    if (host !== '127.0.0.1' && host !== 'localhost') throw new Error(`refusing non-loopback ${s}`);
    return { host, port: Number(port) };
  });
if (servers.length === 0) throw new Error('set BENCH_SERVERS');

// Commands fail fast while a master is down (no offline queue); errors are results, not crashes.
export function clients() {
  const list = servers.map((s) => new Redis({ host: s.host, port: s.port,
                                              maxRetriesPerRequest: 1,
                                              enableOfflineQueue: false }));
  for (const c of list) c.on('error', () => {});
  return list;
}
