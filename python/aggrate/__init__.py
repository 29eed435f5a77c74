"""aggrate: learn 802.11ac A-MPDU frame aggregation from packet timing.

Read a capture (and optionally a receiver's kernel log) into a polars DataFrame of labelled
feature rows, fit and apply models with aggrate's own solvers (scikit-learn style), run the
receiver's online estimator, and run the 802.11ac emulator::

    import aggrate
    df = aggrate.read_capture("capture.pcapng")            # one row per packet, y = frame start
    clf = aggrate.LogisticRegression(m=20).fit(df, df["y"])
    clf.score(df, df["y"])                                   # F1 of frame starts
    clf.model_.save("model.json")                            # what `aggrate recv --model` loads
    est = aggrate.OnlineEstimator(clf.model_)
    reports = est.run(df["host_ns"])                         # μ_N every 100 ms
"""

from ._aggrate import AggrateError, InputError, ModelError, Model, OnlineEstimator as _OnlineEstimator
from ._aggrate import __version__
from .calibrate import calibrate, training_likeness
from .capture import CaptureError, inspect, read_capture, read_dataset
from .estimators import LinearSVC, LogisticRegression, ThresholdClassifier
from .online import OnlineEstimator
from .sim import simulate
from . import receivers  # leave-one-receiver-out: aggrate.receivers.leave_one_receiver_out

__all__ = [
    "AggrateError",
    "CaptureError",
    "InputError",
    "LinearSVC",
    "LogisticRegression",
    "Model",
    "ModelError",
    "OnlineEstimator",
    "ThresholdClassifier",
    "__version__",
    "calibrate",
    "inspect",
    "read_capture",
    "read_dataset",
    "receivers",
    "simulate",
    "training_likeness",
]
