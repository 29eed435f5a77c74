"""``python -m aggrate.spark bench``: how the Spark jobs scale, and MLlib beside them.

Emulates ``captures × max(scales)`` captures once (alternating the ``phone`` and ``laptop``
receive paths, 300 Mb/s, distinct seeds), then for each scale s takes the first ``captures × s``
of them and times, in one run on the same Spark:

* the features job (captures → Parquet rows), rows per second;
* one Newton pass of the logistic model (gradient + Hessian, one Spark aggregation) on the rows,
  cached, against one iteration of MLlib's LogisticRegression on the same cached rows (its whole
  fit's time ÷ its iterations) — the ratio MLlib ÷ ours;
* a whole logistic fit on the same cached rows, ours (the scaler job and every Newton pass, to
  ``aggrate train``'s tolerance) and MLlib's (``maxIter = 100``, its default tolerance);
* the growth: each time ÷ the 1× time, and a least-squares line of time against rows (a fixed
  cost per job plus a cost per row) with each run's deviation from it.

Absolute times move with the machine and the day; the ratios in one run hold.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np


def _emulate(folder: pathlib.Path, count: int, seconds: float, log) -> List[pathlib.Path]:
    import aggrate

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        noise = ("phone", "laptop")[i % 2]
        p = folder / f"{noise}{i:03d}_300mbps.pcapng"
        if not p.exists():
            aggrate.simulate(p, rate_mbps=300, duration_s=seconds, noise=noise, seed=100 + i)
        out.append(p)
    if log:
        log(f"{count} captures of {seconds:g} s in {folder}")
    return out


def _best(repeats: int, job: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        job()
        best = min(best, time.perf_counter() - t0)
    return best


def _newton_pass_seconds(df, names: List[str], repeats: int = 3) -> float:
    """Best of ``repeats``: the first (full) Newton pass at β = 0 over the cached rows."""
    from .train import _counts_and_scaler, newton_pass

    _, _, mean, std = _counts_and_scaler(df, names)
    beta = [0.0] * (len(names) + 1)
    return _best(repeats, lambda: newton_pass(df, names, mean, std, beta, (1.0, 1.0), True))


def _mlp_evaluation_seconds(df, names: List[str], repeats: int = 3) -> float:
    """Best of ``repeats``: one L-BFGS evaluation of the 16-unit perceptron (loss + gradient)."""
    from aggrate import _aggrate

    from .train import _counts_and_scaler, mlp_evaluation

    n, pos, mean, std = _counts_and_scaler(df, names)
    solver = _aggrate.MlpSolver(len(names), n, pos, "{}", 1024)
    w = solver.ask()
    return _best(repeats, lambda: mlp_evaluation(df, names, mean, std, solver.sums_args, w))


def _mllib_seconds(df, names: List[str]) -> Dict[str, float]:
    """MLlib's LogisticRegression fitted on the same cached rows to its default tolerance
    (``maxIter = 100``, ``tol = 1e-6``, the same L2 as ours): the fit's seconds, its iterations,
    and their ratio — the average cost of one iteration, set-up included. (The marginal cost of
    one more iteration, ``maxIter = 3`` against ``1``, is lost in the noise here: an iteration
    stays in the JVM on blocks of cached vectors.)"""
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    vec = VectorAssembler(inputCols=names, outputCol="features").transform(df) \
        .withColumn("label", F.col("y").cast("double")).select("features", "label").cache()
    n = vec.count()
    t0 = time.perf_counter()
    m = LogisticRegression(maxIter=100, regParam=1.0 / n, standardization=True).fit(vec)
    whole = time.perf_counter() - t0
    vec.unpersist()
    iters = max(1, m.summary.totalIterations)
    return {"iteration": whole / iters, "fit": whole, "fit_iterations": float(iters)}


def _our_fit_seconds(df, names: List[str], spec_json: str) -> Dict[str, float]:
    """Our logistic fit from zero to ``aggrate train``'s tolerance (the scaler job and every
    Newton pass), on the same cached rows."""
    from .train import fit

    t0 = time.perf_counter()
    _, info = fit(df, names, spec_json, "logistic", {})
    return {"fit": time.perf_counter() - t0, "passes": float(info["steps"])}


def bench(spark, work: str, scales: List[int], captures: int = 2, seconds: float = 2.0,
          log: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Run the benchmark; returns (and writes to ``work``/bench.json) one row per scale."""
    from .features import features_job, read_spec

    work_dir = pathlib.Path(work)
    caps = _emulate(work_dir / "captures", captures * max(scales), seconds, log)
    # Warm up (JVM, Python workers, the package's import) on one capture, untimed.
    features_job(spark, caps[:1], os.fspath(work_dir / "rows_warmup"))
    rows_out: List[Dict[str, Any]] = []
    for s in sorted(scales):
        subset = caps[: captures * s]
        out = os.fspath(work_dir / f"rows_{s}x")
        feat_s = float("inf")
        for _ in range(2):  # best of two: the first run of a size still warms the JVM's writers
            t0 = time.perf_counter()
            summary = features_job(spark, subset, out)
            feat_s = min(feat_s, time.perf_counter() - t0)
        parquet_bytes = sum(f.stat().st_size for f in pathlib.Path(out).rglob("*.parquet"))
        spec_json, names = read_spec(spark, out)
        df = spark.read.parquet(out).select(*names, "y").cache()
        n = df.count()
        ours = _newton_pass_seconds(df, names)
        mlp = _mlp_evaluation_seconds(df, names)
        ml = _mllib_seconds(df, names)
        our_fit = _our_fit_seconds(df, names, spec_json)
        mllib = ml["iteration"]
        df.unpersist()
        rows_out.append({"scale": s, "captures": len(subset), "rows": n, "failed": summary["failed"],
                         "parquet_bytes_per_row": parquet_bytes / max(n, 1),
                         "features_s": feat_s, "features_rows_per_s": n / feat_s,
                         "newton_pass_s": ours, "newton_rows_per_s": n / ours,
                         "mlp_evaluation_s": mlp,
                         "mllib_iteration_s": mllib, "mllib_over_ours": mllib / ours,
                         "our_fit_s": our_fit["fit"], "our_fit_passes": our_fit["passes"],
                         "mllib_fit_s": ml["fit"], "mllib_fit_iterations": ml["fit_iterations"]})
        if log:
            r = rows_out[-1]
            log(f"{s}×: {n} rows; features {feat_s:.1f} s ({r['features_rows_per_s']:,.0f} rows/s); "
                f"Newton pass {ours:.2f} s; MLlib per iteration {mllib:.2f} s ({r['mllib_over_ours']:.2f}×); "
                f"whole fit: ours {our_fit['fit']:.1f} s, MLlib {ml['fit']:.1f} s")
    base = rows_out[0]
    for r in rows_out:
        r["features_growth"] = r["features_s"] / base["features_s"]
        r["newton_growth"] = r["newton_pass_s"] / base["newton_pass_s"]
        r["rows_growth"] = r["rows"] / base["rows"]
    result = {"spark": f"{spark.version} ({spark.sparkContext.master})", "runs": rows_out,
              "features_fit": linear_fit([r["rows"] for r in rows_out], [r["features_s"] for r in rows_out]),
              "newton_fit": linear_fit([r["rows"] for r in rows_out], [r["newton_pass_s"] for r in rows_out]),
              "mlp_fit": linear_fit([r["rows"] for r in rows_out], [r["mlp_evaluation_s"] for r in rows_out]),
              "our_whole_fit": linear_fit([r["rows"] for r in rows_out], [r["our_fit_s"] for r in rows_out]),
              "mllib_whole_fit": linear_fit([r["rows"] for r in rows_out], [r["mllib_fit_s"] for r in rows_out])}
    (work_dir / "bench.json").write_text(json.dumps(result, indent=2))
    if log:
        log(bench_md(result))
    return result


