"""``cep_gpu.Engine(rules, shedding=Shedder(...))``: the shedder in front of a live engine.

The engine hands each ``publish`` to :meth:`ShedGate.publish` (the engine knows only that its
``shedding`` object has a ``gate`` method: it imports nothing from this package). One event whose
cost cannot reach the global constraint behind an idle engine goes straight to the engine (no
utility, no DataFrame: Sec. 4.1's non-overload mode). Otherwise the gate treats the published
events as a micro-batch that arrived together (:meth:`Shedder.shed_batch`: the kept
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
        self.pending: list[dict] = []  # arrivals of the fast path, not yet in ``recent``
        self.whole: dict[str, int] = {}  # events per type of batches kept whole without utilities
        self._mean_u: tuple | None = None  # (the utility model, its mean utility per type)

    def __setstate__(self, state: dict) -> None:
        # a checkpoint made before the fast path and the support context: they start empty
        self.__dict__.update({"recent": None, "pending": [], "whole": {}, "_mean_u": None} | state)

    def publish(self, engine, events, output: str):
        """Shed ``events`` (one batch arriving now), publish the kept rows through ``engine``."""
        t0 = time.perf_counter()
        if _one_row(events) and self._fits_whole(1):
            return self._publish_whole(engine, events, output, t0)
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
            u = sh.utility.compute(frame, context=self._context())
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
        return self._measured(out, t0)

    def _measured(self, out, t0: float):
        """Count the composite events of one publish and its latency (Eq. 2)."""
        lat = time.perf_counter() - t0
        k = composite_count(out)
        self.composites += k
        if k:
            self.latencies.append((lat, k))
            if lat > self.shedder.latency_bound:
                self.violations += k
        return out

    # -- the fast path: one event that cannot overload an idle engine -----------------------------

    def _fits_whole(self, n: int) -> bool:
        """Whether a batch of ``n`` events behind an idle engine is kept whole whatever its
        events: even ``n`` of the costliest (the largest Z(T), every event a terminator reading
        the whole batch) fit the global constraint β·L_max, so no local constraint is consulted
        and no utility is needed (Sec. 4.1: "in non-overload mode ... utility values are not
        calculated and events are simply appended")."""
        sh = self.shedder
        if sh.policy == "none":
            return True
        st = sh.stats
        z_top = max([*st.costs.values(), sh.z_mean, 0.0])
        return n * (z_top + st.window_cost * n) <= sh.beta * sh.latency_bound

    def _publish_whole(self, engine, event: Mapping, output: str, t0: float):
        """Publish one event as it came (the engine's record path), with its position in the
        published stream as its id when it has none."""
        if "id" not in event:
            event = {**event, "id": self.next_id}
        self.inside = True
        try:
            out = engine.publish(event, output=output)
        finally:
            self.inside = False
        self.next_id += 1
        t = str(event.get("type"))
        self.whole[t] = self.whole.get(t, 0) + 1
        self.published += 1
        self.kept += 1
        if self.shedder.utility.kind == "support":
            self.pending.append(dict(event))
            if len(self.pending) >= 4096:  # fold now and then, so the list stays short
                self._context()
        return self._measured(out, t0)

    # -- the support utility's context ----------------------------------------------------------

    def _context(self) -> pd.DataFrame | None:
        """The earlier arrivals the ``support`` utility counts (None for the other utilities)."""
        if self.shedder.utility.kind != "support":
            return None
        if self.pending:
            self.recent = self._recent(pd.DataFrame(self.pending))
            self.pending = []
        return self.recent

    def _recent(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The arrivals within the rules' lookback of the newest one, this batch included: what
        the ``support`` utility of the next batch counts as earlier events."""
        from .stats import times_ns

        both = frame if self.recent is None else pd.concat([self.recent, frame], ignore_index=True)
        ts = times_ns(both["ts"], UNIT_NS[self.time_unit])
        return both[ts >= ts.max() - self.shedder._lookback_ns].reset_index(drop=True)

    def _whole_utilities(self) -> tuple[dict[str, float], dict[str, float]]:
        """u_all and u_kept with the events of batches kept whole, each counted at its type's
        mean utility over the statistics sample (their own utilities were never computed)."""
        if not self.whole:
            return self.u_all, self.u_kept
        model = self.shedder.utility
        if self._mean_u is None or self._mean_u[0] is not model:  # once per fit of the shedder
            frames = [f for f in self.shedder.stats.samples.values() if len(f)]
            mean = {}
            if frames:
                sample = pd.concat(frames, ignore_index=True)
                u = model.compute(sample)
                types = sample["type"].astype(str).to_numpy()
                mean = {t: float(u[types == t].mean()) for t in np.unique(types)}
            self._mean_u = (model, mean)
        mean = self._mean_u[1]
        add = {t: c * mean.get(t, 1.0) for t, c in self.whole.items()}
        u_all = {t: self.u_all.get(t, 0.0) + add.get(t, 0.0) for t in set(self.u_all) | set(add)}
        u_kept = {t: self.u_kept.get(t, 0.0) + add.get(t, 0.0) for t in set(self.u_kept) | set(add)}
        return u_all, u_kept

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
            "estimated_recall": estimated_recall(self.shedder.rules, *self._whole_utilities()),
            "recall": None,
            "latency_s": _weighted_percentiles(lat, w),
            "violations": self.violations,
            "constraints": self.shedder.constraints(),
        }


def _one_row(events) -> bool:
    """A single event as a dict of scalars, with the columns the engine needs (anything else
    takes the batch path, which words the errors)."""
    return isinstance(events, Mapping) and "type" in events and "ts" in events and \
        all(np.ndim(v) == 0 for v in events.values())


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
