"""Training on Spark (``python -m aggrate.spark train``): ``aggrate train``'s solvers stepped on
the driver, every step's sums one Spark aggregation over the rows."""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .features import read_spec

#: Columns training reads besides the features.
_META = ["path", "receiver", "role", "others", "rate_mbps", "row", "rows_in_capture", "y", "agg_level", "host_ns"]


def _matrix(batch, names: List[str]):
    """Row-major float64 bytes of a batch's feature columns, its labels as bytes, and rows."""
    x = np.column_stack([batch.column(c).to_numpy(zero_copy_only=False) for c in names]).astype(np.float64)
    y = batch.column("y").to_numpy(zero_copy_only=False).astype(np.uint8)
    return np.ascontiguousarray(x).tobytes(), y.tobytes(), len(y)


def _sum_partitions(df, names: List[str], part: Callable, width: int) -> Tuple[np.ndarray, float]:
    """One Spark job: ``part(x, y, n) -> (vector, scalar)`` on every Arrow batch of every
    partition, summed inside the partition, the partitions' sums collected and added in partition
    order (deterministic for a given partitioning). Returns (vector, scalar)."""
    import pyarrow as pa
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("v", T.BinaryType()), T.StructField("s", T.DoubleType())])

    def run(batches):
        acc, s, seen = np.zeros(width), 0.0, False
        for b in batches:
            if b.num_rows == 0:
                continue
            v, sc = part(*_matrix(b, names))
            acc += np.frombuffer(v, dtype="<f8")
            s += sc
            seen = True
        if seen:
            yield pa.RecordBatch.from_pylist([{"v": acc.tobytes(), "s": s}])

    total, scalar = np.zeros(width), 0.0
    for r in df.select(*names, "y").mapInArrow(run, schema).collect():
        total += np.frombuffer(r["v"], dtype="<f8")
        scalar += r["s"]
    return total, scalar


def newton_pass(df, names: List[str], mean, std, beta, weights: Tuple[float, float], full: bool):
    """One pass of the logistic Newton solver as one Spark job: ``(h, g, loss)`` summed over the
    rows (h: the (d+1)² Hessian when ``full``, else zeros)."""
    from aggrate import _aggrate

    d, m = len(names), len(names) + 1

    def part(x, y, k):
        h, g, loss = _aggrate.logistic_sums(x, y, k, d, mean, std, beta, weights[0], weights[1], full)
        return np.concatenate([np.frombuffer(h, "<f8"), np.frombuffer(g, "<f8")]).tobytes(), loss

    v, loss = _sum_partitions(df, names, part, m * m + m)
    return v[: m * m], v[m * m:], loss


