"""Captures → labelled feature rows on Spark (``python -m aggrate.spark features``)."""

from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Any, Dict, Iterable, Iterator, List, Optional

#: The feature layout the jobs use unless told: the shipped perceptron's (m = 5 gaps on a
#: receiver context of 1024 past gaps), which also serves the logistic model.
FEATURE_DEFAULTS: Dict[str, Any] = {"m": 5, "sigma": False, "context": 1024, "n_max": 64}

_CAPTURE = re.compile(r"\.pcap(ng)?(\.gz|\.xz|\.zst)?$")

#: Columns of every row besides the features, with their Spark SQL types.
META_TYPES = [
    ("path", "string"),
    ("capture", "string"),
    ("receiver", "string"),
    ("role", "string"),
    ("others", "string"),
    ("rate_mbps", "double"),
    ("row", "long"),
    ("rows_in_capture", "long"),
    ("number", "long"),
    ("host_ns", "long"),
    ("tsft_us", "long"),
    ("seq", "long"),
    ("y", "boolean"),
    ("frame_id", "long"),
    ("agg_level", "long"),
    ("phy_rate_bps", "long"),
]
#: Columns only the per-file table uses (on the mapped rows; not written with the features).
FILE_TYPES = [("_kind", "byte"), ("_error", "string"), ("_offset", "long"), ("_fault", "string")]


def list_inputs(inputs: Iterable[os.PathLike | str]) -> List[Dict[str, Any]]:
    """Capture tasks from dataset folders (``manifest.json``: each run's stations, their kernel
    logs, receiver, role, others on the channel and rate), plain folders (every capture in them) and capture files.
    Reads manifests and directory listings only — never a capture."""
    tasks: List[Dict[str, Any]] = []
    for item in inputs:
        p = pathlib.Path(item)
        manifest = p / "manifest.json"
        if p.is_dir() and manifest.exists():
            tasks.extend(_manifest_tasks(manifest))
        elif p.is_dir():
            for c in sorted(x for x in p.iterdir() if _CAPTURE.search(x.name)):
                tasks.append(_file_task(c))
        elif p.exists() or _CAPTURE.search(p.name):
            # A file the executors will open (and report, if they cannot).
            tasks.append(_file_task(p))
        else:
            raise FileNotFoundError(f"{p}: no such capture, dataset folder or folder of captures")
    if not tasks:
        raise ValueError("no captures in " + ", ".join(map(str, inputs)))
    seen = set()
    for t in tasks:
        if t["path"] in seen:
            raise ValueError(f"{t['path']}: listed twice")
        seen.add(t["path"])
    return tasks


def _manifest_tasks(manifest: pathlib.Path) -> List[Dict[str, Any]]:
    """The stations of every run of a dataset manifest, checked: a run or station that does not
    say what it must is an error naming the manifest and the run."""
    try:
        m = json.loads(manifest.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{manifest}: not a dataset manifest: {e}") from None
    runs = m.get("runs") if isinstance(m, dict) else None
    if not isinstance(runs, list):
        raise ValueError(f"{manifest}: not a dataset manifest: no list of runs")
    out = []
    for i, run in enumerate(runs):
        where = f"{manifest}: run {i}"
        if not isinstance(run, dict) or not isinstance(run.get("stations", []), list):
            raise ValueError(f"{where}: not an object with a list of stations")
        for key, kinds in (("receiver", (str,)), ("role", (str,)), ("others", (str,)), ("rate_mbps", (int, float))):
            if run.get(key) is not None and not isinstance(run[key], kinds):
                raise ValueError(f"{where}: {key} = {run[key]!r}")
        for st in run.get("stations", []):
            if not isinstance(st, dict) or not isinstance(st.get("file"), str):
                raise ValueError(f"{where}: a station without a capture file ({st!r})")
            kernel = st.get("kernel")
            if kernel is not None and not isinstance(kernel, str):
                raise ValueError(f"{where}: kernel = {kernel!r}")
            out.append({
                "path": _absolute(manifest.parent / st["file"]),
                "kernel": None if kernel is None else _absolute(manifest.parent / kernel),
                "receiver": run.get("receiver"),
                "role": run.get("role"),
                "others": run.get("others"),
                "rate_mbps": None if run.get("rate_mbps") is None else float(run["rate_mbps"]),
            })
    return out


def _absolute(p: pathlib.Path) -> str:
    """An absolute path: executors on other nodes run in other working directories."""
    return os.fspath(p.absolute())


def _file_task(p: pathlib.Path) -> Dict[str, Any]:
    return {"path": _absolute(p), "kernel": None, "receiver": None, "role": None, "others": None, "rate_mbps": None}


def _spark_schema(feature_names: List[str], with_file_columns: bool):
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "double": T.DoubleType(), "long": T.LongType(),
             "boolean": T.BooleanType(), "byte": T.ByteType()}
    cols = META_TYPES + [(f, "double") for f in feature_names] + (FILE_TYPES if with_file_columns else [])
    return T.StructType([T.StructField(n, kinds[t], True) for n, t in cols])


