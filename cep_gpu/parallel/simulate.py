"""Deterministic replay of a measured run with ``k`` units (beyond this machine's cores).

:func:`trace` runs one rule over the events once, with one unit inline, and records per chunk
(between two quiescent points) and per stage what the engine did: tasks, items, pairs scanned,
extended matches, queue hand-overs, and the measured costs: seconds per task (numbering,
inserting, output), per fragment access (one kernel call), per scanned pair, per queue
hand-over, per barrier, and the serial part (ingestion and output assembly).

:func:`simulate` replays that trace for a method with ``k`` units, charging those costs:

* ``hybrid``: agents (after Algorithm 2 when ``fusion``) with units from the cost model or an
  equal split. Per chunk, agent ``A`` with ``U`` units and ``T`` tasks of total work ``w`` takes
  ``w / min(U, T)``; each of its tasks visits ``U`` fragments of the opposite buffer (``U / 2``
  with static roles). Agents form a pipeline: the last task of ``A_i`` cannot end before
  ``A_{i-1}`` has ended. With ``dynamic`` units (role- and agent-dynamic), idle units join busy
  agents, so a chunk takes ``max(total work / k, the pipeline's critical path)``.
* ``state-parallel``: one unit per agent (``k`` ignored beyond sharing ``k`` cores).
* ``rip`` / ``llsf``: each unit pays the events it reads (its batches plus their overlap) at the
  measured per-event cost, and the share of the match work its starting events own; the slowest
  unit sets the time.

The model is validated against real 1- and 2-unit runs by ``cep-gpu bench parallel``.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import ArgumentError
from . import _compat, kernels
from .costmodel import ChainStats, allocate
from .engine import OUTPUT_PART, as_rule_list, chunk_bounds, concat_parts, load_events, output_parts
from .runtime import SPLIT_MIN, Layout, Runtime


@dataclass
class Trace:
    """What one rule's run did per chunk and stage, and what each kind of work costs (seconds)."""

    rule: str
    n_events: int
    length: int
    window_ns: int
    chunk_events: list[int]
    #: per chunk: arrays over stages 1..n-1 (index 0 = stage 1)
    tasks: np.ndarray
    items: np.ndarray
    scanned: np.ndarray
    outputs: np.ndarray
    t_task: np.ndarray  # per stage: per stage call, fragment visit and wrapping included
    c_scan: np.ndarray  # per stage: per pair scanned
    t_access: float
    t_push: float
    t_barrier: float
    serial_s: float  # ingestion + output assembly
    stats: ChainStats | None = None
    #: the splitter: per event routed, plus ``t_fpush`` per batch it hands to a queue (the
    #: engine's batch size sets the number of batches); data-parallel units pay both per event read
    t_event: float = 0.0
    t_fpush: float = 0.0
    t_event_owned: float = 0.0  # per event read by a data-parallel unit (owned starts filtered)
    #: the parallel splitter: the fixed cost of one slice (a ``SplitJob`` task: its kernel calls
    #: per position, the locks, the hand-over in slice order)
    t_slice: float = 0.0
    #: data-parallel: the match work (s) of the whole stream
    match_work_s: float = 0.0
    batch: int = 256
    chunk: int = 16_384
    t_item: float = 0.0  # per item entering a stage (numbering, appending, output)
    t_piece: float = 0.0  # data-parallel: per piece (the unit's runtime fed, drained and emptied)
    t_piece2: float | None = None  # the same while two units run pieces at once (None: as t_piece)
    #: the hybrid engine's fixed cost of a run beyond ingestion and output (building the engine,
    #: starting and stopping its threads, the publish's checks, chunk bounds, joining the parts):
    #: charged once per run to the publishing thread (:func:`_run_overhead`)
    t_run: float = 0.0
    match_items: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))
    span_s: float = 1.0
    first_ts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    all_ts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    output_s: float = 0.0  # of ``serial_s``: output assembly (the hybrid engine overlaps it)
    #: what one more output part costs (the hybrid engine cuts a group of composite events in
    #: parts that several threads build: ``engine.output_parts``)
    t_opart: float = 0.0
    #: the share of ``output_s`` that runs without the GIL (the compiled sort): only this share
    #: of an output part runs in parallel with the others in the replay
    output_nogil: float = 0.0
    #: the share of building output parts that ran in parallel on two threads, measured
    #: (:func:`_output_parallel_share`); ``None``: not measurable, ``output_nogil`` is used
    output_parallel: float | None = None
    output_cores: float = 0.0  # the cores two threads got while it was measured
    #: the share of the units' work that did not run in parallel when two units ran the rule at
    #: once on two threads (:func:`_units_serial_share`: the GIL-held Python, and what two
    #: threads contend for); ``None``: not measurable, the replay takes all but the pairs
    units_serial: float | None = None
    #: the same loop's loss over the whole inline run (splitter, quiescent points and results
    #: included: what the replays before 2026-11-25 16:30 UTC took as ``units_serial``)
    run_serial: float | None = None
    #: the loop's loss beside a compiled ``nogil`` loop cut in as many calls as the units' phase
    #: makes, over as long: what the loop loses to the GIL's hand-overs alone (each call takes
    #: the GIL back from the loop), not to Python run by the units
    spin_control: float | None = None
    #: the loop's loss while the units work (``units_serial`` before 2026-11-25 16:30 UTC)
    spin_units: float | None = None
    #: the run had every stage in one agent (else one agent per stage); ``split``: the same rule
    #: traced the other way, for layouts with several agents (simulate picks)
    fused: bool = True
    split: Trace | None = None


