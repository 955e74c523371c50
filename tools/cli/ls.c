/* ls.c: ls (the locks held under a prefix: redlock_client_scan, then each
 * name's state read as status reads it).
 *
 * The scan and the inspections share one deadline (--wait, default 10 s):
 * at most LS_IN_FLIGHT inspections at a time; names not inspected by the
 * deadline are listed with '?' (and the listing is called incomplete). */
#include "cli.h"

#define LS_IN_FLIGHT 16
#define LS_DEF_WAIT_MS 10000
#define LS_DEF_MAX 1000

const char help_ls[] =
    "usage: redlock ls [OPTIONS] [PREFIX]\n"
    "\n"
    "List the locks held on the masters whose name starts with PREFIX\n"
    "(every name without it), one line each, sorted by name: the name, its\n"
    "kind (lock, rw, semaphore) and its state: for a lock, held on k of N\n"
    "masters, the ttl left (the quorum-th longest, ms) and the holder (as\n"
    "status shows it: its --id, then 8 characters of the token);\n"
    "for a semaphore, the permits held of its limit; for a read-write lock\n"
    "the masters that show it. The masters are read with SCAN (bounded:\n"
    "never a KEYS), every one in parallel, a cluster's every primary. The\n"
    "library's own keys (fencing counters, the ttl record) are not listed.\n"
    "  --max N        list at most N names (default 1000, at most 100000);\n"
    "                 a listing cut there says so on stderr (exit 0)\n"
    "  --wait D       the whole listing's deadline (default 10s)\n"
    "  --json         one object: \"names\" (name, kind, masters, and the\n"
    "                 state), \"complete\"\n"
    "Exit 0 when a quorum of masters was read (stderr names a master that\n"
    "could not be, or a listing cut by --max); 69 when too few masters\n"
    "could be read; 74 when the deadline passed first.\n";

typedef struct ls_row {
  char *name;           /* NUL-terminated copy (len bytes) */
  size_t len;
  int kind;
  unsigned masters;     /* that showed it in the scan */
  int state;            /* 0 not inspected, 1 inspected, -1 failed */
  unsigned held_on;     /* lock: masters that hold it */
  int64_t pttl_ms;      /* lock: the quorum-th longest pttl, -1 unknown */
  holder_view holder;   /* lock: as status shows it */
  unsigned permits, limit;   /* semaphore */
} ls_row;

static ls_row *rows;
static size_t n_rows, next_row, rows_done;
static unsigned in_flight;
static uv_timer_t ls_timer;
static int ls_timer_open, deadline_passed, printed, scanned;
static int scan_complete, scan_capped;
static unsigned scan_done, scan_masters;
static uint64_t ls_deadline;   /* uv_now() */
static char scan_error[300];

