#!/usr/bin/env bash
# `recv --self-calibrate` on real Linux receive paths, in the closed loop (models/README.md,
# "Its operating point for your receiver"; the full table in its git history): `aggrate send` and `aggrate ap` (the emulated 802.11ac AP, VHT
# MCS 9) in one network namespace, `aggrate recv` in another behind a veth pair whose receive
# side is set up as PATH says, with and without --self-calibrate. The truth is the AP's: its
# MPDUs per A-MPDU over the run (data_out / ampdus); the estimate is the mean μ_N of the
# receiver's reports over the same run (ramp-up included in both). The receiver is told the
# AP's PHY rate (--phy-mbps 866.7, the training WLAN's), so self-calibration takes no distance
# limit (its default there); MAX_DISTANCE=D sets one.
# Root. Every namespace, link and process it makes is removed on exit, also on failure.
#
#   scripts/selfcal_veth.sh [SECONDS] [PATH...]     PATH: plain | gro | gro,threaded | burner | gro,burner
#   AGGRATE=path/to/aggrate (default: on PATH)
set -euo pipefail
secs="${1:-20}"; shift || true
paths=("$@"); [ ${#paths[@]} -gt 0 ] || paths=(plain gro gro,threaded burner gro,threaded,burner)
bin="${AGGRATE:-aggrate}"
[ "$(id -u)" = 0 ] || { echo "selfcal_veth.sh: needs root (network namespaces)" >&2; exit 2; }
tag="agsc$$"; tx="$tag-tx"; rx="$tag-rx"
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
ip -n "$tx" addr add 10.214.0.1/24 dev "${tag}t"; ip -n "$rx" addr add 10.214.0.2/24 dev "${tag}r"
for ns in "$tx" "$rx"; do ip -n "$ns" link set lo up; done
ip -n "$tx" link set "${tag}t" up; ip -n "$rx" link set "${tag}r" up
ncpu=$(nproc); rxcpu=$((ncpu > 1 ? 1 : 0))
echo "| receive path | recv | true level (AP) | estimated μ_N | rate Mb/s | one-way delay ms (mean of reports) | windows used; too far | last nearest (distance) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for path in "${paths[@]}"; do
  gro=off; threaded=0; burner=0
  IFS=, read -ra sw <<<"$path"
  for s in "${sw[@]}"; do
    case $s in
      plain) ;; gro) gro=on ;; threaded) threaded=1 ;; burner) burner=1 ;;
      *) echo "unknown switch $s" >&2; exit 2 ;;
    esac
  done
  ip netns exec "$rx" ethtool -K "${tag}r" gro "$gro" >/dev/null 2>&1 || true
  ip netns exec "$rx" sh -c "echo $threaded > /sys/class/net/${tag}r/threaded" 2>/dev/null || true
  for mode in plain cal; do
    extra=(); [ "$mode" = cal ] && extra=(--self-calibrate ${MAX_DISTANCE:+--max-distance "$MAX_DISTANCE"})
    bp=""
    if [ "$burner" = 1 ]; then
      taskset -c "$rxcpu" sh -c 'while :; do :; done' & bp=$!; pids+=("$bp")
    fi
    ip netns exec "$tx" "$bin" -q ap --listen 10.214.0.1:7000 --stations 10.214.0.2:9000 \
      --duration "$((secs + 2))" >"$work/ap.json" 2>"$work/ap.err" & ap=$!; pids+=("$ap")
    AGGRATE_KEY_FILE="$work/key" ip netns exec "$rx" taskset -c "$rxcpu" "$bin" recv \
      --listen 10.214.0.2:9000 --duration "$((secs + 2))" --phy-mbps 866.7 "${extra[@]}" >"$work/rx.json" 2>"$work/rx.err" & rp=$!; pids+=("$rp")
    sleep 0.5
    ip netns exec "$tx" "$bin" -q send --to 10.214.0.1:7000 --key-file "$work/key" \
      --duration "$secs" >"$work/tx.json" 2>"$work/tx.err"
    wait "$ap" "$rp"
    [ -n "$bp" ] && { kill "$bp" 2>/dev/null || true; wait "$bp" 2>/dev/null || true; }
    python3 - "$work" "$path" "$mode" <<'EOF'
import json, re, sys
w, path, mode = sys.argv[1:]
ap = json.load(open(f"{w}/ap.json"))
rx = json.load(open(f"{w}/rx.json"))
rep = [l for l in open(f"{w}/rx.err") if "μ_N" in l]
mu, rate, owd = [], [], []
for l in rep:
    m = re.search(r"μ_N\s+([\d.]+)\s+\(frame count\s+[\d.]+\)\s+rx\s+([\d.]+) Mb/s\s+owd\s+([\d.]+|NaN) ms", l)
    if m and float(m.group(2)) > 0:
        mu.append(float(m.group(1))); rate.append(float(m.group(2))); owd.append(float(m.group(3)))
# Over the whole run, as the AP counts (ramp-up included).
h = 0
mean = lambda v: sum(v) / len(v) if v else float("nan")
true = ap["data_out"] / max(ap["ampdus"], 1)
sc = rx.get("self_calibration") or {}
last = sc.get("last") or {}
far = sc.get("too_far", 0)
cal = f"{sc.get('windows', 0)}; {far}" if mode == "cal" else ""
near = f"{last.get('nearest', '')} ({last.get('distance', float('nan')):.2f})" if mode == "cal" and last else ""
print(f"| {path} | {'--self-calibrate' if mode == 'cal' else 'plain'} | {true:.1f} | {mean(mu[h:]):.1f} | {mean(rate[h:]):.0f} | {mean(owd[h:]):.2f} | {cal} | {near} |")
EOF
  done
done
