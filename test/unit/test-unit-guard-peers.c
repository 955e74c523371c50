/* test-unit-guard-peers: the guard's verdict on a Redis Cluster's other
 * primaries (guard.c redlock__guard_check_peers, DESIGN "The guard's
 * argument" 7.), on a guard made by hand: one cluster master of three
 * primaries, no server, no loop. Node 0 said yes; nodes 1 and 2 are its
 * peers. Each case is a schedule the simulator does not draw (a primary
 * drained of every slot, a vote judged while the client closes) or a
 * state the engine reaches only through a real step's timing:
 *  - idled: a peer that a topology idled (drained of its slots within its
 *    window, so they carry its losses) is judged by its instance, as one
 *    that is down: refused while young, counted once the window passed
 *    (the code before skipped it: two holders);
 *  - stale clock: an up peer whose last clock reading was sent before the
 *    YES came does not count on it: a reading is asked (one due here) and
 *    the vote waits (the code before counted it: a step since may have
 *    expired a slot's keys that then moved to the node that said yes);
 *  - down: a peer that is down, of an old instance, no read of its own
 *    (none can cover a node that is down), counts once a valid read
 *    started after its handshake (the code before waited for a read of its
 *    own forever, reading the record back to back);
 *  - closing: a peer on its way up while the client closes refuses the
 *    vote (the code before waited, after guard_close woke every waiter). */
#include <stdio.h>
#include <string.h>

#include "guard.h"
#include "harness.h"
#include "master.h"

#define MS REDLOCK__NS_PER_MS
#define S (1000 * MS)

static const unsigned all3[3] = {0, 1, 2};

static unsigned three(const redlock__master *m, const unsigned **out) {
  (void)m;
  *out = all3;
  return 3;
}

static int map_stale;   /* the master's map_stale answer */

static int stale_map(const redlock__master *m, redlock__ns now) {
  (void)m;
  (void)now;
  return map_stale;
}

static redlock__master_ops ops;
static redlock__master master;
static redlock__node nodes[3];
static redlock__guard g;
static char names[3][16];

/* A guard over one cluster of three primaries, each up, of an old
 * instance (cleared), its clock followed closely and last read at 1 s
 * (a reading asked of a node finds one due: nothing is sent). */
static void setup(int64_t mode_ms) {
  unsigned i;
  memset(nodes, 0, sizeof(nodes));
  memset(&ops, 0, sizeof(ops));
  ops.kind = "cluster";
  ops.node_indexes = three;
  ops.map_stale = stale_map;
  map_stale = 0;
  master.ops = &ops;
  master.index = 0;
  master.nodes = nodes;
  ASSERT_EQ(redlock__guard_init(&g, nodes, 3, 1, 1, mode_ms, "rec", 3), 0);
  g.masters = &master;
  g.window_ms = 5000;
  for (i = 0; i < 3; i++) {
    redlock__guard_node *gn = &g.gn[i];
    snprintf(names[i], sizeof(names[i]), "p%u:7000", i);
    nodes[i].index = i;
    nodes[i].master = 0;
    nodes[i].state = REDLOCK__NODE_UP;
    nodes[i].uri.display = names[i];
    nodes[i].clock_due = 1;   /* a reading asked is "on its way": no I/O */
    snprintf(gn->run_id, sizeof(gn->run_id), "run%u/repl%u", i, i);
    memcpy(gn->cleared, gn->run_id, sizeof(gn->cleared));
    gn->up = 1;
    gn->up_ns = 1 * S;
    gn->start = 1;
    gn->read = GUARD_READ_OK;
    gn->have = 1;
    gn->continuity = 1;
    gn->slack_us = 0;
    gn->base = 1;
    gn->last.send_ns = 1 * S;
    gn->last.reply_ns = 1 * S;
  }
}

static redlock__guard_verdict peers(redlock__ns now, redlock__ns since,
                                    unsigned *peer, char *why,
                                    size_t whylen) {
  int64_t wait_ms, window_ms;
  int cause;
  *peer = 99;
  return redlock__guard_check_peers(&g, 0, 1000, now, since, why, whylen,
                                    &wait_ms, &window_ms, &cause, peer);
}

/* Peer 1 is a young instance (first seen at 10 s) that a topology then
 * idled: its slots went to the others. */
static void idled(void) {
  char why[300];
  unsigned peer;
  redlock__guard_verdict v;
  setup(5000);
  g.gn[1].cleared[0] = '\0';
  g.gn[1].start = 10 * S;
  g.gn[1].up_ns = 10 * S;
  g.gn[1].up = 0;
  nodes[1].lazy = 1;
  nodes[1].state = REDLOCK__NODE_DOWN;
  v = peers(12 * S, 12 * S, &peer, why, sizeof(why));
  if (v != REDLOCK__GUARD_REFUSE)
    TEST_FAIL("idled young peer: verdict %d, not refused (its slots carry "
              "its losses)", (int)v);
  ASSERT_EQ(peer, 1);
  ASSERT(strstr(why, "p1:7000") != NULL);
  /* Its window passed: it counts (node 2 is fresh enough). */
  g.gn[2].last.send_ns = 16 * S;
  v = peers(16 * S, 16 * S, &peer, why, sizeof(why));
  ASSERT_EQ(v, REDLOCK__GUARD_COUNT);
  /* Never seen by this client: nothing to judge. */
  g.gn[1].run_id[0] = '\0';
  v = peers(12 * S, 12 * S, &peer, why, sizeof(why));
  ASSERT_EQ(v, REDLOCK__GUARD_COUNT);
  redlock__guard_free(&g);
}

