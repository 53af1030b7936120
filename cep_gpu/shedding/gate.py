"""``cep_gpu.Engine(rules, shedding=Shedder(...))``: the shedder in front of a live engine.

The engine hands each ``publish`` to :meth:`ShedGate.publish` (the engine knows only that its
``shedding`` object has a ``gate`` method: it imports nothing from this package). The gate treats
the published events as a micro-batch that arrived together (:meth:`Shedder.shed_batch`: the kept
rows' estimated processing time fits the latency bound, lowest utilities dropped first), gives
rows without an ``id`` their position in the whole published stream (so ids are those of batch
:func:`cep_gpu.detect` over every event, dropped ones included), publishes the kept rows and
measures the detection latency of the composite events it returns: the time from the ``publish``
call (the batch's arrival) to its return (Eq. 2).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..errors import ArgumentError
from ..events.checks import require_columns
from ..events.values import UNIT_NS
from ..output import composite_count

#: publishes whose latency the percentiles are taken over (a long-lived engine keeps no more)
LATENCY_WINDOW = 100_000


def estimated_recall(rules, u_all: Mapping[str, float], u_kept: Mapping[str, float]) -> float:
    """Mean over rules of ∏ over a rule's predicates of the utility-weighted share of its type
    that was kept (Σ U of kept events / Σ U of all events): an estimate that needs no reference."""
    est = []
    for r in rules:
        p = 1.0
        for pred in r.predicates:
            tot = u_all.get(pred.event_type, 0.0)
            p *= u_kept.get(pred.event_type, 0.0) / tot if tot > 0 else 1.0
        est.append(p)
    return float(np.mean(est)) if est else 1.0


class ShedGate:
    """The shedder of one live engine and its counters (made by :meth:`Shedder.gate`)."""

    def __init__(self, shedder, rules, time_unit: str) -> None:
        shedder.constraints()  # raises SheddingError when it has no statistics yet
        mine = sorted(r.name for r in shedder.rules)
        theirs = sorted(r.name for r in rules)
        if mine != theirs:
            raise ArgumentError(f"shedding: the Shedder was fitted for rules {mine}, the Engine has {theirs}; "
                                "fit it on the engine's rules")
        self.shedder = shedder
        self.time_unit = time_unit
        self.inside = False  # set while the gate publishes its kept rows through the engine
        self.next_id = 0
        self.published = 0
        self.kept = 0
        self.dropped_per_type: dict[str, int] = {}
        self.composites = 0
        self.violations = 0
        self.u_all: dict[str, float] = {}
        self.u_kept: dict[str, float] = {}
        self.latencies: deque = deque(maxlen=LATENCY_WINDOW)  # (seconds, composites) per publish
        self.recent: pd.DataFrame | None = None  # the support utility's context (all arrivals)

    def publish(self, engine, events, output: str):
        """Shed ``events`` (one batch arriving now), publish the kept rows through ``engine``."""
        t0 = time.perf_counter()
        frame = _frame(events)
        n = len(frame)
        if n or len(frame.columns):
            # the one column check of a publish, as the engine words it (was a pandas KeyError)
            require_columns(list(frame.columns))
        if "id" not in frame.columns:
            frame = frame.assign(id=np.arange(self.next_id, self.next_id + n, dtype=np.int64))
        sh = self.shedder
        keep = u = None
        if n:
            u = sh.utility.compute(frame, context=self.recent)
            keep = sh.keep_mask(frame, time_unit=self.time_unit, utilities=u)
        self.inside = True
        try:
            out = engine.publish(frame if keep is None or keep.all() else frame[keep], output=output)
        finally:
            self.inside = False
        # counted once the engine took the batch: a batch it refused (late, bad ts) is not published
        self.next_id += n
        if n and sh.utility.kind == "support":
            self.recent = self._recent(frame)
        if n:
            types = frame["type"].astype(str).to_numpy()
            for t in np.unique(types):
                m = types == t
                self.u_all[t] = self.u_all.get(t, 0.0) + float(u[m].sum())
                self.u_kept[t] = self.u_kept.get(t, 0.0) + float(u[m & keep].sum())
                if (m & ~keep).any():
                    self.dropped_per_type[t] = self.dropped_per_type.get(t, 0) + int((m & ~keep).sum())
            self.published += n
            self.kept += int(keep.sum())
        lat = time.perf_counter() - t0
        k = composite_count(out)
        self.composites += k
        if k:
            self.latencies.append((lat, k))
            if lat > sh.latency_bound:
                self.violations += k
        return out

    def _recent(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The arrivals within the rules' lookback of the newest one, this batch included: what
        the ``support`` utility of the next batch counts as earlier events."""
        from .stats import times_ns

        both = frame if self.recent is None else pd.concat([self.recent, frame], ignore_index=True)
        ts = times_ns(both["ts"], UNIT_NS[self.time_unit])
        return both[ts >= ts.max() - self.shedder._lookback_ns].reset_index(drop=True)

    def stats(self) -> dict:
        """Events published, kept and dropped (per type), composite events, the estimated recall,
        detection latency percentiles (over the last :data:`LATENCY_WINDOW` publishes that
        returned some), violations of the bound, the shedder's constraints. The measured recall
        needs a reference run: ``SheddingEngine.run`` reports it; here it is ``None``."""
        lat = np.array([x for x, _ in self.latencies])
        w = np.array([k for _, k in self.latencies])
        return {
            "policy": self.shedder.policy,
            "latency_bound_s": self.shedder.latency_bound,
            "published": self.published,
            "kept": self.kept,
            "dropped": self.published - self.kept,
            "dropped_per_type": dict(self.dropped_per_type),
            "composites": self.composites,
            "estimated_recall": estimated_recall(self.shedder.rules, self.u_all, self.u_kept),
            "recall": None,
            "latency_s": _weighted_percentiles(lat, w),
            "violations": self.violations,
            "constraints": self.shedder.constraints(),
        }


def _frame(events) -> pd.DataFrame:
    """One published batch as a DataFrame (a row dict, a DataFrame, an Arrow table, or a mapping
    of columns)."""
    if isinstance(events, pd.DataFrame):
        return events
    if hasattr(events, "to_pandas"):
        return events.to_pandas()
    if isinstance(events, Mapping):
        values = list(events.values())
        if values and all(np.ndim(v) == 0 for v in values):
            return pd.DataFrame([dict(events)])
        try:
            return pd.DataFrame({k: np.asarray(v) for k, v in events.items()})
        except ValueError as exc:
            raise ArgumentError(f"publish: columns of different lengths ({exc})") from None
    raise ArgumentError(f"publish: events must be a dict, a DataFrame, an Arrow table or a mapping of "
                        f"columns, got {type(events).__name__}")


def _weighted_percentiles(lat: np.ndarray, weight: np.ndarray) -> dict:
    """Percentiles of the composite events' latencies (each publish's latency, once per composite)."""
    if len(lat) == 0:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    order = np.argsort(lat)
    lat, weight = lat[order], weight[order]
    cum = np.cumsum(weight) / weight.sum()
    q = {f"p{p}": float(lat[min(np.searchsorted(cum, p / 100), len(lat) - 1)]) for p in (50, 95, 99)}
    return q | {"max": float(lat[-1]), "mean": float((lat * weight).sum() / weight.sum())}


__all__ = ["LATENCY_WINDOW", "ShedGate", "estimated_recall"]
