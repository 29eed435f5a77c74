"""Fixtures of the Python package's tests (run by scripts/test.sh after `pip install .`)."""

import os
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "ns3_vht_mcs9_2ss_300mbps.pcap.xz"


@pytest.fixture(scope="session")
def sample() -> pathlib.Path:
    return SAMPLE


@pytest.fixture(scope="session")
def aggrate_bin() -> str:
    """The CLI, to cross-check the package against it: $AGGRATE_BIN (scripts/test.sh sets it to
    the binary `cargo test` built), else `aggrate` on the PATH."""
    b = os.environ.get("AGGRATE_BIN") or shutil.which("aggrate")
    if not b or not os.path.exists(b):
        pytest.fail("the aggrate CLI is needed to cross-check: set AGGRATE_BIN (scripts/test.sh does)")
    return b


@pytest.fixture(scope="session")
def emulated(tmp_path_factory) -> pathlib.Path:
    """Two seconds of emulated 400 Mb/s downlink through the `phone` receive path."""
    import aggrate

    out = tmp_path_factory.mktemp("sim") / "emu_400mbps.pcapng"
    aggrate.simulate(out, rate_mbps=400, duration_s=2.0, noise="phone", seed=7)
    return out
