"""DecoPa plans (paper §5.1, Definitions 3-6) and their construction (§6, Algorithm 1), with the
hybrid and centralized baselines of §7.1.

A split is a dict ``{positions: (input_a, input_b)}`` over frozensets of positions; single
positions are the leaves (the shuffle of primitive events) and take no unit.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field

from ..errors import ArgumentError, is_finite_positive
from ..model import Rule
from .errors import DecompositionError
from .model import ESTIMATES, RateModel, comparisons, divisor, ingestion, max_c
from .query import Pattern, analyse
from .stats import Stats

STRATEGIES = ("decopa", "hybrid", "centralized")
Split = dict  # frozenset[int] -> tuple[frozenset[int], frozenset[int]]

#: ld splits sampled per sub-query beyond ALL_ORDERS_UP_TO positions (all orders up to it), Alg. 1 line 3.
LD_SAMPLES = 24
ALL_ORDERS_UP_TO = 4
#: Predecessor pairs tried per sub-query (the cheapest by their costs first), Alg. 1 line 12.
MAX_PAIRS = 3000
#: most units a plan places (planning time and the plan grow linearly with them)
MAX_UNITS = 1_000_000


@dataclass(frozen=True)
class Units:
    """``n`` homogeneous processing units, each ingesting at most ``iota`` events and making at
    most ``kappa`` comparisons per window (paper §3.3)."""

    n: int
    iota: float
    kappa: float

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ArgumentError(f"Units: n must be an int >= 1, got {self.n!r}")
        if self.n > MAX_UNITS:  # planning lists every unit: 10^7 took minutes, 10^12 never ends
            raise ArgumentError(f"Units: n must be at most {MAX_UNITS}, got {self.n}")
        for name in ("iota", "kappa"):
            v = getattr(self, name)
            if not is_finite_positive(v):
                raise ArgumentError(f"Units: {name} must be a finite number > 0, got {v!r}")


@dataclass(frozen=True)
class Operator:
    """One operator of a plan (Definition 3): a sub-query, its units and the partitioned input.

    ``positions``/``inputs`` are declaration indices of the rule's positions. ``partitioned``: the
    index (0 or 1) of the input whose events are spread over the units (hash of their ids); the
    other input goes to every unit. ``input_rates``/``rate``: predicted per window (the plan's
    estimate; ``rate_order`` the order-aware one). ``ingestion``/``comparisons``: Î and K̂ of one
    unit at c = 1 (this operator's share: under ``centralized`` the unit also runs the others).
    ``c``: the largest rate factor this operator's units sustain; ``bound``: which capacity binds.
    """

    name: str
    positions: tuple[int, ...]
    aliases: tuple[str, ...]
    inputs: tuple[tuple[int, ...], tuple[int, ...]]
    units: tuple[int, ...]
    partitioned: int
    rule: Rule = field(repr=False)
    input_rates: tuple[float, float]
    rate: float
    rate_order: float
    ingestion: float
    comparisons: float
    c: float
    bound: str

    @property
    def n_units(self) -> int:
        return len(self.units)

    def label(self, aliases) -> str:
        kind = "AND" if len(self.rule.plans) > 1 else "SEQ"
        return f"{kind}({', '.join(aliases[p] for p in self.positions)})"


@dataclass(frozen=True)
class Plan:
    """A DecoPa plan (Definition 4): operators in topological order, the last one the whole query.

    ``c_star``: the largest rate factor every unit sustains; ``bottleneck``: the operator whose
    units bind it.
    """

    rule: Rule = field(repr=False)
    strategy: str
    units: Units
    stats: Stats = field(repr=False)
    estimate: str
    operators: tuple[Operator, ...]
    c_star: float
    bottleneck: Operator = field(repr=False)

    @property
    def pattern(self) -> Pattern:
        return analyse(self.rule)

    @property
    def root(self) -> Operator:
        return self.operators[-1]

    def operator(self, positions) -> Operator:
        """The operator over ``positions`` (an iterable of declaration indices)."""
        key = tuple(sorted(positions))
        for op in self.operators:
            if op.positions == key:
                return op
        raise KeyError(f"no operator over positions {key}")

    def split(self) -> Split:
        return {frozenset(o.positions): (frozenset(o.inputs[0]), frozenset(o.inputs[1])) for o in self.operators}

    def explain(self) -> str:
        """The plan as a table in the manner of the paper's Figure 2."""
        aliases = self.pattern.aliases
        rows = [("op", "sub-query", "inputs (rate/window)", "units", "Î/unit", "K̂/unit", "c", "binds")]
        for o in self.operators:
            ins = []
            for j, (inp, r) in enumerate(zip(o.inputs, o.input_rates)):
                mark = "*" if j == o.partitioned and o.n_units > 1 else ""
                ins.append(f"{'+'.join(aliases[p] for p in inp)}{mark} {_num(r)}")
            rows.append((o.name, o.label(aliases), ", ".join(ins), str(o.n_units), _num(o.ingestion),
                         _num(o.comparisons), _num(o.c), o.bound))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"DecoPa plan ({self.strategy}, {self.estimate} rates) for {self.rule.name}: "
                 f"{self.units.n} units, iota={_num(self.units.iota)}, kappa={_num(self.units.kappa)} per window"]
        for i, r in enumerate(rows):
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        lines.append("(* partitioned input: hashed over the units; the other input goes to every unit;"
                     " Î, K̂ at c = 1)")
        lines.append(f"c* = {_num(self.c_star)}, bottleneck {self.bottleneck.name} "
                     f"({self.bottleneck.label(aliases)}, {self.bottleneck.bound})")
        return "\n".join(lines)

    def validate(self) -> bool:
        """Check structural validity (Definition 5) and the plan's own numbers; True, or
        :class:`DecompositionError` naming the violated property."""
        pattern = self.pattern
        k = pattern.k
        seen: set[frozenset] = set()
        used: set[frozenset] = set()
        all_units: list[int] = []
        for o in self.operators:
            s = frozenset(o.positions)
            if len(s) < 2 or not s <= set(range(k)):
                raise DecompositionError(f"Definition 5 (1): operator {o.name} has positions {o.positions}")
            if s in seen:
                raise DecompositionError(f"Definition 5 (1): two operators over {o.positions}")
            a, b = (frozenset(i) for i in o.inputs)
            for inp in (a, b):
                if not inp or not inp < s:
                    raise DecompositionError(
                        f"Definition 2 (i): input {sorted(inp)} of {o.name} is not a proper sub-query of it")
                if len(inp) > 1 and inp not in seen:
                    raise DecompositionError(
                        f"Definition 5 (1): input {sorted(inp)} of {o.name} is produced by no earlier operator")
                used.add(inp)
            if a | b != s:
                raise DecompositionError(
                    f"Definition 2 (ii): the inputs of {o.name} cover {sorted(a | b)}, not {sorted(s)}")
            if o.rule != pattern.sub_rule(s, name=o.rule.name):
                raise DecompositionError(f"Definition 1: the sub-query of {o.name} is not {pattern.rule.name} "
                                         f"restricted to {o.aliases}")
            if o.partitioned not in (0, 1):
                raise DecompositionError(
                    f"Definition 5 (2): operator {o.name} must partition exactly one input, got {o.partitioned!r}")
            if not o.units or any(not 0 <= u < self.units.n for u in o.units):
                raise DecompositionError(f"operator {o.name} runs on units {o.units} outside 0..{self.units.n - 1}")
            all_units.extend(o.units)
            seen.add(s)
        if frozenset(self.root.positions) != frozenset(range(k)):
            raise DecompositionError("Definition 5 (1): the last operator is not the whole query")
        for s in seen - {frozenset(range(k))}:
            if s not in used:
                raise DecompositionError(f"Definition 5 (1): the result of sub-query {sorted(s)} is used by no operator")
        for p in range(k):
            if frozenset((p,)) not in used:
                raise DecompositionError(f"Definition 2 (ii): position {pattern.aliases[p]} enters no operator")
        if self.strategy != "centralized" and len(set(all_units)) != len(all_units):
            raise DecompositionError("a unit is assigned to two operators")
        c = _plan_c(list(self.operators), self.units, self.strategy == "centralized")[0]
        if not math.isclose(c, self.c_star, rel_tol=1e-9):
            raise DecompositionError(f"c* = {self.c_star} does not follow from the operators (recomputed {c})")
        return True

    def to_json(self) -> dict:
        """The plan as JSON-ready data; :meth:`from_json` reads it back (``rule_text`` and
        ``stats`` make it self-contained: ``cep-gpu decopa run PLAN.json EVENTS`` runs it)."""
        aliases = self.pattern.aliases
        return {
            "rule": self.rule.name, "rule_text": self.rule.text, "strategy": self.strategy,
            "estimate": self.estimate, "stats": self.stats.to_json(),
            "units": {"n": self.units.n, "iota": self.units.iota, "kappa": self.units.kappa},
            "c_star": self.c_star, "bottleneck": self.bottleneck.name,
            "operators": [{
                "name": o.name, "sub_query": o.label(aliases),
                "inputs": [[aliases[p] for p in i] for i in o.inputs],
                "partitioned": o.partitioned, "units": list(o.units), "input_rates": list(o.input_rates),
                "rate": o.rate, "rate_order": o.rate_order, "ingestion": o.ingestion,
                "comparisons": o.comparisons, "c": o.c, "bound": o.bound,
            } for o in self.operators],
        }


    @classmethod
    def from_json(cls, obj) -> Plan:
        """The plan that :meth:`to_json` wrote (a dict, or its JSON text): the rule is parsed from
        ``rule_text``, the operators are taken as written and the plan is checked with
        :meth:`validate`. Executing it gives the same rows as executing the original plan.

        Raises :class:`DecompositionError` naming the missing or malformed field (a plan written
        before ``rule_text`` was saved: plan again with ``cep-gpu decompose ... --json``)."""
        import json
        from collections.abc import Mapping

        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as err:
                raise DecompositionError(f"plan JSON: not JSON ({err})") from None
        if not isinstance(obj, Mapping):
            raise DecompositionError(f"plan JSON: expected an object, got {type(obj).__name__}")
        if "rule_text" not in obj:
            raise DecompositionError(
                "plan JSON: no 'rule_text' (the plan was written by an older cep-gpu): plan again "
                "with cep-gpu decompose ... --json PLAN.json")
        from .. import parse_rule

        if not isinstance(obj["rule_text"], str):
            raise DecompositionError(f"plan JSON: 'rule_text' must be the rule's text, got {obj['rule_text']!r}")
        rule = parse_rule(obj["rule_text"])
        if obj.get("rule", rule.name) != rule.name:
            raise DecompositionError(f"plan JSON: 'rule' is {obj['rule']!r} but 'rule_text' defines {rule.name!r}")
        pattern = analyse(rule)
        field_name = "plan JSON"
        try:
            field_name = "'stats'"
            stats = Stats.from_json(obj.get("stats", {}))
            stats.resolve(pattern)
            field_name = "'units'"
            units = Units(**obj["units"])
            field_name = "'operators'"
            ops = []
            for o in obj["operators"]:
                if not isinstance(o, Mapping):
                    raise DecompositionError(f"operator {len(ops) + 1}: expected an object, got {o!r}")
                field_name = f"operator {o.get('name', len(ops) + 1)!r}"
                if any(u != int(u) for u in o["units"]):
                    raise DecompositionError(f"'units' must be whole unit numbers, got {o['units']!r}")
                inputs = tuple(tuple(sorted(pattern.alias_index(a) for a in inp)) for inp in o["inputs"])
                if len(inputs) != 2:
                    raise DecompositionError(f"{len(inputs)} inputs, expected 2")
                positions = tuple(sorted(set(inputs[0]) | set(inputs[1])))
                ops.append(Operator(
                    name=str(o["name"]), positions=positions,
                    aliases=tuple(pattern.aliases[p] for p in positions), inputs=inputs,
                    units=tuple(int(u) for u in o["units"]), partitioned=int(o["partitioned"]),
                    rule=pattern.sub_rule(frozenset(positions)),
                    input_rates=tuple(float(r) for r in o["input_rates"]), rate=float(o["rate"]),
                    rate_order=float(o["rate_order"]), ingestion=float(o["ingestion"]),
                    comparisons=float(o["comparisons"]), c=float(o["c"]), bound=str(o["bound"]),
                ))
            field_name = "plan JSON"
            if not ops:
                raise DecompositionError("no operators")
            bottleneck = next((o for o in ops if o.name == obj["bottleneck"]), None)
            if bottleneck is None:
                raise DecompositionError(f"'bottleneck' {obj['bottleneck']!r} names no operator")
            if obj["strategy"] not in STRATEGIES:
                raise DecompositionError(f"'strategy' must be one of {STRATEGIES}, got {obj['strategy']!r}")
            if obj["estimate"] not in ESTIMATES:
                raise DecompositionError(f"'estimate' must be one of {ESTIMATES}, got {obj['estimate']!r}")
            plan = cls(rule, str(obj["strategy"]), units, stats, str(obj["estimate"]), tuple(ops),
                       float(obj["c_star"]), bottleneck)
        except KeyError as err:
            raise DecompositionError(f"{field_name}: missing field {err}") from None
        except (TypeError, ValueError, AttributeError) as err:  # ArgumentError and DecompositionError too
            raise DecompositionError(f"{field_name}: {err}") from None
        plan.validate()
        return plan


