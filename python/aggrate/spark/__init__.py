"""Fleets of captures on Apache Spark: feature rows and training at cluster scale.

Two jobs, run with ``python -m aggrate.spark`` (or ``spark-submit``, see docs/scale-out.md):

``features``
    lists captures (dataset folders with their ``manifest.json`` and receiver logs, folders of
    captures, or capture files) on the driver — names only — and turns each capture into labelled
    feature rows *inside the executors* with this package (:func:`aggrate.read_capture`, Arrow
    batches through ``mapInArrow``), written as Parquet partitioned by receiver and send rate. A
    capture that cannot be read is a row of the per-file table (path, byte offset, message); the
    other files go on.

``train``
    fits the logistic model (Newton / IRLS) or the perceptron (full-batch L-BFGS) on those rows:
    every step's sums — the gradient, and for Newton the (d+1)² Hessian — are one Spark
    aggregation over the rows (each partition's share computed by the same Rust code
    ``aggrate train`` runs), and the steps themselves are ``aggrate train``'s own solver, stepped
    on the driver. Same scaler, regularisation, initialisation, seed and stopping rule, so the
    same model: the logistic weights agree to 1e-6, the perceptron (whose sums Spark adds in
    another order) to rounding. Contiguous folds of each capture and leave-one-receiver-out are
    Spark filters. The result is an aggrate model file that ``aggrate recv --model`` loads, with
    a report; MLlib's LogisticRegression and MultilayerPerceptronClassifier on the same rows can
    run beside it (``--peers``).

Needs ``pyspark`` ≥ 4.0 (grouped ``applyInArrow``; 4.3 tested) with ``pyarrow`` and a Java 17+ runtime
(``pip install "aggrate[spark]"``).
"""

from __future__ import annotations

import os
import sys

from .features import FEATURE_DEFAULTS, features_job, list_inputs
from .train import train_job

__all__ = ["FEATURE_DEFAULTS", "features_job", "list_inputs", "session", "train_job"]


def session(master: str | None = None, app: str = "aggrate", conf: dict | None = None):
    """A SparkSession: on ``master`` if given (``local[2]``, ``yarn``, ``spark://…``), else where
    ``spark-submit`` put it (pyspark's own default, ``local[*]``, when run as a plain script).
    A local master's executors run this Python (``PYSPARK_PYTHON`` unless set) with a few
    shuffle partitions; a cluster's settings are left as ``spark-submit --conf`` gave them."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:  # pragma: no cover - the test command installs pyspark
        raise ImportError(
            "aggrate.spark needs pyspark, pyarrow and pandas (pip install \"aggrate[spark]\") and a "
            "Java 17+ runtime (Debian: apt install openjdk-17-jre-headless)"
        ) from e
    local = master is None or master.startswith("local")
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = SparkSession.builder.appName(app)
    if master:
        b = b.master(master)
    # Spark's own progress bar on a terminal (long feature jobs), quiet in logs and tests.
    settings = {"spark.ui.showConsoleProgress": "true" if sys.stderr.isatty() else "false"}
    if master is not None and local:
        settings["spark.sql.shuffle.partitions"] = "8"
    for k, v in {**settings, **(conf or {})}.items():
        b = b.config(k, v)
    return b.getOrCreate()