/* Peer 2's clock was last read at 1 s; the YES came at 3 s. */
static void stale_clock(void) {
  char why[300];
  unsigned peer;
  redlock__guard_verdict v;
  setup(5000);
  g.gn[1].last.send_ns = 4 * S;
  v = peers(3 * S + 5 * MS, 3 * S, &peer, why, sizeof(why));
  if (v != REDLOCK__GUARD_PENDING)
    TEST_FAIL("peer read before the YES: verdict %d, not waiting for a "
              "new reading", (int)v);
  /* The reading came (sent after the YES): it counts. */
  g.gn[2].last.send_ns = 3 * S + 1 * MS;
  v = peers(3 * S + 5 * MS, 3 * S, &peer, why, sizeof(why));
  ASSERT_EQ(v, REDLOCK__GUARD_COUNT);
  /* Clock checks off: no reading needed. */
  g.gn[2].last.send_ns = 1 * S;
  g.clock_on = 0;
  v = peers(3 * S + 5 * MS, 3 * S, &peer, why, sizeof(why));
  ASSERT_EQ(v, REDLOCK__GUARD_COUNT);
  redlock__guard_free(&g);
}

/* Peer 1 (auto window) went down before any read covered it: no read of
 * its own will ever come. */
static void down(void) {
  char why[300];
  unsigned peer;
  redlock__guard_verdict v;
  setup(0);
  g.gn[1].cleared[0] = '\0';
  g.gn[1].read = GUARD_READ_NONE;
  g.gn[1].start = 2 * S;
  g.gn[1].up_ns = 2 * S;
  g.gn[1].up = 0;
  nodes[1].state = REDLOCK__NODE_DOWN;
  g.gn[2].last.send_ns = 20 * S;
  g.reading = 1;        /* another read in flight: no I/O here */
  g.read_ok_ns = 3 * S; /* a valid read started after its handshake */
  /* Young: refused by its age. */
  v = peers(4 * S, 4 * S, &peer, why, sizeof(why));
  ASSERT_EQ(v, REDLOCK__GUARD_REFUSE);
  ASSERT_EQ(peer, 1);
  /* Its window passed: it counts, without a read of its own. */
  v = peers(8 * S, 8 * S, &peer, why, sizeof(why));
  if (v != REDLOCK__GUARD_COUNT)
    TEST_FAIL("old down peer: verdict %d, not counted (waits for a read "
              "that cannot cover it)", (int)v);
  /* No valid read since its handshake: the one in flight is waited for. */
  g.read_ok_ns = 1 * S;
  v = peers(8 * S, 8 * S, &peer, why, sizeof(why));
  ASSERT_EQ(v, REDLOCK__GUARD_PENDING);
  g.reading = 0;
  redlock__guard_free(&g);
}

/* Peer 1 is on its way up (its handshake) while the client closes. */
static void closing(void) {
  char why[300];
  unsigned peer;
  redlock__guard_verdict v;
  setup(5000);
  g.gn[1].up = 0;
  nodes[1].state = REDLOCK__NODE_HANDSHAKE;
  g.gn[2].last.send_ns = 4 * S;
  v = peers(3 * S, 3 * S, &peer, why, sizeof(why));
  ASSERT_EQ(v, REDLOCK__GUARD_PENDING);
  g.closing = 1;
  v = peers(3 * S, 3 * S, &peer, why, sizeof(why));
  if (v != REDLOCK__GUARD_REFUSE)
    TEST_FAIL("closing: verdict %d, the vote waits after the close woke "
              "every waiter", (int)v);
  redlock__guard_free(&g);
}

/* test-unit-guard-peers [CASE]: every case, or the one named. */
/* A MOVED made the map out of date: the vote waits for the next map,
 * whatever the primaries it knows would say (one it does not know of may
 * have passed its losses on); then they are judged as before. */
static void stale_map_waits(void) {
  char why[300];
  unsigned peer;
  redlock__guard_verdict v;
  setup(5000);
  g.gn[1].last.send_ns = 4 * S;
  g.gn[2].last.send_ns = 4 * S;
  map_stale = 1;
  v = peers(3 * S + 5 * MS, 3 * S, &peer, why, sizeof(why));
  if (v != REDLOCK__GUARD_PENDING)
    TEST_FAIL("stale map: verdict %d, not waiting for the map", (int)v);
  map_stale = 0;
  v = peers(3 * S + 5 * MS, 3 * S, &peer, why, sizeof(why));
  ASSERT_EQ(v, REDLOCK__GUARD_COUNT);
  redlock__guard_free(&g);
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    void (*fn)(void);
  } cases[] = {{"idled", idled}, {"stale-clock", stale_clock},
               {"down", down}, {"closing", closing},
               {"stale-map", stale_map_waits}};
  unsigned k;
  for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
    if (argc < 2 || strcmp(argv[1], cases[k].name) == 0)
      cases[k].fn();
  printf("test-unit-guard-peers: ok\n");
  return 0;
}
