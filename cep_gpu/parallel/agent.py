"""Agents, stages and buffer fragments (paper Section 3.2, with sequence numbers for exactly once).

A *stage* is one pattern state ``S_i`` (position ``i >= 1`` of the ``SEQ``): it joins partial
matches of positions ``0..i-1`` with events of position ``i``. An *agent* runs one stage, or
several consecutive ones after fusion (Section 4.2, Algorithm 2). Each stage keeps its event
buffer ``EB_i`` and match buffer ``MB_i`` split in fragments, one per execution unit that has
inserted into it.

Exactly once (docs/parallel.md): an item entering a stage takes the next sequence number *and* is
appended to its unit's fragment inside one short critical section; it then probes every fragment
of the opposite buffer and joins only with items of a smaller number. Of any (event, match) pair
the later-numbered item finds the earlier one already appended, and the earlier one skips the
later, so each pair is compared exactly once whatever the thread schedule.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from . import kernels
from .compile import ChainSpec


class Buffer:
    """One buffer of a stage (``EB_i`` or ``MB_i``): its fragments, one per unit that inserted,
    held in shared 2-D arrays (fragment ``f`` is row ``f``) that one compiled call can probe whole.

    Only the stage's lock holder appends (to its own fragment) or grows the arrays; growth
    replaces them with larger copies, so a probe that took the arrays and the counts under the
    lock keeps reading valid items (no writer touches an item below a count once it is counted).
    ``width``: 0 for events, ``k`` for partial matches of ``k`` positions.
    """

    __slots__ = ("width", "slot_of", "counts", "nbs", "rows", "seq", "first", "last", "n", "nb",
                 "bstart", "bmin", "bmax", "bpmax")

    def __init__(self, width: int, slots: int = 2, cap: int = 256) -> None:
        self.width = width
        self.slot_of: dict[int, int] = {}  # unit -> its fragment
        self.counts: list[int] = []  # items per fragment (a Python copy of ``n``, for room checks)
        self.nbs: list[int] = []  # blocks per fragment (a Python copy of ``nb``)
        self._alloc(max(slots, 1), cap, 16 if width else 1)

    def _alloc(self, slots: int, cap: int, bcap: int) -> None:
        """New arrays of ``slots`` fragments with room for ``cap`` items and ``bcap`` blocks each,
        holding the items so far (the old arrays stay valid for the probes that hold them)."""
        w = self.width
        old = getattr(self, "n", None)
        rows = np.empty((slots, cap, w) if w else (slots, cap), np.int64)
        seq = np.empty((slots, cap), np.int64)
        first = np.empty((slots, cap), np.int64)  # events: their timestamps
        last = np.empty((slots, cap if w else 0), np.int64)
        blocks = [np.empty((slots, bcap), np.int64) for _ in range(4)]
        n = np.zeros(slots, np.int64)
        nb = np.zeros(slots, np.int64)
        if old is not None:
            for f, (k, b) in enumerate(zip(self.counts, self.nbs)):
                rows[f, :k] = self.rows[f, :k]
                seq[f, :k] = self.seq[f, :k]
                first[f, :k] = self.first[f, :k]
                if w:
                    last[f, :k] = self.last[f, :k]
                for new, cur in zip(blocks, (self.bstart, self.bmin, self.bmax, self.bpmax)):
                    new[f, :b] = cur[f, :b]
                n[f], nb[f] = k, b
        # the counts last: a snapshot taken under the lock reads them, never half-built arrays
        self.rows, self.seq, self.first, self.last = rows, seq, first, last
        self.bstart, self.bmin, self.bmax, self.bpmax = blocks
        self.nb = nb
        self.n = n

    def slot(self, unit: int) -> int:
        """``unit``'s fragment (created on its first insert; the caller holds the stage lock)."""
        f = self.slot_of.get(unit)
        if f is None:
            f = len(self.counts)
            if f >= len(self.n):  # room for more fragments (the copy takes the existing ones)
                self._alloc(2 * len(self.n), self.seq.shape[1], self.bstart.shape[1])
            self.counts.append(0)
            self.nbs.append(0)
            self.slot_of[unit] = f
        return f

    def room(self, f: int, k: int) -> None:
        """Make room for ``k`` more items (and their blocks) in fragment ``f`` (under the lock)."""
        cap, bcap = self.seq.shape[1], self.bstart.shape[1]
        need, bneed = self.counts[f] + k, (self.nbs[f] + k // kernels.BLOCK + 1 if self.width else 1)
        if need > cap or bneed > bcap:
            self._alloc(len(self.n), max(need, 2 * cap) if need > cap else cap,
                        max(bneed, 2 * bcap) if bneed > bcap else bcap)

    @property
    def fragments(self) -> int:
        return len(self.counts)

    def clear(self) -> None:
        """Drop every item (only at a quiescent point)."""
        self.n[:] = 0
        self.nb[:] = 0
        self.counts = [0] * len(self.counts)
        self.nbs = [0] * len(self.nbs)

    def keep_from(self, lo: int) -> None:
        """Keep the matches whose first timestamp is at least ``lo`` (only at a quiescent point)."""
        kernels.keep_matches(self.rows, self.seq, self.first, self.last, self.n, self.nb,
                             self.bstart, self.bmin, self.bmax, self.bpmax, lo)
        k = len(self.counts)
        self.counts = self.n[:k].tolist()
        self.nbs = self.nb[:k].tolist()


@dataclass
class StageStats:
    tasks: int = 0
    items: int = 0
    match_items: int = 0  # of which partial matches (the rest are events)
    compared: int = 0  # pairs of the cost model (within W of each other)
    scanned: int = 0  # pairs the kernels looked at (items probed)
    outputs: int = 0
    accesses: int = 0  # fragment visits (the paper's synchronisations acc_i)
    kernel_s: float = 0.0
    busy_s: float = 0.0

    def add(self, other: StageStats) -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))


