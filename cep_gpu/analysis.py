"""Rule analysis shared by every layer above the model: the composite-event hierarchy (which rule
produces the events another rule reads, and in which order rules run) and window facts.

Plain functions of :class:`~cep_gpu.model.Rule` objects; nothing here reads events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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


def absent_types(rules: Sequence[Rule], present: Iterable[str]) -> list[tuple[Rule, str]]:
    """``(rule, type)`` for each event type a rule reads (positive, negated or aggregated) that is
    neither among ``present`` (the types of the input's events) nor made by a rule of ``rules``;
    in rule order, then by type name.

    Most often a typo (``SEQ(GOGL a, ...)`` for ``GOOG``), which makes a rule match nothing without
    a word. Detection stays silent about it (a batch or a publish may simply lack a type); the
    command lines warn with :func:`absent_type_warnings`. Nothing when ``present`` is empty (an
    input without events lacks every type alike)."""
    present = set(present)
    if not present:
        return []
    made = set(producers(rules))
    return [(r, t) for r in rules for t in sorted(r.input_types) if t not in present and t not in made]


def absent_type_warnings(rules: Sequence[Rule], present: Iterable[str], source: str,
                         shown: int = 10) -> list[str]:
    """One line per :func:`absent_types` pair, naming the rule, the type, ``source`` (where the
    events came from: a file name) and the types it has (the first ``shown`` of them, by name)."""
    present = sorted(set(present))
    listed = ", ".join(present[:shown]) + (f", ... ({len(present) - shown} more)" if len(present) > shown else "")
    return [f"rule {r.name!r} reads type {t!r}, which no event in {source} has (types: {listed})"
            for r, t in absent_types(rules, present)]
