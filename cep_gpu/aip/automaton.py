"""The AIP automaton model: a rule compiled into sequence models (plain data, cached per rule)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..analysis import has_aggregate
from ..model import (
    SELF,
    Attr,
    Compare,
    Expr,
    Plan,
    Rule,
    Timestamp,
    aggregate_inputs,
    inputs,
    negation_inputs,
    ready_step,
    walk,
)
from .kleene import KleeneStep


@dataclass(frozen=True)
class Transition:
    """The transition that binds ``pred`` (declaration index) at ``position`` of a sequence model.

    ``lower``: ``(x, anchor, window)`` checks ``ts(x) >= ts(anchor) - window``; ``upper``:
    ``(x, before, ties)`` checks ``ts(x) < ts(before)``, or ``row(x) < row(before)`` with ``ties``
    (:attr:`cep_gpu.model.Predicate.ties`: (ts, id) order); ``conditions``: indices into ``Rule.conditions``
    whose inputs are all bound once this transition fires (static filters excepted: they are the
    content test of the event itself). ``expiry``: ``(x, window)`` of the bound predicates whose
    anchor is still to come after this transition; the instance expires once
    ``min(ts(x) + window)`` has passed. ``same_row``: the event that fired the previous transition
    may fire this one too (two predicates may bind one event; ties go by declaration index).
    """

    pred: int
    position: int
    conditions: tuple[int, ...]
    lower: tuple[tuple[int, int, int], ...]
    upper: tuple[tuple[int, int, bool], ...]
    expiry: tuple[tuple[int, int], ...]
    same_row: bool
    accepting: bool
    #: attribute comparisons between the new event and a bound one, checked without building
    #: the clones first (a subset of ``conditions``, or equalities they imply, see :class:`FastCompare`)
    fast: tuple[FastCompare, ...] = ()



@dataclass(frozen=True)
class FastCompare:
    """``Attr(left) op Attr(right)`` where one side is the predicate the transition binds.

    ``implied_by`` is empty for a condition of the rule. Otherwise the comparison is an equality
    implied by a chain of equality conditions over the attributes ``implied_by`` (a parameter
    shared by several predicates: ``A.k = C.k`` and ``B.k = C.k`` give ``A.k = B.k``, checkable
    when B arrives instead of when C does). Such a check is used only when all those attributes
    have the same kind in the table, where equality is transitive; it removes only instances that
    would fail the rule's own conditions later.
    """

    op: str
    left: tuple[int, str]
    right: tuple[int, str]
    implied_by: tuple[str, ...] = ()



@dataclass(frozen=True)
class SequenceModel:
    """A linear automaton for binding steps ``0..depth`` of plan ``plan``, in arrival order ``order``."""

    plan: int
    depth: int
    order: tuple[int, ...]
    transitions: tuple[Transition, ...]
    #: ``last`` early deletion applies to the first state (see :meth:`AipRun._supersede`).
    supersede: bool = False
    #: ``"last"``/``"first"``: the second transition clones, per group of first-state instances
    #: whose events are interchangeable, only the latest / earliest one (see :meth:`AipRun._prune`).
    prune: str | None = None

    def state_name(self, rule: Rule, state: int) -> str:
        """The name of ``state``: the alias bound last (as in Figure 1), or ``init``."""
        return "init" if state == 0 else rule.predicates[self.order[state - 1]].alias



@dataclass(frozen=True)
class ResolveStep:
    """What resolving the complete instances of sub-plan ``depth`` of a plan checks and chooses."""

    depth: int
    negations: tuple[int, ...]
    conditions: tuple[int, ...]  # conditions that read aggregate values (checked here, not per event)
    aggregates: tuple[int, ...]  # aggregates those conditions need
    policy: str | None  # "last"/"first" of step ``depth``; None for "each" and the terminator
    prefix: tuple[int, ...]  # declaration indices bound at steps 0..depth-1
    pred: int  # declaration index bound at step ``depth``
    final: bool



@dataclass(frozen=True)
class Automaton:
    """A rule compiled for AIP: its sequence models and how to resolve their complete instances."""

    rule: Rule
    models: tuple[SequenceModel, ...]
    steps: tuple[tuple[ResolveStep, ...], ...]  # per plan, ascending depth
    static: tuple[tuple[int, ...], ...]  # per predicate: its static filters (condition indices)
    waits_for_future: bool  # some span reaches past the terminator: resolve later
    #: per plan, its Kleene positions in binding order, bound at resolution after the plain
    #: positions (:mod:`cep_gpu.aip.kleene`); empty for rules without Kleene closure
    kleene: tuple[tuple[KleeneStep, ...], ...] = ()

    def describe(self) -> str:
        """The sequence models as text (one line per model)."""
        lines = []
        for m in self.models:
            names = " -> ".join(self.rule.predicates[p].alias for p in m.order)
            sets = self.kleene[m.plan] if self.kleene else ()
            tail = "".join(f", then Kleene set {self.rule.predicates[k.pred].alias} from its span"
                           for k in sets)
            lines.append(f"plan {m.plan} steps 0..{m.depth}: init -> {names} (accept){tail}")
        return "\n".join(lines)




def compile_automaton(rule: Rule) -> Automaton:
    """Build the automaton model of ``rule`` (see the module docstring)."""
    static = []
    for pred in range(rule.n_predicates):
        static.append(tuple(
            i for i, c in enumerate(rule.conditions)
            if not has_aggregate(c) and inputs(c) == frozenset((pred,))
        ))
    models: list[SequenceModel] = []
    steps: list[tuple[ResolveStep, ...]] = []
    kleene: list[tuple[KleeneStep, ...]] = []
    for p, plan in enumerate(rule.plans):
        n = len(plan.order)
        # Kleene positions are bound last (after every plain position): the models take the
        # plain ones, the sets are bound at resolution
        n_plain = sum(1 for x in plan.order if plan.predicates[x].kleene is None)
        chosen = {k for k in range(1, n_plain) if plan.predicates[plan.order[k]].policy in ("last", "first")}
        depths = sorted(chosen | {n_plain - 1})
        plan_steps = []
        for k in depths:
            for order in _arrival_orders(plan, plan.order[: k + 1]):
                models.append(_sequence_model(rule, plan, p, k, order, static))
            plan_steps.append(_resolve_step(rule, plan, k, chosen, final=k == n - 1))
        steps.append(tuple(plan_steps))
        kleene.append(tuple(_kleene_step(rule, plan, k) for k in range(n_plain, n)))
    return Automaton(rule, tuple(models), tuple(steps), tuple(static), _waits_for_future(rule),
                     tuple(kleene) if rule.kleene_positions else ())


def _kleene_step(rule: Rule, plan: Plan, k: int) -> KleeneStep:
    """The checks of binding step ``k`` (a Kleene position): those ready exactly there."""
    pred = plan.order[k]
    return KleeneStep(
        pred,
        tuple(i for i, n in enumerate(rule.negations) if ready_step(plan, negation_inputs(n)) == k),
        tuple(i for i, c in enumerate(rule.conditions) if ready_step(plan, inputs(c, rule)) == k),
        tuple(i for i, a in enumerate(rule.aggregates) if a.kleene == pred),
    )



def _arrival_orders(plan: Plan, sub: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Every order in which the events of ``sub`` can arrive: each before its ``before``."""
    members = set(sub)
    children = {x: [y for y in sub if plan.predicates[y].before == x] for x in sub}

    def extend(done: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if len(done) == len(members):
            yield done
            return
        for x in sub:
            if x not in done and all(c in done for c in children[x]):
                yield from extend(done + (x,))

    yield from extend(())



def _sequence_model(
    rule: Rule, plan: Plan, p: int, k: int, order: tuple[int, ...], static
) -> SequenceModel:
    members = frozenset(order)
    pos = {x: i for i, x in enumerate(order)}
    term = plan.terminator
    conds: list[list[int]] = [[] for _ in order]
    for i, c in enumerate(rule.conditions):
        ins = inputs(c) if not has_aggregate(c) else None
        if ins is None or not ins <= members or (len(ins) == 1 and i in static[next(iter(ins))]):
            continue
        conds[max((pos[x] for x in ins), default=pos[term])].append(i)
    lower: list[list[tuple[int, int, int]]] = [[] for _ in order]
    upper: list[list[tuple[int, int, bool]]] = [[] for _ in order]
    for x in order:
        pr = plan.predicates[x]
        if x == term:
            continue
        if pr.window is not None:
            lower[max(pos[x], pos[pr.anchor])].append((x, pr.anchor, pr.window))
        upper[max(pos[x], pos[pr.before])].append((x, pr.before, pr.ties))
    fast: list[list[FastCompare]] = [[] for _ in order]
    for i, cs in enumerate(conds):
        for c in list(cs):
            fc = _as_fast(rule.conditions[c])
            if fc is not None:
                fast[i].append(fc)
                cs.remove(c)
    for fc in _implied_equalities(rule, members):
        i = max(pos[fc.left[0]], pos[fc.right[0]])
        fast[i].append(fc)
    transitions = []
    for i, x in enumerate(order):
        bound = set(order[: i + 1])
        expiry = tuple(
            (y, plan.predicates[y].window) for y in order[: i + 1]
            if y != term and plan.predicates[y].window is not None
            and plan.predicates[y].anchor not in bound
        )
        transitions.append(Transition(
            pred=x, position=i, conditions=tuple(conds[i]), lower=tuple(lower[i]),
            upper=tuple(upper[i]), expiry=expiry, same_row=i > 0 and x > order[i - 1],
            accepting=i == len(order) - 1, fast=tuple(fast[i]),
        ))
    first = order[0]
    policy = plan.predicates[first].policy
    chosen_first = (
        len(order) > 1 and first == plan.order[k] and policy in ("last", "first")
        and not rule.consuming and _supersedable(rule, first)
    )
    supersede = chosen_first and policy == "last"
    prune = None
    if chosen_first:
        pr = plan.predicates[first]
        # the timing check that could favour the *other* event must already be done at the
        # second transition: `last` keeps the newer event (it may fail a later `< ts(before)`),
        # `first` keeps the older one (it may fail a later `>= ts(anchor) - window`)
        if policy == "last" and pos[pr.before] == 1:
            prune = "last"
        elif policy == "first" and (pr.window is None or pos[pr.anchor] == 1):
            prune = "first"
    return SequenceModel(p, k, order, tuple(transitions), supersede, prune)



def _as_fast(expr: Expr) -> FastCompare | None:
    """``expr`` as a :class:`FastCompare` when it compares attributes of two predicates."""
    if (isinstance(expr, Compare) and isinstance(expr.left, Attr) and isinstance(expr.right, Attr)
            and SELF not in (expr.left.pred, expr.right.pred) and expr.left.pred != expr.right.pred):
        return FastCompare(expr.op, (expr.left.pred, expr.left.name), (expr.right.pred, expr.right.name))
    return None



def _implied_equalities(rule: Rule, members: frozenset[int]) -> list[FastCompare]:
    """Equalities between attributes of two predicates implied by the rule's equality conditions
    among ``members`` (and not conditions themselves)."""
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(u):
        while parent.setdefault(u, u) != u:
            u = parent[u]
        return u

    direct = set()
    for c in rule.conditions:
        fc = _as_fast(c)
        if fc is None or fc.op != "=" or not {fc.left[0], fc.right[0]} <= members:
            continue
        direct.add(frozenset((fc.left, fc.right)))
        parent[find(fc.left)] = find(fc.right)
    classes: dict[tuple[int, str], list[tuple[int, str]]] = {}
    for u in list(parent):
        classes.setdefault(find(u), []).append(u)
    out = []
    for nodes in classes.values():
        names = tuple(sorted({n for _, n in nodes}))
        nodes = sorted(nodes)
        for a, u in enumerate(nodes):
            for v in nodes[a + 1:]:
                if u[0] != v[0] and frozenset((u, v)) not in direct:
                    out.append(FastCompare("=", u, v, names))
    return out



def _supersedable(rule: Rule, pred: int) -> bool:
    """Whether two events bound to ``pred`` are interchangeable for everything but their time order.

    True when nothing reads ``pred``'s timestamp (besides the window itself) and no negation or
    aggregate span is fixed by it; then only the attributes that conditions read distinguish them.
    """
    exprs = list(rule.conditions)
    for part in list(rule.negations) + list(rule.aggregates):
        if pred in part.span.refs:
            return False
        exprs.extend(part.conditions)
    return not any(
        isinstance(node, Timestamp) and node.pred == pred for e in exprs for node in walk(e)
    )



def read_attributes(rule: Rule, pred: int) -> tuple[str, ...]:
    """The attributes of ``pred`` read by any condition, negation or aggregate condition."""
    exprs = list(rule.conditions)
    for part in list(rule.negations) + list(rule.aggregates):
        exprs.extend(part.conditions)
    names = {n.name for e in exprs for n in walk(e) if isinstance(n, Attr) and n.pred == pred}
    return tuple(sorted(names))



def _resolve_step(rule: Rule, plan: Plan, k: int, chosen: set[int], final: bool) -> ResolveStep:
    negs = tuple(
        i for i, n in enumerate(rule.negations) if ready_step(plan, negation_inputs(n)) <= k
    )
    conds = tuple(
        i for i, c in enumerate(rule.conditions)
        if has_aggregate(c) and ready_step(plan, inputs(c, rule)) <= k
    )
    aggs = tuple(
        i for i, a in enumerate(rule.aggregates) if ready_step(plan, aggregate_inputs(a)) <= k
    )
    policy = plan.predicates[plan.order[k]].policy if k in chosen else None
    return ResolveStep(k, negs, conds, aggs, policy, plan.order[:k], plan.order[k], final)



def _waits_for_future(rule: Rule) -> bool:
    """Whether some negation or aggregate span may include events after the terminator."""
    for span in [n.span for n in rule.negations] + [a.span for a in rule.aggregates]:
        for off, incl in ((span.lo_offset, span.lo_inclusive), (span.hi_offset, span.hi_inclusive)):
            if off > 0 or (off == 0 and incl):
                return True
    return False



_CACHE: dict[int, tuple[Rule, Automaton]] = {}



def automaton_of(rule: Rule) -> Automaton:
    """The (cached) automaton of ``rule``."""
    hit = _CACHE.get(id(rule))
    if hit is not None and hit[0] is rule:
        return hit[1]
    auto = compile_automaton(rule)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[id(rule)] = (rule, auto)
    return auto

