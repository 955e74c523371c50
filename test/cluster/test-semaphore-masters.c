/* A counting semaphore on every kind of master (issue 32): a Redis
 * Cluster of three primaries, and a sentinel group, each the one master
 * of its client (N = 1: the semaphore is then the cluster's or the
 * group's own bound), and both together with a plain master (N = 3 mixed:
 * cluster, sentinel group, plain).
 *
 * For each: K = 2; two holders get the two permits (0 and 1, distinct),
 * a third is refused (ETAKEN) while both hold; inspect shows the limit,
 * two held and none free; the release of one lets the third in, on the
 * permit freed; a client using another limit gets ELIMIT; the permits'
 * keys are "{name}:sem:<i>" (one slot on a cluster: the primary that
 * serves "name" holds them, and the limit record "{name}:sem"); nothing
 * but the record is left once all are released. */
#include "tutil.h"

#define P 3          /* the cluster's primaries */
#define K 2

static harness_server cl[P];
static harness_server grp[1];
static harness_server sent[3];
static harness_server plain[1];

typedef struct seen {
  int done, status;
  unsigned limit, held, free_;
} seen;

static void on_info(redlock_lock_t *sem, int status,
                    const redlock_semaphore_info *info,
                    const redlock_result *res, void *arg) {
  seen *s = arg;
  (void)sem;
  (void)res;
  s->status = status;
  if (info != NULL) {
    s->limit = info->limit;
    s->held = info->held;
    s->free_ = info->free;
  }
  s->done = 1;
}

/* The server of `data` that holds key (a cluster's owner, else the one
 * given). */
static const harness_server *holder_of(const harness_server *data, int n,
                                       const char *key) {
  int i = n > 1 ? harness_cluster_owner(data, n, key) : 0;
  ASSERT(i >= 0);
  return &data[i];
}

static void exercise(uv_loop_t *loop, const char *const *addrs, int n,
                     const char *name, const harness_server *data,
                     int n_data) {
  redlock_client_t *c;
  redlock_lock_t *a, *b, *d, *other;
  redlock_acquire_opts once = {.wait_ms = -1};
  char key[64], rec[64];
  seen s;
  tu_op op;
  int pa, pb;
  fprintf(stderr, "%s: %d master(s)\n", name, n);
  c = tu_client_at(loop, addrs, n, NULL, (unsigned)n);
  ASSERT_EQ(redlock_semaphore_new(c, name, strlen(name), K, &a), 0);
  ASSERT_EQ(redlock_semaphore_new(c, name, strlen(name), K, &b), 0);
  ASSERT_EQ(redlock_semaphore_new(c, name, strlen(name), K, &d), 0);
  ASSERT_EQ(redlock_semaphore_new(c, name, strlen(name), K + 1, &other),
            0);
  ASSERT_EQ(tu_acquire(loop, a, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(loop, b, 10000, &once, &op), 0);
  pa = redlock_semaphore_permit(a);
  pb = redlock_semaphore_permit(b);
  ASSERT(pa >= 0 && pa < K && pb >= 0 && pb < K && pa != pb);
  if (n_data > 0) {
    /* The permits and the record share the name's slot. */
    snprintf(key, sizeof(key), "{%s}:sem:%d", name, pa);
    snprintf(rec, sizeof(rec), "{%s}:sem", name);
    ASSERT_GT(harness_pttl(holder_of(data, n_data, name), key), 0);
    ASSERT_EQ(harness_pttl(holder_of(data, n_data, name), rec), -1);
  }
  ASSERT_EQ(tu_acquire(loop, d, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_acquire(loop, other, 10000, &once, &op), REDLOCK_ELIMIT);

  memset(&s, 0, sizeof(s));
  ASSERT_EQ(redlock_semaphore_inspect(a, on_info, &s), 0);
  ASSERT_EQ(harness_run_until(loop, &s.done, 10000), 0);
  ASSERT_EQ(s.status, 0);
  ASSERT_EQ(s.limit, K);
  ASSERT_EQ(s.held, K);
  ASSERT_EQ(s.free_, 0);

  ASSERT_EQ(tu_release(loop, a, &op), 0);
  ASSERT_EQ(tu_acquire(loop, d, 10000, &once, &op), 0);
  ASSERT_EQ(redlock_semaphore_permit(d), pa);
  ASSERT_EQ(tu_release(loop, d, &op), 0);
  ASSERT_EQ(tu_release(loop, b, &op), 0);
  if (n_data > 0) {
    int i;
    for (i = 0; i < K; i++) {
      snprintf(key, sizeof(key), "{%s}:sem:%d", name, i);
      ASSERT_EQ(harness_pttl(holder_of(data, n_data, name), key), -2);
    }
  }
  ASSERT_EQ(redlock_lock_free(other), 0);
  ASSERT_EQ(redlock_lock_free(d), 0);
  ASSERT_EQ(redlock_lock_free(b), 0);
  ASSERT_EQ(redlock_lock_free(a), 0);
  tu_close_client(loop, c);
}

int main(void) {
  uv_loop_t loop;
  const char *addr[3];
  char group[600];
  int i;

  for (i = 0; i < P; i++)
    cl[i].cluster = 1;
  harness_start(cl, P);
  harness_cluster_make(cl, P, P);
  harness_start(grp, 1);
  harness_sentinel_start(sent, 3, "grp", &grp[0], 0);
  /* One primary without replicas: it cannot refuse writes when cut off
   * (the operator's override; test-sentinel-isolation checks it). */
  snprintf(group, sizeof(group), "%s&isolation=unchecked",
           harness_sentinel_addr(sent, 3, "grp"));
  harness_start(plain, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  addr[0] = harness_cluster_addr(&cl[0]);
  exercise(&loop, addr, 1, "backups", cl, P);
  addr[0] = group;
  exercise(&loop, addr, 1, "backups", grp, 1);
  addr[0] = harness_cluster_addr(&cl[1]);
  addr[1] = group;
  harness_addrs(plain, 1, &addr[2]);
  exercise(&loop, addr, 3, "builds", NULL, 0);

  harness_loop_close(&loop, 10000);
  harness_stop_all();
  return 0;
}
