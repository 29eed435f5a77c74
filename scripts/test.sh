#!/usr/bin/env bash
# The test command: installs what the tests need (tshark, through apt) when it is missing, then
# runs every test. Safe to run again; the cargo target directory is shared across clones.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/aggrate/target}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# tshark cross-checks parsing; iproute2 and ethtool build the real-kernel receive paths
# (network namespaces, veth, GRO) that tests/realtime/testbed.rs replays through.
missing=()
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)   # the C ABI test
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ethtool >/dev/null 2>&1 || [ -x /usr/sbin/ethtool ] || missing+=(ethtool)
command -v iperf3 >/dev/null 2>&1 || missing+=(iperf3)    # kernel TCP through the testbed
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)   # local Spark (tests/python/test_spark.py)
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  echo "wireshark-common wireshark-common/install-setuid boolean false" | as_root debconf-set-selections
  as_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi
export PATH="$PATH:/usr/sbin:/sbin"

# Real ONNX Runtime (its PyPI wheel carries the library) to check ONNX exports; polars,
# matplotlib and nbclient to execute notebooks/training.ipynb headless; maturin, pytest and
# scikit-learn for the Python package; pyspark (with pyarrow; pandas < 3, which pyspark 4 still
# warns about) for the Spark jobs, run on a local Spark.
venv="${AGGRATE_VENV:-$HOME/.cache/aggrate/venv}"
venv_pid=""
venv_log=$(mktemp)
trap 'rm -f "$venv_log"' EXIT
if ! "$venv/bin/python" -c "import onnxruntime, onnx, numpy, polars, matplotlib, nbclient, nbformat, ipykernel, sklearn, pytest, maturin, pyspark, pyarrow" >/dev/null 2>&1; then
  # In the background while cargo compiles the tests: the downloads overlap the build, the
  # unpacking competes with it for the same two cores (on a fresh machine it gave back
  # seconds, not minutes: the build is CPU-bound).
  echo "== setting up $venv in the background (onnxruntime, onnx, numpy, polars, matplotlib, nbclient, ipykernel, scikit-learn, pytest, maturin, pyspark, pyarrow)"
  ( python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check onnxruntime onnx numpy polars matplotlib nbclient nbformat ipykernel scikit-learn pytest maturin pyspark pyarrow "pandas<3"
  ) >"$venv_log" 2>&1 &
  venv_pid=$!
fi
export AGGRATE_PYTHON="$venv/bin/python"

echo "== cargo test --no-run (building the tests)"
cargo test --locked --workspace --exclude aggrate-py --lib --tests --benches --no-run
if [ -n "$venv_pid" ]; then
  if ! wait "$venv_pid"; then
    cat "$venv_log" >&2
    echo "setting up the Python venv $venv failed (above)" >&2
    exit 1
  fi
fi

# The Python package, as a user installs it (`pip install .`), built with the dev profile here
# (the tests' compiled dependencies are reused; a user's install builds an optimised release).
echo "== pip install . (the aggrate Python package)"
PATH="$venv/bin:$PATH" MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall .

echo "== cargo test"
# Everything in one build — one feature set, so every dependency (polars above all) compiles
# once: the core crate, the library, the CLI (two integration-test binaries: tests/suite, the
# CPU-bound ones, and tests/realtime, the kernel paths and live loops, which cargo runs apart),
# the C ABI (header current, a C program built with the system compiler against it), and every
# crate's doc tests. (The Python extension is tested through pytest below. That the core crate
# builds alone, without the features the others unify into it, CI's clippy of it checks.)
cargo test --locked --workspace --exclude aggrate-py --lib --tests --benches
cargo test --locked --workspace --exclude aggrate-py --doc

echo "== pytest (the Python package)"
AGGRATE_BIN="$CARGO_TARGET_DIR/debug/aggrate" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python
