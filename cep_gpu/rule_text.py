"""Rule printing: the one text form of durations, expressions, spans and rules that every explain
(``Engine.explain``, ``cep-gpu explain``, each backend's ``explain``) is built from."""

from __future__ import annotations

from .model import (
    SELF,
    AggValue,
    Arith,
    Attr,
    BoolOp,
    Compare,
    Const,
    Expr,
    Neg,
    Not,
    Rule,
    Span,
    Timestamp,
    static_conditions,
)

_UNITS = (("h", 3_600_000_000_000), ("min", 60_000_000_000), ("s", 1_000_000_000),
          ("ms", 1_000_000), ("us", 1_000))


def duration(ns: int | None) -> str:
    """A duration in nanoseconds as the largest unit that divides it (``"5 s"``, ``"250 ms"``,
    ``"7 ns"``); ``None`` is ``"unbounded"``."""
    if ns is None:
        return "unbounded"
    for unit, scale in _UNITS:
        if ns and ns % scale == 0:
            return f"{ns // scale} {unit}"
    return f"{ns} ns"


def aliases(rule: Rule) -> list[str]:
    """The name of each predicate of ``rule`` in declaration order (its alias, else its type)."""
    return [p.alias or p.event_type for p in rule.predicates]


def expr_text(e: Expr, names: list[str]) -> str:
    """An expression of the rule model as text; ``names[i]`` names predicate ``i``."""
    if isinstance(e, Const):
        return repr(e.value) if isinstance(e.value, str) else str(e.value)
    if isinstance(e, Attr):
        return e.name if e.pred == SELF else f"{names[e.pred]}.{e.name}"
    if isinstance(e, Timestamp):
        return "ts" if e.pred == SELF else f"{names[e.pred]}.ts"
    if isinstance(e, AggValue):
        return f"agg{e.index}"
    if isinstance(e, (Arith, Compare)):
        return f"({expr_text(e.left, names)} {e.op} {expr_text(e.right, names)})"
    if isinstance(e, Neg):
        return f"-{expr_text(e.arg, names)}"
    if isinstance(e, BoolOp):
        return "(" + f" {e.op} ".join(expr_text(a, names) for a in e.args) + ")"
    if isinstance(e, Not):
        return f"not {expr_text(e.arg, names)}"
    return repr(e)


def span_text(span: Span, names: list[str]) -> str:
    """A negation's or aggregate's time span, e.g. ``(b - 5 s, a]``."""
    def end(ref: int, off: int) -> str:
        return names[ref] + (f" {'+' if off > 0 else '-'} {duration(abs(off))}" if off else "")

    lo = ("[" if span.lo_inclusive else "(") + end(span.lo_ref, span.lo_offset)
    return f"{lo}, {end(span.hi_ref, span.hi_offset)}" + ("]" if span.hi_inclusive else ")")


def rule_lines(rule: Rule) -> list[str]:
    """What a rule says, one line per part: its plans (columns with their filters and windows,
    binding order), cross conditions, negations, aggregates, consumption and attributes."""
    names = aliases(rule)
    lines = [f"rule {rule.name} ({rule.syntax}): {len(rule.plans)} plan(s), "
             f"lookback {duration(rule.lookback())}"]
    for k, plan in enumerate(rule.plans):
        if len(rule.plans) > 1:
            lines.append(f"  plan {k}: binding order {' -> '.join(names[i] for i in plan.order)}")
        for i in plan.order:
            p = plan.predicates[i]
            filters = [expr_text(rule.conditions[c], names) for c in static_conditions(rule, i)]
            where = f" [{' and '.join(filters)}]" if filters else ""
            if i == plan.terminator:
                lines.append(f"    column {names[i]}: {p.event_type}{where} (terminator)")
            else:
                before = "" if p.before == p.anchor else f", before {names[p.before]}"
                lines.append(
                    f"    column {names[i]}: {p.policy} {p.event_type}{where} within "
                    f"{duration(p.window)} from {names[p.anchor]}{before}"
                )
    cross = [c for c in range(len(rule.conditions))
             if not any(c in static_conditions(rule, i) for i in range(rule.n_predicates))]
    for c in cross:
        lines.append(f"  condition: {expr_text(rule.conditions[c], names)}")
    for n in rule.negations:
        conds = " and ".join(expr_text(c, names) for c in n.conditions)
        lines.append(f"  not {n.event_type}({conds}) in {span_text(n.span, names)}")
    for a in rule.aggregates:
        conds = " and ".join(expr_text(c, names) for c in a.conditions)
        attr = f".{a.attribute}" if a.attribute else ""
        lines.append(f"  {a.name or 'aggregate'} = {a.function}({a.event_type}({conds}) "
                     f"in {span_text(a.span, names)}){attr}")
    if rule.consuming:
        lines.append(f"  consuming {', '.join(names[i] for i in rule.consuming)}")
    for a in rule.attributes:
        lines.append(f"  attribute {a.name}: {a.type or '?'} := {expr_text(a.expr, names)}")
    return lines