def trace(rule, events: pd.DataFrame, *, time_unit: str = "s", chunk_size: int = 16_384,
          batch_size: int = 16, stats: ChainStats | None = None, repeat: int = 1) -> Trace:
    """Run ``rule`` (one ``SEQ`` rule) over ``events`` with one inline unit and record the trace.

    :func:`simulate` scales the task counts to other batch sizes (per-task costs scale with the
    number of tasks, the pairs scanned do not). One warm-up run (kernels loaded, frames converted
    once), then ``repeat`` runs, of which the one with the least CPU time is kept, as a
    benchmark's best-of-n run is: on a shared machine, other jobs on the same core inflate even
    CPU time.
    """
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ArgumentError(f"repeat must be an int >= 1, got {repeat!r}")
    (r,) = as_rule_list(rule) if not isinstance(rule, list) else rule
    kernels.warm_up()
    # the same pairs cost more when every stage is its own agent (partial matches wait in queues
    # and come back cold) than when the stages run fused: both layouts are recorded
    traces = []
    probe: tuple[float | None, float] = (None, 0.0)
    serial: tuple[float | None, float | None, float | None] = (None, None, None)
    for fused in (True, False):
        warm = _trace_once(r, events, time_unit, chunk_size, batch_size, stats, fused, probe=fused)
        if fused:  # measured once: a property of building the output, not of the layout
            probe = (warm.output_parallel, warm.output_cores)
            serial = (warm.run_serial, warm.spin_units, warm.spin_control)
        traces.append(min((_trace_once(r, events, time_unit, chunk_size, batch_size, stats, fused)
                           for _ in range(repeat)), key=_charged))
    t_run = _run_overhead(r, events, time_unit)
    for tr in traces:
        tr.output_parallel, tr.output_cores = probe
        tr.run_serial, tr.spin_units, tr.spin_control = serial
        tr.t_run = t_run
    traces[0].split = traces[1]
    return traces[0]


def _charged(tr: Trace) -> float:
    """The CPU seconds a trace charges for one unit (what picks the best of several traces)."""
    return tr.serial_s + float((tr.scanned * tr.c_scan).sum() + (tr.tasks * tr.t_task).sum()) \
        + float(tr.items.sum()) * tr.t_item + tr.t_event * tr.n_events


def _trace_once(r, events, time_unit, chunk_size, batch_size, stats, fused: bool, probe: bool = False) -> Trace:
    t0 = time.thread_time()
    strings, table, (spec,), strcodes, store, rows = load_events([r], events, time_unit)
    t_ingest = time.thread_time() - t0
    n = spec.length
    if n < 2:
        raise ArgumentError("simulate: the rule needs at least two positions (agents)")
    # fused: one agent running every stage, as the engine runs a rule on one or two units (its
    # partial matches go to the next stage inline); else every stage its own agent
    layout = Layout([[tuple(range(1, n))]], [0], 1) if fused else Layout([[(p,) for p in range(1, n)]], [0] * (n - 1), 1)
    rt = Runtime([spec], store, layout, [strcodes], dynamic=False, threads=False, batch_size=batch_size,
                 time_kernels=True)
    prev = np.zeros((6, n - 1))
    per_chunk = []
    chunk_events = []
    barrier_s = 0.0
    feed_s = 0.0
    chunk_results = []
    t_run = time.thread_time()
    for lo, hi in chunk_bounds(store.ts[rows - store.base], chunk_size):
        f0 = time.thread_time()
        rt.feed(rows[lo:hi])
        feed_s += time.thread_time() - f0
        rt.drain()
        b0 = time.thread_time()
        rt.quiesce()
        barrier_s += time.thread_time() - b0
        st = rt.stage_stats()[0]
        cur = np.array([[st[p].tasks for p in range(1, n)], [st[p].items for p in range(1, n)],
                        [st[p].scanned for p in range(1, n)], [st[p].outputs for p in range(1, n)],
                        [st[p].match_items for p in range(1, n)], [st[p].busy_s for p in range(1, n)]],
                       dtype=np.float64)
        d = cur - prev
        prev = cur
        per_chunk.append(d)
        chunk_events.append(hi - lo)
        chunk_results.append(rt.take_results()[0])
    run_s = time.thread_time() - t_run
    # output assembly as HybridEngine.publish does it, in groups of at least OUTPUT_PART rows
    # (each group one part here: what cutting a group in several parts adds is ``t_opart``)
    t1 = time.thread_time()
    out_table = _compat.store_table(store, strings, table.time)
    parts, held = [], []
    for res in chunk_results:
        if sum(len(h) for h in held) >= OUTPUT_PART:
            parts += [b() for b in output_parts([r], [np.concatenate(held)], store, out_table, False,
                                                OUTPUT_PART, 1).build]
            held = []
        held.append(res)
    parts += [b() for b in output_parts([r], [np.concatenate(held) if held else np.empty((0, n), np.int64)],
                                        store, out_table, False, OUTPUT_PART, 1).build]
    concat_parts(parts, False)
    t_out = time.thread_time() - t1
    t_opart = _output_part_cost(r, chunk_results, store, out_table)
    par_share, par_cores = _output_parallel_share(r, chunk_results, store, out_table) if probe else (None, 0.0)
    spin_units, run_serial, spin_control = (_units_serial_share(spec, store, strcodes, rows, chunk_size, batch_size)
                                            if probe else (None, None, None))
    # the part of the output work that runs without the GIL: sorting the matches (compiled,
    # nogil); the rest (gathers, Arrow and pandas frames) is charged as if it held the GIL
    t_sort = 0.0
    for res in chunk_results:
        s0 = time.thread_time()
        kernels.order_matches(res, _compat.match_term(r), store.ts, store.ids, store.base)
        t_sort += time.thread_time() - s0
    st = rt.stage_stats()[0]
    t_call, t_access = _access_cost(spec, store, strcodes)
    t_push = _push_cost()
    tasks = np.array([c[0] for c in per_chunk])
    match_items = np.array([c[4] for c in per_chunk])
    scanned = np.array([c[2] for c in per_chunk])
    items = np.array([c[1] for c in per_chunk])
    busy = np.array([c[5] for c in per_chunk])
    # pairs: kernel time (less the fixed cost of a call) per pair scanned; items: measured on their
    # own; the rest of a stage's time is per task (less the trace's own clock reads)
    _, t_item = _call_item_cost(spec, store, strcodes, rows)
    t_clock = _clock_cost()
    calls = np.array([st[p].accesses for p in range(1, n)], dtype=np.float64)
    kern = np.array([st[p].kernel_s for p in range(1, n)])
    n_calls = np.maximum(tasks.sum(axis=0), 1.0)
    # one probe call per stage call, visiting every fragment of the opposite buffer in it
    c_scan = np.maximum(kern - n_calls * t_call - calls * t_access, 0.0) / np.maximum(scanned.sum(axis=0), 1.0)
    per_call = (busy.sum(axis=0) - kern - items.sum(axis=0) * t_item - 2 * n_calls * t_clock) / n_calls
    # the unit's work around a stage call (taking the task, handing over), per task
    wrap = max(run_s - feed_s - barrier_s - float(busy.sum()), 0.0) / max(float(tasks.sum()), 1.0)
    # per task: the call (the probe's fixed cost, one fragment visit: the trace ran one unit)
    # and the wrapping
    t_task = np.maximum(per_call, 0.0) + t_call + t_access + wrap
    # the units' GIL-held share, accounted directly: of the units' CPU time (the tasks and the
    # work around them), all but the probe calls' time, which runs without the GIL; a probe
    # call's fixed cost (its dispatch among it) counts as held
    units_work = max(run_s - feed_s - barrier_s, 1e-9)
    nogil_s = max(float(kern.sum()) - float(tasks.sum()) * (t_call + t_clock), 0.0)
    units_gil = float(np.clip(1.0 - nogil_s / units_work, 0.0, 1.0))
    pair_s = float((scanned.sum(axis=0) * c_scan).sum())
    t_piece = _piece_cost(spec, store, strcodes, rows[: min(len(rows), 64)], t_task, t_item, c_scan)
    t_piece2 = _piece_cost(spec, store, strcodes, rows[: min(len(rows), 64)], t_task, t_item, c_scan, units=2)
    t_route, t_fpush, t_route_owned, t_slice = _feed_costs(spec, store, strcodes, rows, chunk_size)
    ts = store.ts[rows - store.base]
    first_code = store.type_code(spec.types[0])
    pair_work = pair_s
    tr = Trace(
        rule=r.name, n_events=len(rows), length=n, window_ns=spec.window, chunk_events=chunk_events,
        tasks=tasks, items=items, scanned=scanned, t_item=t_item, t_piece=t_piece, t_piece2=t_piece2,
        outputs=np.array([c[3] for c in per_chunk]), t_task=t_task, c_scan=c_scan,
        t_access=t_access, t_push=t_push, t_barrier=barrier_s / max(len(per_chunk), 1),
        serial_s=t_ingest + t_out, output_s=t_out, t_opart=t_opart,
        output_nogil=min(t_sort / t_out, 1.0) if t_out > 0 else 0.0, stats=stats,
        output_parallel=par_share, output_cores=par_cores, units_serial=units_gil,
        run_serial=run_serial, spin_units=spin_units, spin_control=spin_control,
        t_event=t_route, t_fpush=t_fpush, t_event_owned=t_route_owned, t_slice=t_slice,
        match_work_s=pair_work,
        match_items=match_items, span_s=float(ts[-1] - ts[0]) / 1e9 if len(ts) > 1 else 1.0,
        first_ts=ts[store.types[rows - store.base] == first_code] if first_code >= 0 else ts[:0],
        all_ts=ts, batch=batch_size, chunk=chunk_size, fused=fused,
    )
    rt.close()
    return tr


