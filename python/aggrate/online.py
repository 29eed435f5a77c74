"""The receiver's online estimator."""

from __future__ import annotations

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

    ``model``: an :class:`aggrate.Model` (default: the shipped one); ``interval_ms``: report period.
    """

    def __init__(self, model: Optional["_aggrate.Model"] = None, interval_ms: float = 100.0):
        self._inner = _aggrate.OnlineEstimator(model, interval_ms)

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
