#!/usr/bin/env bash
# Peak RSS of a 1 GB reliable transfer at 5 % loss each way (the lab's link at 1 Gb/s, virtual
# clock: `aggrate tool bulk-lab`, all mechanisms, one run): sender and receiver live in one
# process here, so the figure bounds both together. The file is made and hashed chunk by chunk
# as the sender takes it; what the transfer holds is the two windows (4,096 segments of 1,408
# bytes each end) and the path's queue. Fails above 64 MB.
#   benches/bulk_rss.sh [BYTES]   (default 1000000000; needs /usr/bin/time)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/aggrate/target}"
cargo build --release --locked -q
bin="$CARGO_TARGET_DIR/release/aggrate"
bytes="${1:-1000000000}"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
/usr/bin/time -f '%M %e' -o "$dir/rss" "$bin" -q tool bulk-lab -o "$dir/out" --files "$bytes" \
  --losses 0.05 --seeds 1 --datagram 1472 --no-ablation --rate 125000000 >/dev/null
read -r rss_kb secs <"$dir/rss"
python3 - "$dir/out/bulk_lab.json" "$rss_kb" "$secs" <<'PY'
import json, sys
row = json.load(open(sys.argv[1]))[0]
rss_mb = int(sys.argv[2]) / 1024
print(json.dumps({"file_bytes": row["file_bytes"], "exact": row["exact"], "loss": row["loss"],
                  "goodput_bytes_per_s": round(row["goodput_bytes_per_s"]), "overhead": round(row["overhead"], 4),
                  "peak_rss_mb": round(rss_mb, 1), "wall_s": float(sys.argv[3])}))
sys.exit(0 if row["exact"] and rss_mb < 64 else 1)
PY
