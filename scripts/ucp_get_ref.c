// A reference for scripts/bench_serve_tcp.sh: plain UCX (UCP) GETs of SIZE bytes with DEPTH
// outstanding, between two processes of this host (fork; worker address and rkey go over a
// socketpair), the target waiting as MODE says:
//   spin   the target calls ucp_worker_progress in a loop (what a dedicated target core does)
//   event  the target drains, arms the worker and sleeps in poll() on its event fd
// Why: ucx_perftest's passive side (ucp_get) only progresses its worker inside its socket barrier,
// between poll(..., 1 ms) calls (sock_io in ucx_perftest), so over TCP, where the target's CPU
// executes every GET, its rate is bounded by ~DEPTH GETs per millisecond and not by UCX.
// usage: ucp_get_ref spin|event SIZE DEPTH OPS [VARIANT]   (UCX_TLS etc. from the environment)
// VARIANT (default "plain"), to bisect what rdmahash's fabric does differently (scripts/bench_serve_tcp.sh):
//   plain     the features rdmahash requests (RMA, AMO64, AM, WAKEUP), endpoints without error handling,
//             DEPTH GETs always in flight (a new one as soon as one completes), like ucx_perftest
//   rma       context with UCP_FEATURE_RMA only
//   peer      endpoint with UCP_ERR_HANDLING_MODE_PEER (as `bench --connect` clients' endpoints)
//   batch     DEPTH GETs posted, then all of them awaited before the next DEPTH are posted: how
//             rdmahash's engine drives a transport (one batch per round trip, engine.h)
//   batch+peer  both
// Prints one line: mode size depth ops seconds ops_per_s p50_us p99_us variant, then the target's
// "target_cpu_us_per_get X" (its CPU time, user + system, over the GETs it served, warm-up included).
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

static void die(const char* what, ucs_status_t st) {
  fprintf(stderr, "ucp_get_ref: %s: %s\n", what, ucs_status_string(st));
  exit(1);
}
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static void send_blob(int fd, const void* p, uint64_t n) {
  if (write(fd, &n, 8) != 8 || write(fd, p, n) != (ssize_t)n) exit(1);
}
static void* recv_blob(int fd, uint64_t* n) {
  if (read(fd, n, 8) != 8) exit(1);
  char* p = malloc(*n);
  for (uint64_t got = 0; got < *n;) {
    ssize_t r = read(fd, p + got, *n - got);
    if (r <= 0) exit(1);
    got += (uint64_t)r;
  }
  return p;
}
static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

struct op {
  double start;
  int done;
  void* req;  // freed once done
};
static void on_get(void* req, ucs_status_t st, void* user) {
  (void)req;
  if (st != UCS_OK) die("get", st);
  ((struct op*)user)->done = 1;
}

