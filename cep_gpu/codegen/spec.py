"""Lowering: a rule and one of its plans -> a small kernel spec (what each binding step checks).

The spec is the one place where the CDP host code and the kernel generators (Numba here, CUDA C in
:mod:`cep_gpu.codegen.cuda`) agree on:

* which conditions are **column filters** (read only one predicate and no aggregate: evaluated
  once per column on the host, :mod:`cep_gpu.columns`), and which are **residual checks** made in
  the kernel of the step where their last input is bound (:func:`cep_gpu.model.step_checks`);
* which equality a step answers with the **parameter index** (``X.attr = <expr of bound
  predicates>``, the typical ``k=$k``) instead of scanning its window;
* the **argument layout** of the kernels (:class:`Layout`): attribute arrays by slot number,
  string constants as runtime codes, negation and aggregate columns. Rule text never reaches
  generated source: names become slot numbers here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import has_aggregate
from ..model import (
    SELF,
    Attr,
    Compare,
    Const,
    Expr,
    Plan,
    Rule,
    inputs,
    kleene_exprs,
    step_checks,
    walk,
)


@dataclass(frozen=True)
class KeySpec:
    """Step candidates come from the parameter index: ``pred.attr = expr`` (condition ``condition``)."""

    condition: int
    attr: str
    expr: Expr


@dataclass(frozen=True)
class StepSpec:
    """One binding step of a plan.

    ``conditions``/``negations``: indices into ``Rule.conditions``/``Rule.negations`` checked by
    the kernel for each candidate (column filters and the indexed equality are left out: the
    candidates already satisfy them). ``policy`` is ``"each"`` for the terminator.
    """

    step: int
    pred: int
    policy: str
    window: int | None
    anchor: int | None
    before: int | None
    conditions: tuple[int, ...]
    negations: tuple[int, ...]
    key: KeySpec | None
    #: :attr:`cep_gpu.model.Predicate.ties`: "before" is row order, not strictly earlier ts
    ties: bool = False

    @property
    def trivial(self) -> bool:
        """True when every candidate in range is valid (nothing left for the kernel to check)."""
        return not self.conditions and not self.negations


@dataclass(frozen=True)
class PlanSpec:
    plan: Plan
    steps: tuple[StepSpec, ...]


@dataclass(frozen=True)
class Layout:
    """Kernel argument layout: the ``env`` tuple every generated function receives.

    ``env[0]`` = table timestamps; attribute slot ``s`` at ``env[1 + 2s]`` (values) and
    ``env[2 + 2s]`` (validity); ``env[strings_at]`` = int64 codes of the string constants;
    negation ``k``'s column rows/timestamps at ``env[neg_at + 2k]``/``env[neg_at + 2k + 1]``;
    aggregate ``k``'s at ``env[agg_at + 2k]``/``env[agg_at + 2k + 1]``.
    """

    attrs: tuple[str, ...]
    strings: tuple[str, ...]
    n_negations: int
    n_aggregates: int

    def values_at(self, attr: str) -> int:
        return 1 + 2 * self.attrs.index(attr)

    @property
    def strings_at(self) -> int:
        return 1 + 2 * len(self.attrs)

    @property
    def neg_at(self) -> int:
        return self.strings_at + 1

    @property
    def agg_at(self) -> int:
        return self.neg_at + 2 * self.n_negations


@dataclass(frozen=True)
class RuleSpec:
    """Everything the CDP host loop and the kernel generators need about one rule."""

    rule: Rule
    plans: tuple[PlanSpec, ...]
    #: per predicate: indices of its column filters in ``Rule.conditions``
    filters: tuple[tuple[int, ...], ...]
    #: per negation / aggregate: indices into its own ``conditions`` (filters / kernel checks)
    neg_filters: tuple[tuple[int, ...], ...]
    neg_checks: tuple[tuple[int, ...], ...]
    agg_filters: tuple[tuple[int, ...], ...]
    agg_checks: tuple[tuple[int, ...], ...]
    layout: Layout
    use_index: bool
    #: Kleene position -> first of its three hidden columns in the CDP sequences, after the
    #: predicates' (set start and length in the step's flat set store, the set's last row)
    kleene_cols: tuple[tuple[int, int], ...] = ()

    def kleene_base(self, pred: int) -> int:
        """The first hidden column of Kleene position ``pred`` (see ``kleene_cols``)."""
        return dict(self.kleene_cols)[pred]

    @property
    def width(self) -> int:
        """Columns of the CDP partial sequences (the predicates, then the Kleene hidden ones)."""
        return self.rule.n_predicates + 3 * len(self.kleene_cols)


def _is_filter(rule: Rule, expr: Expr, pred: int) -> bool:
    """Reads only ``pred`` (or only SELF when ``pred`` is SELF) and no aggregate."""
    if has_aggregate(expr):
        return False
    ins = inputs(expr, rule)
    return ins == frozenset() if pred == SELF else ins == frozenset((pred,))


def _key_of(rule: Rule, index: int, pred: int, bound: frozenset[int]) -> KeySpec | None:
    """``pred.attr = e`` (either side) with ``e`` reading only already bound predicates."""
    cond = rule.conditions[index]
    if not isinstance(cond, Compare) or cond.op != "=":
        return None
    for mine, other in ((cond.left, cond.right), (cond.right, cond.left)):
        if not (isinstance(mine, Attr) and mine.pred == pred):
            continue
        if has_aggregate(other) or isinstance(other, Const):
            continue
        if any(isinstance(n, Attr) and n.pred == SELF for n in walk(other)):
            continue
        ins = inputs(other, rule)
        if ins and ins <= bound:
            return KeySpec(index, mine.name, other)
    return None


def lower(rule: Rule, use_index: bool = True) -> RuleSpec:
    """The kernel spec of ``rule`` (``use_index=False`` scans windows instead of using the index)."""
    filters = tuple(
        tuple(i for i, c in enumerate(rule.conditions) if _is_filter(rule, c, p))
        for p in range(rule.n_predicates)
    )
    plans = []
    for plan in rule.plans:
        steps = []
        checks = step_checks(rule, plan)
        for s, ch in enumerate(checks):
            p = plan.predicates[ch.pred]
            residual = [c for c in ch.conditions if c not in filters[ch.pred]]
            key = None
            if use_index and s > 0:
                bound = frozenset(plan.order[:s])
                for c in residual:
                    key = _key_of(rule, c, ch.pred, bound)
                    if key is not None:
                        residual.remove(c)
                        break
            steps.append(
                StepSpec(
                    s, ch.pred, p.policy or "each", p.window, p.anchor, p.before,
                    tuple(residual), ch.negations, key, p.ties,
                )
            )
        plans.append(PlanSpec(plan, tuple(steps)))

    def split(parts):
        fil, chk = [], []
        for part in parts:
            f = tuple(i for i, c in enumerate(part.conditions) if _is_filter(rule, c, SELF))
            fil.append(f)
            chk.append(tuple(i for i in range(len(part.conditions)) if i not in f))
        return tuple(fil), tuple(chk)

    neg_filters, neg_checks = split(rule.negations)
    agg_filters, agg_checks = split(rule.aggregates)
    return RuleSpec(
        rule, tuple(plans), filters, neg_filters, neg_checks, agg_filters, agg_checks,
        _layout(rule), use_index,
        tuple((k, rule.n_predicates + 3 * j) for j, k in enumerate(rule.kleene_positions)),
    )


def _layout(rule: Rule) -> Layout:
    attrs: list[str] = []
    strings: list[str] = []
    exprs = list(rule.conditions) + list(kleene_exprs(rule))
    for part in list(rule.negations) + list(rule.aggregates):
        exprs.extend(part.conditions)
    for expr in exprs:
        for node in walk(expr):
            if isinstance(node, Attr) and node.name not in attrs:
                attrs.append(node.name)
            elif isinstance(node, Const) and isinstance(node.value, str) and node.value not in strings:
                strings.append(node.value)
    for agg in rule.aggregates:
        if agg.attribute is not None and agg.attribute not in attrs:
            attrs.append(agg.attribute)
    return Layout(tuple(attrs), tuple(strings), len(rule.negations), len(rule.aggregates))
