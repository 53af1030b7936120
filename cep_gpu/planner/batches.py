"""Decisions and batches: the cheaper device per batch of terminators, and batches within
``max_batch_latency``."""

from __future__ import annotations

import datetime
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError
from .profile import DEVICES, FEATURES, Profile
from .work import RuleWork


def check_max_batch_latency(value) -> float | None:
    """``max_batch_latency`` as seconds: ``None`` (or infinity) for unbounded, else a number >= 0.

    Accepts a number of seconds or a ``datetime.timedelta`` / ``pandas.Timedelta`` /
    ``numpy.timedelta64``; anything else (negative, NaN, text, bool) raises :class:`~cep_gpu.errors.ArgumentError`
    (a ``ValueError``).
    """
    if value is None:
        return None
    secs = math.nan  # anything not understood below is rejected
    if isinstance(value, datetime.timedelta):
        secs = value.total_seconds()
    elif isinstance(value, np.timedelta64):
        secs = float(value / np.timedelta64(1, "ns")) / 1e9
    elif isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        secs = float(value)
    if math.isnan(secs) or secs < 0:
        raise ArgumentError(f"max_batch_latency must be None (unbounded) or a number of seconds >= 0, got {value!r}")
    return None if math.isinf(secs) else secs



@dataclass(frozen=True)
class Decision:
    """The planner's choice for one batch of terminators, with the two estimates behind it."""

    device: str
    cpu_s: float
    gpu_s: float
    first: int
    stop: int
    reason: str



def decide(profile: Profile, features: Mapping[str, float], gpu_usable: bool) -> tuple[str, float, float, str]:
    """``(device, cpu_estimate_s, gpu_estimate_s, reason)``: the GPU only when usable and cheaper."""
    cpu_s = profile.cost("cpu", features)
    gpu_s = profile.cost("gpu", features)
    if not gpu_usable:
        return "cpu", cpu_s, gpu_s, "no usable GPU"
    if gpu_s < cpu_s:
        return "gpu", cpu_s, gpu_s, "GPU estimate lower"
    return "cpu", cpu_s, gpu_s, "CPU estimate lower or equal"



def _largest_batch(work: RuleWork, profile: Profile, dev: str, cum: np.ndarray, i: int, bound: float) -> int:
    """The largest ``j > i`` such that the batch ``i:j`` is estimated within ``bound`` on ``dev``
    (``i + 1`` when even one terminator exceeds it)."""
    n = len(work.term_rows)
    coef = profile.cpu if dev == "cpu" else profile.gpu
    # without the per-batch features (launch, events read) the cost is a prefix sum
    j = min(n, int(np.searchsorted(cum, cum[i] + bound - coef["launches"], "right")) - 1)
    if j <= i:
        return i + 1
    if coef["events"] == 0.0:
        return j
    # the events a batch reads only grow with it: binary search for the largest batch that fits
    lo, hi = i, j
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if profile.cost(dev, work.batch_features(i, mid)) <= bound:
            lo = mid
        else:
            hi = mid - 1
    return max(lo, i + 1)



def plan_batches(
    work: RuleWork, profile: Profile, gpu_usable: bool, max_batch_latency: float | None = None
) -> list[Decision]:
    """Split the terminators into launches and decide each one.

    ``max_batch_latency`` (seconds): a batch grows while the estimate of the device it would
    use stays within the bound (at least one terminator per batch); ``None``: one batch with every
    terminator; ``0``: one terminator per batch.
    """
    n = len(work.term_rows)
    if n == 0:
        return []
    bounds: list[tuple[int, int]]
    if max_batch_latency is None or math.isinf(max_batch_latency):
        bounds = [(0, n)]
    elif max_batch_latency <= 0:
        bounds = [(i, i + 1) for i in range(n)]
    else:
        devices = DEVICES if gpu_usable else ("cpu",)
        cum = {}
        for dev in devices:
            coef = np.array([(profile.cpu if dev == "cpu" else profile.gpu)[f] for f in FEATURES])
            cum[dev] = np.concatenate([[0.0], np.cumsum(work.per_terminator @ coef)])
        bounds, i = [], 0
        while i < n:
            # as many terminators as some device can take within the bound; the cheaper device
            # of that batch is then within the bound too
            stop = max(_largest_batch(work, profile, dev, cum[dev], i, max_batch_latency) for dev in devices)
            bounds.append((i, stop))
            i = stop
    out = []
    for i, j in bounds:
        dev, c, g, why = decide(profile, work.batch_features(i, j), gpu_usable)
        out.append(Decision(dev, c, g, i, j, why))
    return out

