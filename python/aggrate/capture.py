"""Captures to polars DataFrames of labelled feature rows."""

from __future__ import annotations

import os
import re
import json
import pathlib
from typing import List, Optional, Union

import numpy as np
import polars as pl

from . import _aggrate
from ._aggrate import InputError

PathLike = Union[str, "os.PathLike[str]"]

_PROTOS = {"udp": 17, "tcp": 6}


class CaptureError(InputError):
    """A capture (or its kernel log) could not be read to the end, or gave no rows.

    Attributes: ``path`` (the file at fault), ``offset`` (byte offset of the damage, or None),
    ``rows`` (a DataFrame of the rows read before the error; may be empty).
    """

    def __init__(self, message: str, path: Optional[str], offset: Optional[int], rows: pl.DataFrame):
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.rows = rows


def _series(name: str, spec) -> pl.Series:
    dtype, data, valid = spec
    values = np.frombuffer(data, dtype=np.dtype(dtype))
    s = pl.Series(name, values)
    if valid is not None:
        mask = np.frombuffer(valid, dtype=np.bool_)
        s = pl.select(pl.when(pl.lit(pl.Series(mask))).then(pl.lit(s)).otherwise(None).alias(name)).to_series()
    return s


def _rate_from_name(path: str) -> Optional[float]:
    m = re.search(r"([0-9.]+)mbps", os.path.basename(path).lower())
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def inspect(
    path: PathLike,
    *,
    port: Optional[int] = None,
    proto: Optional[Union[str, int]] = None,
    n_max: int = 64,
    keep_going: bool = False,
) -> dict:
    """Describe a capture as ``aggrate inspect --json`` does: format, compression, link type,
    records, the ten largest flows, 802.11 frame types, and the aggregation summary of one flow
    (the one ``port``/``proto`` select, else the largest UDP, else TCP flow): packets, MPDUs,
    A-MPDUs and their mean / median / largest size when the capture has ground truth, PHY rates,
    received Mb/s. Damage stops the read and is reported in the result (``complete`` False,
    ``error`` naming the file and byte offset) with everything read before it; a file that cannot
    be opened raises ``InputError``.
    """
    if isinstance(proto, str):
        if proto.lower() not in _PROTOS:
            raise ValueError(f"proto {proto!r}: udp or tcp")
        proto = _PROTOS[proto.lower()]
    return json.loads(_aggrate.inspect(os.fspath(path), port, proto, n_max, keep_going))


def read_capture(
    path: PathLike,
    kernel: Optional[PathLike] = None,
    *,
    m: int = 20,
    sigma: bool = True,
    context: int = 0,
    n_max: int = 64,
    seq_offset: int = 0,
    keep_going: bool = False,
    port: Optional[int] = None,
    proto: Union[str, int, None] = None,
    rate_mbps: Optional[float] = None,
) -> pl.DataFrame:
    """Labelled feature rows of one capture, as ``aggrate features`` writes them.

    ``kernel``: a receiver's ``seq,host_ns`` CSV or receiver-side capture whose times replace the
    capture's (joined by sequence number). ``m``/``sigma``/``context``: the feature layout (a
    model's ``spec``). The flow is the largest UDP flow (else TCP) unless ``port``/``proto`` say.

    Columns: capture, rate_mbps, number, host_ns, tsft_us, seq, y (frame start), frame_id,
    agg_level, phy_rate_bps, then the features (``gap_1`` … / context columns).

    Raises :class:`CaptureError` (with ``path``, ``offset`` and the rows read before the damage in
    ``rows``) for a damaged capture, no flow, no ground truth, or a log that matches nothing.
    """
    path = os.fspath(path)
    if isinstance(proto, str):
        try:
            proto = _PROTOS[proto.lower()]
        except KeyError:
            raise ValueError(f"proto {proto!r}: udp, tcp or a number") from None
    cols, info, err = _aggrate.read_capture(
        path,
        None if kernel is None else os.fspath(kernel),
        m=m,
        sigma=sigma,
        context=context,
        n_max=n_max,
        seq_offset=seq_offset,
        keep_going=keep_going,
        port=port,
        proto=proto,
    )
    rate = rate_mbps if rate_mbps is not None else _rate_from_name(path)
    n = info["rows"]
    df = pl.DataFrame(
        [
            pl.Series("capture", [os.path.basename(path)] * n, dtype=pl.Utf8),
            pl.Series("rate_mbps", [rate] * n, dtype=pl.Float64),
        ]
        + [_series(name, spec) for name, spec in cols.items()]
    )
    if err is not None:
        if err["kind"] == "input":
            raise CaptureError(err["message"], err["path"] and os.fspath(err["path"]), err["offset"], df)
        raise OSError(err["message"])
    return df


def read_dataset(folder: PathLike, *, train_only: bool = False, **options) -> pl.DataFrame:
    """Rows of every capture of a dataset folder (``aggrate dataset build``), with ``receiver``,
    ``role``, ``rate_mbps`` and ``others`` (the kind of other traffic on the channel, for recipes
    with ``[[others]]``; null otherwise) from its ``manifest.json`` and each run's kernel log joined when
    the manifest names one; without a manifest, every capture in the folder (receiver from the
    capture's comment). ``options`` go to :func:`read_capture` (``m``, ``sigma``, ``context``, …).

    Group by ``receiver`` to hold out whole receive paths (scikit-learn's ``GroupKFold``), as
    ``aggrate train --group-by receiver`` does.
    """
    folder = pathlib.Path(folder)
    manifest = folder / "manifest.json"
    parts: List[pl.DataFrame] = []
    if manifest.exists():
        m = json.loads(manifest.read_text())
        for run in m.get("runs", []):
            if train_only and run.get("role") != "train":
                continue
            for st in run.get("stations", []):
                kernel = st.get("kernel")
                df = read_capture(
                    folder / st["file"],
                    None if kernel is None else folder / kernel,
                    rate_mbps=run.get("rate_mbps"),
                    **options,
                )
                parts.append(df.with_columns(
                    pl.lit(run.get("receiver"), dtype=pl.Utf8).alias("receiver"),
                    pl.lit(run.get("role"), dtype=pl.Utf8).alias("role"),
                    pl.lit(run.get("others"), dtype=pl.Utf8).alias("others"),
                ))
    else:
        # Captures only, compressed or not (a kernel log may sit beside them as .csv or .csv.gz).
        captures = sorted(p for p in folder.iterdir() if re.search(r"\.pcap(ng)?(\.gz|\.xz)?$", p.name))
        for p in captures:
            df = read_capture(p, **options)
            parts.append(df.with_columns(
                pl.lit(_aggrate.receiver_of(os.fspath(p)), dtype=pl.Utf8).alias("receiver"),
                pl.lit(None, dtype=pl.Utf8).alias("role"),
                pl.lit(None, dtype=pl.Utf8).alias("others"),
            ))
    if not parts:
        raise InputError(f"{folder}: no captures (no manifest.json runs and no .pcap/.pcapng files)")
    return pl.concat(parts)
