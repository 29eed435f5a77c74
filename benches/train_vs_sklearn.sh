#!/usr/bin/env bash
# 20-fold contiguous CV of the logistic estimator: aggrate vs scikit-learn on the same rows, in
# one run; prints both times, their ratio and the F1 difference per rate.
#   benches/train_vs_sklearn.sh [DATASET_MANIFEST]   (default datasets/paper.toml)
# Sets up its own venv (scikit-learn, pyarrow) under ~/.cache/aggrate/bench-venv. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/aggrate/target}"
manifest="${1:-datasets/paper.toml}"
venv="$HOME/.cache/aggrate/bench-venv"
if ! "$venv/bin/python" -c "import sklearn, pyarrow" >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check scikit-learn pyarrow numpy
fi
cargo build --release --quiet
bin="$CARGO_TARGET_DIR/release/aggrate"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" -q dataset build "$manifest" --out "$tmp/data"
files=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(s["file"] for r in d["runs"] if r["role"]=="train" for s in r["stations"]))' "$tmp/data/manifest.json")
pq=()
for f in $files; do
  "$bin" -q features "$tmp/data/$f" -o "$tmp/${f%.pcapng}.parquet"
  pq+=("$tmp/${f%.pcapng}.parquet")
done
start=$(date +%s.%N)
"$bin" -q train --dataset "$tmp/data" --model logistic -o "$tmp/models"
ours=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')
sk=$("$venv/bin/python" benches/sklearn_logistic.py "${pq[@]}" 20)
python3 - "$ours" "$sk" "$tmp/models/logistic_m20_sigma.report.json" <<'PY'
import json, sys
ours, sk, rep = float(sys.argv[1]), json.loads(sys.argv[2]), json.load(open(sys.argv[3]))
print(f"rows {sk['rows']}, 20-fold contiguous CV of L2 logistic regression (m = 20 + sigma)")
print(f"aggrate train (incl. reading captures): {ours:.1f} s")
print(f"scikit-learn fits only:                 {sk['fit_seconds']:.1f} s")
print(f"ratio scikit-learn / aggrate:           {sk['fit_seconds'] / ours:.2f}x")
for r in rep["per_rate"]:
    key = str(float(r["rate_mbps"]))
    s = sk["f1_per_rate"].get(key)
    if s is not None:
        print(f"  {r['rate_mbps']:6.0f} Mb/s: F1 aggrate {r['f1']:.4f}  scikit-learn {s:.4f}  diff {r['f1'] - s:+.4f}")
PY
