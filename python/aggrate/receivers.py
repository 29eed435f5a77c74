"""Leave-one-receiver-out evaluation in Python, the way ``aggrate train --group-by receiver`` does it.

Does a model carry to a receive path it never saw? For each receiver of a dataset (a DataFrame
from :func:`aggrate.read_dataset`), a model is fitted on every *other* receiver's rows and scored
on this one ("held out"), and the same kind of model is cross-validated on this receiver alone
with contiguous folds of each capture ("own"). The criterion of issue 10 / ``models/README.md``:
at every rate up to 500 Mb/s the held-out F1 is within 0.01 of the own-CV F1, and at least 0.97
wherever own CV reaches 0.98.

Any scikit-learn-style classifier works (``make_model`` returns a fresh one), so a feature or a
model can be tried on the whole receiver set in seconds before it is built into the estimator::

    import aggrate
    from aggrate.receivers import leave_one_receiver_out, verdicts
    from sklearn.neural_network import MLPClassifier

    df = aggrate.read_dataset("data/receivers", m=5, context=1024)
    table = leave_one_receiver_out(df, lambda: MLPClassifier((8,), max_iter=8), max_train_rows=300_000)
    verdicts(table)                     # one row per receiver: passes the criterion or not

With :class:`aggrate.ThresholdClassifier` on ``m=1`` rows it gives the CLI's own numbers (a test
checks it).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import polars as pl

from .estimators import f1_score

#: The strict criterion, with the names and values ``aggrate train --group-by receiver`` writes
#: in its report's ``criteria`` (a test compares them): held-out F1 within ``tol`` of own CV, and
#: at least ``floor`` wherever own CV reaches ``floor_if``, at rates up to ``max_rate`` Mb/s.
CRITERIA: Dict[str, float] = {"tol": 0.01, "floor": 0.97, "floor_if": 0.98, "max_rate": 500.0}

#: Columns of a dataset DataFrame that are not features.
META = {
    "capture", "capture_id", "rate_mbps", "number", "host_ns", "tsft_us", "seq", "y", "frame_id",
    "agg_level", "phy_rate_bps", "receiver", "role", "others",
}


def feature_columns(df: pl.DataFrame) -> List[str]:
    """The feature columns of a DataFrame from :func:`aggrate.read_capture` / ``read_dataset``."""
    return [c for c in df.columns if c not in META]


def own_folds(captures: Sequence[Any], k: int) -> np.ndarray:
    """Fold of each row: every run of equal ``captures`` is cut into ``k`` contiguous blocks (the
    CLI's contiguous folds). A capture with fewer than ``k`` rows is refused."""
    caps = np.asarray(captures)
    fold = np.zeros(len(caps), dtype=np.int64)
    for start, end in _runs(caps):
        n = end - start
        if n < k:
            raise ValueError(f"capture {caps[start]!r} has {n} rows, fewer than {k} folds")
        # Block f holds rows [n·f/k, n·(f+1)/k) of the run, as the CLI cuts them.
        pos = np.arange(n)
        fold[start:end] = np.searchsorted([n * f // k for f in range(1, k)], pos, side="right")
    return fold


def _runs(captures: np.ndarray):
    """(start, end) of every run of equal values, in order."""
    start = 0
    while start < len(captures):
        end = start + 1
        while end < len(captures) and captures[end] == captures[start]:
            end += 1
        yield start, end
        start = end


def leave_one_receiver_out(
    df: pl.DataFrame,
    make_model: Callable[[], Any],
    features: Optional[Sequence[str]] = None,
    *,
    own_k: int = 3,
    max_train_rows: Optional[int] = None,
    seed: int = 0,
    criteria: Optional[Dict[str, float]] = None,
    best_threshold: bool = False,
    calibrate: Optional[float] = None,
) -> pl.DataFrame:
    """Held-out and own-CV F1 per receiver and rate.

    ``df`` needs ``receiver``, ``capture``, ``rate_mbps`` and ``y`` besides the features (all
    columns that are not metadata unless ``features`` names them). ``make_model()`` returns an
    unfitted classifier with ``fit(X, y)`` and ``predict(X)``. ``max_train_rows`` caps the rows of
    each held-out fit (a seeded random subset; the own-CV fits use every row of their folds).

    Returns one row per (receiver, rate): ``rows``, ``held_out_f1``, ``own_f1``, ``loss`` (own −
    held out) and ``fails`` (``criteria``, by default :data:`CRITERIA`; above its ``max_rate``,
    never).

    ``best_threshold=True`` (the model needs ``predict_proba``) adds ``held_out_best_f1`` and
    ``best_threshold``: the held-out model's F1 at the threshold on its probability that is best
    *for this receiver and rate*, chosen with the labels. It is an upper bound, not a model: where
    it reaches the own-CV F1 but ``held_out_f1`` does not, the held-out model ranks the packets
    as well as the receiver's own and only its operating point is off; where it does not, the
    ranking itself is worse.

    ``calibrate=f`` (0 < f < 1; ``predict_proba`` again) adds ``calibrated_f1``: the threshold is
    chosen with the labels of the first ``f`` of each of the held-out receiver's captures (a
    short labelled stretch, as a few seconds of sniffer capture joined with the receiver's log
    would give) and the F1 is scored on the rest of that rate's rows. The model is not refitted.
    """
    crit = {**CRITERIA, **(criteria or {})}
    if calibrate is not None and not 0.0 < calibrate < 1.0:
        raise ValueError(f"calibrate is the labelled fraction of each capture, in (0, 1), not {calibrate}")
    for c in ("receiver", "capture", "rate_mbps", "y"):
        if c not in df.columns:
            raise ValueError(f"the DataFrame has no {c!r} column: read it with aggrate.read_dataset")
    if df["receiver"].null_count() > 0:
        raise ValueError("some rows have no receiver: every run of the dataset must name one")
    names = list(features) if features is not None else feature_columns(df)
    X = df.select(names).to_numpy()
    y = df["y"].to_numpy().astype(bool)
    rec = df["receiver"].to_numpy()
    rate = df["rate_mbps"].fill_null(float("nan")).to_numpy()
    caps = df["capture"].to_numpy()
    receivers = list(dict.fromkeys(rec.tolist()))  # first-seen order, as the CLI lists them
    if len(receivers) < 2:
        raise ValueError(f"leave-one-receiver-out needs two receivers or more, got {receivers}")
    rng = np.random.default_rng(seed)
    out = []
    for r in receivers:
        test = np.flatnonzero(rec == r)
        train = np.flatnonzero(rec != r)
        if max_train_rows is not None and len(train) > max_train_rows:
            train = np.sort(rng.choice(train, max_train_rows, replace=False))
        model = make_model().fit(X[train], y[train])
        held = np.asarray(model.predict(X[test])).astype(bool)
        if best_threshold or calibrate is not None:
            if not hasattr(model, "predict_proba"):
                raise TypeError(
                    f"best_threshold and calibrate need a model with predict_proba, {type(model).__name__} has none"
                )
            proba = np.asarray(model.predict_proba(X[test]))[:, 1]
        if calibrate is not None:
            head = _capture_heads(caps[test], calibrate)
        fold = own_folds(caps[test], own_k)
        own = np.zeros(len(test), dtype=bool)
        for k in range(own_k):
            tr, te = test[fold != k], test[fold == k]
            own[fold == k] = np.asarray(make_model().fit(X[tr], y[tr]).predict(X[te])).astype(bool)
        yt, rt = y[test], rate[test]
        for q in sorted({float(v) for v in rt if v == v}):
            w = rt == q
            h, o = f1_score(yt[w], held[w]), f1_score(yt[w], own[w])
            fails = q <= crit["max_rate"] and (h < o - crit["tol"] or (o >= crit["floor_if"] and h < crit["floor"]))
            row = {"receiver": r, "rate_mbps": q, "rows": int(w.sum()), "held_out_f1": h, "own_f1": o,
                   "loss": o - h, "fails": fails}
            if best_threshold:
                row["held_out_best_f1"], row["best_threshold"] = best_f1(yt[w], proba[w])
            if calibrate is not None:
                _, t = best_f1(yt[w & head], proba[w & head])
                row["calibrated_f1"] = f1_score(yt[w & ~head], proba[w & ~head] > t)
            out.append(row)
    return pl.DataFrame(out)


def _capture_heads(captures: np.ndarray, fraction: float) -> np.ndarray:
    """True on the first ``fraction`` of every run of equal ``captures``."""
    head = np.zeros(len(captures), dtype=bool)
    for start, end in _runs(captures):
        head[start:start + int((end - start) * fraction)] = True
    return head


def best_f1(y: np.ndarray, p: np.ndarray) -> tuple:
    """The highest F1 of ``p > t`` over every threshold ``t``, and a ``t`` that gives it (midway
    between the two scores it separates), exact: one sort, F1 at every cut."""
    y = np.asarray(y, dtype=bool)
    p = np.asarray(p, dtype=float)
    positives = int(y.sum())
    if positives == 0:
        return 0.0, 0.5  # as f1_score: no true start, no F1
    order = np.argsort(-p, kind="stable")
    ps, tp = p[order], np.cumsum(y[order])
    # Cut after position k (calling the k + 1 highest scores) only where the score changes.
    cuts = np.flatnonzero(np.append(ps[1:] < ps[:-1], True))
    f1 = 2.0 * tp[cuts] / (cuts + 1 + positives)
    k = int(np.argmax(f1))
    c = cuts[k]
    t = (ps[c] + ps[c + 1]) / 2.0 if c + 1 < len(ps) else np.nextafter(ps[c], -np.inf)
    return float(f1[k]), float(t)


def verdicts(table: pl.DataFrame) -> pl.DataFrame:
    """One row per receiver of a :func:`leave_one_receiver_out` table: ``passes`` (no rate
    fails), the rates where it fails and the largest loss."""
    return (
        table.group_by("receiver", maintain_order=True)
        .agg(
            (~pl.col("fails").any()).alias("passes"),
            pl.col("rate_mbps").filter(pl.col("fails")).alias("failing_rates"),
            pl.col("loss").max().alias("worst_loss"),
        )
    )
