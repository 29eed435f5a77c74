#!/usr/bin/env bash
# Emulator benchmark: simulated packets per second of wall time, writing captures.
#   benches/simulate.sh
# Prints one line per case (a single 250k-packet rate point, and the whole paper dataset).
# Not a test: nothing here fails on a slow machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/aggrate/target}"
cargo build --release --quiet
bin="$CARGO_TARGET_DIR/release/aggrate"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

best() { # best wall time of 3 runs of "$@"
  local b=""
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$tmp/t" "$@" >/dev/null 2>&1
    local w; w=$(cut -d' ' -f1 "$tmp/t")
    if [ -z "$b" ] || awk -v a="$w" -v c="$b" 'BEGIN{exit !(a<c)}'; then b="$w"; fi
  done
  echo "$b"
}
rate() { awk -v n="$1" -v t="$2" 'BEGIN{ if (t < 0.01) t = 0.01; printf "%.2f", n / t / 1e6 }'; }

# 250,000 packets at 300 Mb/s = 10 s of virtual time, phone noise, pcapng.
w=$(best "$bin" -q simulate --rate-mbps 300 --duration 10 --noise phone --seed 1 -o "$tmp/one.pcapng")
echo "one rate point (250,000 packets, phone noise, pcapng): ${w} s wall, $(rate 250000 "$w") M packets/s"
w=$(best "$bin" -q dataset build datasets/paper.toml --out "$tmp/paper")
n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_packets"])' "$tmp/paper/manifest.json")
echo "paper dataset (9 rate points, $n packets): ${w} s wall, $(rate "$n" "$w") M packets/s"