def _capture_batches(tasks: Iterator, spec: Dict[str, Any], arrow_schema, keep_partial: bool,
                     batch_rows: int = 65_536):
    """Executor side: each task row → its capture's rows as Arrow batches, then one file row
    (``_kind`` = 1) saying how it went. Runs where the capture is, not on the driver."""
    import numpy as np
    import pyarrow as pa
    import polars as pl

    import aggrate
    from aggrate import _aggrate
    from aggrate.capture import _rate_from_name

    names = arrow_schema.names
    for batch in tasks:
        for t in batch.to_pylist():
            path = t["path"]
            error, offset, fault, rows = None, None, None, None
            rate = t["rate_mbps"] if t["rate_mbps"] is not None else _rate_from_name(path)
            try:
                rows = aggrate.read_capture(path, t["kernel"], rate_mbps=rate, **spec)
            except aggrate.CaptureError as e:
                error, offset, fault = str(e), e.offset, e.path
                if keep_partial and e.offset is not None:
                    # Damage at a byte offset: the rows before it are whole. (No ground truth, or
                    # a log that matches nothing, leaves no row worth keeping.)
                    rows = e.rows
                else:
                    error = error.replace("(results up to the damage were kept)",
                                          "(its rows are left out; --keep-partial keeps those read before the damage)")
            except (OSError, aggrate.AggrateError, ValueError) as e:
                error = str(e) if path in str(e) else f"{path}: {e}"
                fault = path
            receiver = t["receiver"]
            if receiver is None and os.path.isfile(path):
                receiver = _aggrate.receiver_of(path)
            n = 0 if rows is None else rows.height
            written = 0
            try:
                for start in range(0, n, batch_rows):
                    # A batch at a time: a capture's rows are held once, in polars, and each batch
                    # converts on its own (a long path repeated over millions of rows stays far
                    # from Arrow's 2 GiB per string column).
                    part = rows.slice(start, batch_rows)
                    k = part.height
                    part = part.with_columns(
                        pl.lit(path).alias("path"),
                        pl.lit(receiver, dtype=pl.Utf8).alias("receiver"),
                        pl.lit(t["role"], dtype=pl.Utf8).alias("role"),
                        pl.lit(t["others"], dtype=pl.Utf8).alias("others"),
                        pl.Series("row", np.arange(start, start + k, dtype=np.int64)),
                        pl.lit(n, dtype=pl.Int64).alias("rows_in_capture"),
                        pl.lit(0, dtype=pl.Int8).alias("_kind"),
                        pl.lit(None, dtype=pl.Utf8).alias("_error"),
                        pl.lit(None, dtype=pl.Int64).alias("_offset"),
                        pl.lit(None, dtype=pl.Utf8).alias("_fault"),
                    )
                    yield from part.select(names).to_arrow().cast(arrow_schema).to_batches()
                    written += k
            except (pa.ArrowException, pl.exceptions.PolarsError, ValueError) as e:
                error, fault = (f"{path}: its rows could not be converted for Spark: {e} "
                                f"(the first {written} of {n} were written)"), path
            rows = None
            file_row = {c: None for c in names}
            file_row.update({"path": path, "capture": os.path.basename(path), "receiver": receiver,
                             "role": t["role"], "others": t["others"], "rate_mbps": rate, "rows_in_capture": n,
                             "_kind": 1, "_error": error, "_offset": offset, "_fault": fault})
            yield pa.RecordBatch.from_pylist([file_row], schema=arrow_schema)


