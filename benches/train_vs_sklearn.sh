#!/usr/bin/env bash
# aggrate vs scikit-learn on the same rows, in one run: 20-fold contiguous CV of the logistic
# estimator and of the linear SVM (times, ratio, F1 difference per rate), and of the slot SVR at
# the same (C, γ, ε) (times, ratio, RMSE difference).
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
secs() { local s; s=$(date +%s.%N); "$@"; awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{print b-a}'; }
ours_lr=$(secs "$bin" -q train --dataset "$tmp/data" --model logistic -o "$tmp/models")
sk_lr=$("$venv/bin/python" benches/sklearn_logistic.py "${pq[@]}" 20)
ours_svm=$(secs "$bin" -q train --dataset "$tmp/data" --model svm -o "$tmp/models")
sk_svm=$("$venv/bin/python" benches/sklearn_linear_svc.py "${pq[@]}" 20)
# Slot SVR: the rows come from `train --model svr`; both sides then run the same 20-fold CV at
# the (C, γ, ε) that aggrate's grid search chose, single-threaded.
"$bin" -q train --dataset "$tmp/data" --model svr -o "$tmp/models" ${SVR_ARGS:-}
svr_report=$(ls "$tmp"/models/slot_svr_*.report.json)
read -r c g e < <(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["slot_svr"]["chosen"]; print(p["c"], p["gamma"], p["epsilon"])' "$svr_report")
slots="${svr_report%.report.json}.slots.csv"
folds=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["slot_svr"]["folds"])' "$svr_report")
ours_svr=$("$bin" tool svr-cv "$slots" --folds "$folds" --c "$c" --gamma "$g" --epsilon "$e")
sk_svr=$("$venv/bin/python" benches/sklearn_svr.py "$slots" "$folds" "$c" "$g" "$e")
python3 - "$ours_lr" "$sk_lr" "$tmp/models/logistic_m20_sigma.report.json" "$ours_svm" "$sk_svm" \
  "$tmp/models/svm_sqhinge_m20_sigma.report.json" "$ours_svr" "$sk_svr" "$c" "$g" "$e" <<'PY'
import json, sys
a = sys.argv[1:]
def block(title, ours, sk, rep):
    ours, sk, rep = float(ours), json.loads(sk), json.load(open(rep))
    print(f"{title}: rows {sk['rows']}, 20-fold contiguous CV")
    print(f"  aggrate train (incl. reading captures): {ours:.1f} s")
    print(f"  scikit-learn fits only:                 {sk['fit_seconds']:.1f} s")
    print(f"  ratio scikit-learn / aggrate:           {sk['fit_seconds'] / ours:.2f}x")
    for r in rep["per_rate"]:
        s = sk["f1_per_rate"].get(str(float(r["rate_mbps"])))
        if s is not None:
            print(f"    {r['rate_mbps']:6.0f} Mb/s: F1 aggrate {r['f1']:.4f}  scikit-learn {s:.4f}  diff {r['f1'] - s:+.4f}")
block("L2 logistic regression (m = 20 + sigma) vs LogisticRegression(lbfgs)", a[0], a[1], a[2])
block("linear SVM, squared hinge, C = 1 vs LinearSVC(dual=False)", a[3], a[4], a[5])
o, s = json.loads(a[6]), json.loads(a[7])
print(f"slot RBF SVR (C = {a[8]}, gamma = {a[9]}, epsilon = {a[10]}): {o['rows']} slot rows, {o['folds']}-fold CV, one thread each")
print(f"  aggrate:      {o['fit_seconds']:.3f} s, RMSE {o['rmse']:.4f}")
print(f"  scikit-learn: {s['fit_seconds']:.3f} s, RMSE {s['rmse']:.4f}")
print(f"  ratio scikit-learn / aggrate: {s['fit_seconds'] / o['fit_seconds']:.2f}x, RMSE diff {o['rmse'] - s['rmse']:+.4f}")
PY
