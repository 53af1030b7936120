"""Rule analysis shared by every layer above the model: the composite-event hierarchy (which rule
produces the events another rule reads, and in which order rules run) and window facts.

Plain functions of :class:`~cep_gpu.model.Rule` objects; nothing here reads events.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import RuleError
from .model import AggValue, Expr, Rule, walk


def producers(rules: Sequence[Rule]) -> dict[str, list[int]]:
    """Composite type -> indices of the rules of ``rules`` that produce it (in rule order)."""
    out: dict[str, list[int]] = {}
    for i, r in enumerate(rules):
        out.setdefault(r.name, []).append(i)
    return out


def rule_order(rules: Sequence[Rule]) -> list[int]:
    """Indices of ``rules`` in dependency order (producers before consumers); stable otherwise.

    Raises :class:`RuleError` on a cycle in the composite-event hierarchy.
    """
    made_by = producers(rules)
    deps = {i: sorted({p for t in r.input_types for p in made_by.get(t, [])}) for i, r in enumerate(rules)}
    order: list[int] = []
    state: dict[int, int] = {}

    def visit(i: int, path: list[int]) -> None:
        if state.get(i) == 2:
            return
        if state.get(i) == 1:
            cycle = " -> ".join(rules[j].name for j in path[path.index(i):] + [i])
            raise RuleError(f"cycle in composite-event hierarchy: {cycle}")
        state[i] = 1
        for d in deps[i]:
            visit(d, path + [i])
        state[i] = 2
        order.append(i)

    for i in range(len(rules)):
        visit(i, [])
    return order


def has_aggregate(expr: Expr) -> bool:
    """Whether ``expr`` reads an aggregate's value (it can only be checked once that is known)."""
    return any(isinstance(node, AggValue) for node in walk(expr))


def unbounded_window(rule: Rule) -> bool:
    """Whether a predicate of ``rule`` has no window (``Rule`` objects built by hand may have one;
    the parser never makes one): it can then bind events arbitrarily far back."""
    return any(p.window is None and p.policy is not None for pl in rule.plans for p in pl.predicates)