class Stage:
    """State ``S_i``: the buffers of position ``i`` of one rule and its join program."""

    def __init__(self, spec: ChainSpec, position: int, store, strcodes: np.ndarray,
                 time_kernels: bool = False, units: int = 2) -> None:
        self.spec = spec
        # timing each kernel call costs two clock reads per task: only when calibrating
        self.time_kernels = time_kernels
        self.strcodes = strcodes
        self.position = position
        self.width = position  # partial matches entering hold positions 0..i-1
        self.last = position == spec.length - 1
        self.program = spec.joins[position]
        # the window of this stage and the match position it is measured from (compile.ChainSpec)
        self.window = spec.stage_windows[position] if spec.stage_windows else spec.window
        self.ref = spec.ref_positions[position] if spec.ref_positions else 0
        self.lock = threading.Lock()
        self.counter = 0
        self.events = Buffer(0, units)
        self.matches = Buffer(self.width, units)
        self.store = store
        self.per_unit: dict[int, StageStats] = {}
        # outputs and items of this stage so far, for the first size of a task's output (hints
        # only: racy updates from several units are harmless; the output grows as needed)
        self._hint_out = 0
        self._hint_items = 0

    def _insert(self, unit: int, rows: np.ndarray, is_event: bool) -> tuple[int, tuple, np.ndarray]:
        """Number the items and append them to ``unit``'s fragment in one critical section.

        Returns the first number, the opposite buffer's arrays and its counts (items and
        blocks per fragment, ``(2, fragments)``) as they stood in that critical section: exactly
        the opposite items numbered before these (docs/parallel.md, "Exactly once").
        """
        st = self.store
        k = len(rows)
        with self.lock:
            seq0 = self.counter
            self.counter = seq0 + k
            if is_event:
                own, opp = self.events, self.matches
            else:
                own, opp = self.matches, self.events
            f = own.slot(unit)
            own.room(f, k)
            snap = np.empty((2, len(opp.n)), np.int64)
            if is_event:
                kernels.append_events(own.rows, own.seq, own.first, own.n, f, rows, seq0, st.ts, st.base,
                                      opp.n, opp.nb, snap)
            else:
                kernels.append_matches(own.rows, own.seq, own.first, own.last, own.n, own.nb, own.bstart, own.bmin,
                                       own.bmax, own.bpmax, f, rows, seq0, st.ts, st.base, self.ref, opp.n, opp.nb,
                                       snap)
                own.nbs[f] = int(own.nb[f])
            own.counts[f] += k
            arrays = (opp.rows, opp.seq, opp.first, opp.last, opp.bstart, opp.bmin, opp.bmax, opp.bpmax)
        return seq0, arrays, snap

    def unit_stats(self, unit: int) -> StageStats:
        """``unit``'s own counters (only that unit writes them: no lock)."""
        s = self.per_unit.get(unit)
        if s is None:
            s = self.per_unit.setdefault(unit, StageStats())
        return s

    @property
    def stats(self) -> StageStats:
        """The counters of every unit, summed."""
        total = StageStats()
        for s in list(self.per_unit.values()):
            total.add(s)
        return total

    def process(self, unit: int, rows: np.ndarray, is_event: bool, jitter=None) -> np.ndarray:
        """Insert a batch (events: 1-D rows; matches: (k, width) rows) and probe the other buffer.

        Python runs once per batch: numbering and appending are one compiled call under the
        stage lock, and one compiled call without the GIL probes every fragment of the opposite
        buffer (as the lock left it). Returns the extended matches, (n, width + 1) absolute rows.
        """
        t0 = time.thread_time()
        seq0, (o_rows, o_seq, o_first, o_last, o_bs, o_bmin, o_bmax, o_bpmax), snap = \
            self._insert(unit, rows, is_event)
        if jitter is not None:
            jitter()
        st = self.store
        prog = self.program
        # the output's first size: what this stage has produced per item on average so far
        ratio = self._hint_out / self._hint_items if self._hint_items else 0.0
        cap = max(64, 2 * len(rows), int(1.5 * ratio * len(rows)))
        if self.time_kernels:
            k0 = time.thread_time()
        if is_event:
            out, compared, scanned, visits = kernels.probe_events(
                rows, seq0, o_rows, o_seq, o_first, o_last, snap, o_bs, o_bmin, o_bmax, o_bpmax, self.window,
                prog.code, prog.consts, self.strcodes, st.vals, st.valid, st.ts, st.base, prog.max_stack, cap)
        else:
            out, compared, scanned, visits = kernels.probe_matches(
                rows, seq0, self.ref, o_rows, o_seq, o_first, snap, self.window, prog.code, prog.consts,
                self.strcodes, st.vals, st.valid, st.ts, st.base, prog.max_stack, cap)
        kt = time.thread_time() - k0 if self.time_kernels else 0.0
        got = len(out)
        self._hint_out += got
        self._hint_items += len(rows)
        s = self.unit_stats(unit)
        s.tasks += 1
        s.items += len(rows)
        if not is_event:
            s.match_items += len(rows)
        s.compared += compared
        s.scanned += scanned
        s.outputs += got
        s.accesses += visits
        s.kernel_s += kt
        s.busy_s += time.thread_time() - t0
        return out

    def prune(self, newest: int) -> None:
        """At a quiescent point: drop every buffered event and the matches no later event can extend.

        Once every queue is empty, all matches of the events seen so far exist, so a later match
        holds a later event and only later events can extend it: buffered events are done with.
        A later event (``ts >= newest``) extends a match only if ``ts - first <= W`` (``first``: the
        timestamp the stage's window is measured from).
        """
        self.events.clear()
        if any(self.matches.counts):
            self.matches.keep_from(newest - self.window)


