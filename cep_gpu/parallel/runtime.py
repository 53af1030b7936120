"""The event store and the unit runtime shared by :class:`HybridEngine` and the baselines.

Units are threads of one process (docs/parallel.md says why, with measurements); each loops:
take a batch from its current agent (primary role first, the other role when role-dynamic), else
from its other home agents, else (agent-dynamic) from a random busy agent; run the stage's join
kernel (no GIL held) against every fragment of the opposite buffer; hand the extended matches to
the next stage (same unit, when fused) or the next agent's queue.

The driver feeds the input in chunks; after each chunk it waits for quiescence (every queue
empty, every unit idle), prunes the buffers (``Stage.prune``) and records the units per agent.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import EventError
from . import kernels
from .agent import Agent, Stage, StageStats
from .compile import ChainSpec

_F53 = float(2**53)
#: the least events in a slice of a chunk routed by several splitters (a chunk of fewer than
#: twice this is routed by one thread); a slice costs two kernel calls per position and a lock
SPLIT_MIN = 2048


class SplitJob:
    """One chunk's routing cut in slices that several threads route at once.

    Slices are handed to the queues strictly in order (``next``): the thread that finishes
    slice ``j`` hands over ``j`` and every later slice already routed, holding ``lock``. Each
    (rule, position) queue so receives its batches in time order, as from one splitter: a unit
    takes a queue's batches oldest first, so its event fragments stay in time order (the probe
    binary-searches them), and the sequence-number proof (docs/parallel.md) is untouched.
    """

    def __init__(self, rows: np.ndarray, n_slices: int) -> None:
        b = np.linspace(0, len(rows), n_slices + 1).astype(np.int64)
        self.slices = [rows[b[i]:b[i + 1]] for i in range(n_slices)]
        self.done: dict[int, list] = {}
        self.next = 0
        self.carry: dict[tuple[int, int], np.ndarray] = {}
        self.lock = threading.Lock()


class OutputJob:
    """Output parts built by whichever thread is free: the publishing thread and idle units.

    ``build[j]()`` returns part ``j``; :meth:`Runtime.wait_output` returns the parts in ``j``
    order, however they finished (their concatenation is then ``detect``'s frame: parts are cut
    at timestamp boundaries, in time order).
    """

    def __init__(self, build: list) -> None:
        self.build = build
        self.parts: list = [None] * len(build)
        self.left = len(build)
        self.error: BaseException | None = None
        self.cv = threading.Condition()


class Store:
    """Columnar store of the events in play: absolute row ``r`` lives at ``r - base``.

    ``vals``/``valid``: the attributes the condition programs read, as float64 (string codes,
    bools and ints converted; ints must stay within 2**53 to compare exactly). ``columns``: every
    attribute in its own kind, for the composite events' ``return`` attributes.
    """

    def __init__(self, attributes: tuple[str, ...]) -> None:
        self.attributes = attributes
        self.index = {a: i for i, a in enumerate(attributes)}
        self.base = 0
        self.n = 0  # absolute rows appended
        self.ts = np.empty(0, np.int64)
        self.ids = np.empty(0, np.int64)
        self.types = np.empty(0, np.int32)
        self.vals = np.empty((len(attributes), 0), np.float64)
        self.valid = np.empty((len(attributes), 0), np.bool_)
        self.columns: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}
        self.type_names: list[str] = []

    def check(self, table) -> None:
        """The ``EventError`` :meth:`append` would raise for ``table``, before anything changes:
        integers beyond 2**53 in an attribute the conditions read, or an attribute whose values
        are of another kind than before (ints and floats mix, as floats)."""
        for name in self.index:
            col = table.columns.get(name)
            if col is not None and col.kind == "int" and len(col.values) and \
                    np.abs(col.values[col.valid]).max(initial=0) > 2**53:
                raise EventError(f"attribute {name!r}: integers beyond 2**53 cannot be compared "
                                 "exactly by the parallel engine")
        for name, col in table.columns.items():
            have = self.columns.get(name)
            if have is None or not have[2].any() or not col.valid.any() or have[0] == col.kind:
                continue  # new, so far all null, all null here, or the same kind
            if not {have[0], col.kind} <= {"int", "float"}:
                raise EventError(f"attribute {name!r} holds {have[0]} values and now {col.kind} values")

    def append(self, table) -> np.ndarray:
        """Append an ingested batch (an ``EventTable``); returns its absolute rows. A batch
        :meth:`check` refuses changes nothing."""
        self.check(table)
        k = len(table)
        remap = np.array([self._type_code(t) for t in table.type_names] or [0], np.int32)
        self.ts = np.concatenate([self.ts, table.ts])
        self.ids = np.concatenate([self.ids, table.ids])
        self.types = np.concatenate([self.types, remap[table.types] if k else table.types.astype(np.int32)])
        vals = np.zeros((len(self.attributes), k), np.float64)
        valid = np.zeros((len(self.attributes), k), np.bool_)
        for name, j in self.index.items():
            col = table.columns.get(name)
            if col is None:
                continue
            v = col.values
            vals[j] = v.astype(np.float64)
            valid[j] = col.valid & ~np.isnan(vals[j]) if col.kind == "float" else col.valid
        self.vals = np.concatenate([self.vals, vals], axis=1)
        self.valid = np.concatenate([self.valid, valid], axis=1)
        old_n = len(self.ts) - k
        for name, col in table.columns.items():
            have = self.columns.get(name)
            if not col.valid.any() and have is not None:
                continue  # all null here: a column of no kind (filled below)
            if have is not None and not have[2].any():
                have = None  # so far all null: take this batch's kind
            if have is None:
                kind, values, ok = col.kind, np.zeros(old_n, col.values.dtype), np.zeros(old_n, bool)
            else:
                kind, values, ok = have
            if kind != col.kind:  # ints and floats (check refused the rest)
                kind = "float"
                values = values.astype(np.float64)
            self.columns[name] = (kind, np.concatenate([values, col.values.astype(values.dtype)]),
                                  np.concatenate([ok, col.valid]))
        for name, (kind, values, ok) in list(self.columns.items()):
            if len(values) < len(self.ts):  # absent (or all null) in this batch
                self.columns[name] = (kind, np.concatenate([values, np.zeros(k, values.dtype)]),
                                      np.concatenate([ok, np.zeros(k, bool)]))
        rows = np.arange(self.n, self.n + k, dtype=np.int64)
        self.n += k
        return rows

    def _type_code(self, name: str) -> int:
        if name not in self.type_names:
            self.type_names.append(name)
        return self.type_names.index(name)

    def type_code(self, name: str) -> int:
        return self.type_names.index(name) if name in self.type_names else -1

    def drop_before(self, row: int) -> None:
        """Forget rows below absolute ``row`` (only at a quiescent point)."""
        cut = row - self.base
        if cut <= 0:
            return
        self.ts = self.ts[cut:]
        self.ids = self.ids[cut:]
        self.types = self.types[cut:]
        self.vals = self.vals[:, cut:]
        self.valid = self.valid[:, cut:]
        self.columns = {k: (kd, v[cut:], ok[cut:]) for k, (kd, v, ok) in self.columns.items()}
        self.base = row


@dataclass
class UnitState:
    homes: list[int]
    roles: dict[int, str]  # agent -> "event" | "match" | "both"
    current: int
    last_hop_ts: int | None = None
    busy_s: float = 0.0
    tasks: int = 0
    hops: int = 0
    foreign_tasks: int = 0


@dataclass
class Layout:
    """Agents (per rule: tuples of positions >= 1) and each unit's home agents and roles."""

    groups: list[list[tuple[int, ...]]]  # per rule
    units_per_agent: list[int]  # flat over agents, rule by rule
    n_units: int


