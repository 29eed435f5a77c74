#!/usr/bin/env bash
# Run every cargo-fuzz target for SECONDS each (default 300), or for N million executions each
# (an argument like 10M), and print its executions.
#   scripts/fuzz.sh [SECONDS | NM] [TARGET…]
# Needs the nightly toolchain and cargo-fuzz (installed here when missing). Seeds come from
# tests/data (captures, and the packets inside them for the packet-level targets) and models/;
# the corpus grows in fuzz/corpus/<target>, crashes land in fuzz/artifacts/<target>/ — each one
# found becomes a regression test (in tests/suite/) before it is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# Instrumented builds of polars and friends: their own target directory, reused across runs.
export CARGO_TARGET_DIR="${AGGRATE_FUZZ_TARGET:-$HOME/.cache/aggrate/fuzz-target}"
budget="${1:-300}"
shift || true
if [[ "$budget" =~ ^([0-9]+)M$ ]]; then
  limit=(-runs=$((BASH_REMATCH[1] * 1000000)))
else
  limit=(-max_total_time="$budget")
fi
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(capture_reader radiotap decode wire model_loader ap_binding)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal

seed() {
  local t=$1 dir=fuzz/corpus/$1
  mkdir -p "$dir"
  case $t in
    capture_reader)
      cp tests/data/*.pcap tests/data/*.pcapng "$dir"/
      (xz -dc tests/data/ns3_vht_mcs9_2ss_300mbps.pcap.xz || true) | head -c 8000 > "$dir/ns3_head.pcap" ;;
    radiotap|decode)
      # The first packets of each fixture, one file each (decode: link-type byte first).
      python3 - "$t" "$dir" tests/data/radiotap_fields.pcap <<'PY'
import struct, sys
t, out, path = sys.argv[1], sys.argv[2], sys.argv[3]
b = open(path, 'rb').read()
o, i = 24, 0
while o + 16 <= len(b) and i < 40:
    incl = struct.unpack('<I', b[o + 8:o + 12])[0]
    pkt = b[o + 16:o + 16 + incl]
    open(f"{out}/pkt{i}", 'wb').write((b'\x01' if t == 'decode' else b'') + pkt)
    o, i = o + 16 + incl, i + 1
PY
      ;;
    model_loader) cp models/threshold_m1.json models/logistic_m20_sigma.json models/mlp8_m5_ctx1024.json "$dir"/ ;;
    wire) printf '\xa6\x67\x02\x03\x00\x00\x00\x01\x00\x00\x00\x00' > "$dir/hello_header" ;;
  esac
}

total=0
for t in "${targets[@]}"; do
  seed "$t"
  log=$(mktemp)
  max_len=65536
  [ "$t" = capture_reader ] && max_len=8192
  cargo +nightly fuzz run "$t" "fuzz/corpus/$t" -- "${limit[@]}" -rss_limit_mb=1024 \
    -max_len=$max_len -print_final_stats=1 2>&1 | tee "$log" | grep -E "^(#[0-9]+.*(DONE|pulse))|ERROR|crash" || true
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  echo "== $t: $runs executions ($budget)"
  if grep -q "ERROR: libFuzzer\|SUMMARY: .*Sanitizer\|panicked at" "$log"; then
    echo "== $t: CRASH, see fuzz/artifacts/$t/"; exit 1
  fi
  total=$((total + runs))
  rm -f "$log"
done
echo "== all targets: $total executions, no crash"