static const char *kind_name(int kind) {
  return kind == REDLOCK_NAME_RW ? "rw"
         : kind == REDLOCK_NAME_SEMAPHORE ? "semaphore" : "lock";
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void ls_print(void) {
  size_t i;
  int complete = scan_complete && !deadline_passed;
  if (printed)
    return;
  printed = 1;
  for (i = 0; i < n_rows; i++)
    if (rows[i].kind != REDLOCK_NAME_RW && rows[i].state != 1)
      complete = 0;
  if (opt.json) {
    printf("{\"command\":\"ls\",\"prefix\":");
    json_str(key);
    printf(",\"complete\":%s,\"masters_read\":%u,\"masters\":%u,"
           "\"names\":[", complete ? "true" : "false", scan_done,
           scan_masters);
  }
  for (i = 0; i < n_rows; i++) {
    const ls_row *r = &rows[i];
    if (opt.json) {
      printf("%s{\"name\":", i ? "," : "");
      json_str(r->name);
      printf(",\"kind\":\"%s\",\"masters\":%u", kind_name(r->kind),
             r->masters);
      if (r->state == 1 && r->kind == REDLOCK_NAME_LOCK) {
        printf(",\"held_on\":%u,\"pttl_ms\":", r->held_on);
        if (r->pttl_ms >= 0)
          printf("%lld", (long long)r->pttl_ms);
        else
          printf("null");
        json_holder(&r->holder);
      } else if (r->state == 1 && r->kind == REDLOCK_NAME_SEMAPHORE) {
        printf(",\"permits_held\":%u,\"limit\":%u", r->permits, r->limit);
      }
      putchar('}');
      continue;
    }
    {
      char *t = text_of(r->name);
      printf("%s %s", t != NULL ? t : "?", kind_name(r->kind));
      free(t);
    }
    if (r->kind == REDLOCK_NAME_RW)
      printf(" on=%u/%u\n", r->masters, scan_masters);
    else if (r->state != 1)
      printf(" ?\n");
    else if (r->kind == REDLOCK_NAME_SEMAPHORE)
      printf(" permits=%u/%u\n", r->permits, r->limit);
    else if (r->pttl_ms >= 0)
      printf(" on=%u/%u pttl_ms=%lld holder=%s\n", r->held_on, scan_masters,
             (long long)r->pttl_ms, r->holder.shown);
    else
      printf(" on=%u/%u pttl_ms=- holder=%s\n", r->held_on, scan_masters,
             r->holder.shown[0] ? r->holder.shown : "-");
  }
  if (opt.json)
    printf("]}\n");
  if (!opt.quiet) {
    if (scan_capped)
      fprintf(stderr, "redlock: ls: the listing is cut at %zu names "
              "(--max %u, or the SCAN call cap): more exist\n", n_rows,
              opt.max_names ? opt.max_names : LS_DEF_MAX);
    if (scan_done < scan_masters)
      fprintf(stderr, "redlock: ls: %u of %u masters read to the end "
              "(quorum %u); not listed: what only the others hold (%s)\n",
              scan_done, scan_masters, redlock_client_quorum(client),
              scan_error[0] ? scan_error : "deadline");
    if (deadline_passed)
      fprintf(stderr, "redlock: ls: the deadline passed before every "
              "name was inspected ('?')\n");
  }
  finish(EXIT_OK);
}

static void ls_pump(void);

static void ls_done_one(void) {
  in_flight--;
  rows_done++;
  ls_pump();
}

static void on_lock_inspected(redlock_lock_t *l, int status,
                              const redlock_result *res, void *arg) {
  ls_row *r = arg;
  int64_t pttl[REDLOCK_MAX_SERVERS];
  unsigned i, k, best = 0, n = 0, q = redlock_client_quorum(client);
  (void)redlock_lock_free(l);
  r->state = status == 0 ? 1 : -1;
  r->pttl_ms = -1;
  if (status == 0) {
    /* The holder most masters show; the quorum-th longest pttl. */
    for (i = 0; i < res->n_nodes; i++) {
      unsigned same = 0;
      if (res->nodes[i].vote != REDLOCK_VOTE_YES)
        continue;
      pttl[n++] = res->nodes[i].pttl_ms;
      for (k = 0; k < res->n_nodes; k++)
        same += res->nodes[k].vote == REDLOCK_VOTE_YES &&
                strcmp(res->nodes[k].holder, res->nodes[i].holder) == 0;
      if (same > best) {
        best = same;
        holder_view_of(res->nodes[i].holder, &r->holder);
      }
    }
    r->held_on = n;
    qsort(pttl, n, sizeof(pttl[0]), cmp_desc);
    if (n >= q && q > 0)
      r->pttl_ms = pttl[q - 1];
  }
  ls_done_one();
}

static void on_sem_inspected(redlock_lock_t *l, int status,
                             const redlock_semaphore_info *info,
                             const redlock_result *res, void *arg) {
  ls_row *r = arg;
  (void)res;
  (void)redlock_lock_free(l);
  r->state = status == 0 ? 1 : -1;
  if (status == 0) {
    r->permits = info->held;
    r->limit = info->limit;
  }
  ls_done_one();
}

/* Inspects the next names, LS_IN_FLIGHT at a time; prints once every name
 * is done (or the deadline passed and none is in flight). */
static void ls_pump(void) {
  while (!deadline_passed && in_flight < LS_IN_FLIGHT && next_row < n_rows) {
    ls_row *r = &rows[next_row++];
    redlock_lock_t *l = NULL;
    int rc;
    if (r->kind == REDLOCK_NAME_RW) {
      rows_done++;   /* inspect does not apply to it */
      continue;
    }
    if (r->kind == REDLOCK_NAME_SEMAPHORE)
      rc = redlock_semaphore_new(client, r->name, r->len, 1, &l);
    else
      rc = redlock_lock_new(client, r->name, r->len, &l);
    if (rc == 0)
      rc = r->kind == REDLOCK_NAME_SEMAPHORE
               ? redlock_semaphore_inspect(l, on_sem_inspected, r)
               : redlock_lock_inspect(l, on_lock_inspected, r);
    if (rc != 0) {
      if (l != NULL)
        (void)redlock_lock_free(l);
      r->state = -1;
      rows_done++;
      continue;
    }
    in_flight++;
  }
  if (in_flight == 0 && (rows_done == n_rows || deadline_passed))
    ls_print();
}

static void on_ls_deadline(uv_timer_t *t) {
  (void)t;
  if (!scanned)
    return;   /* the scan's own deadline ends it (its callback follows) */
  deadline_passed = 1;
  if (in_flight == 0)
    ls_print();   /* else when the last one in flight ends */
}

static void on_scanned(redlock_client_t *c, int status,
                       const redlock_scan_result *res, void *arg) {
  size_t i;
  (void)c;
  (void)arg;
  if (status == REDLOCK_ECANCELED)
    return;
  scanned = 1;
  scan_complete = res->complete;
  scan_capped = res->capped;
  scan_done = res->masters_done;
  scan_masters = res->n_masters;
  snprintf(scan_error, sizeof(scan_error), "%s", res->error);
  if (status != 0) {
    fprintf(stderr, "redlock: ls: %s: %u of %u masters read to the end, "
            "quorum %u%s%s\n",
            status == REDLOCK_ETIMEDOUT ? "the deadline passed"
            : status == REDLOCK_ENOQUORUM ? "too few masters could be read"
                                          : redlock_strerror(status),
            res->masters_done, res->n_masters, redlock_client_quorum(client),
            res->error[0] ? ": " : "", res->error);
    finish(status == REDLOCK_ETIMEDOUT ? EXIT_UNRESPONSIVE
           : status == REDLOCK_ENOQUORUM ? EXIT_UNAVAILABLE : EXIT_FAIL);
    return;
  }
  rows = calloc(res->n_names > 0 ? res->n_names : 1, sizeof(*rows));
  if (uv_now(&loop) >= ls_deadline)
    deadline_passed = 1;   /* its timer ran before this callback */
  if (rows == NULL) {
    fprintf(stderr, "redlock: ls: out of memory\n");
    finish(EXIT_FAIL);
    return;
  }
  for (i = 0; i < res->n_names; i++) {
    ls_row *r = &rows[i];
    r->name = malloc(res->names[i].len + 1);
    if (r->name == NULL) {
      fprintf(stderr, "redlock: ls: out of memory\n");
      finish(EXIT_FAIL);
      return;
    }
    memcpy(r->name, res->names[i].name, res->names[i].len);
    r->name[res->names[i].len] = '\0';
    r->len = res->names[i].len;
    r->kind = res->names[i].kind;
    r->masters = res->names[i].masters;
    n_rows++;
  }
  ls_pump();
}

int start_ls(void) {
  int64_t wait = opt.wait_given && opt.wait_ms > 0 ? opt.wait_ms
                                                   : LS_DEF_WAIT_MS;
  int rc = redlock_client_scan(client, key, strlen(key),
                               opt.max_names ? opt.max_names : LS_DEF_MAX,
                               wait, on_scanned, NULL);
  if (rc != 0)
    return rc;
  /* The inspections end by the same deadline (the scan keeps its own). */
  uv_timer_init(&loop, &ls_timer);
  uv_timer_start(&ls_timer, on_ls_deadline, (uint64_t)wait, 0);
  ls_deadline = uv_now(&loop) + (uint64_t)wait;
  ls_timer_open = 1;
  return 0;
}

void close_ls(void) {
  size_t i;
  if (ls_timer_open) {
    ls_timer_open = 0;
    uv_timer_stop(&ls_timer);
    uv_close((uv_handle_t *)&ls_timer, NULL);
  }
  if (in_flight > 0)
    return;   /* their callbacks (ECANCELED at the close) still read rows */
  for (i = 0; i < n_rows; i++)
    free(rows[i].name);
  free(rows);
  rows = NULL;
  n_rows = 0;
}
