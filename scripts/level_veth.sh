#!/usr/bin/env bash
# The live loop over real Linux receive paths, steered by the airtime level and by the frame
# count, each scored against the AP's own truth per report interval (docs/levels.md):
# `aggrate send` and `aggrate ap` (the emulated 802.11ac AP, VHT MCS 9, 2 SS, 80 MHz) in one
# network namespace, `aggrate recv` in another behind a veth pair whose receive side is set up as
# PATH says. `ap --truth` and `recv --log` write the two logs, `aggrate join` scores the steady
# state (the second half of the run). The airtime runs tell recv the PHY rate (--phy-mbps
# 866.7); the frame-count runs do not (then the level is packets ÷ predicted starts).
# Root. Every namespace, link, qdisc and process it makes is removed on exit, also on failure.
#
#   scripts/level_veth.sh [SECONDS] [PATH...]
#   PATH: comma list of plain | gro | threaded | burner | flush=µs | defer=N | shape=Mbit/s | tick=µs
#   AGGRATE=path/to/aggrate (default: on PATH)
set -euo pipefail
secs="${1:-30}"; shift || true
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(plain gro,threaded burner gro,threaded,burner gro,flush=300,defer=4 gro,flush=250,defer=4,burner shape=700 tick=250)
bin="${AGGRATE:-aggrate}"
[ "$(id -u)" = 0 ] || { echo "level_veth.sh: needs root (network namespaces)" >&2; exit 2; }
tag="aglv$$"; tx="$tag-tx"; rx="$tag-rx"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$tx" 2>/dev/null || true
  ip netns del "$rx" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
"$bin" -q keygen "$work/key" >/dev/null
ip netns add "$tx"; ip netns add "$rx"
ip link add "${tag}t" netns "$tx" type veth peer name "${tag}r" netns "$rx"
ip -n "$tx" addr add 10.215.0.1/24 dev "${tag}t"; ip -n "$rx" addr add 10.215.0.2/24 dev "${tag}r"
for ns in "$tx" "$rx"; do ip -n "$ns" link set lo up; done
ip -n "$tx" link set "${tag}t" up; ip -n "$rx" link set "${tag}r" up
ncpu=$(nproc); rxcpu=$((ncpu > 1 ? 1 : 0))
sysfs="/sys/class/net/${tag}r"
echo "| receive path | steered by | true μ_N (AP) | vs target | steered level: bias | median error | frame count: bias | rate Mb/s | one-way delay ms | AP release p50 / p99 µs | A-MPDUs merged by the AP |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for path in "${paths[@]}"; do
  gro=off; threaded=0; burner=0; flush=0; defer=0; shape=0; tick=0
  IFS=, read -ra sw <<<"$path"
  for s in "${sw[@]}"; do
    case $s in
      plain) ;; gro) gro=on ;; threaded) threaded=1 ;; burner) burner=1 ;;
      flush=*) flush="${s#flush=}" ;; defer=*) defer="${s#defer=}" ;;
      shape=*) shape="${s#shape=}" ;; tick=*) tick="${s#tick=}" ;;
      *) echo "unknown switch $s" >&2; exit 2 ;;
    esac
  done
  ip netns exec "$rx" ethtool -K "${tag}r" gro "$gro" >/dev/null 2>&1 || true
  ip netns exec "$rx" sh -c "echo $threaded > $sysfs/threaded" 2>/dev/null || true
  ip netns exec "$rx" sh -c "echo $((flush * 1000)) > $sysfs/gro_flush_timeout" 2>/dev/null || true
  ip netns exec "$rx" sh -c "echo $defer > $sysfs/napi_defer_hard_irqs" 2>/dev/null || true
  ip netns exec "$tx" tc qdisc del dev "${tag}t" root 2>/dev/null || true
  if [ "$shape" != 0 ]; then
    ip netns exec "$tx" tc qdisc add dev "${tag}t" root tbf rate "${shape}mbit" burst 3028 latency 50ms
  fi
  for steer in airtime frame-count; do
    phy=(); [ "$steer" = airtime ] && phy=(--phy-mbps 866.7)
    bp=""
    if [ "$burner" = 1 ]; then
      taskset -c "$rxcpu" sh -c 'while :; do :; done' & bp=$!; pids+=("$bp")
    fi
    ip netns exec "$tx" "$bin" -q ap --listen 10.215.0.1:7000 --stations 10.215.0.2:9000 \
      --duration "$((secs + 2))" --truth "$work/ap.csv" --release-tick-us "$tick" >"$work/ap.json" 2>"$work/ap.err" & ap=$!; pids+=("$ap")
    AGGRATE_KEY_FILE="$work/key" ip netns exec "$rx" taskset -c "$rxcpu" "$bin" -q recv \
      --listen 10.215.0.2:9000 --duration "$((secs + 2))" "${phy[@]}" --log "$work/rx.csv" >"$work/rx.json" 2>"$work/rx.err" & rp=$!; pids+=("$rp")
    sleep 0.5
    ip netns exec "$tx" "$bin" -q send --to 10.215.0.1:7000 --key-file "$work/key" \
      --duration "$secs" >"$work/tx.json" 2>"$work/tx.err"
    wait "$ap" "$rp"
    [ -n "$bp" ] && { kill "$bp" 2>/dev/null || true; wait "$bp" 2>/dev/null || true; }
    "$bin" -q join --truth "$work/ap.csv" --reports "$work/rx.csv" --json >"$work/join.json"
    python3 - "$work" "$path" "$steer" <<'PY'
import csv, json, sys
w, path, steer = sys.argv[1:]
j = json.load(open(f"{w}/join.json"))
rows = [r for r in csv.DictReader(open(f"{w}/rx.csv")) if int(r["packets"]) > 0]
half = rows[len(rows) // 2:]
mean = lambda v: sum(v) / len(v) if v else float("nan")
rate = mean([float(r["rx_mbps"]) for r in half])
owd = mean([float(r["owd_mean_ms"]) for r in half if r["owd_mean_ms"] != "NaN"])
pct = lambda e, k: f"{e[k] * 100:+.1f} %" if e else "–"
med = lambda e: f"{e['mae_rel_median'] * 100:.1f} %" if e else "–"
print(f"| {path} | {steer} | {j['true_level_mean']:.1f} | {j['true_level_vs_target'] * 100:+.1f} % | "
      f"{pct(j['level'], 'bias')} | {med(j['level'])} | {pct(j['frame_count'], 'bias')} | {rate:.0f} | {owd:.2f} | "
      f"{j['release_p50_us']:.0f} / {j['release_p99_us']:.0f} | {j['merged_share'] * 100:.1f} % |")
PY
  done
done
