"""The 802.11ac downlink emulator."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Union

from . import _aggrate


def simulate(
    output: Union[str, "os.PathLike[str]"],
    *,
    rate_mbps: float = 300.0,
    duration_s: float = 1.0,
    noise: Union[str, Dict[str, Any]] = "phone",
    seed: int = 1,
    mcs: Optional[int] = None,
    amsdu: Optional[int] = None,
    scenario: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Emulate an 802.11ac downlink and write what the station's monitor interface records
    (radiotap capture with kernel receive times) to ``output`` (.pcapng or .pcap).

    ``noise``: a receive-path preset ("none", "laptop", "phone", "random") or a receive path as
    a dict (``name``, ``stages``). ``scenario``: a whole scenario as a dict (the TOML of
    ``aggrate simulate --config`` read with ``tomllib``); the keywords override it. Deterministic
    for a seed. Returns the run summary (per station: offered/received Mb/s, mean A-MPDU size,
    delay) with the written ``paths``.
    """
    s: Dict[str, Any] = dict(scenario or {})
    s["seed"] = seed
    s["duration_s"] = duration_s
    flows = s.get("flows") or [{}]
    s["flows"] = [{**f, "rate_mbps": rate_mbps} for f in flows]
    if isinstance(noise, dict):
        s["noise"] = noise
        s.pop("noise_preset", None)
    else:
        s["noise_preset"] = noise
        s.pop("noise", None)
    if mcs is not None or amsdu is not None:
        wlan = dict(s.get("wlan") or {})
        if mcs is not None:
            stations = wlan.get("stations") or [{}]
            wlan["stations"] = [{**st, "mcs": mcs} for st in stations]
        if amsdu is not None:
            wlan["amsdu_max_msdus"] = amsdu
        s["wlan"] = wlan
    summary, paths = _aggrate.simulate(os.fspath(output), json.dumps(s))
    out = json.loads(summary)
    out["paths"] = [os.fspath(p) for p in paths]
    return out
