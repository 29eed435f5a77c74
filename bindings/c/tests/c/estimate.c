/* The C side of tests/c_abi.rs, built with the system compiler against libaggrate_ffi.a.
 *
 *   estimate MODEL.json|- PACKETS.txt   one line per report: start end frames packets mean_agg
 *                                       level rx_rate lost (PACKETS: "seq kernel_ns len" lines)
 *   estimate --abuse                    bad input through every door: one "name status message"
 *                                       line per case
 *   estimate --calibrate BANK.json PHY_BPS PACKETS.txt
 *                                       the shipped model, self-calibrating on the measured
 *                                       receivers of BANK.json as `recv --self-calibrate` does
 *                                       (the link's PHY rate PHY_BPS, UDP payload lengths): the
 *                                       reports, then "state windows skipped too_far knots" and
 *                                       one "knot load threshold" line per knot
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

/* Push every "seq kernel_ns len" line of `packets` (through `cal` when it is not NULL), printing
 * each report as it falls due and the rest after a last second of silence. */
static int replay(AggrateEstimator *est, AggrateCalibrator *cal, const char *packets, uint64_t *last) {
  FILE *f = fopen(packets, "r");
  if (!f) return 2;
  uint64_t seq, ns;
  unsigned len;
  AggrateReport r;
  *last = 0;
  while (fscanf(f, "%" SCNu64 " %" SCNu64 " %u", &seq, &ns, &len) == 3) {
    AggrateStatus s = cal ? aggrate_estimator_push_calibrated(est, cal, seq, ns, len) : aggrate_estimator_push(est, seq, ns, len);
    if (s != AGGRATE_STATUS_OK) {
      fprintf(stderr, "push: %s\n", aggrate_last_error());
      fclose(f);
      return 1;
    }
    while (aggrate_estimator_poll_report(est, ns, &r, sizeof r) == AGGRATE_STATUS_OK) print_report(&r);
    *last = ns;
  }
  fclose(f);
  while (aggrate_estimator_poll_report(est, *last + 1000000000u, &r, sizeof r) == AGGRATE_STATUS_OK) print_report(&r);
  return 0;
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

static int calibrate(const char *bank_path, const char *phy, const char *packets) {
  AggrateModel *model = NULL;
  AggrateEstimator *est = NULL;
  AggrateCalibrator *cal = NULL;
  size_t len = 0;
  char *bank = slurp(bank_path, &len);
  if (!bank) return 2;
  uint64_t phy_bps = strtoull(phy, NULL, 10);
  if (aggrate_model_shipped(&model) != AGGRATE_STATUS_OK || aggrate_estimator_new(model, 100000000, &est) != AGGRATE_STATUS_OK ||
      aggrate_estimator_set_link(est, phy_bps, 28) != AGGRATE_STATUS_OK ||
      aggrate_calibrator_new(model, (const uint8_t *)bank, len, phy_bps, NAN, &cal) != AGGRATE_STATUS_OK) {
    fprintf(stderr, "setup: %s\n", aggrate_last_error());
    return 1;
  }
  aggrate_model_free(model);
  uint64_t last;
  int rc = replay(est, cal, packets, &last);
  if (rc != 0) return rc;
  AggrateCalibration c;
  if (aggrate_calibrator_state(cal, &c, sizeof c) != AGGRATE_STATUS_OK) return 1;
  printf("state %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", c.windows, c.skipped, c.too_far, c.knots);
  double knots[2 * 64];
  size_t n = 0;
  if (aggrate_calibrator_knots(cal, knots, 64, &n) != AGGRATE_STATUS_OK) return 1;
  for (size_t i = 0; i < n; i++) printf("knot %.17g %.17g\n", knots[2 * i], knots[2 * i + 1]);
  /* Bad input: another model's bank, a bank that is not JSON, a short state buffer. */
  const char not_json[] = "{\"format\": 3";
  AggrateCalibrator *bad = NULL;
  aggrate_model_shipped(&model);
  /* The status first: C leaves the order of a call's arguments open. */
  show("not_json", aggrate_calibrator_new(model, (const uint8_t *)not_json, sizeof not_json - 1, 0, NAN, &bad));
  show("negative_distance", aggrate_calibrator_new(model, (const uint8_t *)bank, len, 0, -1, &bad));
  free(bank);
  show("short_state", aggrate_calibrator_state(cal, &c, sizeof c - 8));
  show("null_calibrator", aggrate_estimator_push_calibrated(est, NULL, 1, last + 1, 100));
  aggrate_model_free(model);
  aggrate_calibrator_free(cal);
  aggrate_calibrator_free(NULL);
  aggrate_estimator_free(est);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--abuse") == 0) return abuse();
  if (argc == 5 && strcmp(argv[1], "--calibrate") == 0) return calibrate(argv[2], argv[3], argv[4]);
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
  uint64_t last;
  int rc = replay(est, NULL, argv[2], &last);
  if (rc != 0) return rc;
  aggrate_estimator_free(est);
  return 0;
}
