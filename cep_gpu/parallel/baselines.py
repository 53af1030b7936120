"""Baselines in the same harness as :class:`HybridEngine` (paper Section 5.1).

* ``sequential``: cep-gpu's own streaming :class:`cep_gpu.Engine` (CPU backend), fed in chunks.
* ``hybrid-1``: the hybrid engine with one unit (the same code, one thread).
* ``state-parallel``: one unit per agent (pattern state), no dynamic units, no fusion.
* ``rip``: the input cut in batches of consecutive events dealt round-robin to the units; a batch
  also reads the events up to ``W`` after its last one (the overlap), and owns the matches whose
  first event is in it.
* ``llsf``: each match-starting event goes to the unit with the least load so far (load: the
  events it must read, windows included); a unit reads the union of its events' windows.

RIP and LLSF units run the same join kernels as the hybrid engine, inline in their thread, over
their own copy of the buffers (no sharing: that is what data-parallel means here).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import ArgumentError
from . import _compat
from .compile import rule_span
from .engine import (
    OUTPUT_PART,
    HybridEngine,
    as_rule_list,
    auto_batch,
    auto_chunk,
    check_units,
    load_events,
)
from .kernels import llsf_assign
from .runtime import Layout, Runtime

METHODS = ("hybrid", "hybrid-equal", "state-parallel", "rip", "llsf", "sequential")


@dataclass
class RunResult:
    """One measured run: the composite events, wall seconds (ingestion to output) and details."""

    method: str
    units: int
    output: pd.DataFrame
    seconds: float
    events: int
    stats: dict = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("inf")


def run(method: str, rules, events: pd.DataFrame, units: int = 1, *, time_unit: str = "s",
        stats=None, dynamic: bool = True, fusion: bool = True, batch_size: int | None = None,
        chunk_size: int | None = None, rip_batch: int | None = None, jitter: float = 0.0,
        seed: int = 0, output_part: int = OUTPUT_PART) -> RunResult:
    """Run ``method`` (one of :data:`METHODS`) over ``events`` with ``units`` units.

    ``output_part``: the hybrid engine's (:data:`~cep_gpu.parallel.engine.OUTPUT_PART`);
    a number above the matches builds every composite event at the end, as the other methods do.
    """
    if method not in METHODS:
        raise ArgumentError(f"method must be one of {METHODS}, got {method!r}")
    units = check_units(units)
    rule_list = as_rule_list(rules)
    chunk_size = chunk_size or baseline_chunk(rule_list, events, time_unit)
    if batch_size is None:
        length = max(len(r.predicates) for r in rule_list)
        # data-parallel units each run the whole chain alone; state-parallel has one unit per agent
        own = {"rip": 1, "llsf": 1, "state-parallel": max(sum(len(r.predicates) - 1 for r in rule_list), 1)}
        batch_size = auto_batch(chunk_size, length, own.get(method, units))
    if method in ("hybrid", "hybrid-equal"):
        eng = HybridEngine(rule_list, units=units, allocation="equal" if method == "hybrid-equal" else "cost-model",
                           dynamic=dynamic, fusion=fusion, time_unit=time_unit, stats=stats,
                           batch_size=batch_size, chunk_size=chunk_size, jitter=jitter, seed=seed,
                           output_part=output_part)
        try:
            t0 = time.perf_counter()
            out = eng.publish(events, complete=True)
            sec = time.perf_counter() - t0
            st = eng.stats()
        finally:
            eng.close()
        return RunResult(method, units, out, sec, len(events), st)
    if method == "sequential":
        import cep_gpu

        # an attribute no event has, as detect says it (a stream of chunks could not say that an
        # attribute never comes): from the frame's columns; the engine checks the kinds per publish
        _compat.check_attribute_names(rule_list, [str(c) for c in events.columns if c not in ("type", "ts", "id")])
        eng = cep_gpu.Engine(rule_list, backend="cpu", time_unit=time_unit, max_batch_latency=None)
        step = chunk_size or 16_384
        t0 = time.perf_counter()
        parts = [eng.publish(events.iloc[k:k + step]) for k in range(0, len(events), step)]
        out = pd.concat(parts, ignore_index=True) if parts else eng.publish(events)
        sec = time.perf_counter() - t0
        return RunResult(method, 1, out, sec, len(events), {})
    t0 = time.perf_counter()
    strings, table, specs, strcodes, store, rows = load_events(rule_list, events, time_unit)
    if method == "state-parallel":
        results, st = _state_parallel(specs, store, rows, strcodes, batch_size, chunk_size or 16_384, jitter, seed)
    else:
        window = max(s.window for s in specs)
        plan = (_rip_plan(store, rows, window, units, rip_batch or _auto_rip_batch(store, rows, window))
                if method == "rip" else _llsf_plan(specs, store, rows, strcodes, window, units))
        results, st = _data_parallel(specs, store, plan, strcodes, batch_size,
                                     chunk_size or baseline_chunk(rule_list, events, time_unit))
    out = _compat.build_output(rule_list, results, store, strings, table.time)
    sec = time.perf_counter() - t0
    return RunResult(method, units if method != "state-parallel" else st["units"], out, sec, len(events), st)


def baseline_chunk(rules, events: pd.DataFrame, time_unit: str) -> int:
    """Events per quiescent point: :func:`~cep_gpu.parallel.engine.auto_chunk` of the stream's rate."""
    n = len(events)
    if n < 2:
        return auto_chunk(0.0, 0.0)  # (the floor)
    ts = events["ts"]
    span = (ts.iloc[-1] - ts.iloc[0])
    span = span.total_seconds() if hasattr(span, "total_seconds") else float(span) * {
        "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}.get(time_unit, 1.0)
    w = max(rule_span(r) for r in rules) / 1e9
    return auto_chunk(n / span if span > 0 else float(n), w)


def _state_parallel(specs, store, rows, strcodes, batch_size, chunk, jitter, seed):
    groups = [[(p,) for p in range(1, s.length)] for s in specs]
    n_agents = sum(len(g) for g in groups)
    rt = Runtime(specs, store, Layout(groups, [1] * n_agents, max(n_agents, 1)), [strcodes] * len(specs),
                 dynamic=False, batch_size=batch_size, jitter=jitter, seed=seed)
    try:
        for k in range(0, len(rows), chunk):
            rt.feed(rows[k:k + chunk])
            rt.drain()
            rt.quiesce()
        results = rt.take_results()
    finally:
        rt.close()
    return results, {"units": max(n_agents, 1), "synchronisations": rt.queue_pushes}


def _auto_rip_batch(store, rows, window) -> int:
    """RIP's batch: four windows' worth of events (less makes the overlap dominate), >= 2048."""
    ts = store.ts[rows - store.base]
    span = int(ts[-1] - ts[0]) if len(ts) > 1 else 0
    per_w = len(ts) * window / span if span > 0 else len(ts)
    return int(max(4 * per_w, 2048))


def _rip_plan(store, rows, window, units, batch):
    """Per unit: (segment rows, owned first rows) pieces, batches dealt round-robin."""
    ts = store.ts[rows - store.base]
    plan: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(units)]
    for b, k in enumerate(range(0, len(rows), batch)):
        own = rows[k:k + batch]
        end = int(np.searchsorted(ts, ts[min(k + batch, len(rows)) - 1] + window, side="right"))
        plan[b % units].append((rows[k:end], own))
    return plan


