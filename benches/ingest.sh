#!/usr/bin/env bash
# Ingest benchmark: records/s of aggrate (inspect; features → Parquet; the library pipeline with no
# output) against `tshark -T fields` on the same capture in the same run, and peak RSS at 1× and
# 10× the input size (memory must stay flat).
#
#   benches/ingest.sh [CAPTURE.pcap[.xz]]     (default: the ns-3 sample in tests/data)
#
# Needs tshark and GNU time (/usr/bin/time); prints a table. Not a test: nothing here fails on a
# slow machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/aggrate/target}"
src="${1:-tests/data/ns3_vht_mcs9_2ss_300mbps.pcap.xz}"
cargo build --release --quiet
bin="$CARGO_TARGET_DIR/release/aggrate"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

case "$src" in
  *.xz) xz -dc "$src" > "$tmp/x1.pcap" ;;
  *.gz) gzip -dc "$src" > "$tmp/x1.pcap" ;;
  *) cp "$src" "$tmp/x1.pcap" ;;
esac
"$bin" -q tool repeat "$tmp/x1.pcap" -n 10 -o "$tmp/x10.pcap"
n1=$("$bin" -q inspect "$tmp/x1.pcap" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["records"])')
n10=$((n1 * 10))

# best of 3: "wall user sys maxrss_kb"
measure() {
  local best=""
  for _ in 1 2 3; do
    # wall from the shell's nanosecond clock (GNU time's %e has 10 ms steps); CPU and RSS from time
    local t0 t1; t0=$(date +%s%N)
    /usr/bin/time -f "%U %S %M" -o "$tmp/t" "$@" >/dev/null 2>&1
    t1=$(date +%s%N)
    local t; t="$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", (b-a)/1e9}') $(cat "$tmp/t")"
    if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN{split(a,x," ");split(b,y," ");exit !(x[1]<y[1])}'; then best="$t"; fi
  done
  echo "$best"
}
rate() { awk -v n="$1" -v t="$2" 'BEGIN{ if (t < 0.001) t = 0.001; printf "%.2f", n / t / 1e6 }'; }

printf "%-44s %10s %8s %12s %10s\n" "command (input)" "records" "wall s" "M records/s" "peak RSS"
row() { # label records "wall user sys rss"
  set -- "$1" "$2" $3
  printf "%-44s %10s %8s %12s %8.1f MB\n" "$1" "$2" "$3" "$(rate "$2" "$3")" "$(awk -v k="$6" 'BEGIN{print k/1024}')"
}

ts=$(measure tshark -n -r "$tmp/x1.pcap" -T fields -e frame.time_epoch -e radiotap.mactime -e radiotap.ampdu.reference -e wlan.seq -e udp.dstport -e ip.len)
row "tshark -T fields (1x)" "$n1" "$ts"
for k in 1 10; do
  n=$([ $k = 1 ] && echo "$n1" || echo "$n10")
  ins=$(measure "$bin" -q inspect "$tmp/x$k.pcap" --json)
  row "aggrate inspect (${k}x)" "$n" "$ins"
  fea=$(measure "$bin" -q features "$tmp/x$k.pcap" --port 5001 -o "$tmp/f.parquet")
  row "aggrate features -> parquet zstd (${k}x)" "$n" "$fea"
  lz=$(measure "$bin" -q features "$tmp/x$k.pcap" --port 5001 --compression lz4 -o "$tmp/f.parquet")
  row "aggrate features -> parquet lz4 (${k}x)" "$n" "$lz"
  [ $k = 1 ] && { ins1="$ins"; fea1="$fea"; }
  [ $k = 10 ] && { ins10="$ins"; fea10="$fea"; }
done
# best of 3 for each figure (one run is at the mercy of a noisy machine)
for i in 1 2 3; do "$bin" -q tool ingest-rate "$tmp/x10.pcap" > "$tmp/lib$i.json"; done
lib=$(cat "$tmp/lib1.json")
lib_rate=$(python3 -c 'import json,sys; d=[json.load(open(f)) for f in sys.argv[1:]]; print("%.2f" % max(x["records"]/x["seconds"]/1e6 for x in d))' "$tmp"/lib?.json)
write_rate=$(python3 -c 'import json,sys; d=[json.load(open(f)) for f in sys.argv[1:]]; print("%.2f" % max(x["parquet_write_rows"]/x["parquet_write_seconds"]/1e6 for x in d))' "$tmp"/lib?.json)
rows10=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["rows"])' "$lib")
echo
echo "library pipeline, in-process, one core (10x): $lib_rate M records/s  ($lib)"
echo "Parquet writer alone (rows in memory, zstd):  $write_rate M rows/s"
echo "features -> parquet zstd, end to end (10x):   $(rate "$rows10" "$(echo "$fea10" | cut -d' ' -f1)") M rows/s"
tw=$(echo "$ts" | cut -d' ' -f1)
both1=$(awk -v a="$(echo "$ins1" | cut -d' ' -f1)" -v b="$(echo "$fea1" | cut -d' ' -f1)" 'BEGIN{print a+b}')
echo "inspect+features vs tshark (1x, wall):      $(awk -v t="$tw" -v a="$both1" 'BEGIN{printf "%.1f", t/a}')x faster"
echo "inspect alone vs tshark (1x, wall):         $(awk -v t="$tw" -v a="$(echo "$ins1" | cut -d' ' -f1)" 'BEGIN{printf "%.1f", t/a}')x faster"
echo "peak RSS 10x / 1x: inspect $(awk -v a="$(echo "$ins10" | cut -d' ' -f4)" -v b="$(echo "$ins1" | cut -d' ' -f4)" 'BEGIN{printf "%.2f", a/b}'), features $(awk -v a="$(echo "$fea10" | cut -d' ' -f4)" -v b="$(echo "$fea1" | cut -d' ' -f4)" 'BEGIN{printf "%.2f", a/b}')"