def _num(x: float) -> str:
    if x == math.inf:
        return "inf"
    if x == 0:
        return "0"
    if abs(x) >= 1e6 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"


# ----------------------------------------------------------------------------------------------
# Plan instantiation: Plan(split, units) of Algorithm 1


def _ordered(split: Split) -> list[frozenset]:
    """Internal nodes of ``split`` reachable from its root, in topological order."""
    root = max(split, key=len)
    reach: set[frozenset] = set()
    stack = [root]
    while stack:
        s = stack.pop()
        if s in reach or len(s) < 2:
            continue
        reach.add(s)
        stack.extend(split[s])
    return sorted(reach, key=lambda s: (len(s), sorted(s)))


def _op_loads(model: RateModel, node, inputs, n: int):
    r = (model.rate(inputs[0]), model.rate(inputs[1]))
    part = 0 if r[0] >= r[1] else 1  # §6.1: the larger input is partitioned
    d = [divisor(n, j == part) for j in (0, 1)]
    return r, part, ingestion(r[0], r[1], d[0], d[1]), comparisons(r[0], r[1], d[0], d[1])


def _op_c(model, node, inputs, n, units: Units) -> float:
    _, _, li, lk = _op_loads(model, node, inputs, n)
    return max_c(li, lk, units.iota, units.kappa)[0]


