"""The streaming :class:`Engine`: publish events as they happen, get composite events back.

The engine keeps a sliding :class:`~cep_gpu.events.EventTable` (one string dictionary for the
whole stream) holding the events that some window may still read, plus the composite events that
other rules read. Each :meth:`Engine.publish` appends the new events, then, rule by rule in
dependency order, hands the backend the new terminators (``backend.match(rule, buffer, lo, hi,
excluded)``): the rows before them are context, consumed events are excluded. Composite events
re-enter the buffer, with the same ids as in batch :func:`cep_gpu.detect`. Finally rows that no
window can reach any more are dropped, so memory stays bounded by the longest window.

Rules with a trailing ``NOT`` (and rules reading their output) hold a terminator back until an
event later than its timestamp plus the rule's horizon has arrived, or until :meth:`Engine.flush`.
The results are those of batch ``detect`` over the concatenated input.
"""

from __future__ import annotations

import datetime
import gc
import itertools
import logging
import math
import numbers
import os
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pyarrow as pa

from .analysis import producers, rule_order, unbounded_window
from .backends import Matches
from .detect import (
    as_rules,
    check_schema,
    composite_events,
    composite_ids,
    composite_table,
    in_time_units,
)
from .errors import ArgumentError, EngineClosedError, EventError, LateEventError
from .events import UNIT_NS, AttributeColumn, EventTable, StringDictionary, TimeFormat, stream_time
from .events.checks import require_columns
from .model import (
    Rule,
)
from .output import OutputSchema, assemble, assemble_columns, value_kind
from .ranges import shifted_ts
from .rule_text import duration, rule_lines
from .stream_buffer import (
    AppendBuffer,
    new_rows_last,
    parse_record,
    table_from_columns,
    table_from_record,
)
from .stream_held import matcher_for, settled_states
from .stream_match import AutoChoice, unsupported

log = logging.getLogger("cep_gpu.engine")

@dataclass
class _RuleState:
    """What the engine remembers per rule between publishes."""

    term_types: frozenset[str]
    delay: int  # ns a terminator waits for (trailing NOT here or upstream); 0 = none
    pending: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # ids held back
    consumed: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # ids consumed
    composites: int = 0
    #: the oldest held terminator's timestamp (ns) when ``pending`` is not empty (None: unknown,
    #: a checkpoint of an older version): no held terminator is ready before ``held_ts + delay``
    held_ts: int | None = None
    #: terminators wait for a later timestamp even with ``delay`` 0: the rule depends on the
    #: (ts, id) order of events at one timestamp (AND ties, consumption) and reads composite
    #: events, which come before every input event of their timestamp (negative ids) but are
    #: made when their terminator arrives, possibly after such an event
    settle: bool = False


