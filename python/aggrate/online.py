"""The receiver's online estimator."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import numpy as np
import polars as pl

from . import _aggrate


def _u64(a: Any) -> bytes:
    if isinstance(a, pl.Series):
        a = a.to_numpy()
    return np.ascontiguousarray(np.asarray(a, dtype=np.uint64)).astype("<u8").tobytes()


class OnlineEstimator:
    """Frame boundaries and the mean aggregation level μ_N from kernel receive times, packet by
    packet — the same code `aggrate recv` runs (≈ 50 ns per packet).

    ``model``: an :class:`aggrate.Model` (default: the shipped one); ``interval_ms``: report period;
    ``phy_mbps``: the link's PHY rate — then each report's ``level`` is the level from airtime,
    which receive paths that hide or invent frame starts cannot bias (lengths are UDP payloads).
    ``bank``: the JSON bytes of a summary of measured receivers for ``self_calibrate`` (default:
    the shipped model's, embedded).
    ``self_calibrate``: set the model's operating point from the receive times as they come, as
    ``aggrate recv --self-calibrate`` does (every 16,384 packets, from the shipped model's
    training receivers nearest the window, within ``max_distance`` spreads — by default none when
    ``phy_mbps`` is the training WLAN's 866.7, else 1; the shipped model or a calibrated copy
    only); :meth:`calibration` says what it did.
    """

    def __init__(self, model: Optional["_aggrate.Model"] = None, interval_ms: float = 100.0,
                 self_calibrate: bool = False, max_distance: Optional[float] = None,
                 phy_mbps: Optional[float] = None, bank: Optional[bytes] = None):
        self._inner = _aggrate.OnlineEstimator(model, interval_ms, self_calibrate, max_distance, phy_mbps, bank)

    def calibration(self) -> Optional[Dict[str, Any]]:
        """With ``self_calibrate``: windows used (``windows``), not used (``skipped``) and used
        but too far from every training receiver (``too_far``), the last window's step (rate,
        nearest training receiver, distance, threshold, load) and the operating point's
        ``knots``; None without it."""
        j = self._inner.calibration()
        return None if j is None else json.loads(j)

    def push(self, seq: Optional[int], kernel_ns: int, length: int = 1448,
             sent_ns: Optional[int] = None) -> Optional[tuple]:
        """One packet; ``(start_ns, level)`` when it closed a frame. Times must not go back."""
        return self._inner.push(seq, kernel_ns, length, sent_ns)

    def poll_report(self, now_ns: int) -> Optional[Dict[str, Any]]:
        """The next finished report at receive time ``now_ns``, if one is due."""
        return self._inner.poll_report(now_ns)

    def run(self, kernel_ns: Any, seq: Any = None) -> pl.DataFrame:
        """Push a whole trace (arrays or Series of receive times and, optionally, sequence
        numbers); the reports due along the way, one row each."""
        reports: List[Dict[str, Any]] = self._inner.run(_u64(kernel_ns), None if seq is None else _u64(seq))
        return pl.DataFrame(reports) if reports else pl.DataFrame()