def assign_greedy(model: RateModel, split: Split, units: Units, total: int | None = None) -> dict:
    """§6.1 resolved: one unit per operator, then each further unit to the operator with the
    lowest c (ties: the earliest in topological order). Optimal for a fixed split: c of an
    operator only grows with its units, so raising the minimum is the only way to raise c*."""
    nodes = _ordered(split)
    total = units.n if total is None else total
    if total < len(nodes):
        raise DecompositionError(f"too few units: {len(nodes)} operators need at least {len(nodes)} units, got {total}")
    n = {s: 1 for s in nodes}
    heap = [(_op_c(model, s, split[s], 1, units), i, s) for i, s in enumerate(nodes)]
    heapq.heapify(heap)
    for _ in range(total - len(nodes)):
        c, i, s = heapq.heappop(heap)
        if c == math.inf:  # nothing binds anywhere: further units change nothing
            heapq.heappush(heap, (c, i, s))
            break
        n[s] += 1
        heapq.heappush(heap, (_op_c(model, s, split[s], n[s], units), i, s))
    return n


def assign_proportional(model: RateModel, split: Split, units: Units) -> dict:
    """The hybrid baseline (§7.1): units in proportion to K̂ (one unit each), at least one per
    operator, the remainder by largest fraction."""
    nodes = _ordered(split)
    if units.n < len(nodes):
        raise DecompositionError(f"too few units: {len(nodes)} operators need at least {len(nodes)} units, got {units.n}")
    k = {s: _op_loads(model, s, split[s], 1)[3] for s in nodes}
    total_k = sum(k.values())
    if total_k <= 0:
        share = {s: units.n / len(nodes) for s in nodes}
    else:
        share = {s: units.n * k[s] / total_k for s in nodes}
    n = {s: max(1, math.floor(share[s])) for s in nodes}
    while sum(n.values()) > units.n:  # the minimum of one unit overshot: take from the largest
        s = max(nodes, key=lambda x: (n[x], -nodes.index(x)))
        n[s] -= 1
    rest = units.n - sum(n.values())
    for s in sorted(nodes, key=lambda x: (-(share[x] - math.floor(share[x])), nodes.index(x)))[:rest]:
        n[s] += 1
    return n


