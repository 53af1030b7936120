"""``SEQ`` / ``AND`` pattern syntax tree -> :class:`~cep_gpu.model.Rule`.

Positive positions are the predicates, in pattern order. ``SEQ`` has one plan bound from the last
position backwards; ``AND`` one plan per possible last event. ``NOT(T x)`` positions become
negations whose span is fixed by their positive neighbours; the ``where`` conjuncts that mention
``x`` become that negation's conditions (``x`` read as ``SELF``), the rest go to
``Rule.conditions``.
"""

from __future__ import annotations

from dataclasses import dataclass

from lark import Token, Tree

from ..model import (
    SELF,
    Attr,
    BoolOp,
    Expr,
    Negation,
    Not,
    Plan,
    Predicate,
    Rule,
    Span,
    Timestamp,
)
from .common import (
    Resolver,
    Source,
    attr_decls,
    compile_comparison,
    compile_expr,
    duration,
    output_attributes,
    pos_of,
    subtrees,
)


@dataclass
class _Item:
    """One pattern position: a positive event (``index`` = declaration index) or a NOT."""

    event_type: str
    alias: str
    negated: bool
    index: int  # declaration index (positive) or negation index (NOT)
    at: Tree


class _SeqResolver(Resolver):
    """``alias.attr`` of a pattern position; records which NOT aliases an expression mentions."""

    def __init__(self, src: Source, items: dict[str, _Item]) -> None:
        self.src, self.items = src, items
        self.negated: dict[str, Token] = {}

    def bare(self, tok: Token) -> Expr:
        raise self.src.error(
            f"unknown name {str(tok)!r}: write alias.attribute (aliases: {', '.join(self.items)})",
            tok,
        )

    def qualified(self, name: Token, attr: Token) -> Expr:
        alias = str(name)
        item = self.items.get(alias)
        if item is None:
            raise self.src.error(
                f"unknown alias {alias!r} (aliases: {', '.join(self.items)})", name
            )
        attr_name = self.src.name(attr, "attribute name")
        if item.negated:
            self.negated.setdefault(alias, name)
            return Timestamp(SELF) if attr_name == "ts" else Attr(SELF, attr_name, pos=pos_of(attr))
        if attr_name == "ts":
            return Timestamp(item.index)
        return Attr(item.index, attr_name, pos=pos_of(attr))

    def param(self, tok: Token) -> Expr:
        raise self.src.error("parameters ($name) are not part of SEQ/AND patterns; use where", tok)


def _bool(src: Source, tree: Tree, res: Resolver) -> Expr:
    """A ``where`` boolean expression tree -> model expression."""
    kind = tree.data
    if kind in ("or_expr", "and_expr"):
        args = tuple(_bool(src, c, res) for c in subtrees(tree))
        if len(args) == 1:
            return args[0]
        return BoolOp("or" if kind == "or_expr" else "and", args)
    if kind == "not_expr":
        return Not(_bool(src, tree.children[0], res))
    return compile_comparison(src, tree, res)


def conjuncts(tree: Tree) -> list[Tree]:
    """The top-level ``and`` operands of a ``where`` tree (nested ands flattened)."""
    if tree.data in ("or_expr", "and_expr") and len(tree.children) == 1:
        return conjuncts(tree.children[0])
    if tree.data == "and_expr":
        return [c for child in tree.children for c in conjuncts(child)]
    return [tree]


