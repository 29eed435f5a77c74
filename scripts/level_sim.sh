#!/usr/bin/env bash
# The closed loop on the virtual clock, per receive path, steered three ways — by the airtime
# level (the default), by the shipped model's frame count alone, and by MAC timestamps (the
# upper bound) — with the *true* μ_N over the steady state (the second half), its error against
# the target, the rate and the one-way delay: the table in docs/levels.md.
#
#   scripts/level_sim.sh [SECONDS] [RECEIVER...]
#   RECEIVER: phone | laptop | random:SEED | a receive-path TOML file (datasets/paths/)
#   AGGRATE=path/to/aggrate (default: on PATH)
set -euo pipefail
secs="${1:-30}"; shift || true
recv=("$@")
if [ ${#recv[@]} -eq 0 ]; then
  recv=(phone laptop)
  for s in 1 2 3 4 5 6 7 8 9 10 11 12; do recv+=("random:$s"); done
  recv+=(datasets/paths/bus-700.toml datasets/paths/tick-250.toml datasets/paths/coalesce-300.toml)
fi
bin="${AGGRATE:-aggrate}"
model="$(dirname "$0")/../models/mlp8_m5_ctx1024.json"
echo "| receiver | steered by | true μ_N | vs target | bias of what it steered by | rate Mb/s | delay ms mean / p95 |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for r in "${recv[@]}"; do
  case $r in
    random:*) src=(--noise random --seed "${r#random:}") ;;
    *.toml) src=(--receiver "$r") ;;
    *) src=(--noise "$r") ;;
  esac
  for steer in airtime frame-count mac; do
    case $steer in
      mac) est=() ;;
      *) est=(--model "$model" --steer "$steer") ;;
    esac
    "$bin" -q sim --duration "$secs" "${src[@]}" "${est[@]}" --json | python3 -c '
import json, sys
r, name, steer = json.load(sys.stdin), sys.argv[1], sys.argv[2]
s = r["stations"][0]
e = s.get("level_error")
bias = "%+.1f %%" % (e["bias"] * 100) if e else "–"
off = (s["mean_agg"] / 32 - 1) * 100
print("| %s | %s | %.1f | %+.1f %% | %s | %.0f | %.2f / %.2f |" % (name, steer, s["mean_agg"], off, bias, s["rate_mbps"], s["delay_ms_mean"], s["delay_ms_p95"]))
' "$(basename "$r" .toml)" "$steer"
  done
done
