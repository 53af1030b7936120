"""AIP: the automata-based incremental processing of the T-Rex chapter (section 3.1), ``backend="aip"``.

A second, independent implementation of the semantics of docs/language.md, built the way the
chapter describes T-Rex's automaton engine rather than around columns:

* **Automaton model.** Each rule compiles to an :class:`Automaton` made of linear
  :class:`SequenceModel` s. A sequence model lists the predicates of a plan in the order their
  events *arrive* (the binding order reversed); its last, accepting transition is the terminator.
  A plan whose ``from`` references form a tree (``each B within 5 s from T and each C within 5 s
  from T``) admits several arrival orders, so it gets one sequence model per order (a linear
  extension of "X happens before the predicate it is bound relative to"); a match is accepted by
  exactly one of them (the one that sorts its events by row, ties by declaration index).
* **Sequence instances.** The initial instance of every model waits in its initial state and never
  expires. An event that satisfies the type, content (static filters), timing and cross-event
  constraints of an instance's next transition *clones* the instance into the next state; the
  original stays. An instance is deleted when the time limit of a transition it still needs has
  passed (an event bound with ``within D from Y`` whose ``Y`` has not arrived after ``D``).
  Reaching the accepting state (the terminator) produces a complete instance, which is removed.
* **Selection.** ``last``/``first`` choose among the candidates that pass every check whose inputs
  are bound at that binding step (docs/language.md). The candidates of step ``k`` are exactly the
  complete instances of the *sub-plan* made of binding steps ``0..k``, so a plan gets one extra
  family of sequence models per ``last``/``first`` step. When the terminator arrives the complete
  instances are resolved step by step: per prefix (the rows of steps ``0..k-1``) the latest/earliest
  complete instance of sub-plan ``k`` is chosen, and deeper instances must agree with every choice.
  Early deletion (the chapter: "other composition operators (e.g., last-within) may enable early
  deletion of sequences"): in such a model the chosen predicate X arrives first, so when the next
  event clones several first-state instances whose X events are interchangeable (the same values
  of every attribute of X that a check reads; nothing reads X's timestamp), only the clone of the
  latest (``last``) / earliest (``first``) X is made; the others could never be chosen
  (:meth:`AipRun._prune`; in the chapter's Figure 2 with ``last``, V2 makes Seq31 and not Seq21).
  For ``last``, an older instance in the first state is also deleted once a newer instance with
  identical relevant attributes supersedes it (see :meth:`AipRun._supersede`). ``first`` allows no
  such deletion in the first state: the older event is preferred, but it leaves the window first.
* **Negations and aggregates** are checked when the instances are resolved, against a per-rule
  store of the negated/aggregated events (time-sorted, filtered by their static conditions). A rule
  whose spans reach past the terminator (a trailing ``SEQ`` ``NOT``) keeps the terminator pending
  until an event later than the span (or the end of the input) has arrived.

Why AIP keeps its own filtered stores and span searches instead of reading
:class:`~cep_gpu.columns.ColumnStore` and :mod:`cep_gpu.ranges`: it is the second, independent
implementation of the semantics, built the way the chapter's automaton engine works (events one
at a time, instances cloned and expired), and the differential test compares it with CDP. Sharing
CDP's columns and window ranges would let one bug there pass both.

:func:`trace` runs a rule and records the sequence instances alive after each event, named as in
the chapter's Figure 2 (``Seq``, its clones ``Seq1``, ``Seq2``, their clones ``Seq21``, ...).

Performance: the per-event loop is Python; each transition checks all instances of a state at once
with NumPy (timing and attribute comparisons against the new event are vectorised before any clone
is made; other conditions go through :mod:`cep_gpu.evaluate`), so no Python runs per candidate
comparison, but there is Python per event and per transition (tens of microseconds): the CPU CDP
backend is much faster on the same inputs, as the chapter's Figure 6 leads one to expect
(``bench/aip_quick.py`` measures both; docs/performance.md records the figures).
"""

from __future__ import annotations

import numpy as np

from ..backends import Matches, register
from ..events import EventTable
from ..model import Rule
from .automaton import Automaton, FastCompare, SequenceModel, automaton_of, compile_automaton
from .run import AipRun
from .trace import InstanceView, TraceStep


class AipBackend:
    """The automaton backend, implementing :class:`cep_gpu.backends.Backend`."""

    name = "aip"

    def explain(self, rule: Rule, sample=None) -> str:
        """The automaton of ``rule``: one line per sequence model (the same for every input)."""
        return "AIP automaton:\n" + "\n".join("  " + m for m in automaton_of(rule).describe().splitlines())

    def match(
        self,
        rule: Rule,
        table: EventTable,
        lo: int = 0,
        hi: int | None = None,
        excluded: np.ndarray | None = None,
    ) -> Matches:
        """Matches of ``rule`` whose terminator is a row in ``[lo, hi)`` (see the backend contract)."""
        hi = len(table) if hi is None else hi
        if hi <= lo or len(table) == 0:
            return Matches.empty(rule)
        run = AipRun(automaton_of(rule), table, lo, hi, excluded)
        run.run()
        return run.matches()



def trace(rule: Rule, table: EventTable) -> list[TraceStep]:
    """Run ``rule`` over ``table`` with AIP, recording the instances alive after each event.

    Every event (row) gives one :class:`TraceStep`: the instances alive after it (the initial
    instance of each model, which never changes, is left out as in Figure 2), the instances that
    reached the accepting state on it, and the composite events (ids) produced on it.
    """
    run = AipRun(automaton_of(rule), table, 0, len(table), None, tracing=True)
    run.run()
    return run.trace_steps



register("aip", AipBackend)

__all__ = [
    "AipBackend",
    "AipRun",
    "Automaton",
    "FastCompare",
    "InstanceView",
    "SequenceModel",
    "TraceStep",
    "automaton_of",
    "compile_automaton",
    "trace",
]
