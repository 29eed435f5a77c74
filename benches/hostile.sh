#!/usr/bin/env bash
# Peak RSS of `inspect` and `features` on hostile (valid but state-hungry) captures: a new
# transmitter × TID per packet, a new UDP 5-tuple per packet, and one A-MPDU that never closes.
# Each must stay below 64 MB, with the cap that held it named on stderr. Not a timed test: run
#   benches/hostile.sh [N_PACKETS]        (default 500000; needs /usr/bin/time)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/aggrate/target}"
n="${1:-500000}"
cargo build --release --features onnx -q
bin="$CARGO_TARGET_DIR/release/aggrate"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
limit_kb=$((64 * 1024))
fail=0
printf '%-10s %-9s %10s %9s  %s\n' capture command "size KB" "RSS MB" "cap named on stderr"
for kind in streams flows open-frame; do
  f="$dir/$kind.pcap.xz"
  "$bin" -q tool hostile "$kind" -n "$n" -o "$f"
  size=$(( $(stat -c %s "$f") / 1024 ))
  for cmd in inspect features; do
    args=("$cmd" "$f")
    [ "$cmd" = features ] && args+=(--port 5001 -o "$dir/rows.parquet")
    /usr/bin/time -f '%M' -o "$dir/rss" "$bin" "${args[@]}" >/dev/null 2>"$dir/err" || true
    rss=$(tail -1 "$dir/rss")
    cap=$(grep -o 'cap hit: [^(]*' "$dir/err" | head -1 || true)
    printf '%-10s %-9s %10s %9.1f  %s\n' "$kind" "$cmd" "$size" "$(echo "$rss / 1024" | bc -l)" "${cap:-—}"
    if [ "$rss" -ge "$limit_kb" ]; then fail=1; fi
  done
done
[ "$fail" = 0 ] && echo "all below 64 MB" || { echo "FAILED: some peak RSS ≥ 64 MB"; exit 1; }
