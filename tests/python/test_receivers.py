"""aggrate.receivers: leave-one-receiver-out in Python equals `aggrate train --group-by receiver`."""

import json
import subprocess

import numpy as np
import polars as pl
import pytest

import aggrate
from aggrate.estimators import f1_score
from aggrate.receivers import CRITERIA, best_f1, leave_one_receiver_out, own_folds, verdicts

MANIFEST = """
name = "tiny"
description = "three receivers at two rates"
seed = 11
packets = 3000
train_rates_mbps = [200, 500]

[[receivers]]
preset = "phone"

[[receivers]]
preset = "laptop"

[[receivers]]
random = 1

[base]
noise_preset = "phone"

[base.wlan]
stations = [{ vht = true, mcs = 9, nss = 2, bw_mhz = 80, short_gi = true }]

[[base.flows]]
arrival = { kind = "cbr" }
ip_len = 1500
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, aggrate_bin):
    """Three receivers (phone, laptop, one random draw) × 200 and 500 Mb/s, built by the CLI, and
    the CLI's leave-one-receiver-out table of the m = 1 threshold on it."""
    d = tmp_path_factory.mktemp("tiny")
    (d / "tiny.toml").write_text(MANIFEST)
    subprocess.run([aggrate_bin, "-q", "dataset", "build", str(d / "tiny.toml"), "--out", str(d / "data")], check=True)
    subprocess.run([aggrate_bin, "-q", "train", "--dataset", str(d / "data"), "--model", "threshold",
                    "--group-by", "receiver", "--own-folds", "3", "-o", str(d / "out")], check=True)
    return d


def test_the_threshold_table_equals_the_clis(tiny):
    df = aggrate.read_dataset(tiny / "data", train_only=True, m=1, sigma=False)
    table = leave_one_receiver_out(df, lambda: aggrate.ThresholdClassifier(), own_k=3)
    cli = pl.read_csv(tiny / "out" / "threshold_m1.receivers.csv")
    assert table.height == cli.height == 6
    both = table.join(cli.with_columns(pl.col("rate_mbps").cast(pl.Float64)), on=["receiver", "rate_mbps"],
                      suffix="_cli")
    assert both.height == 6
    assert np.allclose(both["held_out_f1"], both["held_out_f1_cli"], rtol=0, atol=1e-12)
    assert np.allclose(both["own_f1"], both["own_f1_cli"], rtol=0, atol=1e-12)
    report = json.loads((tiny / "out" / "threshold_m1.receivers.json").read_text())
    assert report["criteria"] == CRITERIA
    cli_pass = {v["receiver"]: v["pass"] for v in report["verdicts"]}
    ours = {r["receiver"]: r["passes"] for r in verdicts(table).iter_rows(named=True)}
    assert ours == cli_pass
    # The fixture is not trivial: some receiver fails and some passes.
    assert set(ours.values()) == {True, False}


class _Spy:
    """Records the receivers it is trained on (feature 0 is the receiver's index) and predicts
    from feature 1 (the true label), so every score is 1."""

    seen = []

    def fit(self, X, y):
        _Spy.seen.append(set(np.unique(X[:, 0]).astype(int).tolist()))
        self.rows = set(X[:, 2].astype(int).tolist())
        return self

    def predict(self, X):
        assert not (self.rows & set(X[:, 2].astype(int).tolist())), "a row scored was trained on"
        return X[:, 1] > 0.5


def test_no_receiver_is_in_both_a_training_and_a_test_set(tiny):
    df = aggrate.read_dataset(tiny / "data", train_only=True, m=1, sigma=False)
    names = df["receiver"].unique(maintain_order=True).to_list()
    df = df.with_columns(
        pl.col("receiver").replace_strict({n: i for i, n in enumerate(names)}).cast(pl.Float64).alias("rid"),
        pl.col("y").cast(pl.Float64).alias("label"),
        pl.int_range(pl.len()).cast(pl.Float64).alias("row"),
    )
    _Spy.seen = []
    table = leave_one_receiver_out(df, _Spy, features=["rid", "label", "row"], own_k=3)
    assert (table["held_out_f1"] == 1.0).all() and (table["own_f1"] == 1.0).all()
    # Per receiver: one held-out fit on the others, then three own folds on it alone.
    assert len(_Spy.seen) == 3 * (1 + 3)
    for i in range(3):
        held, *own = _Spy.seen[4 * i: 4 * i + 4]
        assert held == set(range(3)) - {i}
        assert all(o == {i} for o in own)