def instantiate(pattern: Pattern, model: RateModel, split: Split, units: Units, strategy: str,
                stats: Stats, assignment: dict | None = None) -> Plan:
    """The plan of ``split`` with units assigned (greedy, proportional or one shared unit)."""
    nodes = _ordered(split)
    central = strategy == "centralized"
    if assignment is None:
        assignment = {s: 1 for s in nodes} if central else assign_greedy(model, split, units)
    order_model = RateModel(model.kind, model.rates, model.sel, "order")
    ops = []
    next_unit = 0
    for i, s in enumerate(nodes):
        a, b = sorted(split[s], key=lambda x: sorted(x))
        n = assignment[s]
        (r1, r2), part, li, lk = _op_loads(model, s, (a, b), n)
        ids = (0,) if central else tuple(range(next_unit, next_unit + n))
        next_unit += 0 if central else n
        c, bound = max_c(li, lk, units.iota, units.kappa)
        ops.append(Operator(
            name=f"o{i + 1}", positions=tuple(sorted(s)), aliases=tuple(pattern.aliases[p] for p in sorted(s)),
            inputs=(tuple(sorted(a)), tuple(sorted(b))), units=ids, partitioned=part,
            rule=pattern.sub_rule(s), input_rates=(r1, r2), rate=model.rate(s), rate_order=order_model.rate(s),
            ingestion=li, comparisons=lk, c=c, bound=bound,
        ))
    c_star, ops, worst = _plan_c(ops, units, central)
    return Plan(pattern.rule, strategy, units, stats, model.estimate, tuple(ops), c_star, worst)


