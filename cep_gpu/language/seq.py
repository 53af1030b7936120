"""``SEQ`` / ``AND`` pattern syntax tree -> :class:`~cep_gpu.model.Rule`.

Positive positions are the predicates, in pattern order. ``SEQ`` has one plan bound from the last
position backwards; ``AND`` one plan per possible last event. ``NOT(T x)`` positions become
negations whose span is fixed by their positive neighbours; the ``where`` conjuncts that mention
``x`` become that negation's conditions (``x`` read as ``SELF``), the rest go to
``Rule.conditions``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from lark import Token, Tree

from ..model import (
    NEXT,
    SELF,
    Aggregate,
    AggValue,
    Attr,
    BoolOp,
    Expr,
    Kleene,
    Negation,
    Not,
    Plan,
    Predicate,
    Rule,
    Span,
    Timestamp,
    map_expr,
)
from .common import (
    Resolver,
    Source,
    attr_decls,
    compile_comparison,
    compile_expr,
    duration,
    number,
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
    #: (min, max) set size of a Kleene position KL(T b)[min..max] (max None: unbounded)
    kleene: tuple[int, int | None] | None = None


#: placeholder ``Attr.pred`` of ``b[i+o]`` while a condition is compiled (o in -1, 0, 1)
_INDEXED = -10
_AGG_FUNCTIONS = ("count", "sum", "avg", "min", "max")


class _SeqResolver(Resolver):
    """``alias.attr`` of a pattern position; records which NOT aliases an expression mentions."""

    def __init__(
        self, src: Source, items: dict[str, _Item], aggregates: list[Aggregate] | None = None
    ) -> None:
        self.src, self.items = src, items
        self.negated: dict[str, Token] = {}
        # Kleene positions read as elements (b.v), indexed (b[i].v -> offsets), aggregated (sum(b.v))
        self.elements: dict[str, Token] = {}
        self.offsets: dict[str, set[int]] = {}
        self.index_vars: set[str] = set()
        self.aggregated: dict[str, Token] = {}
        self.aggregates = aggregates if aggregates is not None else []

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
        if item.kleene is not None:
            self.elements.setdefault(alias, name)
        if attr_name == "ts":
            return Timestamp(item.index)
        return Attr(item.index, attr_name, pos=pos_of(attr))

    def _kleene_item(self, tok: Token, what: str) -> _Item:
        item = self.items.get(str(tok))
        if item is None or item.kleene is None:
            kleene = [a for a, i in self.items.items() if i.kleene is not None]
            raise self.src.error(
                f"{what} needs a Kleene position KL(T b); {str(tok)!r} is not one"
                + (f" (Kleene positions: {', '.join(kleene)})" if kleene else ""),
                tok,
            )
        return item

    def indexed(self, tree: Tree) -> Expr:
        """``b[i].v`` / ``b[i+1].v``: an element of a Kleene set relative to its neighbour."""
        alias_tok, var_tok = tree.children[0], tree.children[1]
        attr_tok = tree.children[-1]
        item = self._kleene_item(alias_tok, "an indexed reference b[i].attr")
        offset = 0
        if len(tree.children) == 5:
            offset = number(self.src, tree.children[3])
            if not isinstance(offset, int) or offset > 1:
                raise self.src.error(
                    "only consecutive elements can be related: write b[i] and b[i+1]", tree
                )
            offset = -offset if str(tree.children[2]) == "-" else offset
            if offset < -1:
                raise self.src.error(
                    "only consecutive elements can be related: write b[i] and b[i+1]", tree
                )
        seen = self.offsets.setdefault(item.alias, set())
        seen.add(offset)
        self.index_vars.add(str(var_tok))
        if len(self.index_vars) == 1 and max(seen) - min(seen) > 1:
            # b[i-1] with b[i+1]: two apart, as b[i] with b[i+2]
            var = str(var_tok)
            raise self.src.error(
                f"only consecutive elements can be related: {item.alias}[{var}-1] and "
                f"{item.alias}[{var}+1] are two apart; write b[i] and b[i+1] (or b[i-1] and b[i])",
                tree,
            )
        attr_name = self.src.name(attr_tok, "attribute name")
        if attr_name == "ts":
            return Timestamp(_INDEXED + offset)
        return Attr(_INDEXED + offset, attr_name, pos=pos_of(attr_tok))

    def call(self, tree: Tree) -> Expr:
        """``count(b)``, ``sum(b.v)``, ``avg/min/max(b.v)``: an aggregate over a Kleene set."""
        fn_tok, alias_tok = tree.children[0], tree.children[1]
        fn = str(fn_tok).lower()
        if fn not in _AGG_FUNCTIONS:
            raise self.src.error(
                f"unknown function {str(fn_tok)!r}; aggregates over a Kleene set are "
                f"{', '.join(_AGG_FUNCTIONS)}",
                fn_tok,
            )
        item = self._kleene_item(alias_tok, f"{fn}(...)")
        attr = None
        if len(tree.children) == 3:
            attr = self.src.name(tree.children[2], "attribute name")
            if fn == "count":
                raise self.src.error(f"count takes the set only: count({item.alias})", tree)
            if attr == "ts":
                raise self.src.error(
                    "aggregates over timestamps are not supported; aggregate an attribute", tree
                )
        elif fn != "count":
            raise self.src.error(f"{fn} needs an attribute: {fn}({item.alias}.attr)", tree)
        self.aggregated.setdefault(item.alias, alias_tok)
        span = Span(item.index, 0, False, item.index, 0, False)  # unused for set aggregates
        agg = Aggregate(fn, item.event_type, attr, span, (), None, pos_of(tree), kleene=item.index)
        for k, known in enumerate(self.aggregates):
            if known == agg:
                return AggValue(k)
        self.aggregates.append(agg)
        return AggValue(len(self.aggregates) - 1)

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
        named = [c for c in item.children if isinstance(c, Token)]
        alias_tok = named[1] if len(named) > 1 else type_tok
        type_ = src.name(type_tok, "event type")
        alias = src.name(alias_tok, "alias")
        if alias in items:
            raise src.error(
                f"duplicate alias {alias!r}"
                + ("" if len(named) > 1 else "; give each position its own alias"),
                alias_tok,
            )
        negated = item.data == "not_item"
        if negated and is_and:
            raise src.error("NOT is not allowed inside AND(...) (it has no position)", item)
        kleene = None
        if item.data == "kleene_item":
            if is_and:
                raise src.error(
                    "Kleene closure KL(...) is only supported inside SEQ(...), not AND(...)", item
                )
            kleene = _bounds(src, next(iter(subtrees(item, "kl_bounds")), None))
        entry = _Item(type_, alias, negated, n_neg if negated else n_pos, item, kleene)
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
    kleene_items = [i for i in positives if i.kleene is not None]
    _check_kleene(src, positives, kleene_items, policy, clauses.get("select_clause"))
    greedy = policy == "greedy"
    if greedy:
        policy = "each"  # the other positions: every combination
    aggregates: list[Aggregate] = []
    kleene_conds: dict[int, list[Expr]] = {i.index: [] for i in kleene_items}
    kleene_pairs: dict[int, list[Expr]] = {i.index: [] for i in kleene_items}

    # where: conjuncts on positive events -> conditions; on a NOT alias -> that negation
    conditions: list[Expr] = []
    neg_conditions: dict[str, list[Expr]] = {i.alias: [] for i in order if i.negated}
    if "where_cond" in clauses:
        for conj in conjuncts(clauses["where_cond"].children[0]):
            res = _SeqResolver(src, items, aggregates)
            expr = _bool(src, conj, res)
            if len(res.negated) > 1:
                names = ", ".join(sorted(res.negated))
                raise src.error(f"a where condition may mention only one NOT alias ({names})", conj)
            kind = _kleene_kind(src, conj, res)
            if kind is not None:
                target, k, expr = kind[0], kind[1], _to_element(expr, kind[1])
                (kleene_conds if target == "element" else kleene_pairs)[k].append(expr)
            elif res.negated:
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
        plans = tuple(
            plan for t in range(n_pos) for plan in _and_plans(positives, t, window, policy)
        )
    else:
        preds = tuple(
            Predicate(p.event_type, p.alias)
            if p.index == last
            else _kleene_predicate(p, window, last, greedy, kleene_conds, kleene_pairs)
            if p.kleene is not None
            # a Kleene position's neighbour is bound before it: skip over it to the next event
            else Predicate(p.event_type, p.alias, policy, window, last, _next_plain(positives, p.index))
            for p in positives
        )
        # plain positions from the last backwards, then the Kleene positions (their span is fixed
        # by their neighbours once those are bound)
        plain = [i for i in range(last, -1, -1) if positives[i].kleene is None]
        plans = (Plan(preds, tuple(plain + [i.index for i in reversed(kleene_items)])),)

    returns = []
    if "return_clause" in clauses:
        returns = [(r.children[0], r.children[-1]) for r in subtrees(clauses["return_clause"])]
    def return_value(t: Tree) -> Expr:
        ret_res = _SeqResolver(src, {a: i for a, i in items.items() if not i.negated}, aggregates)
        expr = compile_expr(src, t, ret_res)
        if ret_res.elements or ret_res.offsets:
            alias = next(iter(ret_res.elements or ret_res.offsets))
            raise src.error(
                f"{alias!r} is a Kleene set of events: return an aggregate over it "
                f"(count({alias}), sum/avg/min/max({alias}.attr))",
                t,
            )
        return expr

    attributes = output_attributes(src, declared, returns, return_value, "return")
    return Rule(
        name=name,
        plans=plans,
        conditions=tuple(conditions),
        negations=tuple(negations),
        aggregates=tuple(aggregates),
        attributes=attributes,
        syntax="seq",
        source=src.text,
        text=src.text[tree.meta.start_pos : tree.meta.end_pos] if not tree.meta.empty else src.text,
    )


def _and_plans(positives: list[_Item], t: int, window: int | None, policy: str) -> list[Plan]:
    """The plans of ``AND(...)`` in which position ``t`` is the last event.

    Every other position lies before ``t`` in ``(ts, id)`` order (``ties=True``: events that share
    a timestamp combine, exactly once, in the plan of the one with the largest id). Positions of
    one event type must bind distinct events, so each such group is chained in one plan per
    order of its members (the later member is the earlier one's ``before``); every assignment of
    distinct events then lies in exactly one plan, and no event fills two positions.
    """
    others = [p for p in positives if p.index != t]
    groups: dict[str, list[_Item]] = {}
    for p in others:
        groups.setdefault(p.event_type, []).append(p)
    chained = [g for g in groups.values() if len(g) > 1]
    single = sorted((g[0].index for g in groups.values() if len(g) == 1), reverse=True)
    plans = []
    for chains in itertools.product(*(itertools.permutations(g) for g in chained)):
        before = {p.index: t for p in others}
        for chain in chains:  # chain[0] latest: each member lies before the previous one
            for prev, p in zip(chain, chain[1:]):
                before[p.index] = prev.index
        preds = tuple(
            Predicate(p.event_type, p.alias)
            if p.index == t
            else Predicate(p.event_type, p.alias, policy, window, t, before[p.index], ties=True)
            for p in positives
        )
        order = (t, *single, *(p.index for chain in chains for p in chain))
        plans.append(Plan(preds, order))
    return plans


# ---------------------------------------------------------------------------------- Kleene closure


def _bounds(src: Source, tree: Tree | None) -> tuple[int, int | None]:
    """``[m..n]`` / ``[m..]`` -> (min, max); the default is ``[1..]``."""
    if tree is None:
        return 1, None
    values = []
    for tok in tree.children:
        if tok is None:
            values.append(None)
            continue
        v = number(src, tok)
        if not isinstance(v, int):
            raise src.error(f"a Kleene size bound must be a whole number, got {str(tok)}", tok)
        values.append(v)
    lo = values[0]
    hi = values[1] if len(values) > 1 else None
    if lo < 1:
        raise src.error("a Kleene set is never empty: its lower size bound must be at least 1", tree)
    if hi is not None and hi < lo:
        raise src.error(f"Kleene size bounds [{lo}..{hi}]: the upper bound is below the lower", tree)
    return lo, hi


def _check_kleene(
    src: Source, positives: list[_Item], kleene: list[_Item], policy: str, select: Tree | None
) -> None:
    """Reject what the Kleene semantics cannot evaluate (docs/language.md, Kleene closure)."""
    if policy == "greedy" and not kleene:
        raise src.error("select greedy applies to Kleene positions KL(T b); this pattern has none", select)
    if not kleene:
        return
    if policy in ("last", "first"):
        raise src.error(
            f"select {policy} is not supported with a Kleene position; use select each "
            "(every subset) or select greedy (the largest set)",
            select,
        )
    if positives[-1].kleene is not None:
        raise src.error(
            "a Kleene position cannot be the last position of a SEQ: a match is reported when its "
            "last event arrives, and nothing would close the set; add an event after it",
            positives[-1].at,
        )
    for a, b in zip(positives, positives[1:]):
        if a.kleene is not None and b.kleene is not None:
            raise src.error(
                f"Kleene positions {a.alias!r} and {b.alias!r} are next to each other: where one "
                "set ends and the next begins would be ambiguous; put an event between them",
                b.at,
            )


def _kleene_kind(src: Source, conj: Tree, res: _SeqResolver) -> tuple[str, int] | None:
    """Whether a ``where`` operand is a per-element ("element") or consecutive ("pair") condition
    of a Kleene position (and whose), or None (a condition of the match, or of a NOT)."""
    touched = set(res.elements) | set(res.offsets)
    if res.negated and res.aggregated:
        sets = ", ".join(sorted(res.aggregated))
        raise src.error(
            f"a NOT condition may not read an aggregate over a Kleene set (over {sets}); "
            "only the match's conditions may",
            conj,
        )
    if not touched:
        return None
    if res.negated:
        raise src.error(
            "a NOT condition may not read a Kleene position's elements (which element would it be?)",
            conj,
        )
    if len(touched) > 1:
        raise src.error(
            f"a condition may read the elements of one Kleene position only ({', '.join(sorted(touched))})",
            conj,
        )
    if res.aggregated:
        raise src.error(
            "a condition may not mix a Kleene set's elements with aggregates over a set; "
            "write them as separate conditions",
            conj,
        )
    alias = touched.pop()
    item = res.items[alias]
    if res.offsets and res.elements:
        raise src.error(
            f"write every reference to {alias!r} in this condition as {alias}[i] / {alias}[i+1]",
            conj,
        )
    if res.offsets:
        if len(res.index_vars) > 1:
            raise src.error(
                f"use one index variable in a condition ({', '.join(sorted(res.index_vars))})", conj
            )
        offsets = sorted(res.offsets[alias])
        if len(offsets) == 2:
            return "pair", item.index
    return "element", item.index


def _to_element(expr: Expr, k: int) -> Expr:
    """Rewrite a per-element / consecutive condition of Kleene position ``k``: its element is
    ``SELF`` (``b[i]``) and the next one ``NEXT`` (``b[i+1]``)."""
    offsets = sorted({
        n.pred - _INDEXED
        for n in _nodes(expr)
        if isinstance(n, (Attr, Timestamp)) and _INDEXED - 1 <= n.pred <= _INDEXED + 1
    })
    low = offsets[0] if offsets else 0

    def fn(node: Expr) -> Expr:
        if isinstance(node, (Attr, Timestamp)):
            if node.pred == k:
                return _with_pred(node, SELF)
            if _INDEXED - 1 <= node.pred <= _INDEXED + 1:
                return _with_pred(node, SELF if node.pred - _INDEXED == low else NEXT)
        return node

    return map_expr(expr, fn)


def _with_pred(node: Expr, pred: int) -> Expr:
    from dataclasses import replace

    return replace(node, pred=pred)


def _nodes(expr: Expr):
    from ..model import walk

    return walk(expr)


def _next_plain(positives: list[_Item], index: int) -> int:
    """The first position after ``index`` that is not a Kleene position."""
    return next(p.index for p in positives[index + 1 :] if p.kleene is None)


def _kleene_predicate(
    item: _Item, window: int | None, last: int, greedy: bool, conds: dict, pairs: dict
) -> Predicate:
    """The predicate of Kleene position ``item``: its elements lie after the previous position
    (or, when it comes first, in the window) and before the next one."""
    lo, hi = item.kleene
    spec = Kleene(
        min_size=lo, max_size=hi, greedy=greedy,
        after=item.index - 1 if item.index > 0 else None,
        conditions=tuple(conds[item.index]), consecutive=tuple(pairs[item.index]),
    )
    return Predicate(item.event_type, item.alias, "each", window, last, item.index + 1, kleene=spec)
