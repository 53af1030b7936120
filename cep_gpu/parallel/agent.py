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


class Fragment:
    """A growable, append-only slice of one buffer, owned by one unit.

    Readers take ``n`` first and the arrays after: the writer replaces arrays (on growth) before
    it writes items and bumps ``n`` last, so any snapshot holds at least ``n`` valid items.
    """

    __slots__ = ("rows", "seq", "first", "last", "n", "width", "unit", "bstart", "bmin", "bmax", "bpmax", "nb")

    def __init__(self, width: int, unit: int, cap: int = 256) -> None:
        self.width = width  # 0: events (rows is 1-D); k: matches of k positions
        self.unit = unit
        self.rows = np.empty((cap, width) if width else cap, np.int64)
        self.seq = np.empty(cap, np.int64)
        self.first = np.empty(cap, np.int64)  # events: their timestamps
        self.last = np.empty(cap if width else 0, np.int64)
        # blocks (one per appended batch) with the range of ``first`` in each: a probing event
        # skips whole blocks of matches that started too early or too late
        self.bstart = np.empty(16, np.int64)
        self.bmin = np.empty(16, np.int64)
        self.bmax = np.empty(16, np.int64)
        self.bpmax = np.empty(16, np.int64)
        self.nb = 0
        self.n = 0

    def _grow(self, need: int) -> None:
        cap = max(need, 2 * len(self.seq))
        n = self.n
        rows = np.empty((cap, self.width) if self.width else cap, np.int64)
        rows[:n] = self.rows[:n]
        seq = np.empty(cap, np.int64)
        seq[:n] = self.seq[:n]
        first = np.empty(cap, np.int64)
        first[:n] = self.first[:n]
        self.first = first
        if self.width:
            last = np.empty(cap, np.int64)
            last[:n] = self.last[:n]
            self.last = last
        self.rows, self.seq = rows, seq

    def append(self, rows: np.ndarray, seq0: int, ts: np.ndarray, base: int, ref: int = 0) -> None:
        """Append ``rows`` numbered from ``seq0`` (one compiled call; the caller holds the stage lock)."""
        k = len(rows)
        n = self.n
        if n + k > len(self.seq):
            self._grow(n + k)
        if self.width:
            need = self.nb + k // kernels.BLOCK + 1
            if need > len(self.bstart):
                self._grow_blocks(need)
            self.nb = kernels.append_matches(self.rows, self.seq, self.first, self.last, n, rows, seq0, ts, base,
                                             ref, self.bstart, self.bmin, self.bmax, self.bpmax, self.nb)
        else:
            kernels.append_events(self.rows, self.seq, self.first, n, rows, seq0, ts, base)
        self.n = n + k  # last: publishes the items to readers

    def _grow_blocks(self, need: int) -> None:
        cap = max(need, 2 * len(self.bstart))
        nb = self.nb
        for name in ("bstart", "bmin", "bmax", "bpmax"):
            old = getattr(self, name)
            new = np.empty(cap, np.int64)
            new[:nb] = old[:nb]
            setattr(self, name, new)

    def clear(self) -> None:
        self.n = 0
        self.nb = 0

    def keep(self, mask: np.ndarray) -> None:
        """Keep the items where ``mask`` holds (only at a quiescent point)."""
        n = self.n
        idx = np.flatnonzero(mask[:n])
        k = len(idx)
        self.rows[:k] = self.rows[idx]
        self.seq[:k] = self.seq[idx]
        self.first[:k] = self.first[idx]
        if self.width:
            self.last[:k] = self.last[idx]
            self.nb = 0
            need = k // kernels.BLOCK + 1
            if need > len(self.bstart):
                self._grow_blocks(need)
            self.nb = kernels.add_blocks(self.first, 0, k, self.bstart, self.bmin, self.bmax, self.bpmax, 0)
        self.n = k


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
                 time_kernels: bool = False) -> None:
        self.spec = spec
        # timing each kernel call costs two clock reads per fragment visit: only when calibrating
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
        self.ev_frags: dict[int, Fragment] = {}
        self.m_frags: dict[int, Fragment] = {}
        self.ev_list: list[Fragment] = []
        self.m_list: list[Fragment] = []
        self.store = store
        self.per_unit: dict[int, StageStats] = {}
        # outputs and items of this stage so far, for the size of a task's output buffer (hints
        # only: racy updates from several units are harmless)
        self._hint_out = 0
        self._hint_items = 0

    def _insert(self, unit: int, rows: np.ndarray, is_event: bool) -> tuple[int, list[Fragment]]:
        """Number the items and append them to ``unit``'s fragment in one critical section.

        Returns the first number and the opposite buffer's fragment list as it is after the
        numbering (each fragment's item count is read later, by the probe: still after it).
        """
        st = self.store
        with self.lock:
            seq0 = self.counter
            self.counter += len(rows)
            if is_event:
                frag = self.ev_frags.get(unit)
                if frag is None:
                    frag = self.ev_frags[unit] = Fragment(0, unit)
                    self.ev_list = self.ev_list + [frag]  # copy-on-write: readers hold snapshots
                frag.append(rows, seq0, st.ts, st.base)
                return seq0, self.m_list
            frag = self.m_frags.get(unit)
            if frag is None:
                frag = self.m_frags[unit] = Fragment(self.width, unit)
                self.m_list = self.m_list + [frag]
            frag.append(rows, seq0, st.ts, st.base, self.ref)
            return seq0, self.ev_list

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

        Python runs once per batch and fragment: numbering and appending are one compiled call
        under the stage lock, each fragment one compiled probe without the GIL.
        Returns the extended matches, (n, width + 1) absolute store rows.
        """
        t0 = time.thread_time()
        seq0, frags = self._insert(unit, rows, is_event)
        if jitter is not None:
            jitter()
        st = self.store
        prog = self.program
        w = self.width
        window = self.window
        # room for the outputs this stage has produced per item on average so far (a rerun of a
        # fragment whose outputs do not fit costs its whole scan again)
        ratio = self._hint_out / self._hint_items if self._hint_items else 0.0
        cap = max(64, 2 * len(rows), int(1.5 * ratio * len(rows)))
        out = np.empty((cap, w + 1), np.int64)
        got = 0
        compared = 0
        scanned = 0
        kt = 0.0
        for f in frags:
            n = f.n  # after our numbering: every item of a smaller number is in
            if n == 0:
                continue
            while True:
                if self.time_kernels:
                    k0 = time.thread_time()
                if is_event:
                    tot, cmp, scn = kernels.probe_events(
                        rows, seq0, f.rows, f.seq, f.first, f.last, n, f.bstart, f.bmin, f.bmax, f.bpmax, f.nb, window,
                        prog.code, prog.consts, self.strcodes, st.vals, st.valid, st.ts, st.base, prog.max_stack,
                        out, got, cap)
                else:
                    tot, cmp, scn = kernels.probe_matches(
                        rows, seq0, self.ref, f.rows, f.seq, f.first, n, window, prog.code, prog.consts, self.strcodes,
                        st.vals, st.valid, st.ts, st.base, prog.max_stack, out, got, cap)
                if self.time_kernels:
                    kt += time.thread_time() - k0
                if tot <= cap:
                    break
                cap = 2 * tot  # rerun this fragment with room for all
                bigger = np.empty((cap, w + 1), np.int64)
                bigger[:got] = out[:got]
                out = bigger
            got = tot
            compared += cmp
            scanned += scn
            if jitter is not None:
                jitter()
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
        s.accesses += len(frags)
        s.kernel_s += kt
        s.busy_s += time.thread_time() - t0
        return out[:got]

    def prune(self, newest: int) -> None:
        """At a quiescent point: drop every buffered event and the matches no later event can extend.

        Once every queue is empty, all matches of the events seen so far exist, so a later match
        holds a later event and only later events can extend it: buffered events are done with.
        A later event (``ts >= newest``) extends a match only if ``ts - first <= W`` (``first``: the
        timestamp the stage's window is measured from).
        """
        for f in self.ev_list:
            f.clear()
        lo = newest - self.window
        for f in self.m_list:
            if f.n:
                f.keep(f.first[: f.n] >= lo)


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