def _llsf_plan(specs, store, rows, strcodes, window, units):
    """Per unit: pieces (merged windows of its starting events, those events), LLSF-assigned."""
    ts = store.ts[rows - store.base]
    starts = set()
    first_types = {store.type_code(s.types[0]) for s in specs}
    starts_mask = np.isin(store.types[rows - store.base], list(first_types))
    start_rows = rows[starts_mask]
    sts = ts[starts_mask]
    ends = np.searchsorted(ts, sts + window, side="right")
    begins = np.searchsorted(ts, sts, side="left")
    cost = (ends - begins).astype(np.float64)  # events a start makes its unit read
    owner = llsf_assign(sts, cost, units)
    plan: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(units)]
    del starts
    for u in range(units):
        mine = np.flatnonzero(owner == u)
        if not len(mine):
            continue
        # merge the windows [begin, end) of this unit's starts into segments (vectorised: a new
        # segment starts where a window begins after every earlier window has ended)
        b, e = begins[mine], ends[mine]
        reach = np.maximum.accumulate(e)
        cuts = np.flatnonzero(b[1:] > reach[:-1]) + 1
        lo_idx = np.concatenate([[0], cuts])
        hi_idx = np.concatenate([cuts, [len(mine)]])
        for s0, s1 in zip(lo_idx, hi_idx):
            plan[u].append((rows[b[s0]:reach[s1 - 1]], start_rows[mine[s0:s1]]))
    return plan


def _data_parallel(specs, store, plan, strcodes, batch_size, chunk):
    """Each unit (a thread) runs its pieces through its own inline runtime; results merged."""
    results: list[list[np.ndarray]] = [[] for _ in specs]
    errors: list[BaseException] = []
    lock = threading.Lock()
    read = [0] * len(plan)

    def work(u: int) -> None:
        try:
            mine: list[list[np.ndarray]] = [[] for _ in specs]
            groups = [[(p,) for p in range(1, s.length)] for s in specs]
            n_agents = sum(len(g) for g in groups)
            # one runtime per unit, emptied between its pieces (building one per piece cost
            # LLSF about 0.2 ms of Python a piece, thousands of pieces at short windows)
            rt = Runtime(specs, store, Layout(groups, [0] * n_agents, 1), [strcodes] * len(specs),
                         dynamic=False, threads=False, batch_size=batch_size)
            for seg, own in plan[u]:
                own = np.sort(own)
                for k in range(0, len(seg), chunk):
                    rt.feed(seg[k:k + chunk], first_only=own)
                    rt.drain()
                    rt.quiesce()
                for r, res in enumerate(rt.take_results()):
                    mine[r].append(res)
                rt.forget()
                read[u] += len(seg)
            with lock:
                for r in range(len(specs)):
                    results[r].extend(mine[r])
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(u,), daemon=True) for u in range(len(plan))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    out = [np.concatenate(r) if r else np.empty((0, s.length), np.int64) for r, s in zip(results, specs)]
    return out, {"events_read": read, "duplication": sum(read) / max(store.n, 1)}
