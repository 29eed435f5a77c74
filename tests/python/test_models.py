"""Fitting with the project's solvers behind scikit-learn's estimator API; models round-trip."""

import json

import numpy as np
import polars as pl
import pytest
from sklearn.base import clone
from sklearn.model_selection import KFold, cross_val_score
from sklearn.pipeline import make_pipeline

import aggrate


@pytest.fixture(scope="module")
def rows(emulated):
    return aggrate.read_capture(emulated)


def test_logistic_fits_scores_and_round_trips(rows, tmp_path):
    clf = aggrate.LogisticRegression(m=20, l2=1.0).fit(rows, rows["y"])
    pred = clf.predict(rows)
    y = rows["y"].to_numpy()
    tp, fp, fn = np.sum(pred & y), np.sum(pred & ~y), np.sum(~pred & y)
    assert clf.score(rows, rows["y"]) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    # Far better than calling every packet a start (F1 = 2 / (1 + mean level)).
    assert clf.score(rows, rows["y"]) > 2 * (2 * y.mean() / (1 + y.mean()))
    assert clf.model_.kind == "logistic"
    path = tmp_path / "m.json"
    clf.model_.save(path)
    back = aggrate.Model.load(path)
    assert back.to_json() == clf.model_.to_json()
    X = rows.select(back.feature_names).to_numpy()
    d1 = np.frombuffer(back.decision_function(np.ascontiguousarray(X).tobytes(), X.shape[0]), "<f8")
    assert np.array_equal(d1, clf.decision_function(rows))
    assert json.loads(back.spec_json)["m"] == 20


def test_sklearn_cross_validation_pipelines_and_clone(rows):
    clf = aggrate.LogisticRegression(m=20)
    scores = cross_val_score(clf, rows, rows["y"].to_numpy(), cv=KFold(3, shuffle=False))
    assert len(scores) == 3 and all(0.0 < s <= 1.0 for s in scores)
    X = rows.select(aggrate.estimators.feature_names(20, True)).to_numpy()
    pipe = make_pipeline(aggrate.LinearSVC(m=20, c=0.5)).fit(X, rows["y"].to_numpy())
    assert pipe.predict(X).dtype == bool
    c = clone(aggrate.LinearSVC(c=0.25, loss="hinge"))
    assert c.get_params()["c"] == 0.25 and c.get_params()["loss"] == "hinge"


def test_threshold_is_the_m1_baseline(rows):
    t = aggrate.ThresholdClassifier().fit(rows, rows["y"])
    model = json.loads(t.model_.to_json())["model"]
    assert model["kind"] == "threshold"
    thr = model["threshold_us"]
    # The learned threshold separates gaps at frame starts from gaps inside frames.
    start = rows.filter(pl.col("y"))["gap_us_1"].median()
    inside = rows.filter(~pl.col("y"))["gap_us_1"].median()
    assert inside < thr < start
    assert np.array_equal(t.predict(rows), rows["gap_us_1"].to_numpy() > thr)


def test_bad_inputs_are_named(rows):
    with pytest.raises(aggrate.ModelError, match="l2"):
        aggrate.LogisticRegression(l2=-1.0).fit(rows, rows["y"])
    with pytest.raises(aggrate.ModelError, match="unknown field"):
        aggrate._aggrate.fit("logistic", b"", b"", 0, aggrate._aggrate.layout(1, False)[0], '{"C": 1}')
    with pytest.raises(ValueError, match="feature columns"):
        aggrate.LogisticRegression(m=20).fit(np.zeros((10, 3)), np.zeros(10, bool))
    with pytest.raises(ValueError, match="no column"):
        aggrate.LogisticRegression(m=30).fit(rows, rows["y"])
    with pytest.raises(aggrate.ModelError):
        aggrate.Model.from_json('{"format": "aggrate-model"}')
    with pytest.raises(aggrate.ModelError):
        aggrate.Model.load("/nonexistent/model.json")
    with pytest.raises(AttributeError, match="not fitted"):
        aggrate.LogisticRegression().predict(rows)