class Engine:
    """Streaming complex event detection (docs/api.md).

    Parameters
    ----------
    rules:
        A Rule, rule text, or a list of Rules and rule texts (as :func:`cep_gpu.detect`).
    backend:
        ``"auto"``, ``"cpu"``, ``"gpu"``, ``"reference"`` or ``"aip"``.
    allowed_lateness:
        ``None`` (default): an event older than the newest one already published raises
        :class:`~cep_gpu.LateEventError`. Otherwise a duration (a number in ``time_unit``, or a
        ``pandas.Timedelta``): events are buffered and released in timestamp order once the
        watermark (newest timestamp seen minus the lateness) has passed them; an event older than
        what was already released is reported (``stats()["late_events"]``, ``on_late``, a log
        warning) and not processed.
    time_unit:
        The unit of numeric ``ts`` values (as in :func:`cep_gpu.detect`).
    on_late:
        Optional ``callback(list of event dicts)`` for events that came too late.
    max_batch_latency:
        For ``backend="auto"``: the most seconds one launch of the kernels may be estimated to
        take when a publish hands over several terminators (see :func:`cep_gpu.detect`).
        Default ``0``: per-event processing, each terminator planned (CPU or GPU) on its own;
        ``None``: unbounded, all new terminators of a rule in one batch. Other backends accept it
        and ignore it.
    shedding:
        Optional fitted :class:`cep_gpu.shedding.Shedder`: under overload each publish drops its
        lowest-utility events to keep the detection latency bound (``stats()["shedding"]``).

    Example
    -------
    >>> import cep_gpu
    >>> eng = cep_gpu.Engine("define AB(x: int) from B(x=$x) and each A(x=$x) within 5 s from B "
    ...                      "where x=B.x", backend="reference")
    >>> _ = eng.publish({"type": "A", "ts": 1.0, "x": 1})
    >>> eng.publish({"type": "B", "ts": 2.0, "x": 1})[["rule", "ts", "x"]]
      rule   ts  x
    0   AB  2.0  1
    """

    _shedding = None  # the DARLING gate (shedding=); None also for checkpoints made before it

    def __init__(
        self,
        rules,
        backend: str = "auto",
        allowed_lateness=None,
        time_unit: str = "s",
        on_late: Callable[[list[dict]], None] | None = None,
        max_batch_latency: float | None = 0.0,
        shedding=None,
    ) -> None:
        from .planner import backend_for, check_max_batch_latency

        if not isinstance(time_unit, str) or time_unit not in UNIT_NS:
            raise ArgumentError(f"time_unit: unknown unit {time_unit!r}; use one of {sorted(UNIT_NS)}")
        if not isinstance(backend, str):
            raise ArgumentError(f"backend must be a backend name (a str), got {backend!r}")
        if on_late is not None and not callable(on_late):
            raise ArgumentError(f"on_late must be callable or None, got {on_late!r}")
        self.rules: list[Rule] = as_rules(rules)
        if not self.rules:  # (batch detect of no rule is an empty result; a stream of none is a mistake)
            raise ArgumentError(f"rules: {rules!r} holds no rule; an Engine needs at least one")
        self.backend_name = backend
        # an engine of its own for "auto" (its setting and its statistics), shared for the others
        self._backend = backend_for(backend, max_batch_latency, private=True)
        self.max_batch_latency = check_max_batch_latency(max_batch_latency)
        self._closed = False  # set by flush(): the input has ended
        self._callback_errors: list[dict] = []  # the last 100 callbacks that raised
        self._n_callback_errors = 0
        self._backend_calls = 0
        self._backend_seconds = 0.0
        self._order = rule_order(self.rules)
        self._time_unit = time_unit
        self._lateness = _duration_ns(allowed_lateness, time_unit)
        self._on_late = on_late
        self._schema = OutputSchema.of(self.rules)
        self._read_types = {t for r in self.rules for t in r.input_types}
        # rules whose results depend on the (ts, id) order of events of one timestamp (AND ties,
        # the order consuming terminators are processed in): _check_tie_order
        self._tie_order = _tie_order_rules(self.rules)
        self._lookback = _max_lookback(self.rules)
        self._states = self._init_states()
        self._subscribers: dict[str, list[Callable[[list[dict]], None]]] = {}

        self._strings = StringDictionary()
        self._time: TimeFormat | None = None
        # the sliding window's rows, shared by every rule (row lineage: for a device backend)
        self._buf = AppendBuffer(lineage=backend != "cpu")
        self._max_id = -1  # largest primitive id published: newer ids need no duplicate check
        self._timed: dict = {}  # (rule index, time format) -> the rule in that time unit
        self._late_buffer: EventTable | None = None  # published, not yet released (lateness)
        self._next_id = 0
        self._newest: int | None = None  # newest released timestamp (ns)
        self._max_seen: int | None = None  # newest timestamp published (ns)
        self._published = 0
        self._released = 0
        self._expired = 0
        self._late_events: list[dict] = []
        self._init_fast()
        if shedding is not None and not callable(getattr(shedding, "gate", None)):
            raise ArgumentError(f"shedding must be a cep_gpu.shedding.Shedder, got {type(shedding).__name__}")
        self._shedding = None if shedding is None else shedding.gate(self.rules, time_unit)

    def _init_fast(self) -> None:
        """The streaming fast path (stream_match): why each rule takes the general path (None:
        it takes the fast path), and its counters."""
        self._fast_why = {
            i: unsupported(self.rules[i], self._states[i].delay) if self.backend_name in ("cpu", "auto")
            else f"backend {self.backend_name!r}" for i in self._order
        }
        self._fast: dict = {}  # rule index -> (time format, StreamMatcher), made on first use
        self._auto_choice: AutoChoice | None = None  # backend="auto": cached CPU/GPU decisions
        self._fast_calls = 0
        self._fast_fallbacks = 0

    def _init_states(self) -> dict[int, _RuleState]:
        states: dict[int, _RuleState] = {}
        made_by = producers(self.rules)
        for i in self._order:
            rule = self.rules[i]
            # a terminator may only be matched once every composite event it can read is known
            upstream = [states[p].delay for t in rule.input_types for p in made_by.get(t, [])]
            term_types = frozenset(p.predicates[p.terminator].event_type for p in rule.plans)
            states[i] = _RuleState(
                term_types=term_types,
                delay=rule.trailing_horizon() + max(upstream, default=0),
                settle=_order_sensitive(rule, term_types, made_by),
            )
        return states

    # -- public API -------------------------------------------------------------------------------

    def publish(self, events, output: str = "pandas") -> pd.DataFrame | pa.Table | dict | list[dict] | list[tuple]:
        """Add one event (a dict) or many (a DataFrame, an Arrow table, or a mapping of columns:
        column name -> NumPy array / Arrow array / list), in timestamp order.

        Rows of one DataFrame may come in any order (they are sorted like a batch), but none may
        be older than an event of an earlier ``publish`` (see ``allowed_lateness``). Events
        without an ``id`` get their position in the whole stream, as batch ``detect`` would.
        Returns the new composite events: ``output="pandas"`` (default) in the output layout of
        :func:`cep_gpu.detect`; ``output="records"`` as a list of dicts (``rule``, ``ts``, ``ids``
        as a tuple, then the attributes, nulls as ``None``; the form subscribers get), which
        skips building a DataFrame: the fast form for one event per publish;
        ``output="tuples"`` as a list of tuples of the same values in the order of
        :attr:`output_fields` (no dict per composite event); ``output="arrow"`` as a
        :class:`pyarrow.Table` with the columns and rows of ``detect(..., output="arrow")``,
        built from the result arrays without pandas and without a Python object per composite
        event: the form for micro-batches that produce many composite events;
        ``output="columns"`` as a dict of NumPy arrays (``rule``, ``ts``, ``ids`` one row per
        composite event padded with -1, ``ids_len``, ``id_counts`` for Kleene rules, each
        attribute a masked array: see :func:`cep_gpu.output.assemble_columns`), with no pyarrow
        either: the cheapest form for small micro-batches.

        Raises :class:`~cep_gpu.EngineClosedError` after :meth:`flush`: a match that ``flush``
        released (trailing ``NOT``) could no longer be withdrawn by a later event.
        """
        if self._closed:
            self._check_open("publish")
        if output not in _OUTPUTS:
            _check_output(output)
        if self._shedding is not None and not self._shedding.inside:  # DARLING (docs/shedding.md)
            return self._shedding.publish(self, events, output)
        if type(events) is dict and self._lateness is None:
            typ = type(events.get("type"))
            fast = self._publish_row(events, output) if typ is str or typ is np.str_ else \
                self._publish_columns(events, output) if typ is np.ndarray else None
            if fast is not None:
                return fast
        time_before = self._time
        try:
            new, n_rows = self._ingest(events)
            if self._lateness is None:
                self._check_in_order(new, time_before)
        except BaseException:
            # a refused publish leaves no trace: not even the time format it would have fixed
            # (or widened to float64), so later outputs keep the stream's ts dtype
            self._time = time_before
            raise
        if self._lateness is None:
            released = new
        else:
            released = self._admit_late(new)
        self._published += n_rows
        if len(new):
            self._max_id = max(self._max_id, int(new.ids.max()))
        self._next_id = max(self._next_id + n_rows, self._max_id + 1)
        return self._process(released, final=False, output=output)

    def flush(self, output: str = "pandas") -> pd.DataFrame | pa.Table | dict | list[dict] | list[tuple]:
        """End of input: release buffered late events and the matches held back by trailing
        negations; returns the composite events this produces.

        ``flush`` ends the input: a later :meth:`publish` raises
        :class:`~cep_gpu.EngineClosedError`; a second ``flush`` returns no rows.
        """
        _check_output(output)
        if self._closed:
            return self._nothing(output)
        self._closed = True
        released = self._late_buffer
        self._late_buffer = None
        return self._process(released, final=True, output=output)

    def subscribe(self, rule_name: str, callback: Callable[[list[dict]], None]) -> None:
        """Call ``callback(list of composite events as dicts)`` whenever ``rule_name`` produces some.

        Each dict has ``rule``, ``ts``, ``ids`` (a tuple) and the rule's attributes.

        A callback that raises does not abort :meth:`publish`: the exception is logged (logger
        ``cep_gpu.engine``), counted in ``stats()["callback_errors"]`` and kept (the last 100) in
        ``stats()["callback_error_list"]``; the other callbacks still run and ``publish`` still
        returns every composite event.
        """
        names = {r.name for r in self.rules}
        if not isinstance(rule_name, str) or rule_name not in names:
            raise ArgumentError(f"subscribe: no rule named {rule_name!r}; rules: {sorted(names)}")
        if not callable(callback):
            raise ArgumentError(f"subscribe: callback must be callable, got {callback!r}")
        self._subscribers.setdefault(rule_name, []).append(callback)

    # -- checkpoints ------------------------------------------------------------------------------

    def checkpoint(self, path: str | os.PathLike | None = None) -> bytes:
        """The engine's whole state as bytes (also written to ``path`` when given).

        :meth:`restore` gives an engine that goes on exactly where this one stands: the same
        composite events from the next publish on, none lost and none repeated. Saved: the rules,
        the buffer (events still inside some window, held terminators, consumed events, events
        waiting for the lateness watermark), the string dictionary, ids, counters and settings.
        Not saved: subscribers and ``on_late`` (functions; subscribe again after restoring), the
        backend object (made anew from its name).
        """
        state = {k: v for k, v in self.__dict__.items() if k not in _NOT_CHECKPOINTED}
        state["_states"] = settled_states(self._states, self._fast, self._buf)  # (consumed sets the fast path owns)
        data = _CHECKPOINT_MAGIC + pickle.dumps(
            {"version": _CHECKPOINT_VERSION, "state": state}, protocol=pickle.HIGHEST_PROTOCOL
        )
        if path is not None:
            try:
                with open(path, "wb") as f:
                    f.write(data)
            except OSError as exc:
                raise ArgumentError(f"checkpoint: cannot write {str(path)!r}: {exc}") from None
        return data

    @classmethod
    def restore(
        cls,
        checkpoint: bytes | str | os.PathLike,
        on_late: Callable[[list[dict]], None] | None = None,
    ) -> Engine:
        """An engine in the state a :meth:`checkpoint` saved (the bytes, or a file path).

        The checkpoint is a pickle: restore only checkpoints you wrote yourself.
        """
        if isinstance(checkpoint, str) and checkpoint.startswith(_CHECKPOINT_MAGIC.decode("latin1")):
            raise ArgumentError("restore: got the checkpoint as text (str); pass the bytes that "
                                "Engine.checkpoint() returned, or a file path")
        if isinstance(checkpoint, (str, os.PathLike)):
            try:
                with open(checkpoint, "rb") as f:
                    checkpoint = f.read()
            except (OSError, ValueError) as exc:  # ValueError: a path with a NUL byte
                raise ArgumentError(f"restore: cannot read checkpoint file {str(checkpoint)[:200]!r}: {exc}") from None
        if isinstance(checkpoint, memoryview):
            checkpoint = checkpoint.tobytes()
        if not isinstance(checkpoint, (bytes, bytearray)) or not bytes(checkpoint).startswith(_CHECKPOINT_MAGIC):
            raise ArgumentError("restore: not an Engine checkpoint (expected the bytes of Engine.checkpoint())")
        try:
            saved = pickle.loads(bytes(checkpoint)[len(_CHECKPOINT_MAGIC):])
        except Exception as exc:  # noqa: BLE001 - a truncated or corrupt file: say so
            raise ArgumentError(f"restore: the checkpoint is damaged ({type(exc).__name__}: {exc})") from None
        if not isinstance(saved, dict):
            raise ArgumentError(f"restore: the checkpoint is damaged (it holds a {type(saved).__name__}, "
                                "not an engine's state)")
        if saved.get("version") != _CHECKPOINT_VERSION:
            raise ArgumentError(
                f"restore: checkpoint format {saved.get('version')!r}, this cep-gpu reads {_CHECKPOINT_VERSION}"
            )
        from .planner import backend_for

        state = saved.get("state")
        missing = sorted(_CHECKPOINT_REQUIRED - set(state)) if isinstance(state, dict) else ["state"]
        if missing:
            raise ArgumentError(f"restore: the checkpoint is damaged (no {', '.join(missing)})")
        eng = cls.__new__(cls)
        eng.__dict__.update(state)
        eng._backend = backend_for(eng.backend_name, eng.max_batch_latency, private=True)
        eng._on_late = on_late
        eng._subscribers = {}
        eng._timed = {}
        eng._callback_errors = []
        if "_tie_order" not in eng.__dict__:  # a checkpoint made before the tie-order checks
            eng._tie_order = _tie_order_rules(eng.rules)
            made_by = producers(eng.rules)
            for i, st in eng._states.items():
                st.settle = _order_sensitive(eng.rules[i], st.term_types, made_by)
        if "_fast_why" not in eng.__dict__:  # a checkpoint of an engine without the fast path
            eng._init_fast()
        eng._fast = {}  # rebuilt from the buffer on first use
        eng._auto_choice = None
        return eng

    def stats(self) -> dict:
        """Counters: events published/released/buffered, composite events per rule, the work
        handed to the backend and, where the backend keeps its own (``auto``: the planner's
        decisions and time per device), its statistics. Keys are listed in docs/api.md."""
        own = getattr(self._backend, "stats", None)
        return {
            "events": self._published,
            "released": self._released,
            "buffered": len(self._buf),
            "buffer_capacity": self._buf.capacity,
            "waiting_late": 0 if self._late_buffer is None else len(self._late_buffer),
            "expired": self._expired,
            "late": len(self._late_events),
            "late_events": list(self._late_events),
            "composites": {self.rules[i].name: 0 for i in self._order}
            | _sum_by_name(self.rules, {i: s.composites for i, s in self._states.items()}),
            "held": _sum_by_name(self.rules, {i: len(s.pending) for i, s in self._states.items()}),
            "newest_ts": None if self._newest is None else self._fmt_ts(self._newest),
            "backend": self.backend_name,
            "max_batch_latency": self.max_batch_latency,
            "backend_calls": self._backend_calls,
            "backend_seconds": self._backend_seconds,
            "backend_stats": own() if callable(own) else None,
            "callback_errors": self._n_callback_errors,
            "callback_error_list": list(self._callback_errors),
            "closed": self._closed,
            "shedding": None if self._shedding is None else self._shedding.stats(),
            "fast_path": {
                "calls": self._fast_calls,
                "fallbacks": self._fast_fallbacks,
                "rebuilds": sum(m.rebuilds for _, m in self._fast.values()),
                "rules": {self.rules[i].name: why or "fast" for i, why in self._fast_why.items()},
            },
        }

    def explain(self, events=None) -> str:
        """Per rule: its plans (columns with their filters, windows, binding order), negations,
        aggregates, lookback and delay; what the backend says about it (its ``explain``; ``auto``:
        the planner's profile and its last decisions).

        ``events`` (optional): a DataFrame or Arrow table of sample events (in ``time_unit``), or
        a mapping event type -> events per second of event time. Then the planner also reports,
        per rule, the expected events per window of each column, its decision and the CPU and GPU
        estimates behind it (for backends other than ``auto``: what ``auto`` would decide).
        Nothing is published.
        """
        from .planner import explain_plan

        sample = self._explain_sample(events)
        lines = [f"Engine: {len(self.rules)} rule(s), backend={self.backend_name!r}, "
                 f"lookback={duration(self._lookback)}"]
        if self._lateness is not None:
            lines.append(f"allowed lateness: {duration(self._lateness)}")
        for i in self._order:
            rule = self.rules[i]
            head, *rest = rule_lines(rule)
            lines.append(head)
            if self._states[i].delay:
                lines.append(f"  matches held back {duration(self._states[i].delay)} (trailing negation)")
            elif self._states[i].settle:
                lines.append("  matches held back until a later timestamp (composite events of the "
                             "terminator's timestamp come first in (ts, id) order)")
            lines.extend(rest)
            timed = in_time_units(rule, sample.time) if isinstance(sample, EventTable) else rule
            extra = [self._backend.explain(timed, sample)]
            if sample is not None and self.backend_name != "auto":
                extra.append("planner (what backend='auto' would do):")
                extra.append(explain_plan(timed, sample))
            for part in extra:
                if part:
                    lines.extend("  " + s for s in str(part).splitlines())
        return "\n".join(lines)

    def _explain_sample(self, events):
        """``events`` of :meth:`explain` as an EventTable or a rate mapping (no engine state changes)."""
        if events is None:
            return None
        if isinstance(events, Mapping):
            from .planner.explain import check_rates

            return check_rates(events, "explain(events)")
        if isinstance(events, pa.Table):
            return EventTable.from_arrow(events, time_unit=self._time_unit, sort=True)
        if not isinstance(events, pd.DataFrame):
            raise EventError(
                "explain(events) takes a DataFrame or Arrow table of sample events, or a mapping "
                f"event type -> events per second; got {type(events).__name__}"
            )
        return EventTable.from_pandas(events, time_unit=self._time_unit, sort=True)

    # -- ingestion --------------------------------------------------------------------------------

    def _ingest(self, events) -> tuple[EventTable, int]:
        """The published events as a sorted table with running ids, and their number.

        Changes no state (but the time format), so that a rejected publish leaves no trace.
        """
        if isinstance(events, Mapping) and _is_columnar(events):
            fast = table_from_columns(events, self._next_id, self._time_unit, self._strings)
            if fast is not None:  # plain NumPy columns: no Arrow, no pandas
                self._check_time(fast.time, fast.ts)
                return self._checked(fast), len(fast)
            events = _arrow_of_columns(events)
        if isinstance(events, dict):
            fast = table_from_record(events, self._next_id, self._time_unit, self._strings)
            if fast is not None:
                self._check_time(fast.time, fast.ts)
                return self._checked(fast), 1
            events = pd.DataFrame([events])
        if isinstance(events, pa.Table):
            n = events.num_rows
            require_columns(list(events.column_names))  # (before the ids this adds: the user's columns)
            if "id" not in events.column_names:
                events = events.append_column("id", pa.array(np.arange(self._next_id, self._next_id + n, dtype=np.int64)))
            new = EventTable.from_arrow(events, time_unit=self._time_unit, strings=self._strings, sort=True)
        elif isinstance(events, pd.DataFrame):
            n = len(events)
            require_columns([str(c) for c in events.columns])
            if "id" not in events.columns:
                events = events.assign(id=np.arange(self._next_id, self._next_id + n, dtype=np.int64))
            new = EventTable.from_pandas(events, time_unit=self._time_unit, strings=self._strings, sort=True)
        else:
            raise EventError(
                f"publish() takes a dict (one event), a dict of columns (column name -> array), a "
                f"DataFrame or an Arrow table, got {type(events).__name__}"
                + (": publish a list of events as pandas.DataFrame(events)" if isinstance(events, list) else "")
            )
        self._check_time(new.time, new.ts)
        return self._checked(new), n

    def _checked(self, new: EventTable) -> EventTable:
        """``new`` after the checks that need the stream (duplicate ids, attribute kinds), in the
        stream's time format: what would fail once the rows are in goes wrong here, before any
        counter or buffer changes."""
        ids = new.ids
        if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # (rising ids cannot repeat)
            seen, counts = np.unique(ids, return_counts=True)
            if (counts > 1).any():
                raise EventError(f"column 'id' has duplicate id {int(seen[counts > 1][0])}")
        held = [t for t in (self._buf.table(), self._late_buffer) if t is not None]
        if len(new) and int(ids.min()) <= self._max_id:  # ids that may repeat: look them up
            for other in held:
                dup = np.isin(ids, other.ids)
                if dup.any():
                    raise EventError(f"duplicate event id {int(ids[dup][0])}: already published")
        # the kinds a publish brings (a string compared with '<', Avg of strings) are rule errors,
        # as in detect; rows of known kinds take the record path and skip this
        check_schema(self.rules, new, require_attributes=False)
        for other in held:
            other.check_joinable(new)  # an attribute that changes kind (only int and float mix)
        if self._time is not None:
            new.time = self._time
        return new

    def _check_in_order(self, new: EventTable, time_before: TimeFormat | None) -> None:
        """Refuse ``new`` (without allowed lateness) when it starts before the newest event
        already published, or breaks the (ts, id) order a rule depends on (``time_before``: the
        stream's time format before this publish, in which the newest event is named)."""
        if self._newest is not None and len(new) and new.ts[0] < self._newest:
            raise LateEventError(
                f"late event {_describe(new, 0)}: older than the newest event already "
                f"published ({self._fmt_ts(self._newest, time_before)}); events must come in "
                "timestamp order, or create the Engine with allowed_lateness"
            )
        if self._tie_order and self._newest is not None and len(new) and new.ts[0] == self._newest:
            self._check_tie_order(new)

    def _check_tie_order(self, new: EventTable) -> None:
        """Refuse events of the newest timestamp with an id below one already published at it
        (``new`` is in (ts, id) order) when a rule depends on the order of events of one timestamp:
        its terminators of that timestamp were already processed, so batch ``detect`` and the
        stream would differ. (Without explicit ids, ids grow with the stream and this never
        happens; the fast one-event and columns paths leave ids not above the largest published
        to the general path, which checks here.)"""
        top = self._top_id_at_newest()
        if top is not None and int(new.ids[0]) < top:
            rules = ", ".join(repr(n) for n in self._tie_order[:3]) + (", ..." if len(self._tie_order) > 3 else "")
            raise LateEventError(
                f"late event {_describe(new, 0)}: it has the timestamp of the newest event already "
                f"published but a smaller id than id={top}, published before it; events of one "
                f"timestamp are ordered by id, and rule(s) {rules} (AND, consuming) depend on that "
                "order: publish events of one timestamp in id order (or together in one publish)"
            )

    def _top_id_at_newest(self) -> int | None:
        """The largest id released at the newest timestamp (the buffer's rows are in (ts, id)
        order), or None."""
        store, start, end = self._buf.store()
        if store is None or end <= start or int(store.ts[end - 1]) != self._newest:
            return None
        return int(store.ids[end - 1])

    def _check_time(self, fmt: TimeFormat, ts: np.ndarray) -> None:
        """The stream's time format after a publish of format ``fmt`` and timestamps ``ts``
        (:func:`cep_gpu.events.stream_time`: the first publish with rows fixes it)."""
        self._time = stream_time(self._time, fmt, ts, self._unreported_ts)

    def _unreported_ts(self) -> np.ndarray:
        """Timestamps (int64 ns) of earlier events that a later output may still report as a
        composite event's ``ts``: the terminators held back (trailing ``NOT``, or waiting for a
        later timestamp) and the late-buffered events. (Only read when float timestamps widen an
        integer stream: these must stay exact in float64.)"""
        parts = [self._late_buffer.ts] if self._late_buffer is not None else []
        pending = [st.pending for st in self._states.values() if len(st.pending)]
        buf = self._buf.table() if pending else None
        if buf is not None:
            parts.append(buf.ts[np.isin(buf.ids, np.concatenate(pending))])
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def _admit_late(self, new: EventTable) -> EventTable | None:
        """Lateness mode: buffer ``new``, report what is too late, release what the watermark passed."""
        if len(new):
            too_late = new.ts < self._newest if self._newest is not None else np.zeros(len(new), bool)
            top = self._top_id_at_newest() if self._tie_order and self._newest is not None else None
            if top is not None:  # (ts, id) before a released event: as late, for AND / consuming
                too_late |= (new.ts == self._newest) & (new.ids < top)
            if too_late.any():
                self._report_late(new.take(np.flatnonzero(too_late)))
                new = new.take(np.flatnonzero(~too_late))
            seen = int(new.ts.max()) if len(new) else self._max_seen
            self._max_seen = seen if self._max_seen is None else max(self._max_seen, seen)
            if len(new):
                self._late_buffer = new if self._late_buffer is None else self._late_buffer.concat(new)
        if self._late_buffer is None or self._max_seen is None:
            return None
        watermark = self._max_seen - self._lateness
        cut = int(np.searchsorted(self._late_buffer.ts, watermark, "right"))
        released = self._late_buffer.take(np.arange(cut))
        rest = self._late_buffer.take(np.arange(cut, len(self._late_buffer)))
        self._late_buffer = rest if len(rest) else None
        return released

    def _report_late(self, late: EventTable) -> None:
        records = replace(late, time=self._time).to_pandas().to_dict("records")
        self._late_events.extend(records)
        for rec in records:
            log.warning(
                "event %s is later than the allowed lateness (already released up to %s); "
                "it is reported, not processed", rec, self._fmt_ts(self._newest)
            )
        if self._on_late is not None:
            self._call(self._on_late, records, "late events")

    # -- processing -------------------------------------------------------------------------------

    def _publish_row(self, rec: dict, output: str):
        """One plain event straight into the buffer (no table, no pandas); ``None`` (nothing
        changed but maybe the string dictionary) when the general path must handle it: the
        errors (late, duplicate id, a new time format) and the rare cases come from there."""
        row = parse_record(rec, self._next_id, self._time_unit, self._strings)
        if row is None or self._time is None or self._time.kind != "numeric":
            return None
        if row.id <= self._max_id or (self._newest is not None and row.ts < self._newest):
            return None
        if row.ts_dtype != self._time.dtype and not (self._time.dtype == "float64" and -_FLOAT_EXACT <= row.ts <= _FLOAT_EXACT):
            return None  # another dtype than the stream's: the general path checks (or widens) it
        if not self._buf.append_row(row):
            return None
        self._appended(1, row.id, row.ts if self._newest is None else max(self._newest, row.ts))
        return self._match(np.array([row.id], np.int64), {row.type}, False, output)

    def _publish_columns(self, cols: dict, output: str):
        """A micro-batch of NumPy columns straight into the buffer (no table in between) in the
        plain case (:meth:`AppendBuffer.append_columns`); ``None`` (nothing changed) when the
        general path must handle it: new types or columns, nulls, strings, unsorted rows, and
        every error come from there."""
        time_fmt = self._time
        if time_fmt is None or time_fmt.kind != "numeric":
            return None
        got = self._buf.append_columns(cols, self._next_id, UNIT_NS[self._time_unit], time_fmt.dtype,
                                       _INT64_MIN if self._newest is None else self._newest, self._max_id)
        if got is None:
            return None
        ids, types, top = got
        self._appended(len(ids), max(self._max_id, top), int(self._buf.last_ts()))
        return self._match(ids, set(types), False, output)

    def _appended(self, n: int, max_id: int, newest: int) -> None:
        """The counters after ``n`` rows went straight into the buffer (published and released)."""
        # an event without an id gets its position in the stream, or, once a given id went past
        # that, the next id after the largest: never an id already published
        self._next_id = max(self._next_id + n, max_id + 1)
        self._published += n
        self._released += n
        self._max_id = max_id
        self._newest = newest

    def _process(self, released: EventTable | None, final: bool, output: str = "pandas"):
        new_ids = np.empty(0, np.int64)
        new_types: set[str] = set()
        if released is not None and len(released):
            self._buf.append(released)
            newest = int(released.ts.max())
            self._newest = newest if self._newest is None else max(self._newest, newest)
            self._released += len(released)
            new_ids = released.ids
            new_types = _type_names_of(released)
        elif released is not None and not self._buf.filled:
            self._buf.append(released)  # an empty first publish still fixes the columns
        return self._match(new_ids, new_types, final, output)

    def _match(self, new_ids: np.ndarray, new_types: set[str], final: bool, output: str):
        """Match every rule on its new and ready held terminators, expire, deliver."""
        results = []
        if self._buf.filled:
            for i in self._order:
                st = self._states[i]
                new_term = st.term_types & new_types
                if not (len(st.pending) or new_term):
                    continue  # no terminator to match: a non-terminator costs nothing here
                if not (new_term or final) and st.held_ts is not None and st.held_ts + st.delay >= self._newest:
                    continue  # held terminators, none of them ready yet (no pass over the buffer)
                res = self._run_fast(i, new_ids, final) if self._fast_why[i] is None else None
                if res is None:
                    got = self._fast.get(i)
                    if got is not None:  # (the consumed set, if the fast path owns it)
                        got[1].hand_back(st, self._buf)
                    res = self._run_rule(i, new_ids, final)
                if not len(res.ts):
                    continue
                results.append(res)
                if self.rules[i].name in self._read_types:
                    cids = composite_ids(res.rule.name, res.ids, res.lengths, res.sizes)
                    new_ids = np.concatenate([new_ids, cids])
                    new_types = new_types | {res.rule.name}
                    self._buf.append(composite_table(res, cids, self._buf.table()))
            self._expire()
        if not results:
            return self._nothing(output)
        records = self._records(results) if output == "records" or self._subscribers else None
        if records is not None:
            self._notify(records)
        if output == "tuples":
            return self._records(results, tuples=True)
        if output == "arrow":
            return self._output(results, arrow=True)
        if output == "columns":
            return self._columns(results)
        return records if output == "records" else self._output(results)

    def _nothing(self, output: str):
        """No composite event, in the ``output`` form."""
        if output in ("records", "tuples"):
            return []
        if output == "columns":
            # a new dict of the cached empty arrays (length 0: nothing in them to change)
            return dict(_cached(_EMPTY_FRAMES, (self._schema, self._time, "columns"), lambda: self._columns([])))
        return self._empty_output(arrow=output == "arrow")

    def _empty_output(self, arrow: bool = False) -> pd.DataFrame | pa.Table:
        """The empty output frame or Arrow table (built once per output schema, time format and
        form, for every engine: it depends on nothing else; a frame is copied, so callers may
        mutate it; an Arrow table is immutable)."""
        frame = _cached(_EMPTY_FRAMES, (self._schema, self._time, arrow), lambda: self._output([], arrow=arrow))
        return frame if arrow else frame.copy()

    def _timed_rule(self, i: int, time: TimeFormat) -> Rule:
        """Rule ``i`` in the stream's time unit (``in_time_units`` hashes the whole rule: ~15 us,
        so the engine keeps its own small cache)."""
        key = (i, time)
        rule = self._timed.get(key)
        if rule is None:
            rule = self._timed[key] = in_time_units(self.rules[i], time)
        return rule

    def _run_fast(self, i: int, new_ids: np.ndarray, final: bool = False):
        """Rule ``i``'s new terminators (or, with a trailing ``NOT``, its held ones now ready)
        through its incremental matcher (one compiled call); ``None`` when this call takes the
        general path (``auto`` chose the GPU, or some new row is not among the rows since the
        matcher's last sync)."""
        buf = self._buf
        got = self._fast.get(i)
        if got is None or (got[0] is not self._time and got[0] != self._time):
            if got is not None:
                got[1].hand_back(self._states[i], buf)
            got = self._fast[i] = (self._time, matcher_for(self._timed_rule(i, self._time), self._states[i].delay,
                                                    self._states[i].settle))
        matcher = got[1]
        if matcher.max_rows is not None and len(new_ids) > matcher.max_rows:  # the indexed general path
            matcher.skip(buf)
            return None
        if self.backend_name == "auto":
            choice = self._auto_choice
            if choice is None:
                choice = self._auto_choice = AutoChoice(self._backend)
            n = len(buf)
            if choice.device(i, matcher.rule, buf, max(0, n - len(new_ids)), n) != "cpu":
                matcher.skip(buf)
                return None
        t0 = time.perf_counter()
        matches = matcher.run(self._states[i], buf, new_ids, self._newest, final)
        if matches is None:
            self._fast_fallbacks += 1
            return None
        dt = time.perf_counter() - t0
        self._backend_seconds += dt
        self._backend_calls += 1
        self._fast_calls += 1
        if self.backend_name == "auto":
            self._auto_choice.record(matcher.rule, matcher.terminators, dt)
        res = matcher.composites(buf, matches)
        self._states[i].composites += len(res.ts)
        return res

    def _run_rule(self, i: int, new_ids: np.ndarray, final: bool):
        """Match rule ``i`` on its terminators that are new or held back and now ready."""
        st, buf = self._states[i], self._buf.table()
        rule = self._timed_rule(i, self._time or buf.time)
        codes = np.array([c for c in (buf.type_code(t) for t in st.term_types) if c >= 0], np.int32)
        # nothing held and the new rows last (one event per publish, with the composite events
        # it made): only those rows can be terminators to match, so the masks cover them, not
        # the whole buffer (exact: earlier rows are neither new nor held, so no run starts or
        # ends among them)
        tail = len(buf) - len(new_ids)
        if len(st.pending) or not len(new_ids) or not new_rows_last(buf.ids, new_ids, 0, len(buf)):
            tail = 0
        ids = buf.ids[tail:]
        is_term = _member(buf.types[tail:], codes)
        if len(new_ids):
            st.pending = np.concatenate([st.pending, ids[is_term & _member(ids, new_ids)]])
        pending = is_term & _member(ids, st.pending)
        ready = pending.copy()
        if (st.delay or st.settle) and not final:
            # a trailing span (ts, ts + delay] is settled once a later event has been released;
            # its end saturates at the int64 range (a wrapped-around sum would read as settled)
            ready &= shifted_ts(buf.ts[tail:], st.delay) < self._newest
        excluded = _in_sorted(buf.ids, st.consumed) if len(st.consumed) else None
        parts: list[Matches] = []
        for lo, hi in ((lo + tail, hi + tail) for lo, hi in _runs(ready, is_term)):
            t0 = time.perf_counter()
            m = self._backend.match(rule, buf, lo, hi, excluded)
            self._backend_seconds += time.perf_counter() - t0
            self._backend_calls += 1
            parts.append(m)
            if rule.consuming and len(m):
                if excluded is None:
                    excluded = np.zeros(len(buf), bool)
                excluded[m.rows[:, list(rule.consuming)].ravel()] = True
        matches = Matches.concat(rule, parts)
        if rule.consuming and len(matches):
            used = buf.ids[matches.rows[:, list(rule.consuming)].ravel()]
            st.consumed = _with(st.consumed, used)
        done = ids[ready]
        if len(done) == len(st.pending):  # the usual case: every held terminator was ready
            st.pending = np.empty(0, np.int64)
        elif len(done):
            st.pending = st.pending[~_member(st.pending, done)]
        held = buf.ts[tail:][pending & ~ready] if len(st.pending) else ()
        st.held_ts = int(held.min()) if len(held) == len(st.pending) and len(held) else None
        res = composite_events(rule, buf, matches)
        st.composites += len(res.ts)
        return res

    def _expire(self) -> None:
        """Drop rows that no window of any rule (pending terminators included) can still read."""
        ts = self._buf.ts
        if self._lookback is None or not len(ts):
            return
        horizon = self._newest
        for st in self._states.values():
            if len(st.pending):
                if st.held_ts is None:  # (unknown: a restored checkpoint of an older version)
                    buf = self._buf.table()
                    st.held_ts = int(buf.ts[np.isin(buf.ids, st.pending)].min())
                horizon = min(horizon, st.held_ts)
        cutoff = horizon - self._lookback
        if ts[0] >= cutoff:
            return  # nothing to drop (the usual case between two expiries)
        n_old = int(ts.searchsorted(cutoff, "left"))  # (the method: no NumPy dispatch wrapper)
        if n_old == 0:
            return
        # the dropped rows' ids leave the consumed sets (sorted: a binary search per dropped id,
        # not a membership test of every consumed id against the whole buffer per event)
        store, first, _ = self._buf.store()
        dropped = store.ids[first:first + n_old].copy() \
            if any(len(st.consumed) for st in self._states.values()) else ts[:0]
        self._buf.drop_front(n_old)
        self._expired += n_old
        for st in self._states.values() if len(dropped) else ():
            if len(st.consumed):
                st.consumed = _without(st.consumed, dropped)

    # -- output -----------------------------------------------------------------------------------

    def _out_table(self) -> EventTable:
        """What the output assembly reads of the events: the string dictionary and the stream's
        time format, as an empty table (cached per time format: building a view of the buffer
        for these two took 10-13 us per publish)."""
        cached = self.__dict__.get("_out_cache")
        if cached is not None and cached[0] is self._time and cached[1] is self._strings:
            return cached[2]
        time_fmt = self._time
        if time_fmt is None:
            table = self._buf.table()
            time_fmt = table.time if table is not None else None
        table = _empty_table(self._strings, time_fmt)
        self._out_cache = (self._time, self._strings, table)
        return table

    def _output(self, results, arrow: bool = False) -> pd.DataFrame | pa.Table:
        return assemble(results, self._schema, self._out_table(), arrow=arrow)

    def _columns(self, results) -> dict[str, np.ndarray]:
        return assemble_columns(results, self._schema, self._out_table())

    def _notify(self, records: list[dict]) -> None:
        """Call the subscribers with their rules' composite events (copies: a callback that
        changes its records changes nothing else)."""
        if not self._subscribers:
            return
        by_rule: dict[str, list[dict]] = {}
        for rec in records:
            by_rule.setdefault(rec["rule"], []).append(rec)
        for name, callbacks in self._subscribers.items():
            for cb in callbacks if name in by_rule else ():
                self._call(cb, [dict(r) for r in by_rule[name]], name)

    @property
    def output_fields(self) -> tuple[str, ...]:
        """The fields of a composite event, in order: the keys of ``output="records"``, the
        positions of ``output="tuples"`` (``rule``, ``ts``, ``ids``, ``id_counts`` when a rule
        has a Kleene position, then every rule attribute: the pandas output's columns)."""
        schema = self._schema
        return _cached(_FIELDS, schema, lambda: ("rule", "ts", "ids", *(("id_counts",) if schema.kleene else ()),
                                                 *(a for a, _ in schema.attributes)))

    def _records(self, results, tuples: bool = False) -> list[dict] | list[tuple]:
        """Composite events as dicts (or tuples), without pandas: what :func:`composite_records`
        makes of the output frame (same order, keys, values and nulls), built straight from the
        results."""
        if sum(len(r.ts) for r in results) < 2048 or not gc.isenabled():
            return self._build_records(results, tuples)
        # Many new containers at once make Python's cyclic collector walk every object of the
        # process, repeatedly (measured: 6x the building time for 36,000 composite events);
        # these hold no cycles, so the collector pauses while they are built
        gc.disable()
        try:
            return self._build_records(results, tuples)
        finally:
            gc.enable()

    def _build_records(self, results, tuples: bool) -> list[dict] | list[tuple]:
        attrs = [(n, value_kind(results, n, k) if n in self._schema.inferred else k)
                 for n, k in self._schema.attributes]
        keys = self.output_fields
        rows: list = []
        for r in results:
            n = len(r.ts)
            ts = self._time.from_ns(r.ts)
            ts = list(ts) if isinstance(ts, pd.Series) else ts.tolist()
            ids = list(zip(*r.ids.T.tolist()))  # (tuples made by zip: a third faster than map(tuple))
            extra = []
            if self._schema.kleene:  # Kleene: ids padded after lengths[k]; id_counts per position
                ids = ids if r.lengths is None else [t[:m] for t, m in zip(ids, r.lengths.tolist())]
                sizes = [[1] * r.ids.shape[1]] * n if r.sizes is None else r.sizes.tolist()
                extra = [[list(c) for c in sizes]]
            cols = [_python_values(r.attributes.get(name), kind, self._strings, n) for name, kind in attrs]
            name = r.rule.name
            # one dict (tuple) per composite event, built by zip (no Python-level indexing per value)
            vals = zip(itertools.repeat(name, n), ts, ids, *extra, *cols)
            recs = list(vals) if tuples else _record_maker(keys)(vals)
            if len(results) == 1:
                return recs
            rows.extend(zip(r.ts.tolist(), itertools.repeat(name, n), ids, recs))
        rows.sort(key=lambda row: row[:3])  # one rule's results are sorted by (ts, ids) already
        return [row[3] for row in rows]

    def _call(self, callback: Callable, records: list[dict], what: str) -> None:
        """Run a user callback; an exception it raises is reported, never propagated, so that
        the engine's state (already advanced) and the other callbacks are not affected."""
        try:
            callback(records)
        except Exception as exc:  # noqa: BLE001 - user code: isolate whatever it raises
            self._n_callback_errors += 1
            self._callback_errors.append({"callback": callback, "for": what, "error": exc})
            del self._callback_errors[:-100]
            log.exception("callback %r for %s raised; publish goes on", callback, what)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise EngineClosedError(
                f"{what}() after flush(): flush() ends the input (it released the matches held "
                "back by trailing negations); create a new Engine, or restore() a checkpoint "
                "taken before flush"
            )

    def _fmt_ts(self, ns: int | None, time: TimeFormat | None = None):
        """A timestamp (int64 ns) in the stream's time format (or ``time``), for messages."""
        time = time or self._time
        if ns is None or time is None:
            return ns
        return time.from_ns(np.array([ns], np.int64))[0]


