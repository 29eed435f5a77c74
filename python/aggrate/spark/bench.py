"""``python -m aggrate.spark bench``: how the Spark jobs scale, and MLlib beside them.

Emulates ``captures × max(scales)`` captures once (alternating the ``phone`` and ``laptop``
receive paths, 300 Mb/s, distinct seeds), then for each scale s takes the first ``captures × s``
of them and times, in one run on the same Spark:

* the features job (captures → Parquet rows), rows per second;
* one Newton pass of the logistic model (gradient + Hessian, one Spark aggregation) on the rows,
  cached, against MLlib's LogisticRegression with ``maxIter=1`` on the same cached rows (its
  standardisation summary plus one L-BFGS evaluation) — the ratio MLlib ÷ ours;
* the growth: each time ÷ the 1× time, next to s (linear growth: the two agree).

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


def _newton_pass_seconds(df, names: List[str], repeats: int = 3) -> float:
    """Best of ``repeats``: the first (full) Newton pass at β = 0 over the cached rows."""
    from aggrate import _aggrate

    from .train import _counts_and_scaler, _sum_partitions

    n, pos, mean, std = _counts_and_scaler(df, names)
    d = len(names)
    beta = [0.0] * (d + 1)

    def part(x, y, k):
        h, g, loss = _aggrate.logistic_sums(x, y, k, d, mean, std, beta, 1.0, 1.0, True)
        return np.concatenate([np.frombuffer(h, "<f8"), np.frombuffer(g, "<f8")]).tobytes(), loss

    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _sum_partitions(df, names, part, (d + 1) ** 2 + d + 1)
        best = min(best, time.perf_counter() - t0)
    return best


def _mlp_evaluation_seconds(df, names: List[str], repeats: int = 3) -> float:
    """Best of ``repeats``: one L-BFGS evaluation of the 16-unit perceptron (loss + gradient)."""
    from aggrate import _aggrate

    from .train import _counts_and_scaler, _sum_partitions

    n, pos, mean, std = _counts_and_scaler(df, names)
    d = len(names)
    solver = _aggrate.MlpSolver(d, n, pos, "{}", 1024)
    hidden, skip, wp, wn = solver.sums_args
    w = solver.ask()

    def part(x, y, k):
        loss, g = _aggrate.mlp_sums(x, y, k, d, mean, std, hidden, skip, w, wp, wn)
        return g, loss

    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _sum_partitions(df, names, part, len(w) // 8)
        best = min(best, time.perf_counter() - t0)
    return best


def _mllib_seconds(df, names: List[str], repeats: int = 3) -> float:
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    vec = VectorAssembler(inputCols=names, outputCol="features").transform(df) \
        .withColumn("label", F.col("y").cast("double")).select("features", "label").cache()
    vec.count()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        LogisticRegression(maxIter=1, regParam=1e-5, standardization=True).fit(vec)
        best = min(best, time.perf_counter() - t0)
    vec.unpersist()
    return best


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
        _, names = read_spec(spark, out)
        df = spark.read.parquet(out).select(*names, "y").cache()
        n = df.count()
        ours = _newton_pass_seconds(df, names)
        mlp = _mlp_evaluation_seconds(df, names)
        mllib = _mllib_seconds(df, names)
        df.unpersist()
        rows_out.append({"scale": s, "captures": len(subset), "rows": n, "failed": summary["failed"],
                         "parquet_bytes_per_row": parquet_bytes / max(n, 1),
                         "features_s": feat_s, "features_rows_per_s": n / feat_s,
                         "newton_pass_s": ours, "newton_rows_per_s": n / ours,
                         "mlp_evaluation_s": mlp,
                         "mllib_one_iteration_s": mllib, "mllib_over_ours": mllib / ours})
        if log:
            r = rows_out[-1]
            log(f"{s}×: {n} rows; features {feat_s:.1f} s ({r['features_rows_per_s']:,.0f} rows/s); "
                f"Newton pass {ours:.2f} s; MLlib 1 iteration {mllib:.2f} s ({r['mllib_over_ours']:.2f}×)")
    base = rows_out[0]
    for r in rows_out:
        r["features_growth"] = r["features_s"] / base["features_s"]
        r["newton_growth"] = r["newton_pass_s"] / base["newton_pass_s"]
        r["rows_growth"] = r["rows"] / base["rows"]
    result = {"spark": f"{spark.version} ({spark.sparkContext.master})", "runs": rows_out,
              "features_fit": linear_fit([r["rows"] for r in rows_out], [r["features_s"] for r in rows_out]),
              "newton_fit": linear_fit([r["rows"] for r in rows_out], [r["newton_pass_s"] for r in rows_out]),
              "mlp_fit": linear_fit([r["rows"] for r in rows_out], [r["mlp_evaluation_s"] for r in rows_out]),
              "mllib_fit": linear_fit([r["rows"] for r in rows_out],
                                      [r["mllib_one_iteration_s"] for r in rows_out])}
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
             "| input | rows | features s | rows/s | growth | Newton pass s | rows/s | growth | MLlib 1 iteration s | MLlib ÷ ours |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["runs"]:
        lines.append(f"| {r['scale']}× | {r['rows']:,} | {r['features_s']:.1f} | {r['features_rows_per_s']:,.0f} | "
                     f"{r['features_growth']:.2f} | {r['newton_pass_s']:.2f} | {r['newton_rows_per_s']:,.0f} | "
                     f"{r['newton_growth']:.2f} | {r['mllib_one_iteration_s']:.2f} | {r['mllib_over_ours']:.2f} |")
    lines += ["", "| job | fixed s | ns per row | largest deviation from the line |", "|---|---:|---:|---:|"]
    for k, label in (("features_fit", "features"), ("newton_fit", "one Newton pass"),
                     ("mlp_fit", "one perceptron evaluation (16 units)"),
                     ("mllib_fit", "MLlib LogisticRegression, 1 iteration")):
        f = result[k]
        lines.append(f"| {label} | {f['fixed_s']:.2f} | {f['ns_per_row']:.0f} | {100 * f['max_deviation']:.1f} % |")
    return "\n".join(lines)
