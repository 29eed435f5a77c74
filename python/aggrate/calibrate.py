"""A model's operating point for one receiver, from labelled rows of that receiver — what
``aggrate calibrate`` does, on a DataFrame from :func:`aggrate.read_capture` /
:func:`aggrate.read_dataset` (a sniffer capture joined with the receiver's kernel log) — or,
with ``no_labels=True``, from the receiver's timing alone (``aggrate calibrate --no-labels``)."""

import os
from typing import Any, Dict, Optional, Tuple
import json

import numpy as np

from ._aggrate import Model


def calibrate(model: Model, df: Any, share: float = 1.0, *, no_labels: bool = False,
              bank: Optional[os.PathLike] = None, neighbours: Optional[int] = None,
              max_distance: Optional[float] = None, mcs: Optional[int] = None, nss: Optional[int] = None,
              bw: Optional[int] = None, ip_len: Optional[int] = None,
              measured: bool = False) -> Tuple[Model, Dict[str, Any]]:
    """Return ``(calibrated model, report)``.

    The threshold is set on the first ``share`` of each capture's rows (rows of one ``capture``
    and ``rate_mbps``, in order); below 1 the report's ``rest_before`` / ``rest_after`` score the
    rest. A perceptron on a receiver context gets a threshold per load (``knots``: the
    context's mean log-gap ``lmean`` → threshold), other models one ``threshold``.

    ``no_labels=True`` reads no label: each capture's threshold is the best one on the emulated
    receivers whose gap distribution is most like the capture's (``neighbours`` of them, 20
    unless given, from ``bank``, a dataset manifest file; default the embedded
    ``datasets/bank.toml``), as ``aggrate calibrate --no-labels`` does; a capture whose nearest
    bank receiver lies farther than ``max_distance`` (3 spreads unless given; ``float("inf")``:
    no limit) keeps the model's own threshold. ``mcs``, ``nss``, ``bw`` (MHz) and ``ip_len``
    (IP packet bytes) emulate the bank at the receiver's WLAN instead of the bank file's (the
    paper's VHT MCS 9, 2 SS, 80 MHz, 1500 B) — as ``aggrate calibrate --no-labels --mcs …``; the
    CLI reads them from the captures where it can, a DataFrame does not carry them. It needs
    ``host_ns`` and ``rate_mbps`` per row (``share`` does not apply).

    ``measured=True`` (with ``no_labels``) takes the shipped model's own training receivers —
    real kernel receive paths among them, embedded as a summary for that model — instead of the
    emulated bank, as ``aggrate calibrate --no-labels --measured`` does (5 ``neighbours`` and no
    ``max_distance`` unless given; no ``bank`` or WLAN: they are at the paper's). The shipped model only: another is a
    :class:`ModelError`.
    """
    import polars as pl

    names = list(model.feature_names)
    if measured and not no_labels:
        raise ValueError("measured=True is a bank for calibration without labels: give no_labels=True too")
    if no_labels:
        missing = [c for c in names + ["capture", "rate_mbps", "host_ns"] if c not in df.columns]
        if missing:
            raise ValueError(f"the DataFrame has no column(s) {missing}: read it with aggrate.read_capture / "
                             f"read_dataset with the model's layout ({model!r})")
        x = np.ascontiguousarray(df.select(names).to_numpy(), dtype=np.float64)
        run = df["capture"].cast(pl.Categorical).to_physical().to_numpy().astype("<u4")
        rate = df["rate_mbps"].cast(pl.Float64).fill_null(float("nan")).to_numpy().astype("<f4")
        host = df["host_ns"].cast(pl.UInt64).to_numpy().astype("<u8")
        text = None if bank is None else open(os.fspath(bank), encoding="utf-8").read()
        kw = {} if neighbours is None else {"neighbours": neighbours}
        if max_distance is not None:
            kw["max_distance"] = float(max_distance)
        for key, value in (("mcs", mcs), ("nss", nss), ("bw", bw), ("ip_len", ip_len)):
            if value is not None:
                kw[key] = int(value)
        if measured:
            kw["measured"] = True
        new, report = model.self_calibrate(x.tobytes(), len(df), run.tobytes(), rate.tobytes(), host.tobytes(),
                                           text, **kw)
        return new, json.loads(report)
    missing = [c for c in names + ["y", "capture", "rate_mbps", "agg_level"] if c not in df.columns]
    if missing:
        raise ValueError(f"the DataFrame has no column(s) {missing}: read it with aggrate.read_capture / read_dataset "
                         f"with the model's layout ({model!r})")
    x = np.ascontiguousarray(df.select(names).to_numpy(), dtype=np.float64)
    y = df["y"].to_numpy().astype(np.uint8)
    run = df["capture"].cast(pl.Categorical).to_physical().to_numpy().astype("<u4")
    rate = df["rate_mbps"].cast(pl.Float64).fill_null(float("nan")).to_numpy().astype("<f4")
    level = np.clip(df["agg_level"].to_numpy(), 0, 65535).astype("<u2")
    new, report = model.calibrate(x.tobytes(), y.tobytes(), len(df), run.tobytes(), rate.tobytes(),
                                  level.tobytes(), share)
    return new, json.loads(report)


def training_likeness(model: Model, df: Any) -> list:
    """How like the shipped model's training receivers each capture in ``df`` times packets,
    without labels — what ``aggrate eval`` reports as ``training_likeness``: per capture (rows of
    one ``capture`` and ``rate_mbps``) a dict with its ``capture`` name, ``rate_mbps``, the
    ``nearest`` training receiver, the rate it was taken at, the ``distance`` (in spreads over the
    training receivers) and ``familiar`` (within 1: on receivers it never saw, the model held its
    own-CV F1 there at every point tested; beyond, it missed at a quarter to a third of them).
    ``model`` is the shipped one (or a calibrated copy); another is a :class:`ModelError`. Needs
    ``host_ns`` and ``rate_mbps`` per row."""
    import polars as pl

    missing = [c for c in ["capture", "rate_mbps", "host_ns"] if c not in df.columns]
    if missing:
        raise ValueError(f"the DataFrame has no column(s) {missing}: read it with aggrate.read_capture / read_dataset")
    names = df["capture"].unique(maintain_order=True).to_list()
    run = df["capture"].replace_strict({n: i for i, n in enumerate(names)}, return_dtype=pl.UInt32) \
        .to_numpy().astype("<u4")
    rate = df["rate_mbps"].cast(pl.Float64).fill_null(float("nan")).to_numpy().astype("<f4")
    host = df["host_ns"].cast(pl.UInt64).to_numpy().astype("<u8")
    out = json.loads(model.training_likeness(len(df), run.tobytes(), rate.tobytes(), host.tobytes()))
    for r in out:
        r["capture"] = names[r["capture"]]
    return out