def _plan_c(ops: list[Operator], units: Units, central: bool):
    """c* (M9): the minimum over units of the largest c each sustains; under ``central`` one unit
    carries the sum of every operator's load."""
    if central:
        li = sum(o.ingestion for o in ops)
        lk = sum(o.comparisons for o in ops)
        c, bound = max_c(li, lk, units.iota, units.kappa)
        from dataclasses import replace

        ops = [replace(o, c=c, bound=bound) for o in ops]
        worst = max(ops, key=lambda o: o.comparisons if bound == "comparison" else o.ingestion)
        return c, ops, worst
    worst = min(ops, key=lambda o: o.c)
    return worst.c, ops, worst


# ----------------------------------------------------------------------------------------------
# Splits


def ld_split(order) -> Split:
    """The left-deep split of positions in ``order``: ((p0, p1), p2), ... (paper §4.1)."""
    split: Split = {}
    acc = frozenset((order[0],))
    for p in order[1:]:
        nxt = acc | {p}
        split[nxt] = (acc, frozenset((p,)))
        acc = nxt
    return split


def merge(*splits: Split) -> Split:
    """Union of split DAGs; a sub-query split differently in two of them keeps the first's split
    (each is a valid split of it, Definition 2)."""
    out: Split = {}
    for s in splits:
        for node, inp in s.items():
            out.setdefault(node, inp)
    return out


def _sub(split: Split, root: frozenset) -> Split:
    keep = _ordered({**split, root: split[root]} if root in split else split)
    return {s: split[s] for s in keep}