def composite_records(out: pd.DataFrame) -> list[dict]:
    """Rows of a ``detect``/``publish`` output as dicts (``ids`` as a tuple, nulls as None)."""
    records = []
    columns = [c for c in out.columns if c != "ids"]
    ids = out["ids"].tolist()
    for k, row in enumerate(out[columns].itertuples(index=False, name=None)):
        rec = {c: (None if _isnull(v) else v) for c, v in zip(columns, row)}
        rec["ids"] = tuple(int(x) for x in ids[k])
        if "id_counts" in rec:  # Kleene rules (docs/language.md)
            rec["id_counts"] = [int(x) for x in rec["id_counts"]]
        records.append({"rule": rec.pop("rule"), "ts": rec.pop("ts"), "ids": rec.pop("ids"), **rec})
    return records


_RECORD_MAKERS: dict[tuple, Callable] = {}
_FIELDS: dict[OutputSchema, tuple[str, ...]] = {}  # output schema -> Engine.output_fields
_NUMPY_DTYPES = {"int": np.int64, "float": np.float64, "bool": np.bool_}
_OUTPUTS = frozenset({"pandas", "arrow", "columns", "records", "tuples"})


def _record_maker(keys: tuple[str, ...]) -> Callable:
    """``rows -> [dict(zip(keys, row)) for row in rows]``, as a comprehension over a dict display
    whose keys are constants (a third of the time per record: no zip object, no generic dict
    constructor). The keys enter the source only as ``repr`` literals of plain strings."""
    if not keys or any(type(k) is not str for k in keys):
        return lambda rows: [dict(zip(keys, v)) for v in rows]

    def build() -> Callable:
        names = [f"v{i}" for i in range(len(keys))]
        display = ", ".join(f"{k!r}: {v}" for k, v in zip(keys, names))
        return eval(f"lambda rows: [{{{display}}} for ({', '.join(names)},) in rows]", {"__builtins__": {}})

    return _cached(_RECORD_MAKERS, keys, build)


