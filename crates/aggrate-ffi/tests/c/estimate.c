/* The C side of tests/c_abi.rs, built with the system compiler against libaggrate_ffi.a.
 *
 *   estimate MODEL.json|- PACKETS.txt   one line per report: start end frames packets mean_agg
 *                                       level rx_rate lost (PACKETS: "seq kernel_ns len" lines)
 *   estimate --abuse                    bad input through every door: one "name status message"
 *                                       line per case
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggrate.h"

static void print_report(const AggrateReport *r) {
  printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %.17g %.17g %.17g %" PRIu64 "\n", r->start_ns, r->end_ns,
         r->frames, r->packets, r->mean_agg, r->level, r->rx_rate_bps, r->lost);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void show(const char *name, AggrateStatus s) { printf("%s %d %s\n", name, (int)s, aggrate_last_error()); }

static int abuse(void) {
  AggrateModel *m = NULL;
  AggrateEstimator *e = NULL;
  AggrateController *c = NULL;
  AggrateReport r;
  double rate = 0;
  const char junk[] = "{\"format\": \"aggrate-model\", \"version\": 1, \"spec\": 7}";
  const char bad_utf8[] = "{\"format\": \"\xff\"}";
  show("null_json", aggrate_model_from_json(NULL, 10, &m));
  show("null_out", aggrate_model_from_json((const uint8_t *)junk, sizeof junk - 1, NULL));
  show("empty_json", aggrate_model_from_json((const uint8_t *)junk, 0, &m));
  show("bad_model", aggrate_model_from_json((const uint8_t *)junk, sizeof junk - 1, &m));
  show("not_utf8", aggrate_model_from_json((const uint8_t *)bad_utf8, sizeof bad_utf8 - 1, &m));
  show("null_model", aggrate_estimator_new(NULL, 100000000, &e));
  if (aggrate_model_shipped(&m) != AGGRATE_STATUS_OK) return 2;
  show("bad_interval", aggrate_estimator_new(m, 1000, &e));
  if (aggrate_estimator_new(m, 100000000, &e) != AGGRATE_STATUS_OK) return 2;
  show("null_estimator", aggrate_estimator_push(NULL, 1, 1000, 1500));
  show("first_push", aggrate_estimator_push(e, 1, 5000000, 1500));
  show("backwards", aggrate_estimator_push(e, 2, 4000000, 1500));
  show("short_report", aggrate_estimator_poll_report(e, 9000000000u, &r, sizeof r - 8));
  show("null_report", aggrate_estimator_poll_report(e, 9000000000u, NULL, sizeof r));
  show("null_params_ok", aggrate_controller_new(NULL, &c));
  memset(&r, 0, sizeof r);
  r.mean_agg = NAN;
  show("nan_report", aggrate_controller_on_report(c, 1, &r, &rate));
  show("null_rate", aggrate_controller_on_silence(c, 1, 1, NULL));
  AggrateControlParams p;
  aggrate_controller_defaults(&p);
  p.k0 = -1;
  AggrateController *c2 = NULL;
  show("bad_params", aggrate_controller_new(&p, &c2));
  aggrate_controller_free(c);
  aggrate_controller_free(NULL);
  aggrate_estimator_free(e);
  aggrate_estimator_free(NULL);
  aggrate_model_free(m);
  aggrate_model_free(NULL);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--abuse") == 0) return abuse();
  if (argc != 3) {
    fprintf(stderr, "usage: estimate MODEL.json|- PACKETS.txt | estimate --abuse\n");
    return 2;
  }
  AggrateModel *model = NULL;
  AggrateStatus s;
  if (strcmp(argv[1], "-") == 0) {
    s = aggrate_model_shipped(&model);
  } else {
    size_t len = 0;
    char *json = slurp(argv[1], &len);
    if (!json) return 2;
    s = aggrate_model_from_json((const uint8_t *)json, len, &model);
    free(json);
  }
  if (s != AGGRATE_STATUS_OK) {
    fprintf(stderr, "model: %s\n", aggrate_last_error());
    return 1;
  }
  AggrateEstimator *est = NULL;
  if (aggrate_estimator_new(model, 100000000, &est) != AGGRATE_STATUS_OK) {
    fprintf(stderr, "estimator: %s\n", aggrate_last_error());
    return 1;
  }
  aggrate_model_free(model);
  FILE *f = fopen(argv[2], "r");
  if (!f) return 2;
  uint64_t seq, ns, last = 0;
  unsigned len;
  AggrateReport r;
  while (fscanf(f, "%" SCNu64 " %" SCNu64 " %u", &seq, &ns, &len) == 3) {
    if (aggrate_estimator_push(est, seq, ns, len) != AGGRATE_STATUS_OK) {
      fprintf(stderr, "push: %s\n", aggrate_last_error());
      return 1;
    }
    while (aggrate_estimator_poll_report(est, ns, &r, sizeof r) == AGGRATE_STATUS_OK) print_report(&r);
    last = ns;
  }
  fclose(f);
  while (aggrate_estimator_poll_report(est, last + 1000000000u, &r, sizeof r) == AGGRATE_STATUS_OK) print_report(&r);
  aggrate_estimator_free(est);
  return 0;
}
