"""The online estimator and the emulator from Python."""

import pathlib

import numpy as np
import polars as pl
import pytest

import aggrate


def test_online_estimator_tracks_the_true_level(sample):
    rows = aggrate.read_capture(sample)
    reports = aggrate.OnlineEstimator().run(rows["host_ns"], rows["seq"].cast(pl.UInt64))
    assert reports.height >= 20  # 2.5 s at 100 ms
    true_level = rows.height / rows["y"].sum()
    est = reports["packets"].sum() / reports["frames"].sum()
    # The shipped model on the ns-3 capture (clean receive times): within 2 % of the truth.
    assert abs(est - true_level) / true_level < 0.02, (est, true_level)
    assert (reports["lost"] == 0).all()

    # One packet at a time gives the same reports.
    e = aggrate.OnlineEstimator()
    one = []
    for s, t in zip(rows["seq"].to_list(), rows["host_ns"].to_list()):
        e.push(s, t)
        while (r := e.poll_report(t)) is not None:
            one.append(r)
    assert pl.DataFrame(one).equals(reports)


def test_online_estimator_refuses_time_going_back():
    e = aggrate.OnlineEstimator(aggrate.Model.shipped())
    e.push(1, 1_000_000)
    with pytest.raises(ValueError, match="before the previous"):
        e.push(2, 999_999)
    with pytest.raises(ValueError, match="interval_ms"):
        aggrate.OnlineEstimator(interval_ms=float("nan"))


def test_simulate_is_deterministic_and_readable(tmp_path):
    a = aggrate.simulate(tmp_path / "a.pcapng", rate_mbps=200, duration_s=0.5, seed=3)
    b = aggrate.simulate(tmp_path / "b.pcapng", rate_mbps=200, duration_s=0.5, seed=3)
    assert (tmp_path / "a.pcapng").read_bytes() == (tmp_path / "b.pcapng").read_bytes()
    st = a["stations"][0]
    assert st["received_mbps"] == pytest.approx(200, rel=0.05)
    assert a["paths"] == [str(tmp_path / "a.pcapng")]
    df = aggrate.read_capture(a["paths"][0])
    assert df["y"].sum() == pytest.approx(df.height / st["mean_agg"], rel=0.02)
    amsdu = aggrate.simulate(tmp_path / "c.pcapng", rate_mbps=200, duration_s=0.5, amsdu=4)
    assert amsdu["stations"][0]["stats"]["mpdus"] < amsdu["stations"][0]["stats"]["delivered"]
    with pytest.raises(ValueError, match="scenario"):
        aggrate.simulate(tmp_path / "d.pcapng", noise="no-such-preset")


def test_online_self_calibration_sets_an_operating_point(tmp_path):
    # A receiver the emulator draws (random receive path), 400 Mb/s for 1 s: two windows.
    aggrate.simulate(tmp_path / "r.pcapng", rate_mbps=400, duration_s=1.0, noise="random", seed=11)
    rows = aggrate.read_capture(tmp_path / "r.pcapng", m=1)
    assert rows.height > 2 * 16_385
    t = rows["host_ns"]
    assert aggrate.OnlineEstimator().calibration() is None

    # At the training WLAN's PHY rate: no distance limit, so the nearest receivers' threshold.
    e = aggrate.OnlineEstimator(self_calibrate=True, phy_mbps=866.7)
    e.run(t)
    c = e.calibration()
    assert c["windows"] + c["skipped"] == rows.height // 16_385
    assert c["windows"] >= 1 and not c["last"]["too_far"]
    assert 300 < c["last"]["rate_mbps"] < 500 and c["last"]["bank_rate_mbps"] == 400
    assert [c["last"]["load"], c["last"]["threshold"]] in c["knots"]

    # A limit no window meets: the model's own threshold, and the same frames as without.
    far = aggrate.OnlineEstimator(self_calibrate=True, max_distance=0.0)
    plain = aggrate.OnlineEstimator()
    assert far.run(t).equals(plain.run(t))
    assert far.calibration()["last"]["too_far"]
    assert all(k[1] == 0.0 for k in far.calibration()["knots"])

    with pytest.raises(ValueError, match="max_distance"):
        aggrate.OnlineEstimator(self_calibrate=True, max_distance=-1.0)
    with pytest.raises(aggrate.ModelError, match="shipped model"):
        repo = pathlib.Path(__file__).resolve().parents[2]
        logistic = aggrate.Model.load(repo / "models" / "logistic_m20_sigma.json")
        aggrate.OnlineEstimator(logistic, self_calibrate=True)


def test_self_calibration_matches_recv_and_takes_a_bank_passed_in(tmp_path):
    """Python's self-calibrating estimator learns on a capture's receive times what `recv
    --self-calibrate` learns (the CLI's replay of the same calibrator), with the embedded bank
    and with the same bank passed in as JSON bytes; its levels are the airtime levels."""
    import json, lzma, os, pathlib, subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    cap = tmp_path / "ns3.pcap"
    cap.write_bytes(lzma.decompress((root / "tests/data/ns3_vht_mcs9_2ss_300mbps.pcap.xz").read_bytes()))
    out = subprocess.run([os.environ["AGGRATE_BIN"], "-q", "tool", "self-calibrate", str(cap), "--phy-mbps", "866.7"],
                         capture_output=True, text=True, check=True)
    want = json.loads(out.stdout)
    df = aggrate.read_capture(cap, m=5, sigma=False, context=1024)
    bank = lzma.decompress((root / "models/mlp8_m5_ctx1024.bank.json.xz").read_bytes())
    for kw in ({}, {"bank": bank}):
        e = aggrate.OnlineEstimator(self_calibrate=True, phy_mbps=866.7, **kw)
        levels = []
        for seq, ns in zip(df["seq"].to_list(), df["host_ns"].to_list()):
            e.push(seq, ns, 1472)
            while (r := e.poll_report(ns)) is not None:
                levels.append(r["level"])
        c = e.calibration()
        assert c["windows"] == want["calibration"]["windows"] >= 2, (c, want)
        assert c["knots"] == want["calibration"]["knots"] and c["knots"], (c, want)
        assert levels == want["levels"]
    with pytest.raises(aggrate.ModelError, match="bank"):
        aggrate.OnlineEstimator(self_calibrate=True, bank=b"{")
    with pytest.raises(ValueError, match="self_calibrate"):
        aggrate.OnlineEstimator(bank=bank)
