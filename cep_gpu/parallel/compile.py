"""Rule -> chain specification for HYPERSONIC: event types per position, filters, join programs.

A ``SEQ(T0 a0, ..., Tn-1 an-1) within W`` rule (skip-till-any-match, i.e. ``select each``) becomes
a chain of *stages* 1..n-1 (the paper's agents A_2..A_n): stage ``i`` joins the partial matches of
positions ``0..i-1`` with the events of position ``i``. Every condition of the rule is checked at
the stage of the latest position it reads (the paper's state ``S_i``); conditions that read one
position only are filters applied by the splitter before an event enters any buffer.

A TESLA chain of ``each`` (``from T0 and each T1 within D1 from T0 and each T2 within D2 from T1
...``) has the same shape read backwards: positions are the predicates from the last declared to
the terminator, and stage ``i``'s window ``D`` is measured from the match's last event (position
``i - 1``, the predicate anchored at position ``i``) instead of its first.

Conditions are compiled to a tiny stack program that one generic Numba kernel interprets per
(match, event) pair, so a new rule costs no compilation and no Python runs per comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import RuleError
from ..model import (
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
    Timestamp,
    children,
    inputs,
    walk,
)

# opcodes of the condition programs (kernels.py interprets them); each instruction is 3 int64s
OP_CONST, OP_ATTR, OP_TS, OP_NEG, OP_ADD, OP_SUB, OP_MUL, OP_DIV = range(8)
OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE = range(8, 14)  # noqa: F841
OP_AND, OP_OR, OP_NOT, OP_CHECK = range(14, 18)

_ARITH = {"+": OP_ADD, "-": OP_SUB, "*": OP_MUL, "/": OP_DIV}
_CMP = {"=": OP_EQ, "!=": OP_NE, "<": OP_LT, "<=": OP_LE, ">": OP_GT, ">=": OP_GE}


class UnsupportedPatternError(RuleError):
    """A rule HYPERSONIC cannot run; the message names the feature (e.g. ``NOT``, ``select last``)."""


@dataclass(frozen=True)
class Program:
    """A conjunction of conditions as a stack program (``code`` (k, 3) int64, ``consts`` float64)."""

    code: np.ndarray
    consts: np.ndarray
    n_conditions: int
    max_stack: int


@dataclass(frozen=True)
class ChainSpec:
    """What the parallel engine needs of one rule."""

    rule: Rule
    types: tuple[str, ...]  # event type per position
    window: int  # ns
    filters: tuple[Program, ...]  # per position: conditions on that position alone
    joins: tuple[Program, ...]  # per stage 1..n-1 (index 0 unused, empty): cross-position conditions
    attributes: tuple[str, ...]  # attribute names the programs read (column index = position here)
    string_consts: tuple[str, ...]  # string literals the programs compare with
    #: per stage 1..n-1 (index 0 unused): the window (ns) and the position of the match whose
    #: timestamp it is measured from: 0 for SEQ (every position within W of the first), the
    #: previous position for a TESLA chain (each event within its predicate's window of the next)
    stage_windows: tuple[int, ...] = ()
    ref_positions: tuple[int, ...] = ()
    #: a TESLA chain binds its predicates terminator first: output columns are positions reversed
    reversed_output: bool = False

    @property
    def length(self) -> int:
        return len(self.types)


def is_tesla_chain(rule: Rule) -> bool:
    """Whether ``rule`` is a TESLA chain of ``each``: ``from T0() and each T1() within D1 from T0
    and each T2() within D2 from T1 ...`` (every predicate before the one it is anchored at)."""
    if rule.syntax == "seq" or len(rule.plans) != 1:
        return False
    plan = rule.plans[0]
    n = len(plan.predicates)
    if n < 1 or plan.order != tuple(range(n)):
        return False
    return all(p.policy == "each" and p.anchor == i - 1 and p.before == i - 1 and not p.ties
               and p.kleene is None and p.window is not None
               for i, p in enumerate(plan.predicates) if i)


def rule_span(rule: Rule) -> int:
    """The longest time (ns) between the first and the last event of a composite event."""
    preds = rule.plans[0].predicates
    if is_tesla_chain(rule):
        return int(sum(p.window for p in preds[1:]))
    return int(preds[0].window or 0) if len(preds) > 1 else 0


def check_supported(rule: Rule) -> None:
    """Raise :class:`UnsupportedPatternError` naming the first feature HYPERSONIC does not run."""
    def no(feature: str) -> UnsupportedPatternError:
        return UnsupportedPatternError(
            f"rule {rule.name!r}: {feature} is not supported by the parallel engine "
            "(cep_gpu.parallel runs SEQ(...) within W, select each, with where conditions, and TESLA "
            "chains of each)"
        )

    tesla = rule.syntax != "seq"
    if rule.kleene_positions:  # a set-valued position: before the binding order, which may look SEQ's
        raise no("Kleene closure KL(...)")
    if not tesla and len(rule.plans) != 1:
        raise no("AND(...)")
    if rule.negations:
        raise no("a TESLA negation (not ...)" if tesla else "NOT(...)")
    if rule.aggregates:
        raise no("a TESLA aggregate" if tesla else "an aggregate")
    if rule.consuming:
        raise no("consuming")
    for c in rule.conditions:
        for node in walk(c):
            if isinstance(node, AggValue):
                raise no("an aggregate value")
    if tesla:
        if any(p.policy in ("last", "first") for p in rule.plans[0].predicates):
            raise no("a TESLA rule with last/first selection")
        if not is_tesla_chain(rule):
            raise no("a TESLA rule whose predicates are not a chain (each one anchored at the one "
                     "declared before it)")
        return
    plan = rule.plans[0]
    n = len(plan.predicates)
    if plan.order != tuple(reversed(range(n))):
        raise no("a binding order other than SEQ's")
    for i, p in enumerate(plan.predicates[:-1]):
        if p.policy != "each":
            raise no(f"select {p.policy}")
        if p.ties or p.anchor != n - 1 or p.before != i + 1:
            raise no("a non-SEQ timing")
    windows = {p.window for p in plan.predicates[:-1]}
    if len(windows) > 1:
        raise no("different windows per position")


def compile_rules(rules: list[Rule], time_scale_ns: int = 10**9) -> list[ChainSpec]:
    """The specs of ``rules``, sharing one attribute list and one string-literal list."""
    attrs: list[str] = []
    strings: list[str] = []
    specs = [compile_rule(r, time_scale_ns, attrs, strings) for r in rules]
    return [ChainSpec(s.rule, s.types, s.window, s.filters, s.joins, tuple(attrs), tuple(strings),
                      s.stage_windows, s.ref_positions, s.reversed_output) for s in specs]


def compile_rule(rule: Rule, time_scale_ns: int = 10**9, attrs: list[str] | None = None,
                 strings: list[str] | None = None) -> ChainSpec:
    """The :class:`ChainSpec` of ``rule``; ``time_scale_ns``: ns per unit of ``X.ts`` in conditions."""
    check_supported(rule)
    plan = rule.plans[0]
    n = len(plan.predicates)
    chain = is_tesla_chain(rule)
    # position of each predicate: SEQ declares them in sequence order, a TESLA chain backwards
    pos = [n - 1 - i for i in range(n)] if chain else list(range(n))
    preds = [plan.predicates[pos.index(k)] for k in range(n)]  # by position
    if chain:
        # stage k adds position k; the predicate before it (position k - 1) is within its window
        windows = (0,) + tuple(int(preds[k - 1].window) for k in range(1, n))
        refs = (0,) + tuple(k - 1 for k in range(1, n))
    else:
        windows = (0,) + (int(plan.predicates[0].window or 0),) * (n - 1)
        refs = (0,) * n
    attrs = [] if attrs is None else attrs
    strings = [] if strings is None else strings
    per_filter: list[list[Expr]] = [[] for _ in range(n)]
    per_join: list[list[Expr]] = [[] for _ in range(n)]
    for c in rule.conditions:
        ins = {pos[i] for i in inputs(c, rule)}
        if len(ins) <= 1:
            per_filter[max(ins, default=0)].append(c)
        else:
            per_join[max(ins)].append(c)
    enc = _Encoder(attrs, strings, float(time_scale_ns), pos)
    filters = tuple(enc.program(cs) for cs in per_filter)
    joins = tuple(enc.program(cs) for cs in per_join)
    return ChainSpec(
        rule=rule,
        types=tuple(p.event_type for p in preds),
        window=rule_span(rule),
        filters=filters,
        joins=joins,
        attributes=tuple(attrs),
        string_consts=tuple(strings),
        stage_windows=windows,
        ref_positions=refs,
        reversed_output=chain,
    )


class _Encoder:
    def __init__(self, attrs: list[str], strings: list[str], scale: float, pos: list[int]) -> None:
        self.attrs = attrs
        self.strings = strings
        self.scale = scale
        self.pos = pos  # predicate index -> position (the slot the kernels read)

    def program(self, conds: list[Expr]) -> Program:
        code: list[tuple[int, int, int]] = []
        consts: list[float] = []
        depth = [0, 0]  # current, max

        def push(k: int = 1) -> None:
            depth[0] += k
            depth[1] = max(depth[1], depth[0])

        def emit(e: Expr) -> None:
            if isinstance(e, Const):
                v = e.value
                if isinstance(v, str):
                    # strings are compared by dictionary code: index -(k+1) is patched per engine
                    if v not in self.strings:
                        self.strings.append(v)
                    code.append((OP_CONST, -(self.strings.index(v) + 1), 0))
                else:
                    consts.append(float(v))
                    code.append((OP_CONST, len(consts) - 1, 0))
                push()
            elif isinstance(e, Attr):
                if e.name not in self.attrs:
                    self.attrs.append(e.name)
                code.append((OP_ATTR, self.pos[e.pred], self.attrs.index(e.name)))
                push()
            elif isinstance(e, Timestamp):
                code.append((OP_TS, self.pos[e.pred], 0))
                push()
                # numeric time: X.ts is in the input's unit (as detect's in_time_units does)
                if self.scale != 1.0:
                    consts.append(self.scale)
                    code.append((OP_CONST, len(consts) - 1, 0))
                    push()
                    code.append((OP_DIV, 0, 0))
                    depth[0] -= 1
            elif isinstance(e, Neg):
                emit(e.arg)
                code.append((OP_NEG, 0, 0))
            elif isinstance(e, Not):
                emit(e.arg)
                code.append((OP_NOT, 0, 0))
            elif isinstance(e, (Arith, Compare)):
                emit(e.left)
                emit(e.right)
                code.append(((_ARITH if isinstance(e, Arith) else _CMP)[e.op], 0, 0))
                depth[0] -= 1
            elif isinstance(e, BoolOp):
                for a in e.args:
                    emit(a)
                code.append((OP_AND if e.op == "and" else OP_OR, len(e.args), 0))
                depth[0] -= len(e.args) - 1
            else:
                raise UnsupportedPatternError(f"expression {e!r} is not supported by the parallel engine")

        for c in conds:
            emit(c)
            code.append((OP_CHECK, 0, 0))
            depth[0] -= 1
        arr = np.array(code, dtype=np.int64).reshape(-1, 3)
        return Program(arr, np.array(consts, dtype=np.float64), len(conds), max(depth[1], 1))


_KIND_WORDS = {"num": "number", "bool": "boolean"}


def string_compare_problems(spec: ChainSpec, kinds: dict[str, str]) -> str | None:
    """A message if a condition orders strings or compares a string with a number or a boolean,
    as detect rejects it (``kinds``: attribute name -> column kind); see :func:`string_compare_error`."""
    found = _string_compare(spec, kinds)
    return None if found is None else found[0]


def string_compare_error(spec: ChainSpec, kinds: dict[str, str]) -> RuleError | None:
    """:func:`string_compare_problems` as detect's :class:`RuleError`, with the line and column
    of the comparison."""
    found = _string_compare(spec, kinds)
    return None if found is None else spec.rule.error(*found)


def _string_compare(spec: ChainSpec, kinds: dict[str, str]):
    """``(message, position)`` of the first comparison detect's check refuses. Values are told
    apart as that check tells them: a timestamp, an aggregate and arithmetic over numbers are
    numbers (``a.s = b.ts`` was let through, and matched nothing)."""
    def kind(e: Expr) -> str | None:
        if isinstance(e, Const):
            return "string" if isinstance(e.value, str) else "bool" if isinstance(e.value, bool) else "num"
        if isinstance(e, Attr):
            k = kinds.get(e.name)
            return {"int": "num", "float": "num"}.get(k, k)
        if isinstance(e, (Timestamp, AggValue)):
            return "num"
        if isinstance(e, (Arith, Neg)):  # a number, unless an operand is not (detect's error)
            return "num" if {kind(c) for c in children(e)} <= {"num", None} else None
        return None

    for c in spec.rule.conditions:
        for node in walk(c):
            if isinstance(node, Compare):
                kl, kr = kind(node.left), kind(node.right)
                if "string" in (kl, kr):
                    if kl and kr and kl != kr:
                        other = _KIND_WORDS.get(kl if kr == "string" else kr)
                        return (f"rule {spec.rule.name!r} compares a string with a {other} "
                                f"(with {node.op!r})", node.pos)
                    if node.op not in ("=", "!="):
                        return (f"rule {spec.rule.name!r}: strings can only be compared with = and != "
                                f"(not {node.op!r})", node.pos)
    return None
