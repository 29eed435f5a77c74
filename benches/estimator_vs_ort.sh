#!/usr/bin/env bash
# The whole per-packet path of the online estimator (`aggrate tool estimator-rate`: features,
# the shipped perceptron's decision, frames, the airtime level's counters, report polling — what
# `recv` runs per packet) against ONNX Runtime running the same exported model batched over the
# same capture's feature rows (one session.run over every row: ORT's cheapest case), in one run;
# prints both in ns per packet/row and their ratio. Needs the release binary and the test venv
# (onnxruntime; scripts/test.sh sets it up).
#   benches/estimator_vs_ort.sh [CAPTURE]   (default: the ns-3 sample, 250,000 packets)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/aggrate/target}"
py="${AGGRATE_PYTHON:-$HOME/.cache/aggrate/venv/bin/python}"
cargo build --release --locked -q
bin="$CARGO_TARGET_DIR/release/aggrate"
cap="${1:-}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
if [ -z "$cap" ]; then
  xz -dc tests/data/ns3_vht_mcs9_2ss_300mbps.pcap.xz >"$tmp/ns3.pcap"; cap="$tmp/ns3.pcap"
fi
ours=$("$bin" -q tool estimator-rate "$cap" --repeat 20)
"$bin" -q features "$cap" --m 5 --no-sigma --context 1024 -o "$tmp/rows.csv" >/dev/null
"$py" - "$tmp/rows.csv" models/mlp8_m5_ctx1024.onnx "$ours" <<'PY'
import json, sys, time
import numpy as np, onnxruntime as ort, polars as pl
rows, model, ours = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
inp = sess.get_inputs()[0]
df = pl.read_csv(rows)
names = [c for c in df.columns if c.startswith(("lg_", "rank_")) or c in ("q50", "q90", "q99", "lmean")]
x = df.select(names).to_numpy().astype(np.float32 if "float)" in inp.type and "double" not in inp.type else np.float64)
opts = ort.SessionOptions(); opts.intra_op_num_threads = 1
sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
best = float("inf")
for _ in range(20):
    t = time.perf_counter(); sess.run(None, {inp.name: x}); best = min(best, time.perf_counter() - t)
ort_ns = best * 1e9 / len(x)
print(json.dumps({"rows": len(x), "onnxruntime_batched_ns_per_row": round(ort_ns, 1),
                  "aggrate_ns_per_packet": round(ours["ns_per_packet"], 1),
                  "ratio": round(ours["ns_per_packet"] / ort_ns, 3)}))
PY