@dataclass
class Agent:
    """An agent: one stage, or several consecutive stages of one rule after fusion."""

    index: int
    rule: int
    stages: tuple[int, ...]  # positions, consecutive
    #: queued input batches: matches for the first stage; events per stage
    match_q: deque = field(default_factory=deque)
    event_q: dict[int, deque] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for s in self.stages:
            self.event_q.setdefault(s, deque())

    @property
    def name(self) -> str:
        return "A" + "-".join(str(s + 1) for s in self.stages)

    def take(self, role: str):
        """Pop the oldest queued batch of ``role`` (``"event"``/``"match"``/``"both"``).

        Returns ``(position, is_event, rows)`` or None. Queue entries are ``(time key, rows)``;
        taking the oldest head keeps the buffers close to time order, so that a probe scans
        few items that are still to come (they would be skipped by their sequence number).
        """
        best = None
        best_key = None
        if role in ("match", "both"):
            q = self.match_q
            if q:
                try:
                    best_key, best = q[0][0], (self.stages[0], False, q)
                except IndexError:
                    pass
        if role in ("event", "both"):
            for s in self.stages:
                q = self.event_q[s]
                if q:
                    try:
                        k = q[0][0]
                    except IndexError:
                        continue
                    if best is None or k < best_key:
                        best_key, best = k, (s, True, q)
        if best is None:
            return None
        position, is_event, q = best
        try:
            return position, is_event, q.popleft()[1]
        except IndexError:  # another unit took it meanwhile
            return self.take(role)

    def has_work(self) -> bool:
        return bool(self.match_q) or any(self.event_q.values())