def make_layout(groups: list[list[tuple[int, ...]]], units_per_agent: list[int], n_units: int) -> Layout:
    return Layout(groups, list(units_per_agent), n_units)


class Runtime:
    """Stages, agents, queues and units for a set of rules (threads, or inline with ``threads=False``)."""

    def __init__(self, specs: list[ChainSpec], store: Store, layout: Layout, strcodes: list[np.ndarray],
                 *, dynamic: bool = True,
                 threads: bool = True, batch_size: int = 512, jitter: float = 0.0, seed: int = 0,
                 time_kernels: bool = False, splitters: int = 1, split_min: int | None = None) -> None:
        self.specs = specs
        self.strcodes = strcodes
        self.store = store
        self.dynamic = dynamic
        self.batch_size = batch_size
        #: threads that route a chunk at once (the publishing thread and idle units; 1: it alone)
        self.splitters = max(int(splitters), 1)
        self.split_min = SPLIT_MIN if split_min is None else max(int(split_min), 1)
        self._split_q: deque = deque()
        self._out_q: deque = deque()  # (OutputJob, part): output parts for idle threads
        self.output_parts = 0  # output parts built, and how many of them by units
        self.output_by_units = 0
        self.split_slices = 0  # slices routed by a SplitJob (a chunk cut for several splitters)
        self.stages: list[dict[int, Stage]] = [
            {p: Stage(spec, p, store, strcodes[r], time_kernels, layout.n_units) for p in range(1, spec.length)}
            for r, spec in enumerate(specs)
        ]
        self.agents: list[Agent] = []
        self.agent_of: list[dict[int, int]] = []  # rule -> position -> agent
        for r, gs in enumerate(layout.groups):
            m: dict[int, int] = {}
            for g in gs:
                a = Agent(len(self.agents), r, tuple(g))
                for p in g:
                    m[p] = a.index
                self.agents.append(a)
            self.agent_of.append(m)
        self.results: list[list[np.ndarray]] = [[] for _ in specs]
        self._results_lock = threading.Lock()
        self.n_units = layout.n_units
        self.units = self._assign_units(layout.units_per_agent)
        lock = threading.RLock()  # the queues' lock
        self._cv = threading.Condition(lock)  # the driver waits on it (drain); units on their own
        # one condition per unit on the same lock: a push wakes an idle unit that can take the
        # batch, instead of idle units polling (each poll costs CPU time the units do not work)
        self._ucv = [threading.Condition(lock) for _ in range(layout.n_units)]
        self._idle: dict[int, bool] = {}  # units waiting on their condition
        self._epoch = 0  # pushes so far: a unit that saw no work waits only if none came since
        self.idle_wakeups = 0  # a unit woken (or timed out) that found no work
        self._pending = 0
        self._stop = False
        self._error: BaseException | None = None
        self.newest: int | None = None
        self.window = max((s.window for s in specs), default=0)
        self.history: list[dict] = []
        self.queue_pushes = 0
        self._rng = random.Random(seed)
        self._jitter_p = jitter
        self._threads: list[threading.Thread] = []
        self.threaded = threads
        if threads:
            for u in range(self.n_units):
                t = threading.Thread(target=self._loop, args=(u,), name=f"cep-unit-{u}", daemon=True)
                t.start()
                self._threads.append(t)

    # -- layout --------------------------------------------------------------------------------

    def _assign_units(self, per_agent: list[int]) -> list[UnitState]:
        n_agents = len(self.agents)
        units: list[UnitState] = []
        if not n_agents:
            return [UnitState([], {}, -1) for _ in range(self.n_units)]
        if sum(per_agent) == self.n_units and all(k >= 1 for k in per_agent):
            for a, k in enumerate(per_agent):
                for j in range(k):
                    # role split (Section 3.3.2): half event workers, half match workers; a lone
                    # unit serves both streams (an agent needs one worker of each role)
                    role = "both" if k == 1 else ("event" if j % 2 == 0 else "match")
                    units.append(UnitState([a], {a: role}, a))
        else:
            # fewer units than agents: each unit is home to several agents, serving both roles
            for u in range(self.n_units):
                homes = [a for a in range(n_agents) if a % self.n_units == u]
                units.append(UnitState(homes, {a: "both" for a in homes}, homes[0]))
        return units

    def units_per_agent(self) -> list[int]:
        counts = [0] * len(self.agents)
        for u in self.units:
            if u.current >= 0:
                counts[u.current] += 1
        return counts

    # -- driver side ---------------------------------------------------------------------------

    def feed(self, rows: np.ndarray, first_only: np.ndarray | None = None) -> None:
        """Route new store rows (absolute, in time order) to the stages: the splitter.

        With ``splitters > 1`` the rows are cut in slices (at least ``split_min`` events each,
        default :data:`SPLIT_MIN`) that the publishing thread and idle units route at once; each
        slice's batches are handed to the queues in slice order (:class:`SplitJob`), so every
        queue receives exactly the batches, in exactly the order, that one splitter would give it.

        ``first_only``: sorted absolute rows; position 0 takes only these (data-parallel
        baselines: a unit owns the matches that start with its events).
        """
        if not len(rows):
            return
        st = self.store
        self.newest = int(st.ts[rows[-1] - st.base])
        n_slices = 1 if first_only is not None else min(self.splitters, len(rows) // self.split_min)
        if n_slices <= 1:
            self._publish(self._route(rows, first_only), {}, True)
            return
        job = SplitJob(rows, n_slices)
        with self._cv:
            self._pending += n_slices
            self._split_q.extend((job, j) for j in range(n_slices))
            self._wake_all()
        # the publishing thread routes slices too (oldest first), with the units that are idle
        while True:
            try:
                task = self._split_q.popleft()
            except IndexError:
                break
            self._run_split(task)

    def _route(self, rows: np.ndarray, first_only: np.ndarray | None) -> list[tuple[int, int, np.ndarray]]:
        """``(rule, position, rows)`` of the events of ``rows`` that each position takes (compiled,
        without the GIL: several splitters route at once)."""
        st = self.store
        out = []
        for r, spec in enumerate(self.specs):
            for p, tname in enumerate(spec.types):
                code = st.type_code(tname)
                if code < 0:
                    continue
                cand = kernels.rows_of_type(rows, st.types, st.base, code)
                prog = spec.filters[p]
                if len(cand) and prog.n_conditions:
                    cand = kernels.filter_rows(cand, p, prog.code, prog.consts, self.strcodes[r], st.vals,
                                               st.valid, st.ts, st.base, prog.max_stack)
                if p == 0 and first_only is not None and len(cand):
                    cand = cand[_members(cand, first_only)]
                if len(cand):
                    out.append((r, p, cand))
        return out

    def _publish(self, routed: list[tuple[int, int, np.ndarray]], carry: dict, last: bool) -> None:
        """Hand one slice's routed events to the queues in batches of ``batch_size``.

        ``carry``: per (rule, position), the events of earlier slices short of a full batch; they
        lead this slice's (so the batches are those of one splitter over the whole chunk). With
        ``last``, every remainder goes out.
        """
        bs = self.batch_size
        for r, p, cand in routed:
            spec = self.specs[r]
            if spec.length == 1:
                self._emit(r, cand.reshape(-1, 1))
                continue
            held = carry.pop((r, p), None)
            if held is not None:
                cand = np.concatenate([held, cand])
            if not last:
                full = len(cand) // bs * bs
                if full < len(cand):
                    carry[(r, p)] = cand[full:]
                cand = cand[:full]
            self._push_many(r, p, cand)
        if last:
            for (r, p), cand in list(carry.items()):
                self._push_many(r, p, cand)
            carry.clear()

    def _push_many(self, r: int, p: int, cand: np.ndarray) -> None:
        """Queue ``cand`` (events of position ``p``, in time order) to its agent in batches, under
        one acquisition of the queues' lock."""
        if not len(cand):
            return
        st = self.store
        bs = self.batch_size
        agent = self.agents[self.agent_of[r][max(p, 1)]]
        keys = st.ts[cand[::bs] - st.base].tolist()  # a batch's key: its first (oldest) event
        if p == 0:  # position-0 events are the first stage's partial matches (one position)
            batches = [cand[k:k + bs].reshape(-1, 1) for k in range(0, len(cand), bs)]
            q = agent.match_q
        else:
            batches = [cand[k:k + bs] for k in range(0, len(cand), bs)]
            q = agent.event_q[p]
        with self._cv:
            self._pending += len(batches)
            self.queue_pushes += len(batches)
            q.extend(zip(keys, batches))
            self._wake(agent.index, p != 0, len(batches))

    def _push_matches(self, agent: Agent, rows: np.ndarray) -> None:
        """Queue partial matches ``rows`` to ``agent`` in batches (so that its units can share
        the work), under one acquisition of the queues' lock; a batch's key: its oldest last event."""
        st = self.store
        bs = self.batch_size
        batches = [rows[k:k + bs] for k in range(0, len(rows), bs)]
        keys = kernels.batch_keys(rows, st.ts, st.base, bs).tolist()
        with self._cv:
            self._pending += len(batches)
            self.queue_pushes += len(batches)
            agent.match_q.extend(zip(keys, batches))
            self._wake(agent.index, False, len(batches))

    def _wake(self, a: int, is_event: bool, n: int) -> None:
        """(Holding the lock, after a push to agent ``a``.) Wake up to ``n`` idle units that take
        such a batch from ``a``: home or current there, in a role that takes it; with dynamic
        units, else any idle unit (it may hop to ``a``)."""
        self._epoch += 1
        if not self._idle:
            return
        role_ok = ("event", "both") if is_event else ("match", "both")
        picked = []
        for u in self._idle:
            st = self.units[u]
            if (st.current == a or a in st.homes) and (self.dynamic or st.roles.get(a, "both") in role_ok):
                picked.append(u)
                if len(picked) == n:
                    break
        if len(picked) < n and self.dynamic:
            picked += [u for u in self._idle if u not in picked][: n - len(picked)]
        for u in picked:
            del self._idle[u]
            self._ucv[u].notify()

    def _wake_all(self) -> None:
        """(Holding the lock.) Wake every idle unit (routing tasks, stop)."""
        self._epoch += 1
        for u in self._idle:
            self._ucv[u].notify()
        self._idle.clear()

    def _run_split(self, task) -> None:
        """Route one slice of a :class:`SplitJob`; hand over every slice whose turn has come."""
        job, j = task
        try:
            routed = self._route(job.slices[j], None)
            if self._jitter_p:
                self._jitter()  # shake the order in which slices finish (tests)
            with job.lock:
                self.split_slices += 1
                job.done[j] = routed
                while job.next in job.done:
                    i = job.next
                    self._publish(job.done.pop(i), job.carry, i == len(job.slices) - 1)
                    job.next += 1
        finally:
            with self._cv:
                self._pending -= 1
                if self._pending == 0:
                    self._cv.notify_all()

    def drain(self) -> None:
        """Wait until every queued batch is processed (inline: process them here)."""
        if not self.threaded:
            while self._pending:
                task = self._next_task(0)
                if task is None:
                    raise RuntimeError("internal error: work left that no unit takes")
                self._run_task(0, task)
        else:
            with self._cv:
                while self._pending and self._error is None:
                    self._cv.wait(0.05)
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def submit_output(self, job: OutputJob) -> OutputJob:
        """Queue ``job``'s parts for the idle units (and :meth:`help_output`)."""
        if job.build:
            with self._cv:
                self._out_q.extend((job, j) for j in range(len(job.build)))
                if self.threaded:
                    self._wake_all()
        return job

    def help_output(self) -> None:
        """(Publishing thread.) Build queued output parts until none is left."""
        while True:
            try:
                task = self._out_q.popleft()
            except IndexError:
                return
            self._run_output(task, None)

    def wait_output(self, job: OutputJob) -> list:
        """Build what is still queued, wait for the parts units are building; the parts in order."""
        self.help_output()
        with job.cv:
            while job.left:
                job.cv.wait(0.05)
        if job.error is not None:
            raise job.error
        return job.parts

    def cancel_output(self) -> None:
        """Drop the output parts not started yet (a publish that failed)."""
        with self._cv:
            self._out_q.clear()

    def abandon(self) -> None:
        """Drop every queued split, batch and output part (a publish that failed): the units stop
        after the task each is running, not after the whole queue (Ctrl-C on a large publish)."""
        with self._cv:
            self._split_q.clear()
        self.cancel_output()
        self.discard_queued()

    def _run_output(self, task, u: int | None) -> None:
        job, j = task
        part, err = None, None
        try:
            if self._jitter_p:
                self._jitter()  # shake the order in which parts finish (tests)
            part = job.build[j]()
        except BaseException as exc:  # noqa: BLE001 - handed to the publishing thread
            err = exc
        with job.cv:
            job.parts[j] = part
            if err is not None and job.error is None:
                job.error = err
            job.left -= 1
            self.output_parts += 1
            self.output_by_units += u is not None
            job.cv.notify_all()

    def discard_queued(self) -> None:
        """Drop every queued batch unprocessed (to time the splitter alone; and :meth:`abandon`)."""
        with self._cv:
            for a in self.agents:
                a.match_q.clear()
                for q in a.event_q.values():
                    q.clear()
            self._pending = 0

    def quiesce(self) -> None:
        """After :meth:`drain`: prune every stage and record the units per agent."""
        if self.newest is not None:
            for stages in self.stages:
                for s in stages.values():
                    s.prune(self.newest)
        self.history.append({"newest": self.newest, "units": self.units_per_agent()})

    def forget(self) -> None:
        """After :meth:`drain`: drop every buffered event and match, so that the next rows fed
        start an independent stream (a data-parallel baseline's next piece) on the same stages
        instead of a runtime built anew per piece."""
        for stages in self.stages:
            for s in stages.values():
                s.events.clear()
                s.matches.clear()
        self.newest = None

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
            self._wake_all()
        for t in self._threads:
            t.join()
        self._threads = []

    # -- units ---------------------------------------------------------------------------------

    def _jitter(self) -> None:
        if self._jitter_p and self._rng.random() < self._jitter_p:
            time.sleep(0 if self._rng.random() < 0.7 else 0.0005)

    def _next_task(self, u: int):
        st = self.units[u]
        if st.current < 0:
            return None  # no agents (single-position rules only)
        order = [st.current] + [a for a in st.homes if a != st.current]
        for a in order:
            role = st.roles.get(a, "both")
            t = self.agents[a].take(role)
            if t is None and role != "both" and self.dynamic:
                # role-dynamic (Section 3.3.2): no work of the primary role, take the other one
                t = self.agents[a].take("match" if role == "event" else "event")
            if t is not None:
                if a != st.current and a in st.homes:
                    st.current = a
                return a, t
        if self.dynamic and len(self.agents) > 1 and self._may_hop(u):
            cands = [a for a in range(len(self.agents)) if a not in order]
            self._rng.shuffle(cands)
            for a in cands:
                t = self.agents[a].take("both")
                if t is not None:
                    # agent-dynamic (Section 4.1, Algorithm 1): the busy agent becomes current
                    st.current = a
                    st.hops += 1
                    st.last_hop_ts = self.newest
                    return a, t
        return None

    def _may_hop(self, u: int) -> bool:
        st = self.units[u]
        if st.last_hop_ts is not None and self.newest is not None and self.newest - st.last_hop_ts < self.window:
            return False  # at most one hop per window W
        # the last unit of an agent does not leave it
        return sum(1 for x in self.units if x.current == st.current) > 1 or st.current not in st.homes

    def _run_task(self, u: int, task) -> None:
        a, (position, is_event, rows) = task
        agent = self.agents[a]
        st = self.units[u]
        t0 = time.thread_time()
        stages = self.stages[agent.rule]
        jit = self._jitter if self._jitter_p else None
        out = stages[position].process(u, rows, is_event, jit)
        while len(out):
            if position == self.specs[agent.rule].length - 1:
                self._emit(agent.rule, out)
                break
            position += 1
            if position in agent.stages:  # fused: the next stage is ours
                out = stages[position].process(u, out, False, jit)
            else:
                self._push_matches(self.agents[self.agent_of[agent.rule][position]], out)
                break
        st.busy_s += time.thread_time() - t0
        st.tasks += 1
        if a not in st.homes:
            st.foreign_tasks += 1
        with self._cv:
            self._pending -= 1
            if self._pending == 0:
                self._cv.notify_all()

    def _emit(self, rule: int, rows: np.ndarray) -> None:
        with self._results_lock:
            self.results[rule].append(rows)

    def _loop(self, u: int) -> None:
        while True:
            if self._stop:  # (close: after a flush nothing is queued; after a failure, drop it)
                return
            if self._split_q:  # routing comes first: it feeds every agent
                try:
                    split = self._split_q.popleft()
                except IndexError:
                    split = None
                if split is not None:
                    try:
                        self._run_split(split)
                    except BaseException as exc:  # noqa: BLE001 - handed to the driver
                        self._error = exc
                    continue
            epoch = self._epoch
            try:
                task = self._next_task(u)
            except BaseException as exc:  # noqa: BLE001 - handed to the driver
                task = None
                self._error = exc
            if task is None and self._out_q:  # no join work: build an output part
                try:
                    out_task = self._out_q.popleft()
                except IndexError:
                    out_task = None
                if out_task is not None:
                    self._run_output(out_task, u)
                    continue
            if task is None:
                with self._cv:
                    if self._stop:
                        return
                    if self._epoch == epoch and not self._split_q and not self._out_q:
                        # no push since we looked: sleep until one wakes us (the timeout is
                        # only a safety net: a unit that wakes looks for work again)
                        self._idle[u] = True
                        self._ucv[u].wait(0.05)
                        self._idle.pop(u, None)
                        self.idle_wakeups += 1
                continue
            try:
                self._run_task(u, task)
            except BaseException as exc:  # noqa: BLE001 - handed to the driver
                self._error = exc
                with self._cv:
                    self._pending -= 1
                    self._cv.notify_all()
            if self._jitter_p:
                self._jitter()

    def take_results(self) -> list[np.ndarray]:
        out = []
        with self._results_lock:
            for r, spec in enumerate(self.specs):
                parts = self.results[r]
                rows = np.concatenate(parts) if parts else np.empty((0, spec.length), np.int64)
                # a TESLA chain's predicates are declared terminator first: positions reversed
                out.append(np.ascontiguousarray(rows[:, ::-1]) if spec.reversed_output else rows)
                self.results[r] = []
        return out

    def stage_stats(self) -> list[dict[int, StageStats]]:
        return [{p: s.stats for p, s in stages.items()} for stages in self.stages]


def _members(rows: np.ndarray, of: np.ndarray) -> np.ndarray:
    """Which of the sorted ``rows`` are in the sorted ``of`` (a binary search each: ``np.isin``
    sorts both again, a tenth of LLSF's time at short windows)."""
    at = np.searchsorted(of, rows)
    hit = at < len(of)
    hit[hit] = of[at[hit]] == rows[hit]
    return hit


@dataclass
class RunCounters:
    events: int = 0
    seconds: float = 0.0
    chunks: int = 0
    matches: int = 0
    extra: dict = field(default_factory=dict)
