"""TESLA rule syntax tree -> :class:`~cep_gpu.model.Rule`.

Predicates are numbered in declaration order (terminator 0). References to other predicates
(``from Y``, ``between Y and Z``, ``Y.attr``, ``consuming Y``) name an alias given with ``as`` or,
failing that, the event type of exactly one predicate; only predicates declared earlier can be
referred to (``consuming`` may name any). Parameters bind at their first occurrence as
``attr = $p`` in a positive predicate and compile to the attribute that bound them.
"""

from __future__ import annotations

from dataclasses import dataclass

from lark import Token, Tree

from ..model import (
    SELF,
    Aggregate,
    AggValue,
    Attr,
    Compare,
    Expr,
    Negation,
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

AGG_FUNCTIONS = ("avg", "sum", "min", "max", "count")


@dataclass
class _Decl:
    """A positive predicate as declared: its type, its explicit alias (if any) and where."""

    event_type: str
    alias: str | None
    at: Tree


class _Rule:
    """The state of one TESLA rule while it compiles."""

    def __init__(self, src: Source, tree: Tree) -> None:
        self.src = src
        self.tree = tree
        self.decls: list[_Decl] = []
        self.params: dict[str, Attr] = {}
        self.predicates: list[Predicate] = []
        self.conditions: list[Expr] = []
        self.negations: list[Negation] = []
        self.aggregates: list[Aggregate] = []
        self.agg_names: dict[str, int] = {}

    # -------------------------------------------------------------------- references

    def declare_all(self, items: list[Tree]) -> None:
        """Collect every positive predicate's type and alias first, for clear 'declared later'
        errors and duplicate-alias checks."""
        aliases: dict[str, Tree] = {}
        for item in items:
            pred = subtrees(item, "event_pred")[0]
            type_ = self.src.name(pred.children[0], "event type")
            alias_tree = subtrees(item, "alias")
            alias = None
            if alias_tree:
                tok = alias_tree[0].children[0]
                alias = self.src.name(tok, "alias")
                if alias in aliases:
                    raise self.src.error(f"duplicate alias {alias!r}", tok)
                aliases[alias] = alias_tree[0]
            self.decls.append(_Decl(type_, alias, item))
        types = {d.event_type for d in self.decls}
        for d in self.decls:
            if d.alias is not None and d.alias in types and d.alias != d.event_type:
                raise self.src.error(
                    f"alias {d.alias!r} is also the event type of another predicate",
                    aliases[d.alias],
                )

    def lookup(self, tok: Token, before: int | None, what: str, itself: bool = True) -> int:
        """The declaration index that ``tok`` names; with ``before``, it must be declared earlier.
        ``itself``: predicate ``before`` is the one referring (a selection), not the next one
        (for a negation or aggregate, ``before`` is the number of predicates declared so far)."""
        name = str(tok)
        found = [i for i, d in enumerate(self.decls) if d.alias == name]
        if not found:
            found = [i for i, d in enumerate(self.decls) if d.event_type == name]
        if not found:
            known = ", ".join(sorted({d.alias or d.event_type for d in self.decls}))
            raise self.src.error(
                f"{what} {name!r} is not a predicate of this rule (known: {known})", tok
            )
        if len(found) > 1:
            raise self.src.error(
                f"{what} {name!r} is ambiguous: {len(found)} predicates have that type; "
                f"give them aliases with 'as'",
                tok,
            )
        idx = found[0]
        if before is not None and idx >= before:
            which = "itself" if itself and idx == before else f"{name!r}, which is declared later"
            raise self.src.error(
                f"{what} refers to {which}; a predicate can only refer to those declared before it",
                tok,
            )
        return idx

    def param(self, tok: Token) -> Attr:
        name = str(tok)[1:]
        self.src.name(tok.update(value=name), "parameter name")
        if name not in self.params:
            raise self.src.error(
                f"parameter ${name} is used before it is bound (bind it with attr = ${name} "
                f"in a predicate before)",
                tok,
            )
        return self.params[name]

    # -------------------------------------------------------------------- parts

    def event_conditions(self, pred: Tree, me: int, positive: bool) -> list[Expr]:
        """The conditions inside ``X(...)``; ``me`` is the predicate's index (or SELF)."""
        res = _PredResolver(self, me)
        out: list[Expr] = []
        for cmp in subtrees(pred, "comparison"):
            left, op, right = cmp.children
            if (
                positive
                and left.data == "bare"
                and str(op.children[0]) == "="
                and right.data == "param"
                and str(right.children[0])[1:] not in self.params
            ):
                attr = self.src.name(left.children[0], "attribute name")
                if attr == "ts":
                    raise self.src.error(
                        f"a parameter binds an attribute, not a timestamp (ts = {right.children[0]}): "
                        "compare timestamps directly: ts inside X(...) is X's timestamp and Y.ts "
                        "Y's, as in A(ts < C.ts)",
                        left.children[0],
                    )
                pname = self.src.name(
                    right.children[0].update(value=str(right.children[0])[1:]), "parameter name"
                )
                bound = Attr(me, attr, pos=pos_of(left.children[0]))
                self.params[pname] = bound
                # The binding names the attribute, so an event that lacks it (missing, null, NaN)
                # fails the predicate (DESIGN 3.3), also when $p is then used only in `where`,
                # a negation or an aggregate (where a null would otherwise just match nothing).
                # `attr = attr` is false exactly when attr is missing, on every backend.
                out.append(Compare("=", bound, bound, pos=pos_of(cmp)))
                continue
            out.append(compile_comparison(self.src, cmp, res))
        return out

    def span(self, tree: Tree, before: int) -> Span:
        if tree.data == "within_from":
            dur, ref = tree.children
            window = duration(self.src, dur)
            y = self.lookup(ref, before, "from", itself=False)
            return Span(y, -window, True, y, 0, False)
        y_tok, z_tok = tree.children
        y = self.lookup(y_tok, before, "between", itself=False)
        z = self.lookup(z_tok, before, "between", itself=False)
        return Span(y, 0, False, z, 0, False)

    def positive(self, item: Tree, idx: int) -> None:
        decl = self.decls[idx]
        pred = subtrees(item, "event_pred")[0]
        alias = decl.alias or decl.event_type
        if item.data == "terminator":
            self.predicates.append(Predicate(decl.event_type, alias))
        else:
            policy = str(item.children[0]).lower()
            within = subtrees(item, "within_from")[0]
            dur, ref = within.children
            window = duration(self.src, dur)
            y = self.lookup(ref, idx, "from")
            self.predicates.append(Predicate(decl.event_type, alias, policy, window, y, y))
        self.conditions.extend(self.event_conditions(pred, idx, positive=True))

    def negation(self, item: Tree, n_before: int) -> None:
        pred, span_tree = item.children
        type_ = self.src.name(pred.children[0], "event type")
        span = self.span(span_tree, n_before)
        conds = self.event_conditions(pred, SELF, positive=False)
        self.negations.append(Negation(type_, span, tuple(conds)))

    def aggregate(self, item: Tree, n_before: int) -> None:
        name_tok, _eq, func_tok, pred, span_tree = item.children[:5]
        attr_tree = next(iter(subtrees(item, "agg_attr")), None)
        test = next(iter(subtrees(item, "agg_test")), None)
        name = self.src.name(name_tok, "aggregate name")
        if name in self.agg_names:
            raise self.src.error(f"aggregate name {name!r} used twice", name_tok)
        func = str(func_tok).lower()
        if func not in AGG_FUNCTIONS:
            raise self.src.error(
                f"unknown aggregate function {str(func_tok)!r}; expected Avg, Sum, Min, Max or Count",
                func_tok,
            )
        attr = None
        if attr_tree is not None:
            attr_tok = attr_tree.children[0]
            attr = self.src.name(attr_tok, "attribute name")
            if func == "count":
                raise self.src.error(
                    "Count takes no attribute (write Count(...) without .attr)", attr_tok
                )
            if attr == "ts":
                raise self.src.error(
                    "aggregates over timestamps are not supported; aggregate an attribute",
                    attr_tok,
                )
        elif func != "count":
            raise self.src.error(
                f"{str(func_tok)} needs the attribute to aggregate: {str(func_tok)}(...).attr",
                func_tok,
            )
        type_ = self.src.name(pred.children[0], "event type")
        span = self.span(span_tree, n_before)
        conds = self.event_conditions(pred, SELF, positive=False)
        index = len(self.aggregates)
        at = pos_of(attr_tree.children[0] if attr_tree is not None else func_tok)
        self.aggregates.append(Aggregate(func, type_, attr, span, tuple(conds), name, pos=at))
        if test is not None:  # compiled before the name exists: `v = ...).x > v` is an error
            op, rhs = test.children
            value = compile_expr(self.src, rhs, _OuterResolver(self, n_before))
            self.conditions.append(
                Compare(str(op.children[0]), AggValue(index), value, pos=pos_of(test))
            )
        self.agg_names[name] = index


class _PredResolver(Resolver):
    """Inside ``X(...)``: a bare name is X's own attribute (``me``: its index or SELF)."""

    def __init__(self, rule: _Rule, me: int) -> None:
        self.rule, self.me = rule, me

    def bare(self, tok: Token) -> Expr:
        name = self.rule.src.name(tok, "attribute name")
        return Timestamp(self.me) if name == "ts" else Attr(self.me, name, pos=pos_of(tok))

    def qualified(self, name: Token, attr: Token) -> Expr:
        if self.me != SELF:
            return _qualified(self.rule, name, attr, self.me)
        return _qualified(self.rule, name, attr, len(self.rule.predicates), itself=False)

    def param(self, tok: Token) -> Expr:
        return self.rule.param(tok)


class _OuterResolver(Resolver):
    """Outside any predicate (aggregate comparisons, ``where``): a bare name is an aggregate."""

    def __init__(self, rule: _Rule, before: int | None) -> None:
        self.rule, self.before = rule, before

    def bare(self, tok: Token) -> Expr:
        name = str(tok)
        if name not in self.rule.agg_names:
            raise self.rule.src.error(
                f"unknown name {name!r}: write Predicate.attribute, $parameter, or the name of "
                f"an aggregate",
                tok,
            )
        return AggValue(self.rule.agg_names[name])

    def qualified(self, name: Token, attr: Token) -> Expr:
        return _qualified(self.rule, name, attr, self.before, itself=False)

    def param(self, tok: Token) -> Expr:
        return self.rule.param(tok)


def _qualified(
    rule: _Rule, name: Token, attr: Token, before: int | None, itself: bool = True
) -> Expr:
    idx = rule.lookup(name, before, "reference", itself)
    attr_name = rule.src.name(attr, "attribute name")
    if attr_name == "ts":
        return Timestamp(idx)
    return Attr(idx, attr_name, pos=pos_of(attr))


def compile_tesla(src: Source, tree: Tree) -> Rule:
    """Compile one ``tesla_rule`` tree."""
    name_tok = tree.children[0]
    name = src.name(name_tok, "rule name")
    decls_tree = next((c for c in subtrees(tree, "attr_decls")), None)
    declared = attr_decls(src, decls_tree)
    items = [
        c for c in subtrees(tree) if c.data in ("terminator", "selection", "negation", "aggregate")
    ]
    rule = _Rule(src, tree)
    rule.declare_all([i for i in items if i.data in ("terminator", "selection")])

    idx = 0
    for item in items:
        if item.data in ("terminator", "selection"):
            rule.positive(item, idx)
            idx += 1
        elif item.data == "negation":
            rule.negation(item, idx)
        else:
            rule.aggregate(item, idx)

    assignments = []
    for where in subtrees(tree, "where_clause"):
        for a in subtrees(where, "assignment"):
            assignments.append((a.children[0], a.children[2]))
    outer = _OuterResolver(rule, None)
    attributes = output_attributes(
        src, declared, assignments, lambda t: compile_expr(src, t, outer), "where"
    )

    consuming: list[int] = []
    for clause in subtrees(tree, "consuming_clause"):
        for tok in clause.children:
            i = rule.lookup(tok, None, "consuming")
            if i in consuming:
                raise src.error(f"{str(tok)!r} is consumed twice", tok)
            consuming.append(i)

    plan = Plan(tuple(rule.predicates), tuple(range(len(rule.predicates))))
    return Rule(
        name=name,
        plans=(plan,),
        conditions=tuple(rule.conditions),
        negations=tuple(rule.negations),
        aggregates=tuple(rule.aggregates),
        attributes=attributes,
        consuming=tuple(consuming),
        syntax="tesla",
        text=_rule_text(src, tree),
        source=src.text,
    )


def _rule_text(src: Source, tree: Tree) -> str:
    if tree.meta.empty:
        return src.text
    return src.text[tree.meta.start_pos : tree.meta.end_pos]