def _cached(cache: dict, key, build: Callable):
    """``cache[key]``, built on a miss; the cache is emptied at 256 entries (schemas and time
    formats come and go in long sessions)."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= 256:
            cache.clear()
        value = cache[key] = build()
    return value


def _python_values(col: AttributeColumn | None, kind: str, strings: StringDictionary, n: int) -> list:
    """One attribute of ``n`` composite events as Python values of the output ``kind``, None for null."""
    if col is None:
        return [None] * n
    if kind == "string":
        if col.kind != "string":
            raise TypeError(f"attribute mixes strings with {col.kind} values")
        return strings.decode(np.where(col.valid, col.values, -1)).tolist()
    values = col.values.astype(_NUMPY_DTYPES[kind], copy=False)  # (tolist copies anyway)
    null = ~col.valid | np.isnan(values) if kind == "float" else ~col.valid
    if not null.any():
        return values.tolist()  # (the usual case: no object array)
    out = values.astype(object)
    out[null] = None
    return out.tolist()


def _isnull(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# -- helpers --------------------------------------------------------------------------------------


_INT64_MIN = -(2**63)
_FLOAT_EXACT = 2**53  # ns: the integers up to here are exact in a float64
_EMPTY_FRAMES: dict = {}  # (output schema, time format, form) -> the empty output (frame/table/columns)
_CHECKPOINT_MAGIC = b"cep-gpu engine checkpoint\n"
_CHECKPOINT_VERSION = 1
#: what every checkpoint's state holds (a damaged one may not)
_CHECKPOINT_REQUIRED = frozenset({"rules", "backend_name", "max_batch_latency", "_buf", "_strings"})
#: what a checkpoint leaves out: callables, the backend object (made anew), caches
_NOT_CHECKPOINTED = frozenset(
    {"_backend", "_on_late", "_subscribers", "_timed", "_callback_errors", "_fast",
     "_auto_choice", "_out_cache"}
)


def _member(a: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.isin(a, values)``, with comparisons for the usual one or few values (``isin``'s
    table method allocates the whole id range, which costs more than the match)."""
    if len(values) == 0:
        return np.zeros(len(a), np.bool_)
    if len(values) <= 4:
        out = a == values[0]
        for v in values[1:]:
            out |= a == v
        return out
    return np.isin(a, values, kind="sort")