def test_own_folds_cut_each_capture_like_the_cli():
    caps = ["a"] * 7 + ["b"] * 3
    assert own_folds(caps, 3).tolist() == [0, 0, 1, 1, 2, 2, 2, 0, 1, 2]
    with pytest.raises(ValueError, match="fewer than 3 folds"):
        own_folds(["a", "a", "b"], 3)


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="receiver"):
        leave_one_receiver_out(pl.DataFrame({"y": [True]}), aggrate.ThresholdClassifier)
    one = pl.DataFrame({"receiver": ["r"] * 3, "capture": ["c"] * 3, "rate_mbps": [1.0] * 3, "y": [True, False, True],
                        "gap_us_1": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="two receivers"):
        leave_one_receiver_out(one, aggrate.ThresholdClassifier)


class _Shy:
    """Ranks perfectly (its probability grows with feature 0, the label) but never reaches 0.5, so
    `predict` calls no start at all."""

    def fit(self, X, y):
        return self

    def predict_proba(self, X):
        p = 0.2 + 0.2 * X[:, 0]
        return np.column_stack([1 - p, p])

    def predict(self, X):
        return self.predict_proba(X)[:, 1] > 0.5


class _Labels:
    """Predicts feature 0; has no predict_proba."""

    def fit(self, X, y):
        return self

    def predict(self, X):
        return X[:, 0] > 0.5


def _two_receivers(n=30):
    y = np.arange(2 * n) % 3 == 0
    return pl.DataFrame({"receiver": ["a"] * n + ["b"] * n, "capture": ["ca"] * n + ["cb"] * n,
                         "rate_mbps": [100.0] * (2 * n), "y": y, "label": y.astype(float)})


def test_the_best_threshold_separates_the_operating_point_from_the_ranking():
    table = leave_one_receiver_out(_two_receivers(), _Shy, features=["label"], best_threshold=True, calibrate=0.2)
    assert (table["held_out_f1"] == 0.0).all(), "predict calls nothing"
    assert (table["held_out_best_f1"] == 1.0).all(), "the ranking is perfect"
    assert ((table["best_threshold"] > 0.2) & (table["best_threshold"] < 0.4)).all()
    # The first 20 % of each capture (6 rows, 2 starts) is enough to set the threshold.
    assert (table["calibrated_f1"] == 1.0).all()
    with pytest.raises(ValueError, match="calibrate"):
        leave_one_receiver_out(_two_receivers(), _Shy, features=["label"], calibrate=1.5)
    # Without predict_proba it says what is missing.
    with pytest.raises(TypeError, match="predict_proba"):
        leave_one_receiver_out(_two_receivers(), _Labels, features=["label"], best_threshold=True)


def test_calibration_uses_only_the_head_of_each_capture():
    """The threshold is set on the head's labels alone: with the head's starts scored low and the
    rest's high, the head's threshold calls nothing on the rest."""

    class _Drift(_Shy):
        def predict_proba(self, X):
            p = np.where(X[:, 1] < 6, 0.2 + 0.2 * X[:, 0], 0.6 + 0.2 * X[:, 0])  # X[:, 1]: row in capture
            return np.column_stack([1 - p, p])

    df = _two_receivers().with_columns((pl.int_range(pl.len()) % 30).cast(pl.Float64).alias("pos"))
    table = leave_one_receiver_out(df, _Drift, features=["label", "pos"], calibrate=0.2)
    # Head: starts at 0.4, others at 0.2 → threshold 0.3; rest: every row ≥ 0.6 → all called.
    starts = 8 / 24  # rows 6..29 of each capture: 8 of 24 are starts
    assert np.allclose(table["calibrated_f1"], 2 * starts / (1 + starts))


def test_best_f1_is_the_best_of_every_threshold():
    rng = np.random.default_rng(3)
    y = rng.random(400) < 0.3
    p = np.round(np.where(y, rng.normal(0.6, 0.2, 400), rng.normal(0.4, 0.2, 400)), 2)  # ties too
    f, t = best_f1(y, p)
    brute = max(f1_score(y, p > c) for c in np.unique(np.append(p, p.min() - 1)))
    assert f == pytest.approx(brute, abs=1e-12)
    assert f1_score(y, p > t) == pytest.approx(f, abs=1e-12)
    assert best_f1(np.zeros(5, bool), p[:5])[0] == 0.0