def _run_overhead(rule, events: pd.DataFrame, time_unit: str, n: int = 8) -> float:
    """CPU seconds (all threads) of a whole ``HybridEngine`` run over ``n`` events with two units,
    less ingesting those events and building their (empty) output as the trace charges them:
    what a run costs beyond the work the trace charges per event, task, pair and part. Median
    of 9, after a warm-up run."""
    from .engine import HybridEngine

    tiny = events.iloc[:n]

    def engine_run() -> float:
        c0 = time.process_time()
        eng = HybridEngine([rule], units=2, time_unit=time_unit)
        try:
            eng.publish(tiny)
        finally:
            eng.close()
        return time.process_time() - c0

    def charged() -> float:
        c0 = time.process_time()
        strings, table, (spec,), _, store, _ = load_events([rule], tiny, time_unit)
        out_table = _compat.store_table(store, strings, table.time)
        concat_parts([b() for b in output_parts([rule], [np.empty((0, spec.length), np.int64)], store, out_table,
                                                False, OUTPUT_PART, 1).build], False)
        return time.process_time() - c0

    engine_run()
    charged()
    return max(float(np.median([engine_run() for _ in range(9)]) - np.median([charged() for _ in range(9)])), 0.0)


def _feed_costs(spec, store, strcodes, rows, chunk: int) -> tuple[float, float, float, float]:
    """The splitter's cost: seconds per event routed and per batch handed to a queue, per event
    routed by a data-parallel unit (which keeps only the match-starting events it owns), and per
    slice of a chunk cut for several splitters (``runtime.SplitJob``).

    Routing the same rows at two batch sizes (queues emptied, nothing processed) gives two
    equations in the two unknowns; routing them again cut in slices of :data:`SPLIT_PROBE`
    events gives the cost of a slice.
    """
    n = spec.length
    layout = Layout([[(p,) for p in range(1, n)]], [0] * (n - 1), 1)

    def once(batch: int, first_only=None, splitters: int = 1) -> tuple[float, int, int]:
        rt = Runtime([spec], store, layout, [strcodes], dynamic=False, threads=False, batch_size=batch,
                     splitters=splitters, split_min=SPLIT_PROBE)
        spent = 0.0
        for k in range(0, len(rows), chunk):
            t0 = time.thread_time()
            rt.feed(rows[k:k + chunk], first_only=first_only)
            spent += time.thread_time() - t0
            rt.discard_queued()  # only routing is measured
        pushes, slices = rt.queue_pushes, rt.split_slices
        rt.close()
        return spent, pushes, slices

    once(1024)  # warm
    small, p_small, _ = once(16)
    big, p_big, _ = once(1024)
    t_fpush = max(small - big, 0.0) / max(p_small - p_big, 1)
    t_route = max(big - p_big * t_fpush, 0.0) / max(len(rows), 1)
    # a data-parallel unit's splitter also keeps only its own match-starting events
    owned, _, _ = once(1024, first_only=rows)
    t_route_owned = max(owned - p_big * t_fpush, 0.0) / max(len(rows), 1)
    cut, _, slices = once(1024, splitters=1 << 20)
    n_chunks = -(-len(rows) // chunk)
    t_slice = max(cut - big, 0.0) / max(slices - n_chunks, 1)
    return t_route, t_fpush, t_route_owned, t_slice


def _output_part_cost(rule, chunk_results, store, out_table) -> float:
    """Seconds one more output part costs: the composite events of the run built as one part and
    as :data:`OUTPUT_PROBE` parts (cut and sorted as the engine cuts them), best of three each."""
    res = np.concatenate(chunk_results) if chunk_results else np.empty((0, 1), np.int64)
    if len(res) < 8 * OUTPUT_PROBE:
        return 0.0

    def once(most: int) -> float:
        job = output_parts([rule], [res], store, out_table, False, 1, most)
        t0 = time.thread_time()
        concat_parts([b() for b in job.build], False)
        return time.thread_time() - t0

    one = min(once(1) for _ in range(3))
    many = min(once(OUTPUT_PROBE) for _ in range(3))
    return max(many - one, 0.0) / (OUTPUT_PROBE - 1)


def _units_serial_share(spec, store, strcodes, rows, chunk: int,
                        batch: int) -> tuple[float | None, float | None, float | None]:
    """The share of the units' work that holds the GIL, measured: the rule run over the events by
    an inline runtime (every stage its own agent) on one thread while a second thread runs a pure
    Python loop, which can only run while the first does not hold the GIL. On two free cores the
    loop's rate falls, against its rate alone, by the share of the time the run holds the GIL
    (the median of 7 turns). Amdahl's law read on two runs at once cannot tell 0.05 from 0, which
    is what decides 24 units; this can.

    Returns ``(units, run, control)``: the loop's loss while the units work (``Runtime.drain``:
    the tasks), over the whole run (the splitter, the quiescent points and taking the results
    too: the share the replays before 2026-11-25 16:30 UTC used), and beside a compiled
    ``nogil`` loop cut in as many calls as the units' phase makes probes, over as long. The
    control shows what the method measures besides Python: each call returns to a GIL the
    loop holds, and the hand-over back and forth costs the loop tens of microseconds (a loop
    that held the GIL for about 1 us of every 190 us call lost 17%, 16:15 UTC). So since 16:30
    UTC the replay takes the share accounted directly (``Trace.units_serial``) and this is
    kept as a cross-check. ``(None, None, None)`` where two threads got less than 1.5 cores
    (three tries)."""

    n = spec.length
    layout = Layout([[(p,) for p in range(1, n)]], [0] * (n - 1), 1)
    count = [0]  # the loop's iterations so far (read by the run at the edges of its units' phases)

    def one(phases: list | None = None) -> Runtime:
        rt = Runtime([spec], store, layout, [strcodes], dynamic=False, threads=False, batch_size=batch)
        for lo, hi in chunk_bounds(store.ts[rows - store.base], chunk):
            rt.feed(rows[lo:hi])
            t0, c0 = time.perf_counter(), count[0]
            rt.drain()
            if phases is not None:
                phases.append((time.perf_counter() - t0, count[0] - c0))
            rt.quiesce()
            rt.take_results()
        rt.close()
        return rt

    def spin_python(stop: threading.Event, out: list) -> None:
        t0 = time.perf_counter()
        while not stop.is_set():
            k = 0
            for _ in range(200):
                k += 1
            count[0] += k
        out.append(count[0] / (time.perf_counter() - t0))

    def rate(with_run) -> tuple[float, float]:
        """The loop's rate over the whole turn, and while the units worked."""
        stop, out, phases = threading.Event(), [], []
        count[0] = 0
        th = threading.Thread(target=spin_python, args=(stop, out))
        th.start()
        if with_run is True:
            one(phases)
        elif with_run:
            with_run()
        else:
            time.sleep(0.05)
        stop.set()
        th.join()
        if not phases:
            return out[0], out[0]
        return out[0], sum(c for _, c in phases) / max(sum(t for t, _ in phases), 1e-9)

    import sys

    phases: list = []
    rt = one(phases)  # warm
    probes = max(sum(s.tasks for s in rt.stage_stats()[0].values()), 1)
    drain_s = sum(t for t, _ in phases)
    kernels.spin(1000)
    s0 = time.perf_counter()
    kernels.spin(10_000_000)
    per_call = max(int(10_000_000 * drain_s / probes / max(time.perf_counter() - s0, 1e-9)), 1)

    def control() -> None:  # as many nogil calls as the units' probes, over as long
        for _ in range(probes):
            kernels.spin(per_call)

    # up to three tries: a turn taken while another job held a core measures that job
    for _ in range(3):
        c0 = cores_available()
        # the loop hands the GIL over as soon as the run asks for it (by default it would keep it
        # for 5 ms, starving the run, and lose nothing itself)
        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        try:
            # alone and beside the run in turns, the median of the 7 ratios: a burst of other
            # work hits one pair, not the result
            run_ratios, unit_ratios, control_ratios = [], [], []
            for _ in range(7):
                alone = rate(False)[0]
                whole, units = rate(True)
                run_ratios.append(whole / alone)
                unit_ratios.append(units / alone)
                control_ratios.append(rate(control)[0] / alone)
        finally:
            sys.setswitchinterval(old)
        if (c0 + cores_available()) / 2 >= 1.5:
            return tuple(float(np.clip(1.0 - np.median(r), 0.0, 1.0))
                         for r in (unit_ratios, run_ratios, control_ratios))
    return None, None, None


def _output_parallel_share(rule, chunk_results, store, out_table) -> tuple[float | None, float]:
    """The share of building output parts that runs in parallel, measured: the run's composite
    events cut in two parts as the engine cuts them, built one after the other and on two
    threads at once (best of 5 each), on the cores two threads get right now (``c``, by
    :func:`cores_available` before and after). Amdahl's law, ``t2 / t1 = (1 - f) + f / c``,
    gives ``f``. ``(None, c)`` where the output is too small to time (fewer than two parts'
    worth) or two threads got less than 1.5 cores (``f`` is then not measurable: the replay
    falls back to the compiled sort's share, as if all the rest held the GIL)."""
    import threading

    res = np.concatenate(chunk_results) if chunk_results else np.empty((0, 1), np.int64)
    if len(res) < 2 * OUTPUT_PART:
        return None, 0.0
    job = output_parts([rule], [res], store, out_table, False, OUTPUT_PART, 2)
    if len(job.build) != 2:
        return None, 0.0
    for b in job.build:
        b()  # warm

    def serial() -> float:
        t0 = time.perf_counter()
        for b in job.build:
            b()
        return time.perf_counter() - t0

    def two() -> float:
        threads = [threading.Thread(target=b) for b in job.build]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return time.perf_counter() - t0

    c0 = cores_available()
    t1 = min(serial() for _ in range(5))
    t2 = min(two() for _ in range(5))
    c = (c0 + cores_available()) / 2
    if c < 1.5:
        return None, c
    return float(np.clip((1.0 - t2 / t1) / (1.0 - 1.0 / min(c, 2.0)), 0.0, 1.0)), c


def cores_available(n: int = 20_000_000) -> float:
    """How many cores two threads get right now: a compiled loop run once alone, then twice at
    once on two threads (about 0.05 s). 2.0 on an idle 2-core machine; about 1 when other jobs
    hold a core, and then no 2-unit run can be faster than one unit."""
    import threading

    spin = kernels.spin
    spin(10)
    t0 = time.perf_counter()
    spin(n)
    one = time.perf_counter() - t0
    threads = [threading.Thread(target=spin, args=(n,)) for _ in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 2.0 * one / max(time.perf_counter() - t0, 1e-9)



#: output parts when :func:`_output_part_cost` measures the cost of a part
OUTPUT_PROBE = 8


#: events per slice when :func:`_feed_costs` measures the cost of a slice
SPLIT_PROBE = 256


def splitter_batches(tr: Trace, batch: int) -> np.ndarray:
    """Per chunk: the batches the splitter hands to queues at ``batch`` items per batch."""
    entering = np.concatenate([tr.match_items[:, :1], tr.items - tr.match_items], axis=1)
    return np.ceil(entering / max(batch, 1)).sum(axis=1)


def _clock_cost() -> float:
    """Seconds of one ``time.thread_time()`` read."""
    t0 = time.thread_time()
    for _ in range(1000):
        time.thread_time()
    return (time.thread_time() - t0) / 1001


def _call_item_cost(spec, store, strcodes, rows) -> tuple[float, float]:
    """Seconds per ``Stage.process`` call (one fragment visited) and per item in it."""
    from .agent import Stage

    def per_call(size: int, reps: int) -> float:
        stage = Stage(spec, 1, store, strcodes)
        # one partial match in the other buffer: every call visits a fragment, as in a run
        stage.process(1, rows[:1].reshape(1, 1), False)
        batch = np.resize(rows[:1], size)
        t0 = time.thread_time()
        for _ in range(reps):
            stage.process(0, batch, True)
        return (time.thread_time() - t0) / reps

    small, big = per_call(1, 400), per_call(256, 400)
    return small, max(big - small, 0.0) / 255


def _piece_cost(spec, store, strcodes, rows, t_task: np.ndarray, t_item: float, c_scan: np.ndarray,
                units: int = 1) -> float:
    """Seconds of a RIP/LLSF piece beyond its tasks, items and pairs, as ``baselines`` runs one:
    feed a real slice of events to the unit's inline runtime (every stage gets fragments), drain
    it, prune it at its quiescent point, take its results and empty it for the next piece; the
    stage calls, items and scanned pairs it ran are charged at the trace's own costs and taken
    off, since simulate charges them per task, per item and per pair. One warm-up, then the
    median (a mean let one slow repetition, another job on the core, count tenfold).

    ``units`` threads do so at once, each on its own runtime, as that many data-parallel units
    do: two threads running small pieces contend for the GIL, and each piece then costs about
    twice its CPU time alone (measured 2026-11-28: 110 against 250 µs a 64-event piece), which the
    one-thread cost left uncharged (LLSF x2 at W <= 0.5 s, thousands of pieces: -13 to -42%).
    """
    n = spec.length
    layout = Layout([[(p,) for p in range(1, n)]], [0] * (n - 1), 1)
    reps = 21 if units == 1 else 201  # (threads overlapping for long enough to contend)
    spent: list[float] = []
    errors: list[BaseException] = []
    start = threading.Barrier(units, timeout=60)

    def unit() -> None:
        try:
            measure()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            start.abort()  # (the others stop waiting)

    def measure() -> None:
        rt = Runtime([spec], store, layout, [strcodes], dynamic=False, threads=False)
        prev = np.zeros((3, n - 1))
        mine = []
        start.wait()
        for rep in range(reps):
            t0 = time.thread_time()
            rt.feed(rows, first_only=rows)
            rt.drain()
            rt.quiesce()
            rt.take_results()
            rt.forget()
            took = time.thread_time() - t0
            st = rt.stage_stats()[0]
            cur = np.array([[st[p].tasks for p in range(1, n)], [st[p].items for p in range(1, n)],
                            [st[p].scanned for p in range(1, n)]], dtype=np.float64)
            (calls, items, scanned), prev = cur - prev, cur
            if rep:  # the first is a warm-up
                mine.append(took - float((calls * t_task).sum()) - float(items.sum()) * t_item
                            - float((scanned * c_scan).sum()))
        spent.extend(mine)

    threads = [threading.Thread(target=unit) for _ in range(units)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or not spent:
        raise (real or errors or [RuntimeError("piece cost: no measurement")])[0]
    return max(float(np.median(spent)), 0.0)


def _access_cost(spec, store, strcodes) -> tuple[float, float]:
    """Seconds of one probe call on one one-item fragment (the fixed cost of a call, its dispatch
    included), and what each further fragment visited in the same call adds (the call with 16
    one-item fragments against one)."""
    prog = spec.joins[1]
    e = np.zeros(1, np.int64) + store.base

    def per_call(frags: int) -> float:
        rows = np.zeros((frags, 1, 1), np.int64) + store.base
        col = np.zeros((frags, 1), np.int64)
        snap = np.ones((2, frags), np.int64)
        args = (e, 1, rows, col, col, col, snap, col, col, col, col, 0, prog.code, prog.consts, strcodes,
                store.vals, store.valid, store.ts, store.base, prog.max_stack, 4)
        kernels.probe_events(*args)
        reps = 2000
        t0 = time.thread_time()
        for _ in range(reps):
            kernels.probe_events(*args)
        return (time.thread_time() - t0) / reps

    one = per_call(1)
    return one, max(per_call(16) - one, 0.0) / 15


def _push_cost() -> float:
    from .engine import queue_cost

    return queue_cost()


@dataclass
class SimResult:
    """Predicted seconds (and events/s) of one method with ``k`` units."""

    method: str
    units: int
    seconds: float
    events: int
    agents: list[str] = field(default_factory=list)
    units_per_agent: list[int] = field(default_factory=list)
    #: CPU seconds charged in all (comparable with a real run's process CPU time at any k)
    cpu_s: float = 0.0
    #: the parallel phase alone: the units' work, without ingestion, splitter, barriers, output
    parallel_s: float = 0.0

    @property
    def throughput(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("inf")


def simulate(tr: Trace, method: str, k: int, *, allocation: str = "cost-model", dynamic: bool = True,
             fusion: bool = True, rip_batch: int | None = None, cores: int | None = None,
             splitters: int | None = None) -> SimResult:
    """Predicted time of ``method`` with ``k`` units on ``cores`` cores (default ``k``).

    ``splitters``: threads routing a chunk in the hybrid engine (default ``k``, as
    ``HybridEngine``; ``1``: one splitter thread). State-parallel has one splitter thread.
    """
    if k < 1:
        raise ArgumentError(f"k must be >= 1, got {k}")
    cores = k if cores is None else cores
    if method in ("hybrid", "hybrid-equal"):
        if method == "hybrid-equal":
            allocation = "equal"
        return _sim_hybrid(tr, k, allocation, dynamic, fusion, cores, splitters)
    if method == "state-parallel":
        tr = tr.split or tr
        m = tr.length - 1
        groups = [(i,) for i in range(2, tr.length + 1)]
        # one thread per agent, whatever k (k only limits the cores they share)
        res = _sim_hybrid_layout(tr, groups, [1] * m, False, min(cores, m), m)
        res.method = "state-parallel"
        return res
    if method in ("rip", "llsf"):
        return _sim_data_parallel(tr.split or tr, method, k, rip_batch, min(cores, k))
    raise ArgumentError(f"simulate: unknown method {method!r}")


def stats_from_trace(tr: Trace, k: int) -> ChainStats:
    """The cost model's statistics read off the trace, at the batch size the engine uses with ``k``
    units (as :func:`cep_gpu.parallel.engine.measure_stats` reads them off a calibration run)."""
    from .engine import auto_batch

    batch = auto_batch(tr.chunk, tr.length, k)
    n, span, W = tr.length, tr.span_s, tr.window_ns / 1e9
    # stage calls with every stage its own agent (the cost model's view)
    every = set(range(n - 1))
    calls = np.sum([stage_calls(tr, c, every, batch) for c in range(len(tr.chunk_events))], axis=0)
    items = tr.items.sum(axis=0)
    m_in = tr.match_items.sum(axis=0)
    ev = items - m_in  # events of positions 1..n-1 that entered their stage
    e = [m_in[0] / span] + [ev[j] / span for j in range(n - 1)]
    m = [0.0, 0.0] + [m_in[j] / span for j in range(n - 1)]
    sel, comp, lock, queue = [0.0], [0.0], [0.0], [0.0]
    for j in range(n - 1):
        pairs = 2.0 * e[j + 1] * m[j + 2] * W * span
        out = tr.outputs[:, j].sum()
        work = tr.scanned[:, j].sum() * tr.c_scan[j]
        sel.append(out / pairs if pairs else 0.0)
        comp.append(work / pairs if pairs else 0.0)
        lock.append(calls[j] * (tr.t_task[j] + tr.t_access) / max(items[j], 1.0))
        queue.append(tr.t_push / max(batch, 1.0))
    return ChainStats(tuple(e), tuple(sel), tuple(comp), tuple(lock), tuple(queue), W)


def _sim_hybrid(tr: Trace, k: int, allocation: str, dynamic: bool, fusion: bool, cores: int,
                splitters: int | None = None) -> SimResult:
    al = allocate(stats_from_trace(tr, k), k, allocation, fusion)
    units = al.units
    pooled = not all(units)  # fewer units than agents: units serve several agents
    if len(al.groups) > 1 and tr.split is not None:
        tr = tr.split  # several agents: partial matches cross queues
    # HybridEngine's default: k splitters (the publishing thread and the idle units)
    res = _sim_hybrid_layout(tr, al.groups, units, dynamic or pooled, min(cores, k), k,
                             splitters=k if splitters is None else splitters)
    res.method = "hybrid" if allocation == "cost-model" else "hybrid-equal"
    # the engine's per-run work on the publishing thread (state-parallel runs a bare runtime)
    res.seconds += tr.t_run
    res.cpu_s += tr.t_run
    return res


def _sim_hybrid_layout(tr: Trace, groups, units, dynamic: bool, cores: int, k: int,
                       batch_units: int | None = None, splitters: int = 1) -> SimResult:
    from .engine import auto_batch

    # the composite events of chunk c - 1 are built (in parts: engine.output_parts) by the
    # publishing thread and the idle units while the units join chunk c (HybridEngine.publish);
    # the last chunk's parts after the units are done, spread over the threads
    finals = tr.outputs[:, -1] if tr.outputs.size else np.zeros(len(tr.chunk_events))
    out_share = tr.output_s * finals / max(float(finals.sum()), 1.0)
    n_parts = np.maximum(np.minimum(finals // OUTPUT_PART, k + 1), 1)
    out_share = out_share + (n_parts - 1) * tr.t_opart  # what cutting in parts adds
    # the parts built at once: their measured parallel share in parallel (where it could not be
    # measured, the compiled sort's share), the rest one after the other
    f = tr.output_parallel if tr.output_parallel is not None else tr.output_nogil
    out_span = out_share * ((1.0 - f) + f / np.minimum(n_parts, max(cores, 1)))
    total = tr.serial_s - tr.output_s + (out_span[-1] if len(out_span) else tr.output_s)
    cpu = tr.serial_s + float(out_share.sum()) - tr.output_s
    # the engine's batch size with k units
    batch = auto_batch(tr.chunk, tr.length, batch_units or k)
    batches = splitter_batches(tr, batch)
    starts = {g[0] - 2 for g in groups}
    share = serial_share(tr, k)
    phase = 0.0
    for c in range(len(tr.chunk_events)):
        works, spans, gil = [], [], 0.0
        all_calls = stage_calls(tr, c, starts, batch)
        for g, u in zip(groups, units):
            idx = [i - 2 for i in g]
            u_eff = max(u, 1)
            frags = u_eff if dynamic else max(1, (u_eff + 1) // 2)
            calls = [all_calls[j] for j in idx]
            tasks = float(sum(calls))
            # the trace's tasks visited one fragment each (one unit); here ``frags``
            pairs = sum(tr.scanned[c, j] * tr.c_scan[j] for j in idx)
            w = pairs + sum(n_calls * (tr.t_task[j] + (frags - 1) * tr.t_access) + tr.items[c, j] * tr.t_item
                            for j, n_calls in zip(idx, calls))
            # hand-overs into the agent (fused stages hand over inline, Section 4.2)
            w += calls[0] * tr.t_push
            # what of it does not run in parallel: the measured serial share of the units' work
            # (two units at once on two threads), else everything but the scanned pairs (a
            # task's Python around its kernel calls, a call's dispatch, numbering and appending
            # items, the hand-over: an upper bound, compiled appends release the GIL)
            bound = w - pairs
            gil += min(share * w, bound) if share is not None else bound
            works.append(w)
            spans.append(w / max(tasks, 1.0))  # one task: the least time an agent can take
        if dynamic:
            crit = sum(spans)
            t = max(sum(works) / min(k, cores), crit)
        else:
            finish = 0.0
            for w, s, u in zip(works, spans, units):
                par = max(min(u, cores), 1)
                finish = max(w / min(par, max(w / s, 1.0)) if s > 0 else 0.0, finish + s)
            t = max(finish, sum(works) / cores)
        # the units' GIL-held parts run one at a time, whatever k
        t = max(t, gil)
        phase += t
        if c:  # the previous chunk's output parts share the cores with the units
            t = max(t, (sum(works) + out_share[c - 1]) / cores, out_span[c - 1])
        # the splitter routes the chunk's events first: one thread, or (HybridEngine) the
        # publishing thread and the units, a slice each (runtime.SplitJob); the hand-over of the
        # batches stays serial (slice order, under the job's lock)
        route = tr.t_event * tr.chunk_events[c]
        push = tr.t_fpush * batches[c]
        n_sl = min(splitters, max(1, int(tr.chunk_events[c]) // SPLIT_MIN))
        if n_sl > 1:
            route += n_sl * tr.t_slice
            split = route / min(n_sl, cores) + push
        else:
            split = route + push
        total += t + tr.t_barrier + split
        cpu += sum(works) + tr.t_barrier + route + push
    return SimResult("hybrid", k, total, tr.n_events, [f"A{'-'.join(map(str, g))}" for g in groups], list(units),
                     cpu, phase)


def serial_share(tr: Trace, k: int) -> float | None:
    """The share of the units' work that runs one unit at a time with ``k`` units: the share
    that holds the GIL (``Trace.units_serial``, accounted directly), plus what the GIL's
    hand-overs cost when it is contended (a unit back from a kernel waits for the holder, and the
    GIL stays idle while the woken thread gets a core), in proportion to how busy ``k`` units
    keep it (``k`` × the held share, at most 1). The hand-over cost at full contention is the
    spinner's loss beyond the held share (:func:`_units_serial_share`: the loop wants the GIL all
    the time). ``None`` (charge all but the pairs) where neither was measured."""
    held = tr.units_serial
    if held is None:
        return None
    if tr.spin_units is None:
        return None if k > 2 else held
    return min(held + max(tr.spin_units - held, 0.0) * min(1.0, k * held), 1.0)


def stage_calls(tr: Trace, c: int, starts: set[int], batch: int) -> list[float]:
    """Calls of every stage (index ``j`` = stage ``j + 1``) in chunk ``c`` at ``batch`` items a task.

    ``starts``: the stages that begin an agent (their partial matches cross a queue). Events come
    from the splitter in batches. The trace's match tasks of a stage (its tasks less its event
    batches) were one per call of the stage before that produced any output (fused trace) or the
    batches of those outputs (split trace); that fraction of the calls before carries over. A stage that begins an agent gets its matches re-batched from the queue: at
    least ``ceil(matches / batch)`` tasks, and a batch per producing call (Section 4.2: fused
    stages skip the queue).
    """
    out: list[float] = []
    for j in range(tr.length - 1):
        ev = float(tr.items[c, j] - tr.match_items[c, j])
        m = float(tr.match_items[c, j])
        ev_tasks = math.ceil(ev / batch)
        if j == 0:  # the first stage's matches are the splitter's first-position events
            out.append(ev_tasks + math.ceil(m / batch))
            continue
        inline_trace = max(float(tr.tasks[c, j]) - math.ceil(ev / tr.batch), 0.0)
        producing = inline_trace / max(float(tr.tasks[c, j - 1]), 1.0) * out[-1]
        m_tasks = max(math.ceil(m / batch), producing) if j in starts else producing
        out.append(ev_tasks + m_tasks)
    return out


def _sim_data_parallel(tr: Trace, method: str, k: int, rip_batch: int | None, cores: int) -> SimResult:
    ts = tr.all_ts
    W = tr.window_ns
    n = len(ts)
    read = np.zeros(k)
    owned = np.zeros(k)
    pieces = np.zeros(k)
    n_first = max(len(tr.first_ts), 1)
    if method == "rip":
        span = int(ts[-1] - ts[0]) if n > 1 else 0
        per_w = n * W / span if span > 0 else n
        batch = rip_batch or int(max(4 * per_w, 2048))
        for b, s in enumerate(range(0, n, batch)):
            e = min(s + batch, n)
            end = int(np.searchsorted(ts, ts[e - 1] + W, side="right"))
            read[b % k] += end - s
            pieces[b % k] += 1
            owned[b % k] += np.count_nonzero((tr.first_ts >= ts[s]) & (tr.first_ts <= ts[e - 1])) / n_first
    else:
        fts = tr.first_ts
        ends = np.searchsorted(ts, fts + W, side="right")
        begins = np.searchsorted(ts, fts, side="left")
        owner = kernels.llsf_assign(fts, (ends - begins).astype(np.float64), k)
        for u in range(k):
            mine = np.flatnonzero(owner == u)
            owned[u] = len(mine) / n_first
            if len(mine):
                b, e = begins[mine], ends[mine]
                # union of the unit's windows (starts are in time order), as baselines._llsf_plan
                reach = np.maximum.accumulate(e)
                cuts = np.flatnonzero(b[1:] > reach[:-1]) + 1
                lo_idx = np.concatenate([[0], cuts])
                hi_idx = np.concatenate([cuts, [len(mine)]])
                read[u] = float((reach[hi_idx - 1] - b[lo_idx]).sum())
                pieces[u] = len(lo_idx)
    from .engine import auto_batch

    # per event read: the splitter's share, and the tasks at the batch size of one unit (each
    # data-parallel unit runs the whole chain alone)
    batch = auto_batch(tr.chunk, tr.length, 1)
    split_per_event = max(tr.t_event_owned, tr.t_event) + tr.t_fpush * float(splitter_batches(tr, batch).sum()) / max(tr.n_events, 1)
    # each unit's runtime has every stage as its own agent
    every = set(range(tr.length - 1))
    calls = np.sum([stage_calls(tr, c, every, batch) for c in range(len(tr.chunk_events))], axis=0)
    tasks_per_event = float(calls.sum()) / max(tr.n_events, 1)
    t_task = float((calls * tr.t_task).sum()) / max(float(calls.sum()), 1.0)
    # a piece smaller than a batch still costs each stage a task per input stream (its events
    # and its matches): tasks are the larger of the two counts
    tasks = np.maximum(read * tasks_per_event, pieces * 2 * (tr.length - 1))
    ev_items = float((tr.items - tr.match_items).sum() + tr.match_items[:, 0].sum())  # events entering
    m_items = float(tr.match_items[:, 1:].sum())  # partial matches: follow the owned starts
    item_per_event = ev_items * tr.t_item / max(tr.n_events, 1)
    # what holds the GIL (as in the hybrid: all but the pairs and the routing)
    # a piece's fixed cost as measured with as many units running pieces at once (two at most:
    # beyond, the contention of two units is charged, a lower bound)
    t_piece = tr.t_piece2 if k >= 2 and tr.t_piece2 is not None else tr.t_piece
    held = read * item_per_event + tasks * t_task + pieces * t_piece + owned * m_items * tr.t_item
    per_unit = held + read * split_per_event + owned * tr.match_work_s
    # k units on ``cores`` cores: the slowest unit, or the total shared by the cores, or what of
    # it holds the GIL, one unit at a time
    bound = float(held.sum())
    # a data-parallel unit's Python is its pieces (its runtime fed, drained, emptied per piece), not
    # the hybrid's tasks: its share is the spinner's loss over the whole inline run (the splitter
    # and the quiescent points among it), as before 16:30 UTC, else the hybrid's
    share = tr.run_serial if tr.run_serial is not None else serial_share(tr, k)
    gil = min(share * float(per_unit.sum()), bound) if share is not None else bound
    t = max(per_unit.max(), per_unit.sum() / cores, gil)
    return SimResult(method, k, tr.serial_s + t, tr.n_events, cpu_s=tr.serial_s + float(per_unit.sum()),
                     parallel_s=t)