def mlp_evaluation(df, names: List[str], mean, std, sums_args, w: bytes):
    """One evaluation of the perceptron's loss and gradient as one Spark job: ``(g, loss)``
    summed over the rows at parameters ``w`` (``sums_args``: the solver's)."""
    from aggrate import _aggrate

    d = len(names)
    hidden, skip, wp, wn = sums_args

    def part(x, y, k):
        loss, g = _aggrate.mlp_sums(x, y, k, d, mean, std, hidden, skip, w, wp, wn)
        return g, loss

    return _sum_partitions(df, names, part, len(w) // 8)


def _counts_and_scaler(df, names: List[str]):
    """Rows, positives and the scaler (``aggrate train``'s: column sums and sums of squares) in
    one Spark job, its partitions' sums added in partition order (the same scaler every run on
    the same partitioning). A column whose sums are not finite is an error naming it."""
    from aggrate import _aggrate

    d = len(names)

    def part(x, y, k):
        s, q = _aggrate.scaler_sums(x, k, d)
        pos = float(np.frombuffer(y, np.uint8).astype(bool).sum())
        return np.array([float(k), pos] + s + q).tobytes(), 0.0

    v, _ = _sum_partitions(df, names, part, 2 + 2 * d)
    n, pos = int(v[0]), int(v[1])
    s, q = v[2:2 + d], v[2 + d:]
    bad = [c for c, a, b in zip(names, s, q) if not (np.isfinite(a) and np.isfinite(b))]
    if bad:
        raise ValueError(f"features {', '.join(bad)}: not finite in some rows (NaN or infinite values)")
    mean, std = _aggrate.scaler_from_sums(float(n), list(s), list(q))
    return n, pos, mean, std


def warm_start(model, mean, std) -> List[float]:
    """A logistic model's decision function re-expressed in the standardised coordinates of
    another scaler ``(mean, std)``, bias last — where ``aggrate train`` starts a CV fold:
    w·(x − μ)/σ + b = w'·(x − μ')/σ' + b' with w' = w σ'/σ, b' = b + Σ w (μ' − μ)/σ."""
    m = json.loads(model.to_json())["model"]
    w, mu, sd = np.asarray(m["w"]), np.asarray(m["scaler"]["mean"]), np.asarray(m["scaler"]["std"])
    return list(w * np.asarray(std) / sd) + [float(m["b"] + np.sum(w * (np.asarray(mean) - mu) / sd))]


def fit(df, names: List[str], spec_json: str, kind: str, params: Dict[str, Any],
        log: Optional[Callable[[str], None]] = None, what: str = "all rows", start=None):
    """Fit ``kind`` ("logistic" or "mlp") on the rows of ``df`` (a Spark DataFrame with the
    feature columns ``names`` and ``y``) as ``aggrate train`` does; returns the model
    (:class:`aggrate.Model`) and the fit's counts. ``start``: a logistic model to start Newton
    from (the all-rows model, for a fold: same optimum, a few passes instead of ~14)."""
    from aggrate import _aggrate, ModelError

    spec = json.loads(spec_json)
    d = len(names)
    t0 = time.perf_counter()
    n, pos, mean, std = _counts_and_scaler(df, names)
    if n < 2 or pos == 0 or pos == n:
        raise ModelError(f"{what}: cannot train on {n} rows with {pos} frame starts: need both classes")
    jobs = 1
    if kind == "logistic":
        p = {k: params[k] for k in ("l2", "max_iter", "tol", "balanced") if k in params}
        solver = _aggrate.LogisticSolver(d, json.dumps(p), None if start is None else warm_start(start, mean, std))
        weights = (n / (2.0 * pos), n / (2.0 * (n - pos))) if p.get("balanced") else (1.0, 1.0)
        while (ask := solver.ask()) is not None:
            beta, full = ask
            h, g, loss = newton_pass(df, names, mean, std, beta, weights, full)
            solver.tell(h.tobytes(), g.tobytes(), loss)
            jobs += 1
            if log:
                log(f"  {what}: Newton pass {solver.passes}{' (Hessian)' if full else ''}, loss {loss:.6g}")
        if solver.failed:
            raise ModelError(f"{what}: a Newton pass summed to NaN or infinity (NaN or infinite features)")
        model = solver.model(spec_json, mean, std, n, pos)
        steps = solver.passes
    elif kind == "mlp":
        p = {k: params[k] for k in ("hidden", "seed", "weight_decay", "max_iter", "skip", "balanced")
             if k in params}
        solver = _aggrate.MlpSolver(d, n, pos, json.dumps(p), spec.get("context", 0))
        while (w := solver.ask()) is not None:
            g, loss = mlp_evaluation(df, names, mean, std, solver.sums_args, w)
            solver.tell(loss, g.tobytes())
            jobs += 1
            if log and solver.progress[1] % 10 == 0:
                it, ev, obj = solver.progress
                log(f"  {what}: L-BFGS step {it} ({ev} evaluations), objective {obj:.6g}")
        model = solver.model(spec_json, mean, std, n, pos)
        steps = solver.progress[0]
    else:
        raise ValueError(f"model {kind!r}: logistic or mlp")
    return model, {"rows": n, "positives": pos, "steps": steps, "spark_jobs": jobs,
                   "seconds": time.perf_counter() - t0}


def _fold_of(row: np.ndarray, n: np.ndarray, k: int) -> np.ndarray:
    """Contiguous fold of each row of a capture, as ``aggrate train`` cuts them: block f holds
    rows [n·f/k, n·(f+1)/k)."""
    return (k * (row + 1) - 1) // n


def _fold_expr(k: int):
    """The same as a Spark column (a filter: ``fold != f`` trains fold f's model)."""
    from pyspark.sql import functions as F

    return F.floor((F.lit(k) * (F.col("row") + 1) - 1) / F.col("rows_in_capture")).cast("int")


def _score(df, names: List[str], models: Dict[str, str], key_of: Callable, n_max: int) -> List[Dict[str, Any]]:
    """Held-out scores: each capture (one group, in row order) cut into blocks of rows that the
    same model predicts (``key_of(table) -> keys``; keys not in ``models`` are not scored), each
    block scored as ``aggrate train`` scores a run: frame-start counts and per-packet level
    errors (levels from the predicted starts). One row per (key, rate) summed over captures."""
    import pyarrow as pa
    from pyspark.sql import types as T

    from aggrate import _aggrate

    fields = [("key", T.StringType()), ("rate_mbps", T.DoubleType())]
    fields += [(c, T.LongType()) for c in ("tp", "fp", "tn", "fn", "n", "exact", "within1")]
    fields += [(c, T.DoubleType()) for c in ("sse", "se")]
    fields += [("pairs", T.BinaryType())]
    schema = T.StructType([T.StructField(a, b) for a, b in fields])
    loaded: Dict[str, Any] = {}

    def run(table):
        table = table.sort_by("row")
        keys = np.asarray(key_of(table))
        y = table.column("y").to_numpy(zero_copy_only=False).astype(bool)
        level = table.column("agg_level").to_numpy(zero_copy_only=False).astype("<u4")
        host = table.column("host_ns").to_numpy(zero_copy_only=False).astype("<u8")
        rate = table.column("rate_mbps")[0].as_py()
        x = np.column_stack([table.column(c).to_numpy(zero_copy_only=False) for c in names]).astype(np.float64)
        out = []
        cut = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        for a, b in zip(np.r_[0, cut], np.r_[cut, len(keys)]):
            key = str(keys[a])
            if key not in models:
                continue
            if key not in loaded:
                loaded[key] = _aggrate.Model.from_json(models[key], key)
            xb = np.ascontiguousarray(x[a:b])
            pred = np.frombuffer(loaded[key].decision_function(xb.tobytes(), b - a), "<f8") > 0
            t = y[a:b]
            p8 = pred.astype(np.uint8).tobytes()
            n, sse, se, exact, within1 = _aggrate.level_errors(p8, level[a:b].tobytes(), n_max)
            pairs = _aggrate.count_pairs(host[a:b].tobytes(), t.astype(np.uint8).tobytes(), p8)
            out.append({"key": key, "rate_mbps": rate, "tp": int((t & pred).sum()), "fp": int((~t & pred).sum()),
                        "tn": int((~t & ~pred).sum()), "fn": int((t & ~pred).sum()), "n": n, "exact": exact,
                        "within1": within1, "sse": sse, "se": se, "pairs": pairs})
        return pa.Table.from_pylist(out, schema=pa.schema([
            ("key", pa.string()), ("rate_mbps", pa.float64())] +
            [(c, pa.int64()) for c in ("tp", "fp", "tn", "fn", "n", "exact", "within1")] +
            [(c, pa.float64()) for c in ("sse", "se")] + [("pairs", pa.binary())]))

    cols = list(dict.fromkeys(_META + names))
    parts = df.select(*cols).groupBy("path").applyInArrow(run, schema).collect()
    acc: Dict[Tuple[str, float], Dict[str, float]] = {}
    for r in parts:
        rate = r["rate_mbps"] if r["rate_mbps"] is not None and r["rate_mbps"] == r["rate_mbps"] else None
        k = (r["key"], rate)
        e = acc.setdefault(k, {**{c: 0 for c in ("tp", "fp", "tn", "fn", "n", "exact", "within1", "sse", "se")},
                               "pairs": b""})
        for c in e:
            e[c] += r[c]
    return [{"key": k, "rate_mbps": rate, **v} for (k, rate), v in sorted(acc.items(), key=lambda i: (i[0][0], _rate_key(i[0][1])))]


def _rate_key(r: Optional[float]) -> float:
    """Unknown rates (None) first, as ``aggrate train`` keys them (−1)."""
    return -1.0 if r is None else r


def _merge(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    m: Dict[str, Any] = {**{c: 0 for c in ("tp", "fp", "tn", "fn", "n", "exact", "within1", "sse", "se")},
                         "pairs": b""}
    for r in rows:
        for c in m:
            m[c] += r[c]
    return m


def mu_n(m: Dict[str, Any]) -> Optional[Dict[str, float]]:
    """The μ_N error per report interval of merged blocks (``aggrate train``'s ``mu_n``)."""
    from aggrate import _aggrate

    e = _aggrate.level_error(m["pairs"])
    return None if e is None else json.loads(e)


def scores(m: Dict[str, Any]) -> Dict[str, float]:
    """F1, precision, recall, accuracy and the per-packet level errors of summed counts, by
    ``aggrate train``'s own metrics (1 when there is nothing to score; level errors 0)."""
    from aggrate import _aggrate

    return json.loads(_aggrate.scores(*(int(m[c]) for c in ("tp", "fp", "tn", "fn", "n")),
                                      float(m["sse"]), float(m["se"]), int(m["exact"]), int(m["within1"])))


def _mean_std(v: List[float]) -> Tuple[float, float]:
    if not v:
        return 0.0, 0.0
    mu = sum(v) / len(v)
    return mu, math.sqrt(sum((x - mu) ** 2 for x in v) / len(v))


def model_name(kind: str, spec: Dict[str, Any], params: Dict[str, Any]) -> str:
    """The file stem ``aggrate train`` gives the same model."""
    sig = "_sigma" if spec.get("sigma") else (f"_ctx{spec['context']}" if spec.get("context") else "")
    if kind == "logistic":
        return f"logistic_m{spec['m']}{sig}"
    return f"mlp{params.get('hidden', 16)}_m{spec['m']}{sig}"


def check_params(model: str, params: Dict[str, Any], d: int, context: int) -> None:
    """Refuse bad hyper-parameters before any Spark job runs (the solvers' own checks)."""
    from aggrate import _aggrate

    if model == "logistic":
        _aggrate.LogisticSolver(d, json.dumps({k: params[k] for k in ("l2", "max_iter", "tol", "balanced")
                                               if k in params}))
    elif model == "mlp":
        _aggrate.MlpSolver(d, 2, 1, json.dumps({k: params[k] for k in
                                                ("hidden", "seed", "weight_decay", "max_iter", "skip", "balanced")
                                                if k in params}), context)
    else:
        raise ValueError(f"model {model!r}: logistic or mlp")


def load_rows(spark, rows: str, names: List[str], all_roles: bool = False):
    """The rows folder's training rows, cached: as ``aggrate train --dataset`` takes a dataset's
    runs, those whose role is ``train`` (rows from plain captures have none and are kept) unless
    ``all_roles``. Read with the schema the features job wrote (partition values stay strings
    and doubles: a receiver named ``007`` stays ``007``)."""
    from pyspark.sql import functions as F

    from .features import _spark_schema

    try:
        df = spark.read.schema(_spark_schema(names, False)).parquet(rows)
    except Exception as e:  # AnalysisException: nothing to read
        raise ValueError(f"{rows}: no Parquet rows (did every capture fail? see {rows}/_files): {e}") from None
    if not all_roles:
        df = df.filter(F.col("role").isNull() | (F.col("role") == "train"))
    df = df.select(*list(dict.fromkeys(_META + names))).cache()
    if df.limit(1).count() == 0:
        df.unpersist()
        raise ValueError(f"{rows}: no training rows" + ("" if all_roles else " (role train, or none)"))
    return df


def _capture_cv(df, names, models_fit, folds: int, n_max: int) -> Dict[str, Any]:
    """``folds`` contiguous blocks of every capture: fold f's model fits on the others."""
    if not 2 <= folds <= 100:
        raise ValueError(f"folds = {folds}: 2..=100")
    _refuse_short(df, folds)
    fold = _fold_expr(folds)
    models = {str(f): models_fit(df.filter(fold != f), f"fold {f}").to_json() for f in range(folds)}

    def key_of(t, k=folds):
        return _fold_of(t.column("row").to_numpy(), t.column("rows_in_capture").to_numpy(), k).astype(str)

    per = _score(df, names, models, key_of, n_max)
    fold_rows = []
    for f in range(folds):
        merged = _merge([r for r in per if r["key"] == str(f)])
        s = scores(merged)
        fold_rows.append({"fold": f, **{k: s[k] for k in ("rows", "f1", "precision", "recall", "accuracy", "agg_rmse")},
                          "mu_n": mu_n(merged)})
    out: Dict[str, Any] = {"folds": fold_rows, "mu_n": mu_n(_merge(per))}
    out["f1_mean"], out["f1_std"] = _mean_std([f["f1"] for f in fold_rows])
    out["accuracy_mean"], out["accuracy_std"] = _mean_std([f["accuracy"] for f in fold_rows])
    rates = sorted({r["rate_mbps"] for r in per}, key=_rate_key)
    out["per_rate"] = [{"rate_mbps": q, **scores(_merge([r for r in per if r["rate_mbps"] == q]))} for q in rates]
    return out


def _refuse_short(df, k: int) -> None:
    short = df.filter(df["rows_in_capture"] < k).select("path").distinct().limit(1).collect()
    if short:
        raise ValueError(f"{short[0]['path']}: fewer rows than {k} folds")


def _receiver_cv(df, names, models_fit, own_folds: int, n_max: int) -> Dict[str, Any]:
    """Each receiver held out in turn, against its own contiguous CV (at least 2 folds)."""
    from pyspark.sql import functions as F

    nameless = df.filter(F.col("receiver").isNull()).select("path").distinct().limit(3).collect()
    if nameless:
        raise ValueError("leave-one-receiver-out needs every capture's receiver; none for "
                         + ", ".join(r["path"] for r in nameless))
    receivers = sorted(r["receiver"] for r in df.select("receiver").distinct().collect())
    if len(receivers) < 2:
        raise ValueError(f"leave-one-receiver-out needs two receivers or more, got {receivers}")
    k, table = _held_against_own(
        df, names, models_fit, receivers,
        lambda r: models_fit(df.filter(df["receiver"] != r), f"without {r}").to_json(),
        own_folds, n_max, "held:", "")
    return {"own_folds": k, "receivers": table}


def _held_against_own(df, names, models_fit, receivers: List[str], held_model: Callable[[str], str],
                      own_folds: int, n_max: int, prefix: str, label: str):
    """Each receiver's rows scored with ``held_model(receiver)`` (a model file's JSON) beside
    its own contiguous CV (``own_folds``, at least 2, fitted on its rows alone): the folds
    used and the table of :func:`_receiver_table`."""
    k = max(2, own_folds)
    _refuse_short(df, k)
    fold = _fold_expr(k)
    models = {}
    for r in receivers:
        models[f"{prefix}{r}"] = held_model(r)
        for f in range(k):
            models[f"own:{r}:{f}"] = models_fit(df.filter((df["receiver"] == r) & (fold != f)),
                                                f"{r}{label} fold {f}").to_json()

    def held_key(t):
        return np.full(t.num_rows, f"{prefix}{t.column('receiver')[0].as_py()}", dtype=object)

    def own_key(t):
        r = t.column("receiver")[0].as_py()
        f = _fold_of(t.column("row").to_numpy(), t.column("rows_in_capture").to_numpy(), k)
        return np.array([f"own:{r}:{v}" for v in f], dtype=object)

    held = _score(df, names, models, held_key, n_max)
    own = _score(df, names, models, own_key, n_max)
    return k, _receiver_table(receivers, held, own, prefix)


def _receiver_table(receivers: List[str], held: List[Dict[str, Any]], own: List[Dict[str, Any]],
                    prefix: str) -> List[Dict[str, Any]]:
    """Per receiver and rate: the held-out model's scores (blocks keyed ``prefix`` + receiver)
    beside the receiver's own CV (``own:receiver:fold``)."""
    table = []
    for r in receivers:
        hr = [x for x in held if x["key"] == f"{prefix}{r}"]
        orows = [x for x in own if x["key"].startswith(f"own:{r}:")]
        per_rate = []
        for q in sorted({x["rate_mbps"] for x in hr}, key=_rate_key):
            h = scores(_merge([x for x in hr if x["rate_mbps"] == q]))
            o = scores(_merge([x for x in orows if x["rate_mbps"] == q]))
            per_rate.append({"rate_mbps": q, "rows": h["rows"],
                             "held_out": {k: h[k] for k in ("f1", "precision", "recall", "agg_rmse")},
                             "own": {k: o[k] for k in ("f1", "precision", "recall", "agg_rmse")}})
        table.append({"receiver": r, "per_rate": per_rate})
    return table


def _test_receivers(df, names, models_fit, final_json: str, test: List[str], own_folds: int,
                    n_max: int) -> List[Dict[str, Any]]:
    """Receivers in no training set (``aggrate train --test``): each scored with the final model,
    against its own contiguous CV."""
    return _held_against_own(df, names, models_fit, test, lambda r: final_json, own_folds, n_max,
                             "test:", " (test)")[1]


def _model_file(final, df, report: Dict[str, Any]) -> str:
    """The final model's file as ``aggrate train`` writes it: the training summary's captures and
    rates, and the CV's headline metrics."""
    doc = json.loads(final.to_json())
    caps = sorted({r["path"] for r in df.select("path").distinct().collect()})
    doc["training"]["captures"] = [os.path.basename(p) for p in caps]
    doc["training"]["rates_mbps"] = sorted({r["rate_mbps"] for r in df.select("rate_mbps").distinct().collect()
                                            if r["rate_mbps"] is not None})
    if "folds" in report:
        doc["metrics"] = {"cv_folds": len(report["folds"]), "f1_mean": report["f1_mean"],
                          "f1_std": report["f1_std"], "accuracy_mean": report["accuracy_mean"]}
    return json.dumps(doc, indent=2)


def train_job(spark, rows: str, output: Optional[str] = None, *, model: str = "logistic",
              group_by: str = "capture", folds: int = 20, own_folds: int = 3,
              params: Optional[Dict[str, Any]] = None, peers: bool = False, all_roles: bool = False,
              test_receivers: Optional[List[str]] = None,
              log: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Cross-validate and fit ``model`` on a rows folder from :func:`features_job`.

    ``group_by="capture"``: ``folds`` contiguous blocks of every capture (``aggrate train``'s
    default CV), then the model on all rows. ``"receiver"``: every receiver held out in turn
    and scored against its own ``own_folds``-fold contiguous CV, then the model on all
    receivers. Dataset runs whose role is not ``train`` are left out unless ``all_roles``, as
    ``aggrate train --dataset`` leaves them. ``test_receivers`` (with ``group_by="receiver"``)
    are in no training set at all: each is scored with the final model against its own CV, as
    ``aggrate train --test`` does (``test_receivers`` in the report). Writes ``<name>.json`` (the model file; ``output``
    is a local folder) and ``<name>.spark.report.json`` / ``.md`` when ``output`` is given;
    returns the report (``fitted``: the final :class:`aggrate.Model`)."""
    from aggrate import _aggrate

    params = dict(params or {})
    spec_json, names = read_spec(spark, rows)
    spec = json.loads(spec_json)
    check_params(model, params, len(names), int(spec.get("context", 0)))
    if group_by not in ("capture", "receiver"):
        raise ValueError(f"group_by {group_by!r}: capture or receiver")
    test = sorted(set(test_receivers or []))
    if test and group_by != "receiver":
        raise ValueError("test receivers are scored with --group-by receiver")
    df = load_rows(spark, rows, names, all_roles)
    cached = df
    if test:
        from pyspark.sql import functions as F

        present = {r["receiver"] for r in df.select("receiver").distinct().collect()}
        missing = [r for r in test if r not in present]
        if missing:
            cached.unpersist()
            raise ValueError(f"test receivers {missing} are not in {rows} (receivers: {sorted(x for x in present if x)})")
        test_df, df = df.filter(F.col("receiver").isin(test)), df.filter(~F.col("receiver").isin(test))
    t0 = time.perf_counter()
    name = model_name(model, spec, params)
    n_max = int(spec.get("n_max", 64))
    report: Dict[str, Any] = {"model": name, "kind": model, "spec": spec, "group_by": group_by,
                              "params": params, "engine": f"spark {spark.version} ({spark.sparkContext.master})"}
    fits = []

    warm = None

    def fit_on(frame, what):
        m, info = fit(frame, names, spec_json, model, params, log=log, what=what, start=warm)
        fits.append({"what": what, **info})
        return m

    try:
        # The model on all rows first: the result, and (logistic) where every fold starts, as
        # `aggrate train` does; the perceptron's folds start from the seed, as the CLI's.
        final = fit_on(df, "all rows")
        all_rows = fits[-1]["rows"]
        warm = final if model == "logistic" else None
        if group_by == "capture":
            report.update(_capture_cv(df, names, fit_on, folds, n_max))
        else:
            report.update(_receiver_cv(df, names, fit_on, own_folds, n_max))
        if test:
            report["test_receivers"] = _test_receivers(test_df, names, fit_on, final.to_json(), test,
                                                       own_folds, n_max)
        report["fits"] = fits
        report["rows"] = all_rows
        report["seconds"] = time.perf_counter() - t0
        if peers:
            report["peers"] = mllib_peers(df, names, model, params, final, log=log)
        text = _model_file(final, df, report)
    finally:
        cached.unpersist()
    final = _aggrate.Model.from_json(text, name)
    if output:
        os.makedirs(output, exist_ok=True)
        path = os.path.join(output, f"{name}.json")
        with open(path, "w") as f:
            f.write(text)
        report["model_file"] = path
        with open(os.path.join(output, f"{name}.spark.report.json"), "w") as f:
            json.dump(report, f, indent=2)
        with open(os.path.join(output, f"{name}.spark.report.md"), "w") as f:
            f.write(report_md(report) + "\n")
    report["fitted"] = final  # the aggrate.Model (not in the JSON)
    return report


def mllib_peers(df, names: List[str], kind: str, params: Dict[str, Any], ours, log=None) -> List[Dict[str, Any]]:
    """MLlib's LogisticRegression and MultilayerPerceptronClassifier on the same rows: seconds,
    training-row F1, and for the logistic model the largest weight difference from ours."""
    from pyspark.ml.classification import LogisticRegression, MultilayerPerceptronClassifier
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    vec = VectorAssembler(inputCols=names, outputCol="features").transform(df) \
        .withColumn("label", F.col("y").cast("double")).select("features", "label").cache()
    n = vec.count()
    out = []
    for peer in ("LogisticRegression", "MultilayerPerceptronClassifier"):
        t0 = time.perf_counter()
        if peer == "LogisticRegression":
            # Ours minimises Σ loss + l2/2 ‖w‖² on standardised weights; MLlib (1/n) Σ loss +
            # regParam/2 ‖w‖² on the same scale when standardization is on: regParam = l2 / n.
            est = LogisticRegression(regParam=params.get("l2", 1.0) / n, elasticNetParam=0.0, maxIter=100,
                                     tol=1e-10, standardization=True)
        else:
            est = MultilayerPerceptronClassifier(layers=[len(names), int(params.get("hidden", 16)), 2],
                                                 maxIter=int(params.get("max_iter", 200)),
                                                 seed=int(params.get("seed", 1)))
        m = est.fit(vec)
        secs = time.perf_counter() - t0
        pred = m.transform(vec).select(
            F.sum(((F.col("prediction") == 1) & (F.col("label") == 1)).cast("long")).alias("tp"),
            F.sum(((F.col("prediction") == 1) & (F.col("label") == 0)).cast("long")).alias("fp"),
            F.sum(((F.col("prediction") == 0) & (F.col("label") == 1)).cast("long")).alias("fn"),
        ).collect()[0]
        tp, fp, fn = pred["tp"] or 0, pred["fp"] or 0, pred["fn"] or 0
        row = {"peer": f"MLlib {peer}", "seconds": secs, "train_f1": 2 * tp / max(1, 2 * tp + fp + fn)}
        if peer == "LogisticRegression" and kind == "logistic":
            mine = json.loads(ours.to_json())["model"]
            sd = np.asarray(mine["scaler"]["std"])
            raw = np.asarray(mine["w"]) / sd
            row["max_weight_difference"] = float(np.max(np.abs(np.asarray(m.coefficients.toArray()) - raw)))
        if log:
            log(f"  peer {row['peer']}: {secs:.1f} s, training F1 {row['train_f1']:.4f}")
        out.append(row)
    vec.unpersist()
    return out


def _rate_txt(r: Optional[float]) -> str:
    return "?" if r is None else f"{r:g}"


def report_md(r: Dict[str, Any]) -> str:
    """The report as Markdown."""
    lines = [f"# {r['model']} on Spark ({r['engine']})", ""]
    if "folds" in r:
        head = f"{len(r['folds'])}-fold contiguous CV: F1 {r['f1_mean']:.4f} ± {r['f1_std']:.4f}"
        if r.get("mu_n"):
            head += (f"; μ_N per 100 ms (packets ÷ predicted starts): bias {100 * r['mu_n']['bias']:+.1f} %, "
                     f"median |error| {100 * r['mu_n']['mae_rel_median']:.1f} %")
        lines.append(head)
        lines += ["", "| rate (Mb/s) | rows | F1 | precision | recall | level RMSE |", "|---:|---:|---:|---:|---:|---:|"]
        for q in r["per_rate"]:
            lines.append(f"| {_rate_txt(q['rate_mbps'])} | {q['rows']} | {q['f1']:.4f} | {q['precision']:.4f} | "
                         f"{q['recall']:.4f} | {q['agg_rmse']:.2f} |")
    if "receivers" in r:
        lines += ["leave one receiver out (test receivers: the final model)", "",
                  "| receiver | rate (Mb/s) | rows | held-out F1 | own-CV F1 |", "|---|---:|---:|---:|---:|"]
        for rec in r["receivers"] + [{**x, "receiver": f"{x['receiver']} (test)"} for x in r.get("test_receivers", [])]:
            for q in rec["per_rate"]:
                lines.append(f"| {rec['receiver']} | {_rate_txt(q['rate_mbps'])} | {q['rows']} | "
                             f"{q['held_out']['f1']:.4f} | {q['own']['f1']:.4f} |")
    lines += ["", "| fit | rows | steps | Spark jobs | seconds |", "|---|---:|---:|---:|---:|"]
    for f in r["fits"]:
        lines.append(f"| {f['what']} | {f['rows']} | {f['steps']} | {f['spark_jobs']} | {f['seconds']:.1f} |")
    if r.get("peers"):
        lines += ["", "| peer on the same rows | seconds | training F1 |", "|---|---:|---:|"]
        for p in r["peers"]:
            lines.append(f"| {p['peer']} | {p['seconds']:.1f} | {p['train_f1']:.4f} |")
    return "\n".join(lines)
