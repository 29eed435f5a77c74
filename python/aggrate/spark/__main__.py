"""``python -m aggrate.spark features|train|bench``: see :mod:`aggrate.spark` and docs/scale-out.md."""

from __future__ import annotations

import argparse
import json
import sys


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    from aggrate.spark import FEATURE_DEFAULTS, session

    ap = argparse.ArgumentParser(prog="python -m aggrate.spark", description=__doc__)
    ap.add_argument("--master", help="Spark master (local[2], yarn, spark://host:7077); default: spark-submit's, else local[*]")
    sub = ap.add_subparsers(dest="cmd", required=True)

    f = sub.add_parser("features", help="captures → labelled feature rows (Parquet, partitioned by receiver and rate)")
    f.add_argument("inputs", nargs="+", help="dataset folders (manifest.json), folders of captures, capture files")
    f.add_argument("-o", "--output", required=True, help="output folder (local path, hdfs://, s3a://, …)")
    f.add_argument("--m", type=int, default=FEATURE_DEFAULTS["m"], help="gaps per row")
    f.add_argument("--context", type=int, default=FEATURE_DEFAULTS["context"], help="receiver context (0: raw gaps)")
    f.add_argument("--sigma", action="store_true", help="add σ (only with --context 0)")
    f.add_argument("--n-max", type=int, default=FEATURE_DEFAULTS["n_max"])
    f.add_argument("--keep-partial", action="store_true", help="keep the rows of a damaged capture read before the damage")

    t = sub.add_parser("train", help="cross-validate and fit a model on the rows, as `aggrate train` does")
    t.add_argument("rows", help="a rows folder written by `features`")
    t.add_argument("-o", "--output", required=True, help="folder for the model file and the report")
    t.add_argument("--model", choices=["logistic", "mlp"], default="logistic")
    t.add_argument("--group-by", choices=["capture", "receiver"], default="capture")
    t.add_argument("--folds", type=int, default=20, help="contiguous folds of each capture (--group-by capture)")
    t.add_argument("--own-folds", type=int, default=3, help="each receiver's own CV (--group-by receiver)")
    t.add_argument("--l2", type=float, default=1.0, help="logistic: L2 penalty")
    t.add_argument("--balanced", action="store_true")
    t.add_argument("--hidden", type=int, default=16, help="perceptron: hidden units")
    t.add_argument("--max-iter", type=int, default=200, help="perceptron: L-BFGS steps at most")
    t.add_argument("--seed", type=int, default=1, help="perceptron: seed of the initial weights")
    t.add_argument("--weight-decay", type=float, default=1e-4, help="perceptron: L2 penalty λ")
    t.add_argument("--skip", action="store_true", help="perceptron: linear skip path")
    t.add_argument("--peers", action="store_true", help="also fit MLlib's LogisticRegression and MultilayerPerceptronClassifier")
    t.add_argument("--test-receivers", nargs="+", default=[], metavar="RECEIVER",
                   help="with --group-by receiver: receivers in no training set, scored with the final model (aggrate train --test)")
    t.add_argument("--all-roles", action="store_true",
                   help="train on every dataset run, not only those whose role is train (as aggrate train takes them)")

    b = sub.add_parser("bench", help="rows/s of the features job and one Newton pass against MLlib, 1× to 8× the captures")
    b.add_argument("-o", "--output", default="spark-bench", help="work folder (captures, rows)")
    b.add_argument("--scales", default="1,2,4,8")
    b.add_argument("--captures", type=int, default=2, help="captures at 1×")
    b.add_argument("--seconds", type=float, default=2.0, help="emulated seconds per capture")

    a = ap.parse_args(argv)
    from aggrate import AggrateError
    spark = session(a.master)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if a.cmd == "features":
            from aggrate.spark.features import features_job, file_table_md

            s = features_job(spark, a.inputs, a.output, m=a.m, context=a.context, sigma=a.sigma,
                             n_max=a.n_max, keep_partial=a.keep_partial, log=_log)
            print(file_table_md(s["files"]))
            return 0 if s["failed"] == 0 else 2
        if a.cmd == "train":
            from aggrate.spark.train import report_md, train_job

            params = {"l2": a.l2, "balanced": a.balanced} if a.model == "logistic" else {
                "hidden": a.hidden, "max_iter": a.max_iter, "seed": a.seed, "weight_decay": a.weight_decay,
                "skip": a.skip, "balanced": a.balanced}
            r = train_job(spark, a.rows, a.output, model=a.model, group_by=a.group_by, folds=a.folds,
                          own_folds=a.own_folds, params=params, peers=a.peers, all_roles=a.all_roles,
                          test_receivers=a.test_receivers, log=_log)
            print(report_md(r))
            _log(f"wrote {r['model_file']}")
            return 0
        from aggrate.spark.bench import bench

        from aggrate.spark.bench import bench_md

        print(bench_md(bench(spark, a.output, [int(x) for x in a.scales.split(",")], a.captures, a.seconds, log=_log)))
        return 0
    except (ValueError, OSError, AggrateError) as e:
        _log(f"error: {e}")
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