def split_cost(model: RateModel, split: Split, units: Units, total: int) -> float:
    """costs(Plan(split, total)) of Algorithm 1: the sum over operators of K̂ per unit, units
    assigned greedily (at least one per operator)."""
    nodes = _ordered(split)
    n = assign_greedy(model, split, units, max(total, len(nodes)))
    return sum(_op_loads(model, s, split[s], n[s])[3] for s in nodes)


def _ld_candidates(positions: frozenset, model: RateModel, rng: random.Random):
    pos = sorted(positions)
    if len(pos) <= ALL_ORDERS_UP_TO:
        yield from itertools.permutations(pos)
        return
    yield tuple(pos)
    yield tuple(sorted(pos, key=lambda p: model.rates[p]))
    for _ in range(LD_SAMPLES):
        yield tuple(rng.sample(pos, len(pos)))


def best_ld(positions: frozenset, model: RateModel, units: Units, total: int, rng) -> tuple[Split, float]:
    best, best_cost = None, math.inf
    for order in _ld_candidates(positions, model, rng):
        s = ld_split(order)
        cost = split_cost(model, s, units, total)
        if cost < best_cost:
            best, best_cost = s, cost
    return best, best_cost


def decopa_splits(model: RateModel, k: int, units: Units, seed: int = 0) -> list[Split]:
    """Algorithm 1 (resolved as in docs/decopa.md): the candidate splits of the whole query it
    builds, the cheapest first."""
    rng = random.Random(seed)
    q = frozenset(range(k))
    max_rate = max(model.rates)
    # line 1: rate-reducing sub-queries: below the largest rate of the query's types (§6.1)
    sq = [frozenset(c) for m in range(2, k) for c in itertools.combinations(range(k), m)
          if model.rate(frozenset(c)) < max_rate]
    splits: dict[frozenset, Split] = {}
    pcosts: dict[frozenset, float] = {}
    for s in sq + [q]:  # lines 2-6: the cheapest ld split, one unit per operator
        splits[s], pcosts[s] = best_ld(s, model, units, len(s) - 1, rng)
    total_cost = sum(pcosts.values()) or 1.0
    leaves = [frozenset((p,)) for p in range(k)]
    candidates: list[tuple[float, Split]] = [(pcosts[q], splits[q])]
    for s in sorted(sq + [q], key=lambda x: (len(x), sorted(x))):  # line 7
        pu = max(len(s) - 1, round(pcosts[s] / total_cost * units.n))  # line 8
        splits[s], pcosts[s] = best_ld(s, model, units, pu, rng)  # line 9
        if s == q:
            candidates.append((pcosts[s], splits[s]))
        pred = [x for x in sq if x < s and pcosts[x] < pcosts[s]] + [x for x in leaves if x < s]  # line 10
        pairs = []
        for i, s1 in enumerate(pred):
            rest = s - s1
            for s2 in pred[i + 1:]:
                if rest <= s2 and not s2 <= s1 and not s1 <= s2:
                    pairs.append((pcosts.get(s1, 0.0) + pcosts.get(s2, 0.0), s1, s2))
        pairs.sort(key=lambda t: t[0])
        for _, s1, s2 in pairs[:MAX_PAIRS]:  # lines 11-16
            cand = merge({s: (s1, s2)}, splits.get(s1, {}), splits.get(s2, {}))
            cand = _sub(cand, s)
            cost = split_cost(model, cand, units, pu)
            if s == q:
                candidates.append((cost, cand))
            if cost < pcosts[s]:
                pcosts[s], splits[s] = cost, cand
    candidates.sort(key=lambda t: t[0])
    return [c for _, c in candidates]


# ----------------------------------------------------------------------------------------------
# The entry point