int main(int argc, char** argv) {
  const char* variant = argc == 6 ? argv[5] : "plain";
  if ((argc != 5 && argc != 6) || (strcmp(argv[1], "spin") != 0 && strcmp(argv[1], "event") != 0) ||
      (strcmp(variant, "plain") != 0 && strcmp(variant, "rma") != 0 && strcmp(variant, "peer") != 0 &&
       strcmp(variant, "batch") != 0 && strcmp(variant, "batch+peer") != 0)) {
    fprintf(stderr, "usage: ucp_get_ref spin|event SIZE DEPTH OPS [plain|rma|peer|batch|batch+peer]\n");
    return 2;
  }
  const int only_rma = strcmp(variant, "rma") == 0;
  const int peer_mode = strstr(variant, "peer") != NULL;
  const int batch = strstr(variant, "batch") != NULL;
  const int spin = strcmp(argv[1], "spin") == 0;
  const size_t size = strtoul(argv[2], NULL, 10);
  const int depth = atoi(argv[3]);
  const long ops = atol(argv[4]);
  if (size == 0 || depth <= 0 || ops <= 0) {
    fprintf(stderr, "ucp_get_ref: SIZE, DEPTH and OPS must be positive\n");
    return 2;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  const pid_t child = fork();
  const int target = child != 0;
  const int fd = target ? sv[0] : sv[1];
  close(target ? sv[1] : sv[0]);  // the initiator's exit must close the target's peer end

  ucp_params_t p = {0};
  p.field_mask = UCP_PARAM_FIELD_FEATURES;
  p.features = only_rma ? UCP_FEATURE_RMA : UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;  // as rdmahash
  if (only_rma && target && !spin) p.features |= UCP_FEATURE_WAKEUP;
  ucp_config_t* cfg;
  ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
  if (st != UCS_OK) die("config", st);
  ucp_context_h ctx;
  st = ucp_init(&p, cfg, &ctx);
  ucp_config_release(cfg);
  if (st != UCS_OK) die("init", st);
  ucp_worker_params_t wp = {0};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w;
  if ((st = ucp_worker_create(ctx, &wp, &w)) != UCS_OK) die("worker", st);
  ucp_address_t* addr;
  size_t addr_len;
  if ((st = ucp_worker_get_address(w, &addr, &addr_len)) != UCS_OK) die("address", st);

  const size_t region = size * 4096;
  if (target) {
    ucp_mem_map_params_t mp = {0};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
    mp.address = NULL;
    mp.length = region;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    ucp_mem_h memh;
    if ((st = ucp_mem_map(ctx, &mp, &memh)) != UCS_OK) die("mem_map", st);
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucp_mem_query(memh, &ma);
    memset(ma.address, 7, region);
    void* rkey;
    size_t rkey_len;
    if ((st = ucp_rkey_pack(ctx, memh, &rkey, &rkey_len)) != UCS_OK) die("rkey_pack", st);
    uint64_t base = (uint64_t)(uintptr_t)ma.address;
    send_blob(fd, addr, addr_len);
    send_blob(fd, rkey, rkey_len);
    send_blob(fd, &base, 8);
    // Serve until the initiator closes its end of the socketpair.
    int efd = -1;
    if (!spin && (st = ucp_worker_get_efd(w, &efd)) != UCS_OK) die("efd", st);
    struct pollfd pf[2] = {{fd, POLLIN, 0}, {efd, POLLIN, 0}};
    for (unsigned long i = 0;; ++i) {
      if (spin) {
        ucp_worker_progress(w);
        if ((i & 1023) == 0 && poll(pf, 1, 0) > 0) break;
      } else {
        while (ucp_worker_progress(w) != 0) {
        }
        st = ucp_worker_arm(w);
        if (st == UCS_ERR_BUSY) continue;
        if (st != UCS_OK) die("arm", st);
        poll(pf, 2, -1);
        if (pf[0].revents) break;
      }
    }
    waitpid(child, NULL, 0);
    // The target's CPU per GET it served (warm-up included), to compare with rdmahash's memory node.
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double cpu_us = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    printf("target_cpu_us_per_get %.2f\n", cpu_us / (double)(ops + ops / 10));
    return 0;
  }

  uint64_t n, base_n, *base;
  void* peer = recv_blob(fd, &n);
  void* rkey_buf = recv_blob(fd, &n);
  base = recv_blob(fd, &base_n);
  ucp_ep_params_t ep = {0};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep.address = peer;
  if (peer_mode) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  }
  ucp_ep_h e;
  if ((st = ucp_ep_create(w, &ep, &e)) != UCS_OK) die("ep_create", st);
  // Wire the endpoint up before the first GET (as rdmahash's clients do).
  ucp_request_param_t fp = {0};
  ucs_status_ptr_t f = ucp_worker_flush_nbx(w, &fp);
  if (UCS_PTR_IS_ERR(f)) die("flush", UCS_PTR_STATUS(f));
  if (f != NULL) {
    while (ucp_request_check_status(f) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(f);
  }
  ucp_rkey_h rkey;
  if ((st = ucp_ep_rkey_unpack(e, rkey_buf, &rkey)) != UCS_OK) die("rkey_unpack", st);
  char* buf = malloc(size * (size_t)depth);
  struct op* slots = calloc((size_t)depth, sizeof *slots);
  double* lat = malloc(sizeof(double) * (size_t)ops);
  long posted = 0, completed = 0;
  const long warm = ops / 10;  // a warm-up (wireup, first touch), not measured
  double t0 = 0;
  for (int s = 0; s < depth; ++s) slots[s].done = 1;
  int in_flight = 0;
  while (completed < ops + warm) {
    // batch: post only when the whole previous batch has completed.
    if (batch && in_flight > 0) {
      in_flight = 0;
      for (int s = 0; s < depth; ++s) in_flight += !slots[s].done;
      if (in_flight > 0) {
        ucp_worker_progress(w);
        continue;
      }
    }
    for (int s = 0; s < depth; ++s) {
      if (!slots[s].done) continue;
      if (slots[s].req != NULL) {
        ucp_request_free(slots[s].req);
        slots[s].req = NULL;
      }
      if (slots[s].start > 0) {
        if (completed >= warm) lat[completed - warm] = now_s() - slots[s].start;
        if (++completed == warm) t0 = now_s();
        slots[s].start = 0;
      }
      if (posted >= ops + warm) continue;
      ucp_request_param_t rp = {0};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      rp.cb.send = on_get;
      rp.user_data = &slots[s];
      slots[s].done = 0;
      slots[s].start = now_s();
      const uint64_t off = (uint64_t)(posted % 4096) * size;
      ucs_status_ptr_t sp = ucp_get_nbx(e, buf + (size_t)s * size, size, *base + off, rkey, &rp);
      ++posted;
      ++in_flight;
      if (sp == NULL) slots[s].done = 1;
      else if (UCS_PTR_IS_ERR(sp)) die("get_nbx", UCS_PTR_STATUS(sp));
      else slots[s].req = sp;
    }
    ucp_worker_progress(w);
  }
  const double secs = now_s() - t0;
  qsort(lat, (size_t)ops, sizeof(double), cmp);
  printf("%s %zu %d %ld %.3f %.0f %.1f %.1f %s\n", argv[1], size, depth, ops, secs, (double)ops / secs,
         lat[ops / 2] * 1e6, lat[ops * 99 / 100] * 1e6, variant);
  ucp_rkey_destroy(rkey);
  ucp_request_param_t cp = {0};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t sp = ucp_ep_close_nbx(e, &cp);
  if (UCS_PTR_IS_PTR(sp)) {
    while (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(sp);
  }
  close(fd);
  return 0;
}
