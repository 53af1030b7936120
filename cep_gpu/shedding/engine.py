"""``SheddingEngine``: a :class:`cep_gpu.Engine` behind DARLING's per-type input buffers.

Events arrive (each with an arrival time in seconds), pass the shedder (kept in their type's
buffer or dropped), and the engine consumes the buffers in arrival order, one event at a time.
The detection latency of a composite event is the time it was reported minus the arrival of its
latest event (paper Eq. 2).

Two clocks:

* ``mode="virtual"``: each event's processing is charged from a :class:`CostModel` (Z(T) plus the
  window work of a terminator); a run is a function of its input and the seed.
* ``mode="real"``: each ``Engine.publish`` is timed (this thread's CPU time) and the shedder's
  own work is charged too; arrivals follow the given schedule (trace-driven replay), so the
  latency is what a single core running this engine would show under that schedule. An event of
  a terminator type whose measured wait leaves less than its processing tail is dropped when it
  comes up for service (docs/shedding.md, resolution 17).
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from .. import Engine, detect
from ..errors import ArgumentError
from ..events.checks import check_unique_columns, require_frame
from ..events.from_arrow import nullable_pandas_type
from ..events.from_pandas import pandas_ids
from ..output import ID_COUNTS
from . import _core
from .gate import estimated_recall
from .shedder import UNIT_NS, Shedder, SheddingError, as_rules
from .stats import CostModel, Statistics, arrival_seconds, times_ns

MODES = ("virtual", "real")

#: the engine's own processing time: this thread's CPU time, so that other processes on a shared
#: machine do not count (the paper gives each engine a dedicated core)
_cpu = time.thread_time


class _FullCollections:
    """Counts this thread's time in full (generation-2) garbage collections while registered
    (``with``): a pause of the whole process (tens of ms here, its cost grows with the heap), not
    processing time of the event it lands in. Statistics of per-event costs leave it out; the
    run's clock keeps it (docs/shedding.md, resolution 17)."""

    def __init__(self) -> None:
        self.total = 0.0  # seconds, over the collections seen
        self.count = 0
        self.longest = 0.0
        self._t0: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._t0 = _cpu()
        elif self._t0 is not None:
            d = _cpu() - self._t0
            self.total += d
            self.count += 1
            self.longest = max(self.longest, d)
            self._t0 = None

    def __enter__(self) -> _FullCollections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


