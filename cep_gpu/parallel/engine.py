"""``HybridEngine``: HYPERSONIC hybrid state- and data-parallel streaming detection.

::

    from cep_gpu.parallel import HybridEngine
    eng = HybridEngine(rule_text, units=2, allocation="cost-model", dynamic=True, fusion=True)
    out = eng.publish(frame)        # composite events, exactly those of cep_gpu.detect
    eng.flush(); print(eng.explain()); eng.stats()
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..errors import ArgumentError, EngineClosedError, EventError, LateEventError
from ..events import stream_time
from ..events.values import UNIT_NS
from ..model import Rule
from . import _compat, kernels
from .compile import (
    ChainSpec,
    UnsupportedPatternError,
    check_supported,
    compile_rules,
    is_tesla_chain,
    string_compare_error,
)
from .costmodel import Allocation, ChainStats, agent_loads, allocate, integer_allocation
from .runtime import Layout, OutputJob, Runtime, Store

ALLOCATIONS = ("cost-model", "equal")
#: most execution units (each is a thread of this process)
MAX_UNITS = 1024
#: default ``output_part``: composite events built per part (fixed costs of a part: about 1 ms)
OUTPUT_PART = 8192


def as_rule_list(rules) -> list[Rule]:
    """A Rule, rule text or a list of Rules, checked for what the parallel engine supports."""
    import cep_gpu

    if isinstance(rules, Rule):
        out = [rules]
    elif isinstance(rules, str):
        out = cep_gpu.parse_rules(rules)
    elif isinstance(rules, Sequence) and all(isinstance(r, Rule) for r in rules):
        out = list(rules)
    else:
        raise ArgumentError(f"rules must be a Rule, a list of Rules or rule text, got {type(rules).__name__}")
    if not out:
        raise ArgumentError("rules: no rule given")
    names = {r.name for r in out}
    for r in out:
        check_supported(r)
        reads = sorted(names & set(r.input_types))
        if reads:
            raise UnsupportedPatternError(
                f"rule {r.name!r} reads composite events of {reads[0]!r}: rule hierarchies are not "
                "supported by the parallel engine")
    return out


def check_units(units) -> int:
    if isinstance(units, bool) or not isinstance(units, (int, np.integer)):
        raise ArgumentError(f"units must be an int >= 1, got {units!r}")
    if units < 1:
        raise ArgumentError(f"units must be >= 1, got {units}")
    if units > MAX_UNITS:  # one thread per unit: 50,000 units did not start within 100 s
        raise ArgumentError(f"units must be at most {MAX_UNITS} (one thread each), got {units}")
    return int(units)


class HybridEngine:
    """Parallel streaming detection of ``SEQ(...) within W`` rules (paper: HYPERSONIC).

    Parameters
    ----------
    rules:
        Rule text, a Rule or a list of Rules: ``SEQ`` patterns with ``where`` conditions and
        ``select each`` (skip-till-any-match). Anything else raises
        :class:`~cep_gpu.parallel.UnsupportedPatternError` naming the feature.
    units:
        Execution units (threads). ``1`` runs the same code with one unit.
    allocation:
        ``"cost-model"`` (units per agent by the paper's Eq. 6 on measured statistics) or
        ``"equal"`` (the same number per agent).
    dynamic:
        Role-dynamic and agent-dynamic units (Sections 3.3.2 and 4.1).
    fusion:
        Agent fusion (Section 4.2, Algorithm 2).
    stats:
        :class:`~cep_gpu.parallel.ChainStats` per rule; default: measured on the first
        ``calibration_events`` events of the first publish (:meth:`calibrate`).
    batch_size, chunk_size:
        Items per task, and events fed between two quiescent points (where buffers are pruned).
        Default: :func:`auto_chunk` (about two windows of events, 32768 to 65536) and
        :func:`auto_batch` (small enough that every agent gets several tasks per unit per chunk).
    output_part:
        Composite events are built each time at least this many are held, in up to ``units + 1``
        parts of at least this many (:func:`output_parts`) that the publishing thread and idle
        units build while the units go on with the next chunk; the parts are joined at the end.
    splitters:
        Threads that route a chunk's events to the agents at once (the publishing thread and
        idle units, each a slice of at least ``SPLIT_MIN`` events, handed over in slice order);
        default ``units``.
    """

    def __init__(self, rules, units: int = 1, allocation: str = "cost-model", dynamic: bool = True,
                 fusion: bool = True, *, time_unit: str = "s", stats: Sequence[ChainStats] | None = None,
                 calibration_events: int = 20_000, batch_size: int | None = None, chunk_size: int | None = None,
                 output_part: int = OUTPUT_PART, splitters: int | None = None, jitter: float = 0.0,
                 seed: int = 0) -> None:
        self.units = check_units(units)
        if allocation not in ALLOCATIONS:
            raise ArgumentError(f"allocation must be one of {ALLOCATIONS}, got {allocation!r}")
        for name, v in (("dynamic", dynamic), ("fusion", fusion)):
            if not isinstance(v, bool):
                raise ArgumentError(f"{name} must be True or False, got {v!r}")
        for name, v in (("batch_size", batch_size), ("chunk_size", chunk_size), ("splitters", splitters),
                        ("calibration_events", calibration_events), ("output_part", output_part)):
            if v is None and name in ("batch_size", "chunk_size", "splitters"):
                continue
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ArgumentError(f"{name} must be an int >= 1, got {v!r}")
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float, np.number)) or not 0.0 <= float(jitter) <= 1.0:
            raise ArgumentError(f"jitter must be a probability in [0, 1], got {jitter!r}")
        if not isinstance(time_unit, str) or time_unit not in UNIT_NS:
            raise ArgumentError(f"time_unit must be one of {sorted(UNIT_NS)}, got {time_unit!r}")
        self.rules = as_rule_list(rules)
        self.allocation = allocation
        self.dynamic = dynamic
        self.fusion = fusion
        self.time_unit = time_unit
        self.batch_size = batch_size
        self.chunk_size = chunk_size
        self.calibration_events = calibration_events
        self.output_part = output_part
        self.splitters = self.units if splitters is None else splitters
        self._jitter = float(jitter)
        self._seed = seed
        if stats is not None:
            stats = list(stats)
            if len(stats) != len(self.rules) or not all(isinstance(s, ChainStats) for s in stats):
                raise ArgumentError("stats: one ChainStats per rule")
        self._given_stats = stats
        self.chain_stats: list[ChainStats | None] | None = None
        self.allocations: list[Allocation | None] = []
        self._strings = _compat.StringDictionary()
        self._time = None
        self._specs: list[ChainSpec] | None = None
        self._store: Store | None = None
        self._rt: Runtime | None = None
        self._published = 0
        self._newest: int | None = None
        self._closed = False
        self._failure: str | None = None  # why a publish failed after it was accepted (_fail)
        self._seconds = 0.0
        self._matches = 0

    # -- public API ------------------------------------------------------------------------------

    def publish(self, events, output: str = "pandas", *, complete: bool = False):
        """Add events (a DataFrame, one event as a dict, or a list of dicts) in timestamp order.

        Returns the new composite events (all of them: a ``SEQ`` match is complete when its last
        event arrives) as ``detect`` would build them; ``output="arrow"`` gives an Arrow table.

        The events are checked against the rules by ``detect``'s own check: a string ordered
        with ``<`` or compared with a number is ``detect``'s ``RuleError``. An attribute that no
        event has yet is no error in a stream, as in :class:`cep_gpu.Engine` (it may come in a
        later publish; predicates that read it do not match). ``complete=True`` says that
        ``events`` are the whole input (one publish, then :meth:`flush`, as ``cep-gpu parallel
        run`` and the baselines do): then a rule that reads an attribute none of them has raises
        ``detect``'s ``RuleError`` naming the rule, the attribute and the attributes there are.

        A publish refused by these checks changes nothing. One that fails after it was accepted
        (an internal error, or ``KeyboardInterrupt`` while the units run) has stored and counted
        its events without processing them all: the engine closes its threads and refuses every
        later publish (and :meth:`flush`) with :class:`~cep_gpu.errors.EngineClosedError` saying
        so; create a new engine.
        """
        self._refuse_if_closed()
        if output not in ("pandas", "arrow"):
            raise ArgumentError(f"output must be 'pandas' or 'arrow', got {output!r}")
        if not isinstance(complete, bool):
            raise ArgumentError(f"complete must be True or False, got {complete!r}")
        df = _frame_of(events)
        # every check comes before the first change: a refused publish leaves the engine as it
        # was (its count and default ids, ts dtype, store, calibration, and strings)
        n_strings = len(self._strings)
        try:
            table = _compat.ingest(df, self.time_unit, self._strings)
            time_now, specs, store = self._check(table, complete)
        except BaseException:
            self._strings.truncate(n_strings)
            raise
        if "id" not in df.columns:
            table.ids = table.ids + self._published
        self._time = time_now
        try:
            return self._publish_accepted(table, specs, store, output == "arrow")
        except BaseException as exc:
            self._fail(exc)
            raise

    def _publish_accepted(self, table, specs: list[ChainSpec], store: Store, arrow: bool):
        """The work of a publish once its checks passed: store, run the units, build the output."""
        time_fmt = self._time or table.time
        if self._rt is None:
            self._start(table, specs, store)
        self._published += len(table)
        store = self._store
        t0 = time.perf_counter()
        rows = store.append(table)
        out_table = _compat.store_table(store, self._strings, time_fmt)  # the parts index it
        out = self._run_chunks(rows, out_table, arrow)
        self._seconds += time.perf_counter() - t0
        if len(rows):
            self._newest = int(store.ts[rows[-1] - store.base])
        if self._newest is not None:
            # rows no match can read any more (after the output is built)
            keep = self._newest - max(s.window for s in self._specs)
            cut = int(np.searchsorted(store.ts, keep, side="left")) + store.base
            if cut - store.base > len(store.ts) // 2:
                store.drop_before(cut)
        return out

    def _fail(self, exc: BaseException) -> None:
        """A publish failed after it was accepted: its events are stored and counted, but the
        newest timestamp, the units' buffers and the results are those of a half-run publish.
        Remember why, drop the output parts not built yet and stop the units; every later
        publish is refused (:meth:`_refuse_if_closed`)."""
        self._failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        try:
            if self._rt is not None:
                self._rt.abandon()  # its queued work and output parts are not done
        finally:
            self.close()

    def _refuse_if_closed(self) -> None:
        """:class:`EngineClosedError` when the input has ended (:meth:`flush`) or a publish failed."""
        if self._failure is not None:
            raise EngineClosedError(
                f"this HybridEngine failed in the middle of a publish ({self._failure}): that publish's "
                "events were stored but not all processed, so its state is inconsistent and it takes "
                "no more events; create a new HybridEngine")
        if self._closed:
            raise EngineClosedError("publish after flush: this HybridEngine's input has ended")

    def _run_chunks(self, rows: np.ndarray, table, arrow: bool):
        """Feed ``rows`` chunk by chunk; the composite events, built in parts (:func:`output_parts`)."""
        rt = self._rt
        jobs = []
        held: list[list[np.ndarray]] = [[] for _ in self.rules]
        n_held = 0
        for lo, hi in chunk_bounds(self._store.ts[rows - self._store.base], self.chunk_size):
            rt.feed(rows[lo:hi])
            if n_held >= self.output_part:
                # the composite events of the chunks done so far are built, in parts, by this
                # thread and the idle units while the units join the new chunk (a timestamp
                # never spans two chunks, so the parts are in detect's order one after the other)
                jobs.append(rt.submit_output(self._output_job(held, table, arrow)))
                rt.help_output()
                held = [[] for _ in self.rules]
                n_held = 0
            rt.drain()
            rt.quiesce()
            for r, res in enumerate(rt.take_results()):
                held[r].append(res)
                n_held += len(res)
                self._matches += len(res)
        jobs.append(rt.submit_output(self._output_job(held, table, arrow)))
        return concat_parts([p for job in jobs for p in rt.wait_output(job)], arrow)

    def flush(self, output: str = "pandas"):
        """End the input; stop the units. Returns the composite events still held (none for SEQ)."""
        if output not in ("pandas", "arrow"):
            raise ArgumentError(f"output must be 'pandas' or 'arrow', got {output!r}")
        if self._failure is not None:  # (its composite events are not known)
            self._refuse_if_closed()
        none = pd.DataFrame({"type": pd.Series([], dtype=str), "ts": pd.Series([], dtype=float)})
        if not self._closed and self._rt is not None:
            empty = self.publish(none, output)
        else:  # flushed before, or nothing published: no composite event either (was None)
            from ..detect import detect

            empty = detect(none, self.rules, backend="reference", time_unit=self.time_unit, output=output)
        self.close()
        return empty

    def close(self) -> None:
        """Stop the unit threads (idempotent)."""
        self._closed = True
        if self._rt is not None:
            self._rt.close()

    def __enter__(self) -> HybridEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass

    def calibrate(self, events) -> list[ChainStats]:
        """Measure the cost model's statistics (rates, selectivities, costs) on a sample of events."""
        df = _frame_of(events)
        table = _compat.ingest(df, self.time_unit, _compat.StringDictionary())
        specs = compile_rules(self.rules, table.time.scale_ns())
        return [measure_stats(spec, table, self._strings_for(table, specs)) for spec in specs]

    def stats(self) -> dict:
        """Units per agent over time, load per agent, items probed, synchronisations, throughput.

        Per agent: ``items`` entered, ``compared`` (pairs within the window band, the cost model's
        count), ``scanned`` (pairs the kernels looked at); ``outputs``; ``accesses`` (fragment visits);
        ``tasks``; ``busy_s`` (thread CPU seconds) and ``load_share``. ``kernel_s`` is only
        measured while calibrating (timing every kernel call costs two clock reads).
        ``split_slices``: slices of chunks routed by several splitters; ``idle_wakeups``: times
        an idle unit woke (pushed to, or its safety timeout) and found no work.
        ``output_parts``: parts of the output built (:func:`output_parts`), ``output_parts_by_units``
        of them by units (the rest by the publishing thread).
        """
        if self._rt is None:
            return {"units": self.units, "events": 0, "agents": []}
        rt = self._rt
        agents = []
        stage_stats = rt.stage_stats()
        per_now = rt.units_per_agent()
        total_busy = sum(s.busy_s for r in stage_stats for s in r.values()) or 1.0
        for a in rt.agents:
            parts = [stage_stats[a.rule][p] for p in a.stages]
            busy = sum(s.busy_s for s in parts)
            agents.append({
                "agent": a.name, "rule": self.rules[a.rule].name, "positions": [p + 1 for p in a.stages],
                "units_now": per_now[a.index],
                "items": sum(s.items for s in parts), "compared": sum(s.compared for s in parts),
                "scanned": sum(s.scanned for s in parts),
                "outputs": sum(s.outputs for s in parts), "accesses": sum(s.accesses for s in parts),
                "tasks": sum(s.tasks for s in parts), "busy_s": busy, "kernel_s": sum(s.kernel_s for s in parts),
                "load_share": busy / total_busy,
            })
        return {
            "units": self.units, "allocation": self.allocation, "dynamic": self.dynamic, "fusion": self.fusion,
            "events": self._published, "matches": self._matches, "seconds": self._seconds,
            "throughput": self._published / self._seconds if self._seconds else 0.0,
            "agents": agents,
            "units_over_time": [h["units"] for h in rt.history],
            "synchronisations": sum(a["accesses"] for a in agents) + rt.queue_pushes,
            "queue_pushes": rt.queue_pushes,
            "hops": sum(u.hops for u in rt.units),
            # chunks cut for several splitters: the slices routed; idle units woken without work
            "split_slices": rt.split_slices,
            "idle_wakeups": rt.idle_wakeups,
            # output parts built (engine.output_parts), and how many of them by units
            "output_parts": rt.output_parts,
            "output_parts_by_units": rt.output_by_units,
            "unit_busy_s": [u.busy_s for u in rt.units],
        }

    def explain(self) -> str:
        """The cost model's numbers (paper Eqs. 1-6) and the allocation, as text."""
        lines = [f"HybridEngine: {self.units} unit(s), allocation={self.allocation}, "
                 f"dynamic={self.dynamic}, fusion={self.fusion}"]
        if self.chain_stats is None:
            lines.append("  not calibrated yet (statistics are measured on the first publish, or pass stats=)")
            return "\n".join(lines)
        for rule, st, al in zip(self.rules, self.chain_stats, self.allocations):
            shape = "TESLA chain" if is_tesla_chain(rule) else "SEQ"
            lines.append(f"rule {rule.name}: {shape} of {len(rule.predicates)}")
            if st is None or al is None:
                lines.append("  one position: no agents (events are matches)")
                continue
            if is_tesla_chain(rule):  # the model's W is the span; each step has its own window
                spec = next(x for x in self._specs if x.rule is rule)
                steps = ", ".join(f"{w / 1e9:g}" for w in spec.stage_windows[1:])
                lines.append(f"  W = {st.window:g} s (the chain's span; windows per step: {steps} s)")
            else:
                lines.append(f"  W = {st.window:g} s")
            lines.append(f"  e_i = {', '.join(f'{x:.4g}' for x in st.rates)} /s")
            lines.append(f"  s_i = {', '.join(f'{x:.3g}' for x in st.selectivity[1:])}; "
                         f"c_i = {', '.join(f'{x * 1e9:.3g}' for x in st.comp_cost[1:])} ns; "
                         f"b_i = {', '.join(f'{x * 1e9:.3g}' for x in st.lock_cost[1:])} ns; "
                         f"q_i = {', '.join(f'{x * 1e9:.3g}' for x in st.queue_cost[1:])} ns")
            loads = agent_loads(st, self.units)
            total = sum(x.load for x in loads) or 1.0
            lines.append("  agent  e_i        m_i        comp_i     sync_i     load_i     |U_i| (Eq. 6)")
            for x in loads:
                lines.append(f"  A{x.stages[0]:<5d}{x.e:<11.4g}{x.m:<11.4g}{x.comp:<11.4g}{x.sync:<11.4g}"
                             f"{x.load:<11.4g}{x.load / total * self.units:.2f}")
            for f in al.fusions:
                lines.append(f"  Algorithm 2: {f}")
            for g, u, s in zip(al.groups, al.units, al.shares):
                lines.append(f"  agent A{'-'.join(map(str, g))}: {u} unit(s) (share {s:.2f})")
            if sum(al.units) != self.units or not all(al.units):
                lines.append("  fewer units than agents: each unit serves several agents")
        return "\n".join(lines)

    # -- internals -----------------------------------------------------------------------------

    def _check(self, table, complete: bool) -> tuple[_compat.TimeFormat | None, list[ChainSpec], Store]:
        """Raise what a publish of ``table`` would be refused for; else the stream's time format
        after it, the compiled rules and the store (a new, empty one before the first publish)
        it would go to. Changes nothing."""
        # detect's check (Engine's call when not complete)
        _compat.check_schema(self.rules, table, require_attributes=complete)
        # the first publish with rows fixes the output's ts dtype (as Engine's; docs/api.md)
        time_now = stream_time(self._time, table.time, table.ts)
        if len(table) and self._newest is not None and int(table.ts[0]) < self._newest:
            raise LateEventError("events must be published in timestamp order: an event at "
                                 f"{table.time.from_ns(table.ts[:1])[0]} came after a later one")
        specs = self._specs if self._specs is not None else compile_rules(self.rules, table.time.scale_ns())
        store = self._store if self._store is not None else Store(specs[0].attributes)
        # kinds of the attributes that hold values (an all-null column has no kind)
        kinds = {k: kind for k, (kind, _, ok) in store.columns.items() if ok.any()}
        kinds.update({k: c.kind for k, c in table.columns.items() if c.valid.any()})
        for spec in specs:
            problem = string_compare_error(spec, kinds)
            if problem is not None:
                raise problem
        store.check(table)
        return time_now, specs, store

    def _output_job(self, held: list[list[np.ndarray]], table, arrow: bool) -> OutputJob:
        """The composite events of ``held`` as an :class:`OutputJob` of parts (:func:`output_parts`)."""
        results = [np.concatenate(h) if h else np.empty((0, spec.length), np.int64)
                   for h, spec in zip(held, self._specs)]
        return output_parts(self.rules, results, self._store, table, arrow, self.output_part, self.units + 1)

    def _strings_for(self, table, specs) -> np.ndarray:
        return np.array([table.strings.encode_one(s) for s in specs[0].string_consts] if specs else [],
                        dtype=np.float64)

    def _start(self, table, specs: list[ChainSpec], store: Store) -> None:
        """Calibrate on the first publish's events and start the units."""
        self._specs = specs
        strcodes = self._strings_for(table, specs)
        if self._given_stats is not None:
            chain_stats = [s if spec.length > 1 else None for s, spec in zip(self._given_stats, specs)]
        else:
            sample = table.take(np.arange(min(len(table), self.calibration_events)))
            chain_stats = [measure_stats(spec, sample, strcodes) if spec.length > 1 else None for spec in specs]
        self.chain_stats = chain_stats
        if self.chunk_size is None:
            span = float(table.ts[-1] - table.ts[0]) / 1e9 if len(table) > 1 else 0.0
            rate = len(table) / span if span > 0 else 0.0
            self.chunk_size = auto_chunk(rate, max(s.window for s in specs) / 1e9)
        if self.batch_size is None:
            self.batch_size = auto_batch(self.chunk_size, max(s.length for s in specs), self.units)
        groups, per_agent = self._layout(specs, chain_stats)
        self._store = store
        self._rt = Runtime(specs, self._store, Layout(groups, per_agent, self.units), [strcodes] * len(specs),
                           dynamic=self.dynamic, batch_size=self.batch_size, jitter=self._jitter, seed=self._seed,
                           splitters=self.splitters)

    def _layout(self, specs, chain_stats):
        """Agents per rule and units per agent (Eq. 6 / equal, Algorithm 2)."""
        chains = [(r, st) for r, st in enumerate(chain_stats) if st is not None]
        rule_units = {r: self.units for r, _ in chains}
        if len(chains) > 1:
            totals = [sum(x.load for x in agent_loads(st, self.units)) for _, st in chains]
            if self.units >= len(chains):
                share = integer_allocation(totals, self.units) if self.allocation == "cost-model" else \
                    [self.units // len(chains) + (j < self.units % len(chains)) for j in range(len(chains))]
            else:
                share = [1] * len(chains)
            rule_units = {r: u for (r, _), u in zip(chains, share)}
        groups: list[list[tuple[int, ...]]] = []
        per_agent: list[int] = []
        self.allocations = []
        for r in range(len(specs)):
            st = chain_stats[r]
            if st is None:
                groups.append([])
                self.allocations.append(None)
                continue
            al = allocate(st, rule_units[r], self.allocation, self.fusion)
            self.allocations.append(al)
            groups.append([tuple(i - 1 for i in g) for g in al.groups])  # paper index -> position
            per_agent.extend(al.units)
        if sum(per_agent) != self.units or not all(per_agent):
            per_agent = [0] * len(per_agent)  # units serve several agents (Runtime._assign_units)
        return groups, per_agent


class Loaded(NamedTuple):
    """A frame of events read once, as every non-streaming run starts: the strings, the table,
    the compiled rules, their string constants' codes and the store holding the rows."""
    strings: _compat.StringDictionary
    table: _compat.EventTable
    specs: list[ChainSpec]
    strcodes: np.ndarray
    store: Store
    rows: np.ndarray


def load_events(rules: list[Rule], events: pd.DataFrame, time_unit: str) -> Loaded:
    """Ingest ``events`` (the whole input) and check them against ``rules`` as ``detect`` does,
    compile ``rules`` for their time scale, and append the events to a new store (the baselines
    and the simulation's trace start so)."""
    strings = _compat.StringDictionary()
    table = _compat.ingest(events, time_unit, strings)
    _compat.check_schema(rules, table)
    specs = compile_rules(rules, table.time.scale_ns())
    strcodes = np.array([strings.encode_one(s) for s in specs[0].string_consts], dtype=np.float64)
    store = Store(specs[0].attributes)
    rows = store.append(table)
    return Loaded(strings, table, specs, strcodes, store, rows)


def chunk_bounds(ts: np.ndarray, size: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` slices of about ``size`` events over sorted ``ts``; a run of equal timestamps
    is never cut (so the composite events of one chunk all come before the next chunk's)."""
    n = len(ts)
    out = []
    lo = 0
    while lo < n:
        hi = min(lo + size, n)
        if hi < n:
            hi = int(np.searchsorted(ts, ts[hi - 1], side="right"))
        out.append((lo, hi))
        lo = hi
    return out


def output_parts(rules, results: list[np.ndarray], store: Store, table, arrow: bool, part: int,
                 most: int) -> OutputJob:
    """The composite events of ``results`` (per rule, absolute store rows, any order) as an
    :class:`OutputJob` of up to ``most`` parts of at least ``part`` matches each.

    The matches are cut at timestamp boundaries (every match of one timestamp in one part, parts
    in time order; ``kernels.bucket_matches``); each part sorts its matches by (ts, ids) in a
    compiled kernel without the GIL (``kernels.order_matches``) and builds its frame as ``detect``
    does, so the parts joined in order are ``detect``'s frame. Any thread may build any part.
    """
    n = sum(len(r) for r in results)
    terms = [_compat.match_term(rule) for rule in rules]
    n_parts = max(1, min(n // max(part, 1), most))
    if n_parts > 1:
        # cut values: quantiles of the match timestamps (a sample of them)
        full = [(rows, t) for rows, t in zip(results, terms) if len(rows)]
        sample = np.concatenate([
            store.ts[(rows[:: max(len(rows) // 4096, 1), t] if t >= 0
                      else rows[:: max(len(rows) // 4096, 1)].max(axis=1)) - store.base]
            for rows, t in full])
        sample.sort()
        cuts = np.unique(sample[(np.arange(1, n_parts) * len(sample)) // n_parts])
        cut = [kernels.bucket_matches(rows, t, store.ts, store.base, cuts) for rows, t in zip(results, terms)]
        pieces = [[rows[off[b]:off[b + 1]] for rows, off in cut] for b in range(len(cuts) + 1)]
        pieces = [p for p in pieces if any(len(x) for x in p)] or pieces[:1]
    else:
        pieces = [results]

    def build(piece: list[np.ndarray]):
        local = [kernels.order_matches(rows, t, store.ts, store.ids, store.base) for rows, t in zip(piece, terms)]
        return _compat.build_sorted(rules, local, table, arrow)

    return OutputJob([lambda p=p: build(p) for p in pieces])


def concat_parts(parts: list, arrow: bool):
    """The output parts as one frame (or Arrow table); empty parts add nothing."""
    full = [p for p in parts if len(p)]
    if len(full) <= 1:
        return full[0] if full else parts[-1]
    # an attribute that is null in every row of a part (another rule's, or a value no match of
    # the part had) gets a kind inferred from nothing there; it takes the kind it has in the
    # parts that hold values, as in detect's one frame
    if arrow:
        import pyarrow as pa

        for j, name in enumerate(full[0].column_names):
            typed = next((t.schema.field(name).type for t in full if t.column(name).null_count < len(t)), None)
            if typed is not None:
                full = [t if t.schema.field(name).type == typed or t.column(name).null_count < len(t)
                        else t.set_column(j, pa.field(name, typed), pa.nulls(len(t), typed)) for t in full]
        return pa.concat_tables(full)
    for name in full[0].columns:
        typed = next((f[name].dtype for f in full if f[name].notna().any()), None)
        if typed is not None:
            for f in full:
                if f[name].dtype != typed and not f[name].notna().any():
                    f[name] = f[name].astype(typed)
    return pd.concat(full, ignore_index=True)


def auto_chunk(rate: float, window_s: float) -> int:
    """Events between two quiescent points: about two windows' worth, within [32768, 65536].

    Each quiescent point is a barrier (every unit waits for the slowest); match fragments are
    searched by blocks, so longer chunks cost little in probing and save barriers. The floor
    was 16384: on two free cores (13:33 UTC, docs/performance.md) 32768 took the hybrid with
    two units from 225 to 200 ms at sensor L=4, W=1.5 s (100,000 events; LLSF 208 ms) and from
    34 to 33 ms at stock L=4, W=0.5 s.
    """
    return int(min(max(2.0 * rate * window_s, 32_768), 65_536))


def auto_batch(chunk: int, length: int, units: int) -> int:
    """Items per task: each position gets about four tasks per unit per chunk, within [256, 1024].

    Python runs once per task (one locked compiled call to number and append, one compiled call
    that probes every fragment), so tasks are as large as the units' load balance allows. The
    floor: a task visits every fragment of its agent's opposite buffer (one per unit there), so
    with many units small tasks cost more in visits and calls than the balance they buy (in the
    k-unit replay, 32-item tasks left the hybrid behind RIP at k >= 8 for patterns of 5-6
    positions; 256 does not change 1 or 2 units at chunks >= 16,384). From 5 units on, at least
    ``64 * units``: a task's Python holds the GIL, so all units' tasks run one at a time; with
    many units that, not the joins, sets the pace unless tasks grow with the units (the k-unit
    replay charges it: docs/parallel.md, "The GIL").
    """
    return int(min(max(chunk // (max(length, 1) * 4 * max(units, 1)), 256, 64 * max(units, 1)),
                   max(1024, 64 * max(units, 1))))


def measure_stats(spec: ChainSpec, table, strcodes: np.ndarray) -> ChainStats:
    """Run ``spec`` over ``table`` with one unit, inline, and read the cost model's statistics.

    ``e_i``: events of position i passing its filters per second of event time; ``s_i``: extended
    matches per compared pair; ``c_i``: kernel seconds per compared pair; ``b_i``: the rest of a
    task's time per item and fragment visited (locking, snapshots, the kernel call itself);
    ``q_i``: the cost of one queue hand-over per match, measured on the queue.
    """
    from .kernels import warm_up

    warm_up()
    store = Store(spec.attributes)
    rows = store.append(table)
    n = spec.length
    layout = Layout([[(p,) for p in range(1, n)]], [0] * (n - 1), 1)
    rt = Runtime([spec], store, layout, [strcodes], dynamic=False, threads=False, time_kernels=True)
    for k in range(0, len(rows), 16_384):
        rt.feed(rows[k:k + 16_384])
        rt.drain()
        rt.quiesce()
    span = (float(table.ts[-1] - table.ts[0]) / 1e9) if len(table) > 1 else 1.0
    span = span or 1.0
    counts = [0] * n
    codes = {t: store.type_code(t) for t in spec.types}
    for p in range(n):
        cand = rows[store.types[rows - store.base] == codes[spec.types[p]]] if codes[spec.types[p]] >= 0 else rows[:0]
        prog = spec.filters[p]
        if len(cand) and prog.n_conditions:
            from .kernels import filter_rows

            cand = filter_rows(cand, p, prog.code, prog.consts, strcodes, store.vals, store.valid,
                               store.ts, store.base, prog.max_stack)
        counts[p] = len(cand)
    st = rt.stage_stats()[0]
    W = spec.window / 1e9
    e = [c / span for c in counts]
    # Eq. (1)-(2) define the pairs a stage compares (2 e_i m_i W per second): s_i and c_i are
    # read against that count, so Eq. (1) reproduces the measured match rates exactly
    m = [0.0, 0.0] + [st[p].match_items / span if p > 1 else e[0] for p in range(1, n)]
    pairs = [0.0] + [2.0 * e[p] * m[p + 1] * W * span for p in range(1, n)]
    total_k = sum(s.kernel_s for s in st.values())
    total_pairs = sum(pairs)
    c_default = total_k / total_pairs if total_pairs else 1e-8
    sel, comp, lock, queue = [0.0], [0.0], [0.0], [0.0]
    q = queue_cost()
    for p in range(1, n):
        s = st[p]
        sel.append(s.outputs / pairs[p] if pairs[p] else 0.0)
        comp.append(s.kernel_s / pairs[p] if pairs[p] else c_default)
        lock.append(max(s.busy_s - s.kernel_s, 0.0) / max(s.items, 1))
        queue.append(q / max(s.outputs / max(s.tasks, 1), 1.0))
    rt.close()
    return ChainStats(tuple(e), tuple(sel), tuple(comp), tuple(lock), tuple(queue),
                      spec.window / 1e9)


_QCOST: list[float] = []


def queue_cost() -> float:
    """Seconds per queue hand-over (append under the condition lock + notify), measured once."""
    if not _QCOST:
        import threading
        from collections import deque

        cv = threading.Condition()
        q: deque = deque()
        x = np.empty((4, 2), np.int64)
        t0 = time.thread_time()
        for _ in range(2000):
            with cv:
                q.append(x)
                cv.notify()
        for _ in range(2000):
            q.popleft()
        _QCOST.append((time.thread_time() - t0) / 2000)
    return _QCOST[0]


def _frame_of(events) -> pd.DataFrame:
    if isinstance(events, pd.DataFrame):
        return events
    if isinstance(events, Mapping):
        return pd.DataFrame([dict(events)])
    if isinstance(events, list) and all(isinstance(e, Mapping) for e in events):
        return pd.DataFrame(events)
    raise EventError(f"events must be a DataFrame, a dict or a list of dicts, got {type(events).__name__}")


__all__ = ["HybridEngine", "as_rule_list", "measure_stats"]