def _with(consumed: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``np.union1d(consumed, ids)`` for a sorted unique ``consumed`` and a few ``ids``: an
    insertion at their sorted positions (a copy) instead of a sort of the whole set."""
    ids = np.unique(ids)
    pos = consumed.searchsorted(ids)
    new = ids[(pos == len(consumed)) | (consumed[np.minimum(pos, len(consumed) - 1)] != ids)] \
        if len(consumed) else ids
    return np.insert(consumed, consumed.searchsorted(new), new) if len(new) else consumed


def _in_sorted(a: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.isin(a, values)`` for a sorted ``values``: a binary search per element of ``a``
    (``isin`` sorts ``a`` and ``values`` together on every call)."""
    pos = values.searchsorted(a)
    np.minimum(pos, len(values) - 1, out=pos)
    return values[pos] == a


def _without(consumed: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``consumed`` (sorted, unique) without ``ids``: a binary search per id, a copy only on a hit."""
    pos = consumed.searchsorted(ids)
    inside = pos < len(consumed)
    pos = pos[inside]
    hit = pos[consumed[pos] == ids[inside]]
    return np.delete(consumed, hit) if len(hit) else consumed


def _check_output(output: str) -> None:
    if output not in _OUTPUTS:
        raise ArgumentError(
            f"output must be 'pandas', 'arrow', 'columns', 'records' or 'tuples', got {output!r}"
        )


def _type_names_of(table: EventTable) -> set[str]:
    """The event type names that occur in ``table``."""
    names = table.type_names
    if len(table) == 1:
        return {names[int(table.types[0])]}
    if len(names) == 1:
        return set(names) if len(table) else set()
    # (a count per code: np.unique sorts, 3 us for 100 rows)
    return {names[c] for c, k in enumerate(np.bincount(table.types, minlength=len(names)).tolist()) if k}


def _is_columnar(events: Mapping) -> bool:
    """A mapping of columns (arrays or lists), not one event: its ``type`` is not a scalar."""
    return isinstance(events.get("type"), (np.ndarray, list, tuple, pa.Array, pa.ChunkedArray, pd.Series, pd.Index,
                                           pd.api.extensions.ExtensionArray))


def _arrow_of_columns(columns: Mapping) -> pa.Table:
    """A mapping column name -> NumPy/Arrow array or list as an Arrow table (columnar publish)."""
    scalar = next((k for k, v in columns.items() if not hasattr(v, "__len__") or isinstance(v, (str, bytes))), None)
    if scalar is not None:
        raise EventError(f"publish(columns): column {scalar!r} is one value ({columns[scalar]!r}), not one value "
                         "per event: give it as an array as long as 'type' (or publish the events as dicts)")
    lengths = {k: len(v) for k, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise EventError(f"publish(columns): the columns differ in length: {lengths}")
    arrays = {}
    for k, v in columns.items():
        if getattr(getattr(v, "dtype", None), "kind", "") == "c":
            raise EventError(f"publish(columns): column {k!r} holds complex numbers; attributes are strings, "
                             "integers, floats or booleans")
        try:
            arrays[str(k)] = v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as exc:
            raise EventError(f"publish(columns): column {k!r} cannot be read as one array: {exc}") from None
    return pa.table(arrays)


def _tie_order_rules(rules: Sequence[Rule]) -> list[str]:
    """Names of the rules whose results depend on the (ts, id) order of events of one timestamp:
    AND (simultaneous events combine in that order) and consuming rules (terminators are
    processed in that order)."""
    return [r.name for r in rules if r.consuming or any(p.ties for plan in r.plans for p in plan.predicates)]


def _order_sensitive(rule: Rule, term_types: frozenset[str], made_by: dict[str, list[int]]) -> bool:
    """Whether ``rule``'s matches at a timestamp depend on composite events of that timestamp
    that may be made after its terminator arrives: an ``AND`` position (ties, in (ts, id) order)
    of a composite type, or a consuming rule whose terminators are composite events (processed in
    (ts, id) order). Such a rule's terminators wait until a later timestamp is released."""
    if any(p.ties and p.event_type in made_by for plan in rule.plans for p in plan.predicates):
        return True
    return bool(rule.consuming) and any(t in made_by for t in term_types)


def _runs(ready: np.ndarray, is_term: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` row ranges covering the ready terminators and no other terminator.

    Non-terminator rows inside a range do no harm (the backend only starts matches at rows of a
    terminator type); already processed terminators must stay outside.
    """
    term_rows = np.flatnonzero(is_term)
    k = np.flatnonzero(ready[term_rows])  # positions of the ready ones among the terminators
    if not len(k):
        return []
    # a run ends where the next terminator is not ready (vectorised: no Python loop per row)
    cut = np.flatnonzero(np.diff(k) != 1)
    first = k[np.concatenate([[0], cut + 1])]
    last = k[np.concatenate([cut, [len(k) - 1]])]
    return [(int(lo), int(hi) + 1) for lo, hi in zip(term_rows[first], term_rows[last])]


def _duration_ns(value, time_unit: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, (datetime.timedelta, np.timedelta64)) and not pd.isna(value):
        ns = int(pd.Timedelta(value).value)
    elif (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
          and math.isfinite(value)):
        ns = int(round(float(value) * UNIT_NS[time_unit]))
    else:
        raise ArgumentError(
            f"allowed_lateness must be a number (in time_unit) or a pandas Timedelta, got {value!r}"
        )
    if ns < 0:
        raise ArgumentError(f"allowed_lateness must not be negative, got {value!r}")
    return ns


def _max_lookback(rules: Sequence[Rule]) -> int | None:
    """The longest lookback of any rule (ns), or None when some window is unbounded."""
    if any(unbounded_window(r) for r in rules):
        return None
    return max((r.lookback() for r in rules), default=0)


def _sum_by_name(rules: Sequence[Rule], values: dict[int, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, v in values.items():
        out[rules[i].name] = out.get(rules[i].name, 0) + v
    return out


def _empty_table(strings: StringDictionary, time: TimeFormat | None) -> EventTable:
    return EventTable(
        ts=np.empty(0, np.int64), ids=np.empty(0, np.int64), types=np.empty(0, np.int32),
        type_names=[], columns={}, strings=strings, time=time or TimeFormat("numeric"),
    )


def _describe(table: EventTable, row: int) -> str:
    typ = table.type_names[table.types[row]]
    ts = table.time.from_ns(table.ts[row:row + 1])[0]
    return f"{typ}(id={int(table.ids[row])}, ts={ts})"


# -- explain --------------------------------------------------------------------------------------


__all__ = ["Engine", "composite_records"]