@contextlib.contextmanager
def _frozen_heap():
    """The objects alive before a real-time run moved out of the collector's reach
    (``gc.freeze``) for its duration: a full collection on the clock then scans only what the
    run made, not the whole process (pandas, Numba, the warm-up's engine), which took 86 ms, more
    than L_max, in one `nasdaq` run (docs/shedding.md, resolution 25)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class SheddingEngine:
    """Streaming detection with DARLING input load shedding.

    Parameters
    ----------
    rules:
        A Rule, a list of Rules, or rule text.
    shedding:
        A :class:`Shedder` (its policy, bound, β and ξ).
    backend:
        The engine's backend (``"cpu"`` by default: ``"auto"`` plans per terminator, which adds
        variance to real-time costs).
    time_unit:
        The unit of numeric ``ts`` values.
    mode:
        ``"virtual"`` or ``"real"`` (module docstring).
    cost_model:
        The virtual-time :class:`CostModel` (default ``CostModel()``: 1 ms per event).
    guard:
        The share of the bound the hard guard keeps each event's estimated latency within
        (docs/shedding.md, "Dropping", step 2); default β in real time, 1 in virtual time.
    drift_check:
        Optional ``fn(recent_events: DataFrame) -> bool``, called after every ``drift_every``
        events of a run with the events that arrived since the last check; ``True`` re-gathers
        the statistics from them (paper Section 4.1: statistics are re-gathered on concept
        drift).
    """

    def __init__(
        self,
        rules,
        shedding: Shedder,
        *,
        backend: str = "cpu",
        time_unit: str = "s",
        mode: str = "virtual",
        cost_model: CostModel | None = None,
        drift_check: Callable[[pd.DataFrame], bool] | None = None,
        drift_every: int = 10_000,
        guard: float | None = None,
    ) -> None:
        if not isinstance(shedding, Shedder):
            raise ArgumentError(f"shedding must be a Shedder, got {type(shedding).__name__}")
        if mode not in MODES:
            raise ArgumentError(f"mode must be 'virtual' or 'real', got {mode!r}")
        if time_unit not in UNIT_NS:
            raise ArgumentError(f"time_unit: unknown unit {time_unit!r}; use one of {sorted(UNIT_NS)}")
        if cost_model is not None and not isinstance(cost_model, CostModel):
            raise ArgumentError(f"cost_model must be a CostModel, got {type(cost_model).__name__}")
        if mode == "real" and cost_model is not None:
            raise ArgumentError("cost_model is for mode='virtual'; mode='real' measures the engine")
        if drift_check is not None and not callable(drift_check):
            raise ArgumentError("drift_check must be callable or None")
        if not isinstance(drift_every, int) or drift_every < 1:
            raise ArgumentError(f"drift_every must be an int >= 1, got {drift_every!r}")
        if guard is not None and (isinstance(guard, bool) or not isinstance(guard, (int, float))
                                  or not 0 < guard <= 1):
            raise ArgumentError(f"guard must be a share of the latency bound in (0, 1], got {guard!r}")
        self.guard = guard
        self.rules = as_rules(rules)
        self.shedder = shedding
        self.backend = backend
        self.time_unit = time_unit
        self.mode = mode
        self.cost_model = (cost_model or CostModel()) if mode == "virtual" else None
        self.drift_check = drift_check
        self.drift_every = drift_every
        Engine(self.rules, backend=backend, time_unit=time_unit)  # fail early on a bad backend
        self._report: dict = {}
        self._found: pd.DataFrame | None = None
        self._live = None  # the long-lived engine of publish()

    # -- statistics -------------------------------------------------------------------------------

    def warm_up(self, events: pd.DataFrame, arrival=None) -> Statistics:
        """Gather R(T), Z(T) and the attribute distributions on a warm-up prefix (nothing is
        dropped) and set the shedder's constraints. In real time Z(T) and κ are measured on this
        engine: per-event ``publish`` times, fitted as Z(T) + κ·(events the terminator reads)."""
        frame, arr, ts_ns = self._input(events, arrival, "warm_up")
        self._warm = frame  # real time: replayed ahead of a run to warm its engine (_engine)
        sh = self.shedder
        if self.mode == "virtual":
            sh.fit(self.rules, frame, arrival=arr, costs=self.cost_model, time_unit=self.time_unit)
        else:
            costs, kappa, ycost = self._measure(frame, ts_ns)
            sh.fit(self.rules, frame, arrival=arr, costs=costs, window_cost=kappa, time_unit=self.time_unit)
            sh.stats.utility_cost = ycost
            sh._constraints()
        return sh.stats

    def regather(self, events: pd.DataFrame, arrival=None) -> Statistics:
        """Re-gather the statistics from recent events (the concept-drift hook). A stretch with no
        event of a type the rules read says nothing about them: the current statistics stay (a
        first warm-up without such events is an error, see :meth:`Shedder.fit`)."""
        sh = self.shedder
        if sh.stats is not None and not events["type"].astype(str).isin(list(sh.column_types)).any():
            return sh.stats
        return self.warm_up(events, arrival)

    def _measure(self, frame: pd.DataFrame, ts_ns: np.ndarray):
        # an engine that has already processed the sample once (kernels compiled, matchers
        # built): a first-use build is a start-up cost, not processing time per event
        eng, offset = self._engine(ts_ns[0])
        recs = _records(frame, offset)
        dt = np.empty(len(recs))
        with _FullCollections() as full:
            for i, r in enumerate(recs):
                g0 = full.total
                t0 = _cpu()
                eng.publish(r, output="records")
                dt[i] = _cpu() - t0 - (full.total - g0)  # a full collection is no event's cost
        types = frame["type"].astype(str).to_numpy()
        sh = self.shedder
        sh.fit(self.rules, frame, costs={t: float(np.mean(dt[types == t])) for t in np.unique(types)},
               time_unit=self.time_unit)
        core = sh.make_core(frame, ts_ns, None)
        is_term = core.is_term[core.typ]
        rel = core.relevant.astype(np.int64)
        pref = np.concatenate([[0], np.cumsum(rel)])
        w = (pref[np.arange(len(frame))] - pref[core.lo]) * is_term
        names = sorted(np.unique(types))
        x = np.zeros((len(frame), len(names) + 1))
        x[np.arange(len(frame)), pd.Index(names).get_indexer(types)] = 1.0
        x[:, -1] = w
        # least squares on every publish: Z(T) is the paper's *average* time per event
        # (Sec. 4.2.2-4.2.3); a median or a trimmed fit would miss the skewed tail of terminators
        # that produce matches, and the queued work would be underestimated
        coef = np.linalg.lstsq(x, dt, rcond=None)[0]
        # the tail of each type's processing time, its longest publish here: the deadline check
        # at service start leaves this much of L_max for the event's own processing (a mean
        # would not do: the events that complete matches are the expensive ones)
        self._tail = {t: float(np.max(dt[types == t])) for t in names}
        kappa = max(float(coef[-1]), 0.0)
        costs = {t: max(float(coef[k]), float(np.min(dt[types == t]))) for k, t in enumerate(names)}
        alphas = self._alphas(frame)  # y: seconds per condition factor (α_T = |C_type(T)|·y)
        nconds = sum(sh.utility.conditions_of(t) for t in types)
        return costs, kappa, float(alphas.sum()) / max(nconds, 1)

    # -- runs -------------------------------------------------------------------------------------

    def run(self, events: pd.DataFrame, arrival=None, *, reference: bool = True,
            utilities: np.ndarray | None = None,
            progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
        """Replay ``events`` arriving at ``arrival`` (seconds; a column name, an array, or None:
        the event timestamps) through the shedder and a fresh engine.

        Returns the composite events found (``rule``, ``ts`` in the form of the input's, as
        ``detect`` gives it, ``ids``: positions in ``events`` sorted by timestamp (:attr:`input_rows`
        maps them to rows), ``detected_s``, ``latency_s``, then ``detect``'s columns after ``ids``:
        ``id_counts`` of Kleene rules and the rules' attributes). ``reference=True`` also runs
        :func:`cep_gpu.detect` on every event, for the measured recall in :meth:`stats`.
        ``utilities``: the darling policy's per-event utilities in [0, 1], one per row of
        ``events``, instead of Eq. 11 (a diagnostic hook: ``bench/shedding_ratio.py`` feeds it
        oracles to bound what any utility could reach). ``progress``: called with (events arrived,
        all events) about every 1% of the run and at its end, between events: off the clock in
        real time (a progress bar does not delay the engine's measured processing).
        """
        self.shedder._need()
        frame, arr, ts_ns = self._input(events, arrival, "run")
        n = len(frame)
        sh = self.shedder
        if utilities is not None:
            try:
                u = np.asarray(utilities, np.float64)
            except (TypeError, ValueError):
                u = np.empty(0)  # not numbers: reported below
            if u.shape != (n,) or not np.all((u >= 0) & (u <= 1)):
                raise ArgumentError(f"utilities must be {n} numbers in [0, 1], one per event")
            utilities = u[self._order]
        util = (sh.utilities(frame) if utilities is None else utilities) if sh.policy == "darling" else None
        real = self.mode == "real"
        # α_T = |C_type(T)|·y per overloaded arrival (Sec. 4.3), charged to the core in real time
        cum_alpha = np.zeros(n + 1)
        if real and sh.policy == "darling":
            cum_alpha[1:] = np.cumsum(self._alphas(frame))
        core = sh.make_core(frame, ts_ns, self.cost_model, utilities=util,
                            guard=self._guard())
        eng, offset = self._engine(ts_ns[0]) if real else \
            (Engine(self.rules, backend=self.backend, time_unit=self.time_unit), 0)
        recs = _records(frame, offset)
        if real:
            # z̄ and Z(T) are "calculated during the system run-time" (Sec. 4.2.1): running means
            # of the core's time per processed event (its publish and the shedder's work charged
            # after it), the warm-up's means weighing as its events. F_SHED counts the shedder's
            # work again, per overloaded arrival, so that a burst delays the queue at once: the
            # overlap is a margin (docs/shedding.md, resolution 13)
            z_sum = core.z_est * _warm_counts(sh, core.type_names)
            z_cnt = _warm_counts(sh, core.type_names)
            shed_sum, shed_cnt = 0.0, 0
            # resolution 17: each type's processing-time tail, for the deadline check at service
            # start: the longest publish so far, in the warm-up and in this run (the kept events
            # are not the warm-up's: DARLING keeps those that complete matches)
            longest = np.zeros(len(core.type_names))
            tail = self._tails(core.type_names, longest)
            cap = self._tail_cap()
            bound = sh.latency_bound
        # the input policies that keep the bound (the guard's); "none" and "state" drop no input
        deadline = real and sh.policy in ("darling", "random")
        clock = 0.0  # the engine's clock: when the event in service ends
        start = np.full(n, np.nan)
        done = np.full(n, np.nan)
        found: list[tuple] = []  # (rule, ts, ids, detected, trigger start)
        # the composite events of each publish as the engine's columns (no Python object per
        # composite event while the clock runs: a terminator can complete thousands, and
        # objects kept per composite event made full collections frequent; resolution 21)
        parts: list[tuple] = []  # (columns, detected, trigger start)
        i = 0  # next arrival
        report_every = max(n // 100, 1)
        next_report = report_every
        last_check = 0
        # full collections during the run (real time): on the clock, out of the running means
        full = _FullCollections()
        paused = []  # their time inside the timed work (a publish, the shedder's), per step
        with (full if real else contextlib.nullcontext()), (_frozen_heap() if real else contextlib.nullcontext()):
            while True:
                step_pause = 0.0  # full collections on the clock in this step
                p = core.next_queued()
                if p < 0:
                    if i >= n:
                        break
                    clock = max(clock, arr[i])  # idle until the next arrival
                    hi = i + 1
                else:
                    s = max(clock, arr[p])
                    if deadline and core.is_term[core.typ[p]] and s - arr[p] + tail[core.typ[p]] > bound:
                        # its measured wait leaves less than its processing tail: every match it
                        # completes would be late (Eq. 2), so it goes unprocessed
                        core.expire(p)
                        continue
                    c = core.begin(p)
                    window_part = c - core.z_act[core.typ[p]]  # κ·w of a terminator (0 otherwise)
                    if real:
                        g0 = full.total
                        t1 = _cpu()
                        out = eng.publish(recs[p], output="columns")
                        c = _cpu() - t1  # a full collection in it included: the queue waits
                        step_pause += full.total - g0
                        own = c - (full.total - g0)
                        k = core.typ[p]
                        if own > longest[k]:  # a new longest publish: that type's tail only
                            longest[k] = own
                            tail[k] = min(max(tail[k], own), cap)
                    else:
                        out = eng.publish(recs[p], output="columns")
                    clock = s + c
                    start[p], done[p] = s, clock
                    if len(out["ids_len"]):
                        parts.append((out, clock, s))
                    # the arrivals during its service (an arrival at the very end comes after the
                    # next event starts, as in the compiled simulation)
                    hi = int(np.searchsorted(arr, clock, "left"))
                if hi > i:
                    core.F[_core.F_TFREE] = clock
                    g1 = full.total
                    t1 = _cpu()
                    over = core.IS[_core.I_OVERLOADED]
                    core.arrive_range(i, hi, arr)
                    if real:  # the shedder's own work runs on the engine's core; utilities are
                        # computed for the arrivals that find the global constraint violated only
                        n_over = core.IS[_core.I_OVERLOADED] - over
                        spent = _cpu() - t1 + (cum_alpha[hi] - cum_alpha[i]) * n_over / (hi - i)
                        clock += spent
                        if n_over:  # running mean of the shedder's work per overloaded arrival
                            shed_sum += spent - (full.total - g1)
                            shed_cnt += n_over
                            core.F[_core.F_SHED] = shed_sum / shed_cnt
                        step_pause += full.total - g1
                    i = hi
                    if progress is not None and i >= next_report:
                        progress(i, n)
                        next_report = i + report_every
                    if self.drift_check is not None and i - last_check >= self.drift_every:
                        recent = frame.iloc[last_check:i]
                        if self.drift_check(recent):
                            self.regather(recent, arr[last_check:i])
                            self._refresh(core, frame, i)
                            if real:
                                tail = self._tails(core.type_names, longest)
                        last_check = i
                if real and p >= 0:
                    t = core.typ[p]
                    if step_pause > 0:  # a full collection: not this event's cost
                        paused.append(step_pause)
                    z_sum[t] += max(clock - s - window_part - step_pause, 0.0)
                    z_cnt[t] += 1
                    core.z_est[t] = z_sum[t] / z_cnt[t]
        if progress is not None:
            progress(n, n)
        # the composite events' own fields after rule, ts, ids (id_counts of Kleene rules, the
        # rules' attributes), as detect gives them
        extra = eng.output_fields[3:]
        for out, det, trig in parts:  # off the clock: the run is over
            cols = [_field_values(out[f], f) for f in extra]
            for j, (rule, ts, ids, k) in enumerate(zip(out["rule"].tolist(), out["ts"].tolist(),
                                                       out["ids"].tolist(), out["ids_len"].tolist())):
                found.append((rule, ts, _unshift(ids[:k], offset), det, trig, tuple(c[j] for c in cols)))
        for m in eng.flush(output="records"):
            found.append((m["rule"], m["ts"], _unshift(m["ids"], offset), clock, clock,
                          tuple(m.get(f) for f in extra)))
        self._finish(frame, arr, core, found, start, done, reference, extra)
        self._report["full_collections"] = {"on_clock": len(paused), "longest_s": max(paused, default=0.0),
                                            "total_s": float(sum(paused))}
        return self._found

    def publish(self, events: pd.DataFrame) -> pd.DataFrame:
        """Live use: a micro-batch of events that arrived together, through a long-lived
        ``cep_gpu.Engine(rules, shedding=shedder)`` (:class:`~cep_gpu.shedding.gate.ShedGate`):
        the shedder keeps the rows whose estimated processing fits the latency bound
        (:meth:`Shedder.shed_batch`) and the engine processes them; returns its new composite
        events (as :meth:`cep_gpu.Engine.publish`). Batches must come in timestamp order; rows
        without an ``id`` get their position in the whole published stream. ``live_stats()``
        reports what was kept and dropped, composite events and their latency."""
        self.shedder._need()
        if not isinstance(events, pd.DataFrame):
            raise ArgumentError(f"events must be a pandas DataFrame, got {type(events).__name__}")
        if self._live is None:
            self._live = Engine(self.rules, backend=self.backend, time_unit=self.time_unit,
                                shedding=self.shedder)
        return self._live.publish(events)

    def live_stats(self) -> dict:
        """The live engine's shedding report (``Engine.stats()["shedding"]``: events published,
        kept, dropped per type, composite events, estimated recall, latency percentiles,
        violations) and its own ``stats()`` under ``"engine"``."""
        if self._live is None:
            raise SheddingError("nothing published yet: call SheddingEngine.publish(events) first")
        own = self._live.stats()
        return own["shedding"] | {"engine": own}

    def _guard(self) -> float:
        """The share of L_max the hard guard keeps each event's estimated latency within:
        ``guard`` if given, else β in real time (estimates can be wrong) and L_max in virtual
        time (estimates are upper bounds there)."""
        if self.guard is not None:
            return min(float(self.guard), 1.0 - 1e-9)
        return self.shedder.beta if self.mode == "real" else 1.0 - 1e-9

    def _tail_cap(self) -> float:
        """The longest tail :meth:`_tails` admits: β's margin, (1 - β)·L_max."""
        return (1.0 - self.shedder.beta) * self.shedder.latency_bound

    def _tails(self, names: list[str], longest: np.ndarray) -> np.ndarray:
        """Per type (in ``names`` order): the tail of its measured processing time (real time):
        its longest publish in the warm-up (the largest of any type for a type the warm-up did
        not see) or in the run so far (``longest``), at most (1 - β)·L_max: β's margin is
        the paper's safety factor, and a longer "tail" is a pause of the whole process (a
        garbage collection) that no check at service start can absorb."""
        tails = getattr(self, "_tail", {})
        top = max(tails.values(), default=0.0)
        cap = self._tail_cap()
        warm = np.array([tails.get(t, top) for t in names], np.float64)
        return np.minimum(np.maximum(warm, longest), cap)

    def _refresh(self, core: _core.Core, frame: pd.DataFrame, i: int) -> None:
        """After a re-gathering: the events that have not arrived yet (``i`` on) get utilities
        from the new statistics, and every buffer the new N_T and γ_T (Sec. 4.1: "the values of
        N_in, N_T, and the utility values are updated accordingly"). Queued events keep their
        buckets (they are linked in them)."""
        sh = self.shedder
        if sh.policy == "darling" and i < len(frame):
            core.bkt[i:] = sh.buckets_of(sh.utilities(frame.iloc[i:], context=frame.iloc[:i]))
        core.nt[:] = [sh.n_t.get(t, 0.0) for t in core.type_names]
        core.gamma[:] = [sh.gamma_t.get(t, 0.0) for t in core.type_names]
        core.F[_core.F_KEST] = sh.stats.window_cost
        if self.mode == "virtual":
            core.z_est[:] = sh.z_estimates(core.type_names, self.cost_model)

    def _alphas(self, frame: pd.DataFrame) -> np.ndarray:
        """α of each event: |C_type(T)| times y, the marginal time of one condition factor of
        Eq. 11 in the vectorised utility code (timed on the whole frame and on a quarter of it,
        so that the per-call overhead, which a run pays once, is not charged per event)."""
        sh = self.shedder
        types = frame["type"].astype(str).to_numpy()
        conds = np.array([sh.utility.conditions_of(t) for t in types], np.float64) if len(types) < 64 else \
            pd.Series(types).map({t: sh.utility.conditions_of(t) for t in np.unique(types)}).to_numpy(np.float64)
        q = len(frame) // 4
        with _FullCollections() as full:
            t0 = _cpu()
            sh.utilities(frame)
            t_all = _cpu() - t0 - full.total
            g0 = full.total
            t0 = _cpu()
            sh.utilities(frame.iloc[:q])
            t_q = _cpu() - t0 - (full.total - g0)
        y = max(t_all - t_q, 0.0) / max(conds.sum() - conds[:q].sum(), 1.0)
        return conds * y

    def _engine(self, first_ns: int) -> tuple[Engine, int]:
        """A fresh engine that has processed the warm-up sample, moved to end more than the
        rules' lookback before ``first_ns`` (so none of it can join a later match), with ids
        0 .. W-1; and W, the offset of the ids of the events published after it."""
        eng = Engine(self.rules, backend=self.backend, time_unit=self.time_unit)
        warm = getattr(self, "_warm", None)
        if warm is None or not len(warm):
            return eng, 0
        ts_ns = times_ns(warm["ts"], UNIT_NS[self.time_unit])
        lookback = max((r.lookback() for r in self.rules), default=0)
        moved = ts_ns - (int(ts_ns[-1]) - first_ns) - lookback - 1_000_000_000
        frame = warm.assign(ts=_moved_ts(moved, warm["ts"], UNIT_NS[self.time_unit]))
        for r in _records(frame, 0):
            eng.publish(r, output="records")
        return eng, len(frame)

    def _finish(self, frame, arr, core, found, start, done, reference: bool,
                extra: tuple[str, ...] = ()) -> None:
        n = len(frame)
        rows = []
        values = []  # per composite event kept: its fields of ``extra``
        for rule, ts, ids, det, trig, more in found:
            prim = [i for i in ids if 0 <= i < n]
            if core.IS[_core.I_EVICTED] and any(core.evicted[i] <= trig for i in prim):
                continue  # the state-side baseline had evicted one of its events before the match
            latest = max(prim) if prim else None
            lat = det - arr[latest] if latest is not None else 0.0
            rows.append((rule, ts, ids, det, lat))
            values.append(more)
        out = pd.DataFrame(rows, columns=["rule", "ts", "ids", "detected_s", "latency_s"])
        out["ts"] = _input_ts(out["ts"], frame["ts"])
        for j, name in enumerate(extra):
            out[name] = _field_column([v[j] for v in values], name)
        self._found = out
        bound = self.shedder.latency_bound
        lat = out["latency_s"].to_numpy(np.float64)
        dropped = {t: int(v) for t, v in zip(core.type_names, core.dropped) if v}
        rep = {
            "policy": self.shedder.policy,
            "mode": self.mode,
            "latency_bound_s": bound,
            "events": n,
            "processed": int((core.status == 2).sum()),
            "dropped": int((core.status == 3).sum()),
            "dropped_per_type": dropped,
            "composites": len(out),
            "violations": int((lat > bound * (1 + 1e-9)).sum()),
            "latency_s": _percentiles(lat),
            "run_s": float(np.nanmax(done)) if np.isfinite(done).any() else 0.0,
            "estimated_recall": self._estimated_recall(frame, core),
        } | core.counters
        if reference:
            ref = detect(frame, self.rules, backend=self.backend, time_unit=self.time_unit)
            want = set(zip(ref["rule"], (tuple(x) for x in ref["ids"])))
            got = set(zip(out["rule"], out["ids"]))
            rep["composites_reference"] = len(want)
            rep["recall"] = len(got & want) / len(want) if want else 1.0
            rep["false_positives"] = len(got - want)
        else:  # no reference run: the measured recall is unknown (estimated_recall stands)
            rep |= {"composites_reference": None, "recall": None, "false_positives": None}
        self._report = rep | {"constraints": self.shedder.constraints()}

    def _estimated_recall(self, frame, core) -> float:
        """:func:`~cep_gpu.shedding.gate.estimated_recall` of this run's kept events."""
        u = self.shedder.utilities(frame)
        kept = core.status == 2
        types = frame["type"].astype(str).to_numpy()
        u_all = {t: float(u[types == t].sum()) for t in np.unique(types)}
        u_kept = {t: float(u[(types == t) & kept].sum()) for t in np.unique(types)}
        return estimated_recall(self.shedder.rules, u_all, u_kept)

    @property
    def input_rows(self) -> np.ndarray:
        """The row of the events given to the last :meth:`run` (or :meth:`warm_up`) at each
        position in timestamp order: the ``ids`` that :meth:`run` returns index these."""
        return self._order

    def stats(self) -> dict:
        """The last run's report: events dropped (in total and per type), composite events found,
        estimated and (with a reference run) measured recall, detection latency percentiles,
        violations of the bound, the shedder's counters and its constraints."""
        if not self._report:
            raise SheddingError("no run yet: call SheddingEngine.run(events) first")
        return dict(self._report)

    # -- input ------------------------------------------------------------------------------------

    def _input(self, events, arrival, where: str):
        require_frame(events, where)
        # two columns of one name: detect's error (a grouping by it failed deep in pandas)
        check_unique_columns([str(c) for c in events.columns])
        if len(events) == 0:
            raise ArgumentError("events is empty")
        if isinstance(arrival, str):
            if arrival not in events.columns:
                raise ArgumentError(f"arrival column {arrival!r} not in the events")
            arrival = events[arrival]
        ts_ns = times_ns(events["ts"], UNIT_NS[self.time_unit])
        order = np.argsort(ts_ns, kind="stable")
        self._order = order
        frame = events.iloc[order].reset_index(drop=True)
        if "id" in frame.columns:
            # (the run numbers the events itself; the ids must still be what detect takes, for the
            # command line and input_rows' users map the composite events' ids back to them)
            pandas_ids(events["id"])
            frame = frame.drop(columns="id")
        ts_ns = ts_ns[order]
        if arrival is None:
            arr = ts_ns / 1e9
        else:
            arr = arrival_seconds(arrival, len(events))[order]
            if np.any(np.diff(arr) < 0):
                raise ArgumentError("arrival times must not decrease in timestamp order (the engine "
                                    "consumes events in timestamp order)")
        return frame, arr, ts_ns


def _records(frame: pd.DataFrame, offset: int) -> list[dict]:
    recs = frame.to_dict("records")
    for i, r in enumerate(recs):
        r["id"] = offset + i
        for k, v in list(r.items()):
            if isinstance(v, float) and math.isnan(v):
                del r[k]  # absent attribute
    return recs


def _input_ts(ts: pd.Series, given: pd.Series) -> pd.Series:
    """Composite events' timestamps in the form of the input's ``ts``, as ``detect`` gives them:
    datetimes (with the input's time zone) for datetimes, the input's integer dtype for integers
    (the engine's columns give nanoseconds and floats)."""
    if pd.api.types.is_datetime64_any_dtype(given):
        out = pd.to_datetime(ts)
        tz = getattr(given.dt, "tz", None)
        if tz is not None and out.dt.tz is None:
            out = out.dt.tz_localize("UTC").dt.tz_convert(tz)
        return out
    if pd.api.types.is_integer_dtype(given) and len(ts):
        v = pd.to_numeric(ts)
        if (v == v.round()).all():
            return v.astype(given.dtype)
    return ts


def _field_values(col, name: str) -> list:
    """One field of ``Engine.publish(..., output="columns")`` as Python values, ``None`` for null:
    ``id_counts`` rows without their 0 padding (every position binds at least one event), an
    attribute's masked array with its masked entries as ``None``."""
    if name == ID_COUNTS:
        return [tuple(int(c) for c in row if c > 0) for row in np.asarray(col)]
    if isinstance(col, np.ma.MaskedArray):
        mask = np.ma.getmaskarray(col)
        return [None if m else v for v, m in zip(col.data.tolist(), mask.tolist())]
    return np.asarray(col).tolist()


def _field_column(values: list, name: str) -> pd.Series | list:
    """A column of the found composite events as ``detect`` types it: ``id_counts`` as an Arrow
    ``list<int32>``, integers and booleans nullable, strings as objects, floats with NaN."""
    if name == ID_COUNTS:
        return pd.Series(pa.array(values, type=pa.list_(pa.int32())), dtype=pd.ArrowDtype(pa.list_(pa.int32())))
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed kinds (several rules): as they are
        return pd.Series(values, dtype=object)
    return arr.to_pandas(types_mapper=nullable_pandas_type)


def _moved_ts(moved_ns: np.ndarray, given: pd.Series, unit_ns: int) -> pd.Series | np.ndarray:
    """Nanosecond timestamps in the form of ``given``: datetimes keep its time zone (a stream is
    all naive or all zone-aware, and the run's events are as the warm-up's), numbers its unit."""
    if pd.api.types.is_integer_dtype(given):
        # integers stay integers of the input's dtype (epoch nanoseconds do not fit a float64
        # exactly, and the engine's stream keeps the first publish's dtype); flooring moves the
        # sample earlier, still more than the lookback before the run
        return pd.array(moved_ns // unit_ns, dtype=given.dtype)
    if not pd.api.types.is_datetime64_any_dtype(given):
        return moved_ns / unit_ns
    tz = getattr(given.dt, "tz", None)
    out = pd.to_datetime(moved_ns, utc=tz is not None)  # (times_ns reads zoned datetimes in UTC)
    return out.tz_convert(tz) if tz is not None else out


def _unshift(ids, offset: int) -> tuple:
    """Composite-event ids back to positions in the run (primitive ids were shifted by
    ``offset``; negative ids are composite events and stay)."""
    return tuple(i - offset if i >= 0 else i for i in ids)


def _warm_counts(sh: Shedder, names: list[str]) -> np.ndarray:
    """Events of each type in the shedder's warm-up sample (at least 1)."""
    return np.array([max(len(sh.stats.samples.get(t, ())), 1) for t in names], np.float64)


def _percentiles(lat: np.ndarray) -> dict:
    if len(lat) == 0:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    q = np.percentile(lat, [50, 95, 99])
    return {"p50": float(q[0]), "p95": float(q[1]), "p99": float(q[2]),
            "max": float(lat.max()), "mean": float(lat.mean())}
