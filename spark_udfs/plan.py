"""Planning a Spark run: keyed or time-sliced, and how much context a time slice needs.

Two ways to cut an event stream so that each piece can run the engine on its own and still give
exactly the composite events of one run over everything:

* **Keyed**: every predicate, negation and aggregate of every rule is tied by equality to one
  attribute (``partition_by``). Events with different values of that attribute can never meet in
  one match, so a group per value is self-contained, ``consuming`` included.
* **Time-sliced**: slices own disjoint ``ts`` ranges ``[lo, hi)``. A slice also reads the events
  of ``[lo - lookback, hi + horizon]`` as context, where ``lookback`` is the furthest back any
  match of an owned terminator can read (windows, negation and aggregate spans, added up along a
  composite-event hierarchy) and ``horizon`` is how far after its terminator a trailing negation
  looks. A slice keeps only the composite events whose terminator it owns.

Everything here reads the rule model only; nothing starts Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cep_gpu.analysis import unbounded_window
from cep_gpu.errors import RuleError
from cep_gpu.model import SELF, Attr, BoolOp, Compare, Expr, Rule

Mode = Literal["keyed", "sliced"]

#: slack (ns) added to lookback and horizon, so that float timestamps rounded on the Spark side and
#: in the engine can never disagree about an event at the very edge of a slice's context
EDGE_SLACK_NS = 1_000

#: the lookback of a rule with a window-less predicate (it can reach back to the first event):
#: larger than any real span, small enough that adding a timestamp to it never overflows int64
UNBOUNDED_NS = 1 << 62


@dataclass(frozen=True)
class SparkPlan:
    """How ``detect_spark`` runs a set of rules.

    ``mode``: ``keyed`` or ``sliced``; ``key``: the grouping column in keyed mode;
    ``lookback_ns`` / ``horizon_ns``: the context a slice reads before / after the range it owns
    (hierarchies added up, slack included; :data:`UNBOUNDED_NS` when a predicate has no window);
    ``reason``: why keyed mode was not possible (for ``explain`` and error messages);
    ``n_slices``: the number of time slices (1 in keyed mode, and when the lookback is unbounded:
    a slice would then need every earlier event as context).
    """

    mode: Mode
    key: str | None
    lookback_ns: int
    horizon_ns: int
    reason: str = ""
    n_slices: int = 1

    @property
    def unbounded(self) -> bool:
        return self.lookback_ns >= UNBOUNDED_NS


def conjuncts(expr: Expr) -> list[Expr]:
    """``expr`` split at top-level ``and``s."""
    if isinstance(expr, BoolOp) and expr.op == "and":
        return [c for a in expr.args for c in conjuncts(a)]
    return [expr]


def _key_equalities(conditions: Sequence[Expr], key: str) -> list[tuple[int, int]]:
    """Pairs ``(i, j)`` of predicates (or SELF) with a condition ``i.key = j.key``."""
    pairs = []
    for cond in conditions:
        for c in conjuncts(cond):
            if (
                isinstance(c, Compare)
                and c.op == "="
                and isinstance(c.left, Attr)
                and isinstance(c.right, Attr)
                and c.left.name == key
                and c.right.name == key
            ):
                pairs.append((c.left.pred, c.right.pred))
    return pairs


def keyed_violation(rule: Rule, key: str) -> str | None:
    """Why ``rule`` is not tied to attribute ``key`` (``None`` when it is).

    Tied means: the equalities ``X.key = Y.key`` among the rule's conditions connect all its
    predicates, and every negation and aggregate has such an equality between its own event and a
    predicate.
    """
    n = rule.n_predicates
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in _key_equalities(rule.conditions, key):
        if a != SELF and b != SELF:
            parent[find(a)] = find(b)
    # a Kleene position's own conditions tie each of its elements (SELF) to another predicate:
    # `b.k = a.k` in a pattern with KL(B b) is kept there, not among the rule's conditions
    for i, pred in enumerate(rule.predicates):
        if pred.kleene is not None:
            for a, b in _key_equalities(pred.kleene.conditions, key):
                other = b if a == SELF else a if b == SELF else None
                if other is not None and other != SELF:
                    parent[find(i)] = find(other)
    roots = {find(i) for i in range(n)}
    if len(roots) > 1:
        loose = [rule.predicates[i].alias for i in range(n) if find(i) != find(0)]
        return (
            f"rule {rule.name!r}: predicate(s) {', '.join(loose)} are not tied to "
            f"{rule.predicates[0].alias} by an equality on {key!r}"
        )
    parts = [("negation", x.event_type, x.conditions) for x in rule.negations]
    # an aggregate over a Kleene set (count(b), max(b.v)) reads only that position's elements
    parts += [("aggregate", x.event_type, x.conditions) for x in rule.aggregates if x.kleene is None]
    for kind, etype, conds in parts:
        if not any(SELF in (a, b) and (a, b) != (SELF, SELF) for a, b in _key_equalities(conds, key)):
            return f"rule {rule.name!r}: the {kind} over {etype} is not tied to the rule's events by an equality on {key!r}"
    return None


def _produces_key(rule: Rule, key: str) -> bool:
    """Whether the composite events of ``rule`` carry ``key`` copied from one of its predicates."""
    return any(a.name == key and isinstance(a.expr, Attr) and a.expr.name == key for a in rule.attributes)


def keyed_reason(rules: Sequence[Rule], key: str) -> str | None:
    """Why ``rules`` cannot run grouped by ``key`` (``None`` when they can).

    Besides each rule being tied to ``key``, a rule whose composite events feed another rule must
    pass ``key`` on (``where key = X.key``), so that the consumer's equality holds in the group.
    """
    consumed = {t for r in rules for t in r.input_types}
    for r in rules:
        why = keyed_violation(r, key)
        if why:
            return why
        if r.name in consumed and not _produces_key(r, key):
            return f"rule {r.name!r} feeds other rules but does not define the attribute {key!r} (where {key}=...)"
    return None


def _chain(rules: Sequence[Rule], own) -> int:
    """The largest sum of ``own(rule)`` along any producer -> consumer chain of the hierarchy."""
    producers: dict[str, list[Rule]] = {}
    for r in rules:
        producers.setdefault(r.name, []).append(r)
    memo: dict[int, int] = {}

    def total(r: Rule, depth: int = 0) -> int:
        if depth > len(rules):
            raise RuleError(f"cycle in composite-event hierarchy through rule {r.name!r}")
        if id(r) not in memo:
            below = [total(p, depth + 1) for t in r.input_types for p in producers.get(t, [])]
            memo[id(r)] = own(r) + max(below, default=0)
        return memo[id(r)]

    return max((total(r) for r in rules), default=0)


def rule_lookback(rule: Rule) -> int:
    """How far (ns) before its terminator a match of ``rule`` reads: the longest chain of windows
    through anchors with negation and aggregate spans added (``Rule.lookback``), or
    :data:`UNBOUNDED_NS` for a window-less predicate."""
    return UNBOUNDED_NS if unbounded_window(rule) else rule.lookback()


def rule_horizon(rule: Rule) -> int:
    """How far (ns) after its terminator a match of ``rule`` reads: trailing ``NOT`` spans (and,
    for safety, any aggregate span that would end after it)."""
    spans = [n.span for n in rule.negations] + [a.span for a in rule.aggregates]
    return max((max(s.lo_offset, s.hi_offset, 0) for s in spans), default=0)


def context_ns(rules: Sequence[Rule]) -> tuple[int, int]:
    """``(lookback, horizon)`` in ns a time slice needs, hierarchies added up, slack included.

    Along a producer -> consumer chain the spans add up: a consumer's terminator at ``t`` reads
    producer composite events back to ``t - lookback(consumer)``, and each of those was decided
    by events a further ``lookback(producer)`` back (likewise forwards for trailing ``NOT``s).
    """
    lookback = min(_chain(rules, rule_lookback) + EDGE_SLACK_NS, UNBOUNDED_NS)
    return lookback, _chain(rules, rule_horizon) + EDGE_SLACK_NS


def plan_rules(rules: Sequence[Rule], partition_by: str | None, n_slices: int) -> SparkPlan:
    """Choose keyed or time-sliced execution; raise :class:`RuleError` when neither is exact.

    ``partition_by`` asks for keyed mode; when the rules are not tied to that column the plan
    falls back to time slices and says why in ``reason``. Rules with ``consuming`` depend on every
    earlier terminator, which a time slice cannot see, so they need keyed mode (or one slice).
    A window-less predicate (unbounded lookback) makes every slice need all earlier events: the
    plan then uses one slice, which is exact.
    """
    lookback, horizon = context_ns(rules)
    reason = "no partition_by column given"
    if partition_by is not None:
        why = keyed_reason(rules, partition_by)
        if why is None:
            return SparkPlan("keyed", partition_by, lookback, horizon)
        reason = why
    if lookback >= UNBOUNDED_NS:
        unbounded = [r.name for r in rules if unbounded_window(r)]
        why = f"rule(s) {', '.join(map(repr, unbounded))} have a predicate without a window"
        return SparkPlan("sliced", None, lookback, horizon, f"{reason}; {why}: one time slice", 1)
    consuming = [r.name for r in rules if r.consuming]
    if consuming and n_slices > 1:
        raise RuleError(
            f"rule(s) {', '.join(map(repr, consuming))} use 'consuming': whether an event is still "
            "available depends on every earlier match of the rule, which a time slice cannot see, "
            "so the result would depend on the partitioning. Pass partition_by=<a column that every "
            f"predicate of these rules is tied to by an equality> (keyed mode), or use one slice "
            f"(num_slices=1). Keyed mode is not possible here: {reason}"
        )
    return SparkPlan("sliced", None, lookback, horizon, reason, n_slices)