def features_job(spark, inputs: Iterable, output: str, *, m: int = FEATURE_DEFAULTS["m"],
                 sigma: bool = FEATURE_DEFAULTS["sigma"], context: int = FEATURE_DEFAULTS["context"],
                 n_max: int = FEATURE_DEFAULTS["n_max"], keep_partial: bool = False,
                 log=None) -> Dict[str, Any]:
    """Turn every capture of ``inputs`` into labelled feature rows on the executors and write
    them to ``output`` as Parquet partitioned by ``receiver`` and ``rate_mbps``; beside them
    ``_spec`` (the feature layout) and ``_files`` (one row per capture: rows, error, byte
    offset and the file it is in — the capture or its kernel log). A capture that fails is
    reported there and left out (``keep_partial``: the rows read before damage at a byte offset
    are kept). Rows are computed once (persisted, memory then disk) and give both the Parquet
    and the file table. Returns the per-file table and counts."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    from aggrate import _aggrate

    spec = {"m": m, "sigma": sigma and context == 0, "context": context, "n_max": n_max}
    spec_json, names = _aggrate.layout(**spec)
    tasks = list_inputs(inputs)
    out_schema = _spark_schema(names, True)
    arrow_schema = to_arrow_schema(out_schema)
    # One capture per partition, so one per task: the executors share the files.
    task_rdd = spark.sparkContext.parallelize(
        [(t["path"], t["kernel"], t["receiver"], t["role"], t["others"], t["rate_mbps"]) for t in tasks], len(tasks))
    task_df = spark.createDataFrame(
        task_rdd, "path string, kernel string, receiver string, role string, others string, rate_mbps double")

    def run(batches):
        return _capture_batches(batches, spec, arrow_schema, keep_partial)

    mapped = task_df.mapInArrow(run, out_schema).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        data_cols = [c for c in out_schema.names if not c.startswith("_")]
        (mapped.filter(F.col("_kind") == 0).select(*data_cols)
         .write.mode("overwrite").partitionBy("receiver", "rate_mbps").parquet(output))
        files = [r.asDict() for r in mapped.filter(F.col("_kind") == 1)
                 .select("path", "receiver", "rate_mbps", F.col("rows_in_capture").alias("rows"),
                         F.col("_error").alias("error"), F.col("_offset").alias("offset"),
                         F.col("_fault").alias("fault"))
                 .orderBy("path").collect()]
    finally:
        mapped.unpersist()
    spark.createDataFrame(files, "path string, receiver string, rate_mbps double, rows long, "
                                 "error string, offset long, fault string") \
        .coalesce(1).write.mode("overwrite").json(output.rstrip("/") + "/_files")
    spark.createDataFrame([(spec_json, json.dumps(names))], "spec string, features string") \
        .coalesce(1).write.mode("overwrite").json(output.rstrip("/") + "/_spec")
    failed = [f for f in files if f["error"] is not None]
    summary = {"captures": len(files), "failed": len(failed), "rows": sum(f["rows"] or 0 for f in files),
               "files": files, "spec": json.loads(spec_json), "features": names, "output": output}
    if log:
        log(f"{summary['rows']} rows from {len(files) - len(failed)} of {len(files)} captures → {output}")
        for f in failed:
            at = "" if f["offset"] is None else f" (byte {f['offset']} of {f['fault'] or f['path']})"
            log(f"  failed: {f['path']}{at}: {f['error']}")
    return summary


def read_spec(spark, rows: str):
    """``(spec JSON, feature names)`` of a rows folder written by :func:`features_job`."""
    try:
        r = spark.read.json(rows.rstrip("/") + "/_spec").collect()
    except Exception as e:  # AnalysisException: path does not exist
        raise FileNotFoundError(
            f"{rows}: no _spec (not a rows folder from `python -m aggrate.spark features`): {e}") from None
    if len(r) != 1:
        raise ValueError(f"{rows}/_spec: {len(r)} rows, expected one")
    return r[0]["spec"], json.loads(r[0]["features"])


def file_table_md(files: List[Dict[str, Any]]) -> str:
    """The per-file table as Markdown."""
    lines = ["| capture | receiver | rate (Mb/s) | rows | error | byte offset | in file |",
             "|---|---|---:|---:|---|---:|---|"]
    for f in files:
        lines.append("| {} | {} | {} | {} | {} | {} | {} |".format(
            f["path"], f["receiver"] or "", "" if f["rate_mbps"] is None else f"{f['rate_mbps']:g}",
            f["rows"] if f["rows"] is not None else "", (f["error"] or "").replace("|", "\\|"),
            "" if f["offset"] is None else f["offset"], f.get("fault") or ""))
    return "\n".join(lines)
