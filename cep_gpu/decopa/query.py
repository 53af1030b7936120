"""What DecoPa reads of a cep-gpu rule: a flat ``SEQ``/``AND`` pattern of positions, its window and
its conditions, and the sub-patterns over subsets of the positions (as cep-gpu rules).

Positions are the rule's predicates in declaration (pattern) order, ``0 .. k-1``; a sub-query is a
frozenset of positions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from ..model import Attr, Rule, Timestamp, inputs, map_expr
from .errors import DecompositionError

#: The largest pattern DecoPa executes (the issue's scope: 2-10 positions).
MAX_POSITIONS = 10


@dataclass(frozen=True)
class Pattern:
    """The decomposable shape of a rule.

    ``kind``: ``"SEQ"`` (strictly increasing timestamps in position order) or ``"AND"`` (any
    order). ``window``: ns. ``unsupported``: the features that stop execution (planning still
    works), in words; empty when the rule can be executed.
    """

    rule: Rule
    kind: str
    types: tuple[str, ...]
    aliases: tuple[str, ...]
    window: int
    unsupported: tuple[str, ...]

    @property
    def k(self) -> int:
        return len(self.types)

    @cached_property
    def condition_inputs(self) -> tuple[frozenset[int], ...]:
        return tuple(inputs(c, self.rule) for c in self.rule.conditions)

    def alias_index(self, alias: str) -> int:
        try:
            return self.aliases.index(alias)
        except ValueError:
            raise DecompositionError(
                f"unknown alias {alias!r}: the rule {self.rule.name!r} has positions {list(self.aliases)}"
            ) from None

    def require_executable(self) -> None:
        if self.unsupported:
            raise DecompositionError(
                f"rule {self.rule.name!r} cannot be executed as a DecoPa plan: "
                + "; ".join(self.unsupported)
                + " (execution covers SEQ/AND patterns of 2-10 positions with `select each`)"
            )

    def conditions_within(self, positions: frozenset[int]) -> tuple[int, ...]:
        """Indices of the conditions that read only ``positions``."""
        return tuple(i for i, ins in enumerate(self.condition_inputs) if ins <= positions)

    def order_pairs(self, left: frozenset[int], right: frozenset[int]) -> list[tuple[int, int]]:
        """SEQ order constraints ``(p, q)`` meaning ``ts(p) < ts(q)`` between the two sides."""
        if self.kind != "SEQ":
            return []
        out = []
        for p in sorted(left - right):
            for q in sorted(right - left):
                out.append((p, q) if p < q else (q, p))
        return out

    def sub_rule(self, positions: frozenset[int], name: str | None = None) -> Rule:
        """The sub-pattern over ``positions``: same kind and window, the conditions it contains
        (Definition 1: types, predicates and order constraints of ``q``), positions renumbered in
        pattern order."""
        pos = sorted(positions)
        if not pos:
            raise DecompositionError("a sub-query needs at least one position")
        name = name or f"{self.rule.name}_" + "_".join(self.aliases[p] for p in pos)
        return pattern_rule(
            name, self.kind if len(pos) > 1 else "SEQ", [self.types[p] for p in pos],
            [self.aliases[p] for p in pos], self.window,
            [renumber(self.rule.conditions[i], {p: j for j, p in enumerate(pos)})
             for i in self.conditions_within(frozenset(pos))],
        )


def renumber(expr, mapping: dict[int, int]):
    """``expr`` with predicate indices renamed by ``mapping``."""

    def fn(e):
        if isinstance(e, Attr) and e.pred in mapping:
            return replace(e, pred=mapping[e.pred])
        if isinstance(e, Timestamp) and e.pred in mapping:
            return Timestamp(mapping[e.pred])
        return e

    return map_expr(expr, fn)


def pattern_rule(name: str, kind: str, types, aliases, window: int, conditions, attributes=()) -> Rule:
    """A cep-gpu rule ``kind(types[0] aliases[0], ...) within window`` with model conditions.

    Built by parsing a skeleton with placeholder type names (event type names of the data need not
    be identifiers of the rule language) and then setting types, window and conditions on the model.
    """
    from .. import parse_rule

    skeleton = ", ".join(f"T{i} {a}" for i, a in enumerate(aliases))
    text = f"define D pattern {kind}({skeleton})" + (" within 1 s" if len(aliases) > 1 else "")
    rule = parse_rule(text)
    plans = tuple(
        replace(plan, predicates=tuple(
            replace(p, event_type=types[i], window=None if p.window is None else window)
            for i, p in enumerate(plan.predicates)))
        for plan in rule.plans
    )
    return replace(rule, name=name, plans=plans, conditions=tuple(conditions),
                   attributes=tuple(attributes), text=f"{kind}({', '.join(f'{t} {a}' for t, a in zip(types, aliases))})")


def check_plannable(rule: Rule) -> None:
    """Refuse what DecoPa does not model at all, before any plan is made: Kleene closure (its
    rates and unary splits, paper §5.3 and §4.1, are not built). Planning such a rule as the plain
    pattern gave a plan for another query (``KL(MSFT b)`` read as one MSFT event), which execution
    then refused; :func:`analyse` runs this check, so ``optimize``, ``plan_from_split``,
    ``Stats.from_sample``, ``Plan.from_json`` and ``execute`` all give this one error."""
    if rule.kleene_positions:
        aliases = [rule.predicates[i].alias for i in rule.kleene_positions]
        raise DecompositionError(
            f"rule {rule.name!r} has Kleene closure KL(...) at {', '.join(map(repr, aliases))}: "
            "DecoPa neither plans nor executes Kleene closure (docs/decopa.md: not built); "
            "run the rule with cep_gpu.detect / cep-gpu run"
        )


def analyse(rule: Rule) -> Pattern:
    """The pattern of ``rule``; raises :class:`DecompositionError` for rules DecoPa cannot even plan
    (TESLA rules, a single position, more than :data:`MAX_POSITIONS` positions, Kleene closure)."""
    if not isinstance(rule, Rule):
        raise DecompositionError(f"expected a cep-gpu Rule (cep_gpu.parse_rule), got {type(rule).__name__}")
    if rule.syntax != "seq":
        raise DecompositionError(
            f"rule {rule.name!r} is a TESLA rule: DecoPa decomposes SEQ(...)/AND(...) patterns"
        )
    k = rule.n_predicates
    if k < 2:
        raise DecompositionError(f"rule {rule.name!r} has {k} position: decomposition needs 2 or more")
    if k > MAX_POSITIONS:
        raise DecompositionError(
            f"rule {rule.name!r} has {k} positions: DecoPa handles at most {MAX_POSITIONS}"
        )
    preds = rule.predicates
    kind = "AND" if len(rule.plans) > 1 else "SEQ"
    windows = {p.window for plan in rule.plans for p in plan.predicates if p.window is not None}
    if len(windows) != 1:
        raise DecompositionError(f"rule {rule.name!r}: expected one window, found {sorted(windows)}")
    check_plannable(rule)
    unsupported = []
    if rule.negations:
        unsupported.append("NOT(...) positions")
    if rule.aggregates:
        unsupported.append("aggregates")
    if rule.consuming:
        unsupported.append("consuming")
    policies = {p.policy for plan in rule.plans for p in plan.predicates if p.policy is not None}
    if policies - {"each"}:
        unsupported.append(f"`select {'/'.join(sorted(policies - {'each'}))}`")
    return Pattern(rule, kind, tuple(p.event_type for p in preds), tuple(p.alias for p in preds),
                   windows.pop(), tuple(unsupported))
