"""The rule model: plain, immutable data that both syntaxes compile to and every backend reads.

Vocabulary
----------
* Predicates are numbered in **declaration order** (the order of ``ids`` in the output): for a
  TESLA rule the terminator is 0, then the ``each/last/first`` predicates as written; for a
  ``SEQ``/``AND`` pattern, the positive positions in pattern order.
* A rule has one or more :class:`Plan` s. A plan fixes the timing of every predicate and the
  **binding order** (``plan.order[0]`` is the terminator). TESLA rules and ``SEQ`` patterns have
  one plan; ``AND(...)`` has one plan per possible last event.
* Every non-temporal constraint is an expression in ``Rule.conditions``: static filters
  (``value > 3.0``), parameters (compiled away: ``$p`` becomes the attribute that bound it),
  cross-event arithmetic, aggregate conditions and ``SEQ`` ``where`` conjuncts. A condition is
  checked at the binding step where the last of its inputs (:func:`inputs`) is bound.
* Times are int64 **nanoseconds** everywhere inside the engine.

Timing of a non-terminator predicate ``X`` in a plan::

    ts(anchor) - window  <=  ts(X)  <  ts(before)

(with ``Predicate.ties``, the upper bound is ``(ts, id)(X) < (ts, id)(before)``: row order).

TESLA ``each X within D from Y``: ``anchor = before = Y``, ``window = D``.
``SEQ(a, b, c) within W`` (plan bound c, b, a): ``b``: anchor c, before c; ``a``: anchor c,
before b; both with ``window = W``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

Policy = Literal["each", "last", "first"]
AggFunction = Literal["avg", "sum", "min", "max", "count"]
CompareOp = Literal["=", "!=", "<", "<=", ">", ">="]
ArithOp = Literal["+", "-", "*", "/"]
ValueType = Literal["string", "int", "float", "bool"]

#: ``Attr.pred`` of the event a negation or an aggregate ranges over (its "own" event); in a
#: Kleene position's conditions, the element being checked (``b[i]`` in a consecutive condition).
SELF = -1
#: ``Attr.pred`` of the next element of a Kleene set in a consecutive condition (``b[i+1]``).
NEXT = -2

#: A 1-based (line, column) in the rule text a model object was compiled from.
Pos = tuple[int, int]


def _pos() -> Pos | None:
    # Where the object was written: for error messages only, so it takes no part in eq/hash/repr
    # (two rules written differently but meaning the same stay equal).
    return field(default=None, compare=False, hash=False, repr=False)

# ----------------------------------------------------------------------------------------------
# Expressions


@dataclass(frozen=True)
class Const:
    """A literal: int, float, str or bool."""

    value: int | float | str | bool


@dataclass(frozen=True)
class Attr:
    """Attribute ``name`` of predicate ``pred`` (declaration index, or :data:`SELF`)."""

    pred: int
    name: str
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Timestamp:
    """The timestamp (int64 ns) of predicate ``pred``; usable in ``where``/``return`` and conditions."""

    pred: int


@dataclass(frozen=True)
class AggValue:
    """The value of ``Rule.aggregates[index]`` (null when an avg/min/max ranges over nothing)."""

    index: int


@dataclass(frozen=True)
class Arith:
    op: ArithOp
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Neg:
    """Unary minus."""

    arg: Expr


@dataclass(frozen=True)
class Compare:
    op: CompareOp
    left: Expr
    right: Expr
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class BoolOp:
    op: Literal["and", "or"]
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Not:
    arg: Expr


Expr = Const | Attr | Timestamp | AggValue | Arith | Neg | Compare | BoolOp | Not


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``expr``."""
    if isinstance(expr, (Arith, Compare)):
        return (expr.left, expr.right)
    if isinstance(expr, (Neg, Not)):
        return (expr.arg,)
    if isinstance(expr, BoolOp):
        return expr.args
    return ()


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, depth first, parents before children."""
    yield expr
    for c in children(expr):
        yield from walk(c)


# ----------------------------------------------------------------------------------------------
# Rule parts


@dataclass(frozen=True)
class Span:
    """A time span fixed by bound predicates, used by negations and aggregates.

    Bounds are ``ts(lo_ref) + lo_offset`` and ``ts(hi_ref) + hi_offset`` (ns). If the lower bound
    comes out above the upper one (only possible for ``between Y and Z`` with Z before Y) the two
    are swapped; ``between`` is exclusive at both ends so the flags do not matter then.

    * ``within D from Y``: ``Span(Y, -D, True, Y, 0, False)`` i.e. ``[Y - D, Y)``.
    * ``between Y and Z``: ``Span(Y, 0, False, Z, 0, False)``.
    * ``SEQ`` ``NOT`` between neighbours p, n: ``(p, n)``; leading: ``[last - W, first)``;
      trailing: ``(last, first + W]``.
    """

    lo_ref: int
    lo_offset: int
    lo_inclusive: bool
    hi_ref: int
    hi_offset: int
    hi_inclusive: bool

    @property
    def refs(self) -> frozenset[int]:
        return frozenset((self.lo_ref, self.hi_ref))


@dataclass(frozen=True)
class Kleene:
    """A Kleene position ``KL(T b)[min..max]``: binds a non-empty *set* of events (docs/language.md,
    "Kleene closure").

    The elements lie in the predicate's window and strictly after ``after`` (a bound predicate, or
    None for a leading position, whose window bounds it). ``conditions`` hold for every element
    (``Attr(SELF, ..)`` is the element, other predicates by index); ``consecutive`` for every pair
    of consecutive elements of the set (``SELF`` = ``b[i]``, ``NEXT`` = ``b[i+1]``). ``greedy``:
    the set is every element of the span that passes ``conditions`` (one set per binding of the
    other positions); otherwise every subset (skip-till-any-match) is a set.
    """

    min_size: int = 1
    max_size: int | None = None
    greedy: bool = False
    after: int | None = None
    conditions: tuple[Expr, ...] = ()
    consecutive: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class Predicate:
    """One positive event of a rule, as placed in one plan.

    ``policy``, ``window``, ``anchor`` and ``before`` are ``None`` for the terminator.

    ``ties``: how "before ``before``" is read. False (TESLA, ``SEQ``): a strictly earlier
    timestamp. True (``AND``): earlier in ``(ts, id)`` order, i.e. in row order, so an event at the
    same timestamp with a smaller id counts as earlier and simultaneous events combine exactly
    once (docs/language.md, "AND and simultaneous events").
    """

    event_type: str
    alias: str
    policy: Policy | None = None
    window: int | None = None
    anchor: int | None = None
    before: int | None = None
    ties: bool = False
    #: set for a Kleene position (binds a set of events): see :class:`Kleene`
    kleene: Kleene | None = None


@dataclass(frozen=True)
class Negation:
    """No event of ``event_type`` in ``span`` satisfying all ``conditions``.

    Conditions refer to the negated event as ``Attr(SELF, ...)``. Besides its own filters they may
    refer to bound predicates (parameters, ``SEQ`` ``where`` conjuncts that mention its alias).
    """

    event_type: str
    span: Span
    conditions: tuple[Expr, ...] = ()
    alias: str | None = None


@dataclass(frozen=True)
class Aggregate:
    """``function`` over ``attribute`` of the ``event_type`` events in ``span`` satisfying ``conditions``.

    ``attribute`` is ``None`` for ``count``. Over no events: count and sum are 0, avg/min/max are
    null (and a comparison with null is false). ``name`` is the variable usable in ``where``.
    """

    function: AggFunction
    event_type: str
    attribute: str | None
    span: Span
    conditions: tuple[Expr, ...] = ()
    name: str | None = None
    pos: Pos | None = _pos()
    #: set for an aggregate over the elements of a Kleene set (``sum(b.v)``): the Kleene
    #: predicate's index; ``span`` and ``conditions`` are then unused
    kleene: int | None = None


@dataclass(frozen=True)
class OutputAttribute:
    """One attribute of the composite event: ``name := expr``; ``type`` as declared (or inferred)."""

    name: str
    type: ValueType | None
    expr: Expr
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Plan:
    """The predicates of a rule with their timing, and the order in which they are bound."""

    predicates: tuple[Predicate, ...]
    order: tuple[int, ...]

    @property
    def terminator(self) -> int:
        return self.order[0]

    def step_of(self, pred: int) -> int:
        """The binding step (0 = terminator) at which declaration index ``pred`` is bound."""
        return self.order.index(pred)


@dataclass(frozen=True)
class Rule:
    """A compiled rule. Build it with :func:`cep_gpu.parse_rule`; backends only read it."""

    name: str
    plans: tuple[Plan, ...]
    conditions: tuple[Expr, ...] = ()
    negations: tuple[Negation, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    attributes: tuple[OutputAttribute, ...] = ()
    consuming: tuple[int, ...] = ()
    syntax: Literal["tesla", "seq"] = "tesla"
    text: str = field(default="", compare=False)
    #: The whole text the rule was compiled from (``pos`` fields are positions in it).
    source: str = field(default="", compare=False, repr=False)

    def error(self, message: str, pos: Pos | None = None):
        """A :class:`~cep_gpu.errors.RuleError` about this rule, showing the rule text with a caret
        under ``pos`` when it is known."""
        from .errors import RuleError

        if pos is None or not self.source:
            return RuleError(message)
        return RuleError(message, line=pos[0], column=pos[1], text=self.source)

    @property
    def predicates(self) -> tuple[Predicate, ...]:
        """The predicates of the first plan (types and aliases are the same in every plan)."""
        return self.plans[0].predicates

    @property
    def kleene_positions(self) -> tuple[int, ...]:
        """Declaration indices of the Kleene positions (empty for rules without Kleene closure)."""
        return tuple(i for i, p in enumerate(self.predicates) if p.kleene is not None)

    @property
    def n_predicates(self) -> int:
        return len(self.plans[0].predicates)

    @property
    def input_types(self) -> frozenset[str]:
        """Every event type the rule reads (positive, negated and aggregated)."""
        types = {p.event_type for p in self.predicates}
        types.update(n.event_type for n in self.negations)
        types.update(a.event_type for a in self.aggregates)
        return frozenset(types)

    def trailing_horizon(self) -> int:
        """How far (ns) after its terminator a match may still be rejected (trailing ``NOT``)."""
        return max((max(n.span.lo_offset, n.span.hi_offset, 0) for n in self.negations), default=0)

    def lookback(self) -> int:
        """An upper bound (ns) on how far before its terminator any event a match reads can lie.

        The longest chain of windows through anchors, with negation and aggregate spans added.
        Used to expire columns in streaming and to size the context of Spark time slices.
        """
        best = 0
        for plan in self.plans:
            reach = {plan.terminator: 0}
            for idx in plan.order[1:]:
                p = plan.predicates[idx]
                reach[idx] = reach[p.anchor] + (p.window or 0)
            deepest = max(reach.values())
            best = max(best, deepest)
            for span in [n.span for n in self.negations] + [a.span for a in self.aggregates]:
                for ref, off in ((span.lo_ref, span.lo_offset), (span.hi_ref, span.hi_offset)):
                    best = max(best, reach.get(ref, deepest) - min(off, 0))
        return best


# ----------------------------------------------------------------------------------------------
# Analysis helpers shared by every backend


def inputs(expr: Expr, rule: Rule | None = None) -> frozenset[int]:
    """The predicates (declaration indices) ``expr`` reads; ``AggValue`` pulls in the aggregate's.

    ``SELF`` is not included. ``rule`` is needed to resolve ``AggValue``.
    """
    out: set[int] = set()
    for node in walk(expr):
        if isinstance(node, (Attr, Timestamp)) and node.pred >= 0:  # not SELF / NEXT
            out.add(node.pred)
        elif isinstance(node, AggValue):
            if rule is None:
                raise ValueError("inputs() of an aggregate value needs the rule")
            out |= aggregate_inputs(rule.aggregates[node.index])
    return frozenset(out)


def negation_inputs(neg: Negation) -> frozenset[int]:
    """The bound predicates a negation needs: its span ends and those its conditions read."""
    out = set(neg.span.refs)
    for c in neg.conditions:
        out |= inputs(c)
    return frozenset(out)


def aggregate_inputs(agg: Aggregate) -> frozenset[int]:
    """The bound predicates an aggregate needs: its span ends and those its conditions read
    (a Kleene set aggregate needs its Kleene predicate only)."""
    if agg.kleene is not None:
        return frozenset((agg.kleene,))
    out = set(agg.span.refs)
    for c in agg.conditions:
        out |= inputs(c)
    return frozenset(out)


def ready_step(plan: Plan, preds: frozenset[int]) -> int:
    """The binding step at which all of ``preds`` are bound (0 when ``preds`` is empty)."""
    return max((plan.step_of(p) for p in preds), default=0)


@dataclass(frozen=True)
class StepChecks:
    """What a plan checks when it binds the predicate of one step.

    ``conditions`` are indices into ``Rule.conditions``, ``negations`` into ``Rule.negations``.
    Aggregates are evaluated where a condition or the output needs them.
    Everything listed here takes part in the ``last``/``first`` choice of that step.
    """

    pred: int
    conditions: tuple[int, ...]
    negations: tuple[int, ...]


def step_checks(rule: Rule, plan: Plan) -> tuple[StepChecks, ...]:
    """For each binding step of ``plan``, the conditions and negations that become checkable."""
    conds: list[list[int]] = [[] for _ in plan.order]
    negs: list[list[int]] = [[] for _ in plan.order]
    for i, c in enumerate(rule.conditions):
        conds[ready_step(plan, inputs(c, rule))].append(i)
    for i, n in enumerate(rule.negations):
        negs[ready_step(plan, negation_inputs(n))].append(i)
    return tuple(
        StepChecks(pred, tuple(conds[s]), tuple(negs[s])) for s, pred in enumerate(plan.order)
    )


def static_conditions(rule: Rule, pred: int) -> tuple[int, ...]:
    """Indices of the conditions that read only predicate ``pred`` (its column filters)."""
    return tuple(i for i, c in enumerate(rule.conditions) if inputs(c, rule) == frozenset((pred,)))


def map_expr(expr: Expr, fn) -> Expr:
    """``expr`` rebuilt bottom-up with ``fn`` applied to every node (``fn`` returns a node)."""
    if isinstance(expr, (Arith, Compare)):
        expr = replace(expr, left=map_expr(expr.left, fn), right=map_expr(expr.right, fn))
    elif isinstance(expr, (Neg, Not)):
        expr = replace(expr, arg=map_expr(expr.arg, fn))
    elif isinstance(expr, BoolOp):
        expr = replace(expr, args=tuple(map_expr(a, fn) for a in expr.args))
    return fn(expr)


def map_rule_exprs(rule: Rule, fn) -> Rule:
    """``rule`` with :func:`map_expr` applied to every expression it holds."""
    return replace(
        rule,
        conditions=tuple(map_expr(c, fn) for c in rule.conditions),
        negations=tuple(
            replace(n, conditions=tuple(map_expr(c, fn) for c in n.conditions)) for n in rule.negations
        ),
        aggregates=tuple(
            replace(a, conditions=tuple(map_expr(c, fn) for c in a.conditions)) for a in rule.aggregates
        ),
        attributes=tuple(replace(a, expr=map_expr(a.expr, fn)) for a in rule.attributes),
        plans=tuple(
            replace(plan, predicates=tuple(_map_kleene(p, fn) for p in plan.predicates))
            for plan in rule.plans
        ),
    )


def _map_kleene(pred: Predicate, fn) -> Predicate:
    k = pred.kleene
    if k is None:
        return pred
    return replace(pred, kleene=replace(
        k,
        conditions=tuple(map_expr(c, fn) for c in k.conditions),
        consecutive=tuple(map_expr(c, fn) for c in k.consecutive),
    ))


def kleene_exprs(rule: Rule) -> Iterator[Expr]:
    """Every per-element and consecutive condition of the rule's Kleene positions."""
    for p in rule.predicates:
        if p.kleene is not None:
            yield from p.kleene.conditions
            yield from p.kleene.consecutive