def optimize(rule, stats: Stats, units: Units, strategy: str = "decopa", estimate: str = "paper",
             seed: int = 0) -> Plan:
    """Plan ``rule`` on ``units`` with the given statistics.

    ``strategy``: ``"decopa"`` (Algorithm 1; never below ``hybrid``), ``"hybrid"`` (the query-order
    left-deep split, units in proportion to K̂, the larger input partitioned) or ``"centralized"``
    (one unit runs the query-order left-deep split). ``estimate``: ``"paper"`` (the paper's rate
    formulas) or ``"order"`` (order-aware SEQ rates). ``seed``: for the sampled ld splits of
    sub-queries over more than 5 positions.
    """
    if isinstance(rule, str):
        from .. import parse_rule

        rule = parse_rule(rule)
    if strategy not in STRATEGIES:
        raise ArgumentError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if estimate not in ESTIMATES:
        raise ArgumentError(f"estimate must be one of {ESTIMATES}, got {estimate!r}")
    if not isinstance(stats, Stats):
        raise ArgumentError(f"stats must be a cep_gpu.decopa.Stats, got {type(stats).__name__}")
    if not isinstance(units, Units):
        raise ArgumentError(f"units must be a cep_gpu.decopa.Units, got {type(units).__name__}")
    pattern = analyse(rule)
    rates, sel = stats.resolve(pattern)
    model = RateModel(pattern.kind, tuple(rates), tuple(tuple(r) for r in sel), estimate)
    k = pattern.k
    query_order = ld_split(list(range(k)))
    if strategy == "centralized":
        return instantiate(pattern, model, query_order, units, strategy, stats)
    if units.n < k - 1:
        raise DecompositionError(
            f"too few units: a {k}-position query needs at least {k - 1} units (one per operator) "
            f"for strategy {strategy!r}, got {units.n}; use strategy='centralized' for one unit")
    hybrid = instantiate(pattern, model, query_order, units, "hybrid", stats,
                         assign_proportional(model, query_order, units))
    if strategy == "hybrid":
        return hybrid
    best = hybrid
    for split in decopa_splits(model, k, units, seed) + [query_order]:
        if len(_ordered(split)) > units.n:
            continue
        plan = instantiate(pattern, model, split, units, "decopa", stats)
        if plan.c_star > best.c_star * (1 + 1e-12) or best.strategy == "hybrid" and plan.c_star >= best.c_star:
            best = plan
    return best


def plan_from_split(rule, stats: Stats, units: Units, split, units_per_operator=None,
                    estimate: str = "paper") -> Plan:
    """A plan for a split of your own: ``split`` maps a sub-query (an iterable of aliases or
    positions) to its two inputs; ``units_per_operator`` (same keys) fixes each operator's number
    of units, else they are assigned greedily. Checked with :meth:`Plan.validate`."""
    if isinstance(rule, str):
        from .. import parse_rule

        rule = parse_rule(rule)
    pattern = analyse(rule)
    rates, sel = stats.resolve(pattern)
    model = RateModel(pattern.kind, tuple(rates), tuple(tuple(r) for r in sel), estimate)

    def key(s) -> frozenset:
        return frozenset(pattern.alias_index(x) if isinstance(x, str) else int(x) for x in s)

    sp = {key(s): (key(a), key(b)) for s, (a, b) in dict(split).items()}
    if frozenset(range(pattern.k)) not in sp:
        raise DecompositionError("split: no entry for the whole query")
    for s, (a, b) in sp.items():
        if a | b != s or not a < s or not b < s:
            raise DecompositionError(f"split: inputs {sorted(a)}, {sorted(b)} do not split {sorted(s)} (Definition 2)")
        for inp in (a, b):
            if len(inp) > 1 and inp not in sp:
                raise DecompositionError(f"split: sub-query {sorted(inp)} has no split of its own")
    assignment = None
    if units_per_operator is not None:
        assignment = {key(s): int(n) for s, n in dict(units_per_operator).items()}
        missing = [sorted(s) for s in _ordered(sp) if s not in assignment]
        if missing or any(n < 1 for n in assignment.values()):
            raise DecompositionError(f"units_per_operator: every operator needs >= 1 unit (missing {missing})")
        if sum(assignment[s] for s in _ordered(sp)) > units.n:
            raise DecompositionError(f"units_per_operator: uses more than the {units.n} units")
    plan = instantiate(pattern, model, sp, units, "decopa", stats, assignment)
    plan.validate()
    return plan