def linear_fit(rows: List[float], secs: List[float]) -> Dict[str, float]:
    """Least squares ``seconds = fixed + per_row × rows``, and the largest deviation of a run
    from the line as a share of its time: small means the time grows linearly with the input
    (a fixed cost per job — scheduling, the Python workers — plus the same cost per row)."""
    x, y = np.asarray(rows, float), np.asarray(secs, float)
    a = np.vstack([np.ones_like(x), x]).T
    (fixed, per_row), *_ = np.linalg.lstsq(a, y, rcond=None)
    dev = np.abs(a @ np.array([fixed, per_row]) - y) / y
    return {"fixed_s": float(fixed), "ns_per_row": float(per_row * 1e9), "max_deviation": float(dev.max())}


def bench_md(result: Dict[str, Any]) -> str:
    lines = [f"Spark {result['spark']}", "",
             "| input | rows | features s | rows/s | growth | Newton pass s | rows/s | growth | MLlib s per iteration (fit ÷ iterations) | MLlib ÷ ours |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["runs"]:
        lines.append(f"| {r['scale']}× | {r['rows']:,} | {r['features_s']:.1f} | {r['features_rows_per_s']:,.0f} | "
                     f"{r['features_growth']:.2f} | {r['newton_pass_s']:.2f} | {r['newton_rows_per_s']:,.0f} | "
                     f"{r['newton_growth']:.2f} | {r['mllib_iteration_s']:.2f} | {r['mllib_over_ours']:.2f} |")
    lines += ["", "| input | our logistic fit s (Newton passes) | MLlib LogisticRegression fit s (iterations) | MLlib ÷ ours |",
              "|---:|---:|---:|---:|"]
    for r in result["runs"]:
        lines.append(f"| {r['scale']}× | {r['our_fit_s']:.1f} ({r['our_fit_passes']:.0f}) | "
                     f"{r['mllib_fit_s']:.1f} ({r['mllib_fit_iterations']:.0f}) | {r['mllib_fit_s'] / r['our_fit_s']:.2f} |")
    lines += ["", "| job | fixed s | ns per row | largest deviation from the line |", "|---|---:|---:|---:|"]
    for k, label in (("features_fit", "features"), ("newton_fit", "one Newton pass"),
                     ("mlp_fit", "one perceptron evaluation (16 units)"),
                     ("our_whole_fit", "our logistic fit"), ("mllib_whole_fit", "MLlib LogisticRegression fit")):
        f = result[k]
        lines.append(f"| {label} | {f['fixed_s']:.2f} | {f['ns_per_row']:.0f} | {100 * f['max_deviation']:.1f} % |")
    return "\n".join(lines)