def compile_seq(src: Source, tree: Tree) -> Rule:
    """Compile one ``seq_rule`` tree."""
    name = src.name(tree.children[0], "rule name")
    declared = attr_decls(src, next(iter(subtrees(tree, "attr_decls")), None))
    pattern = next(c for c in subtrees(tree) if c.data in ("seq_pattern", "and_pattern"))
    is_and = pattern.data == "and_pattern"

    items: dict[str, _Item] = {}
    order: list[_Item] = []
    n_pos = n_neg = 0
    for item in pattern.children:
        type_tok = item.children[0]
        alias_tok = item.children[1] if len(item.children) > 1 else type_tok
        type_ = src.name(type_tok, "event type")
        alias = src.name(alias_tok, "alias")
        if alias in items:
            raise src.error(
                f"duplicate alias {alias!r}"
                + ("" if len(item.children) > 1 else "; give each position its own alias"),
                alias_tok,
            )
        negated = item.data == "not_item"
        if negated and is_and:
            raise src.error("NOT is not allowed inside AND(...) (it has no position)", item)
        entry = _Item(type_, alias, negated, n_neg if negated else n_pos, item)
        n_neg += negated
        n_pos += not negated
        items[alias] = entry
        order.append(entry)
    if n_pos == 0:
        raise src.error("a pattern needs at least one event that is not negated", pattern)

    clauses: dict[str, Tree] = {}
    for clause in subtrees(tree):
        if clause.data in ("where_cond", "within_clause", "select_clause", "return_clause"):
            if clause.data in clauses:
                word = clause.data.split("_")[0]
                raise src.error(f"{word} given twice", clause)
            clauses[clause.data] = clause

    window: int | None = None
    if "within_clause" in clauses:
        window = duration(src, clauses["within_clause"].children[0])
    elif n_pos > 1 or n_neg:
        raise src.error("a pattern needs a window: add 'within <duration>'", tree.children[0])
    policy = "each"
    if "select_clause" in clauses:
        policy = str(clauses["select_clause"].children[0]).lower()

    positives = [i for i in order if not i.negated]
    last = n_pos - 1

    # where: conjuncts on positive events -> conditions; on a NOT alias -> that negation
    conditions: list[Expr] = []
    neg_conditions: dict[str, list[Expr]] = {i.alias: [] for i in order if i.negated}
    if "where_cond" in clauses:
        for conj in conjuncts(clauses["where_cond"].children[0]):
            res = _SeqResolver(src, items)
            expr = _bool(src, conj, res)
            if len(res.negated) > 1:
                names = ", ".join(sorted(res.negated))
                raise src.error(f"a where condition may mention only one NOT alias ({names})", conj)
            if res.negated:
                neg_conditions[next(iter(res.negated))].append(expr)
            else:
                conditions.append(expr)

    negations: list[Negation] = []
    for pos, item in enumerate(order):
        if not item.negated:
            continue
        prev = next((o.index for o in reversed(order[:pos]) if not o.negated), None)
        nxt = next((o.index for o in order[pos + 1 :] if not o.negated), None)
        if prev is not None and nxt is not None:
            span = Span(prev, 0, False, nxt, 0, False)
        elif prev is None:  # leading: [last - W, first)
            span = Span(last, -window, True, 0, 0, False)
        else:  # trailing: (last, first + W]
            span = Span(last, 0, False, 0, window, True)
        negations.append(
            Negation(item.event_type, span, tuple(neg_conditions[item.alias]), item.alias)
        )

    if is_and:
        plans = tuple(_and_plan(positives, t, window, policy) for t in range(n_pos))
    else:
        preds = tuple(
            Predicate(p.event_type, p.alias)
            if p.index == last
            else Predicate(p.event_type, p.alias, policy, window, last, p.index + 1)
            for p in positives
        )
        plans = (Plan(preds, tuple(range(last, -1, -1))),)

    returns = []
    if "return_clause" in clauses:
        returns = [(r.children[0], r.children[-1]) for r in subtrees(clauses["return_clause"])]
    ret_res = _SeqResolver(src, {a: i for a, i in items.items() if not i.negated})
    attributes = output_attributes(
        src, declared, returns, lambda t: compile_expr(src, t, ret_res), "return"
    )
    return Rule(
        name=name,
        plans=plans,
        conditions=tuple(conditions),
        negations=tuple(negations),
        attributes=attributes,
        syntax="seq",
        source=src.text,
        text=src.text[tree.meta.start_pos : tree.meta.end_pos] if not tree.meta.empty else src.text,
    )


def _and_plan(positives: list[_Item], t: int, window: int | None, policy: str) -> Plan:
    """The plan of ``AND(...)`` in which position ``t`` is the last event."""
    preds = tuple(
        Predicate(p.event_type, p.alias)
        if p.index == t
        # ties=True: the terminator is the last event in (ts, id) order, so events that share a
        # timestamp combine, and exactly once (in the plan of the one with the largest id)
        else Predicate(p.event_type, p.alias, policy, window, t, t, ties=True)
        for p in positives
    )
    others = tuple(i for i in range(len(positives) - 1, -1, -1) if i != t)
    return Plan(preds, (t,) + others)
