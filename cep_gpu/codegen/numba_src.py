"""Numba source emission: a :class:`~cep_gpu.codegen.spec.RuleSpec` -> Python source of njit functions.

Safety: the source is built only from the validated model through this module's own templates.
Attribute names become slot numbers (``a3``/``v3`` from the ``env`` tuple), string literals become
runtime codes (``sc[2]``), numbers are emitted by value (``repr`` of a Python int/float, after a
type check), comparison and arithmetic operators come from fixed tables. Every identifier in the
output is generated here; nothing of the rule text is pasted. :func:`check_source` re-verifies that
every name in the emitted source is one of ours before it is compiled.

Null rules (docs/language.md): every sub-expression carries a validity flag; a null input makes the
whole expression null and a null condition is false. Division by zero is null.

Generated functions (``env`` is the tuple of :class:`~cep_gpu.codegen.spec.Layout`):

* ``valid_<plan>_<step>(seqs, i, r, env) -> bool``: candidate row ``r`` for partial sequence ``i``
  passes the step's residual conditions and negations.
* ``neg<k>(env, p..) -> bool``: no event of negation ``k`` in its span (rows of its inputs given).
* ``agg<k>(env, p..) -> float``: aggregate ``k`` (NaN = null).
* ``aggs_all(seqs, i, env, out)``: every aggregate of complete sequence ``i`` into ``out[i]``.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from collections.abc import Callable

from ..model import (
    NEXT,
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
    Timestamp,
    aggregate_inputs,
    negation_inputs,
)
from ..ranges import shift_limit
from .spec import Layout, RuleSpec

_CMP = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_ARITH = {"+": "+", "-": "-", "*": "*"}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: Names the generated source may use besides its own locals (checked by :func:`check_source`).
ALLOWED_GLOBALS = frozenset(
    {"np", "lower_bound", "upper_bound", "True", "False", "float", "int", "range", "min", "max"}
)
_LOCAL = re.compile(r"^(?:t|k|a|v|p|w)\d+$|^(?:seqs|i|r|q|j|env|ts|sc|out|lo|hi|s|e|nr|nt|cnt|tot|mn|mx|nv|x|res)$")
_FUNC = re.compile(r"^(?:valid_\d+_\d+|neg\d+|neg\d+_cond|agg\d+|agg\d+_cond|aggs_all|kel\d+|kpair\d+)$")


class CodegenError(ValueError):
    """The model holds something the generator cannot emit safely."""


def literal(value) -> str:
    """Source of a numeric or boolean constant, by value (never text from the rule)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise CodegenError(f"integer literal {value} does not fit in 64 bits")
        return repr(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "np.nan"
        if math.isinf(value):
            return "np.inf" if value > 0 else "(-np.inf)"
        return repr(float(value))
    raise CodegenError(f"unsupported literal of type {type(value).__name__}")


class Body:
    """Statements of one function; ``emit`` lowers an expression to (value, valid, kind)."""

    def __init__(self, layout: Layout, kinds: dict[str, str | None], row: Callable[[int], str]):
        self.layout, self.kinds, self.row = layout, kinds, row
        self.lines: list[str] = []
        self.n = 0
        self.used_aggs: set[int] = set()

    def tmp(self) -> tuple[str, str]:
        self.n += 1
        return f"t{self.n}", f"k{self.n}"

    def add(self, line: str, depth: int = 1) -> None:
        self.lines.append("    " * depth + line)

    def emit(self, expr: Expr, depth: int = 1) -> tuple[str, str, str]:
        if isinstance(expr, Const):
            v = expr.value
            if isinstance(v, str):
                return f"sc[{self.layout.strings.index(v)}]", "True", "string"
            kind = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "float"
            return literal(v), "True", kind
        if isinstance(expr, Attr):
            kind = self.kinds.get(expr.name)
            if kind is None:  # no event in the table has it: always null
                return "0.0", "False", "float"
            slot = self.layout.attrs.index(expr.name)
            t, k = self.tmp()
            r = self.row(expr.pred)
            self.add(f"{t} = a{slot}[{r}]", depth)
            self.add(f"{k} = v{slot}[{r}]", depth)
            if kind == "float":
                self.add(f"{k} = {k} and not np.isnan({t})", depth)
            return t, k, kind
        if isinstance(expr, Timestamp):
            return f"ts[{self.row(expr.pred)}]", "True", "int"
        if isinstance(expr, AggValue):
            agg = self.layout_agg_args(expr.index)
            t, k = self.tmp()
            self.add(f"{t} = agg{expr.index}(env{agg})", depth)
            self.add(f"{k} = not np.isnan({t})", depth)
            self.used_aggs.add(expr.index)
            return t, k, "float"
        if isinstance(expr, Neg):
            a, ok, kind = self.emit(expr.arg, depth)
            if kind == "float":
                return f"(-{a})", ok, kind
            t, _ = self.tmp()
            self.add(f"{t} = {_wrapping('0', '-', a)}", depth)
            return t, ok, "int"
        if isinstance(expr, Arith):
            a, oka, ka = self.emit(expr.left, depth)
            b, okb, kb = self.emit(expr.right, depth)
            t, k = self.tmp()
            if expr.op == "/":
                self.add(f"{k} = {oka} and {okb} and float({b}) != 0.0", depth)
                self.add(f"{t} = float({a}) / float({b}) if {k} else 0.0", depth)
                return t, k, "float"
            op = _ARITH[expr.op]
            if {ka, kb} <= {"int", "bool"}:
                self.add(f"{t} = {_wrapping(a, op, b)}", depth)
                kind = "int"
            else:
                self.add(f"{t} = float({a}) {op} float({b})", depth)
                kind = "float"
            self.add(f"{k} = {oka} and {okb}", depth)
            return t, k, kind
        if isinstance(expr, Compare):
            a, oka, _ = self.emit(expr.left, depth)
            b, okb, _ = self.emit(expr.right, depth)
            t, k = self.tmp()
            self.add(f"{k} = {oka} and {okb}", depth)
            self.add(f"{t} = {a} {_CMP[expr.op]} {b}", depth)
            return t, k, "bool"
        if isinstance(expr, BoolOp):
            parts = [self.emit(arg, depth) for arg in expr.args]
            t, k = self.tmp()
            self.add(f"{k} = " + " and ".join(f"({p[1]})" for p in parts), depth)
            joiner = " and " if expr.op == "and" else " or "
            self.add(f"{t} = " + joiner.join(_truth(p) for p in parts), depth)
            return t, k, "bool"
        if isinstance(expr, Not):
            a, ok, kind = self.emit(expr.arg, depth)
            return f"(not {_truth((a, ok, kind))})", ok, "bool"
        raise CodegenError(f"not an expression: {type(expr).__name__}")

    def layout_agg_args(self, index: int) -> str:
        preds = self.agg_inputs[index]
        return "".join(f", {self.row(p)}" for p in preds)

    def check(self, expr: Expr, fail: str, depth: int = 1) -> None:
        """Emit ``expr`` as a condition; run ``fail`` when it is false or null."""
        v, ok, kind = self.emit(expr, depth)
        self.add(f"if not ({ok} and {_truth((v, ok, kind))}):", depth)
        self.add(fail, depth + 1)


def _wrapping(a: str, op: str, b: str) -> str:
    """int64 ``a op b`` that wraps around on overflow (docs/language.md, "Integer arithmetic"):
    computed in uint64, since Numba's signed arithmetic lets LLVM assume that it never overflows
    (an overflowing ``a + b < 0`` could then come out either way)."""
    return f"np.int64(np.uint64({a}) {op} np.uint64({b}))"


def _truth(part: tuple[str, str, str]) -> str:
    v, _, kind = part
    return f"({v})" if kind == "bool" else f"({v} != 0)"


def prologue(layout: Layout, kinds: dict[str, str | None]) -> list[str]:
    lines = ["    ts = env[0]", f"    sc = env[{layout.strings_at}]"]
    for s, name in enumerate(layout.attrs):
        if kinds.get(name) is not None:
            lines.append(f"    a{s} = env[{1 + 2 * s}]")
            lines.append(f"    v{s} = env[{2 + 2 * s}]")
    return lines


def _shifted(ts: str, offset: int) -> str:
    """Source of ``ts + offset`` saturated at the int64 range (:func:`cep_gpu.ranges.shift_limit`)."""
    offset = int(offset)
    if offset == 0:
        return ts
    clamp = "max" if offset < 0 else "min"
    return f"{clamp}({ts}, {literal(shift_limit(offset))}) + {literal(offset)}"


def span_bounds(span) -> tuple[list[str], str, str]:
    """Lines setting ``lo``/``hi`` to a negation's or aggregate's span (ordered), and the names of
    the binary searches (``lower_bound``/``upper_bound``) of its first and its end entry."""
    lines = [f"    lo = {_shifted(f'ts[p{span.lo_ref}]', span.lo_offset)}",
             f"    hi = {_shifted(f'ts[p{span.hi_ref}]', span.hi_offset)}",
             "    if lo > hi:",
             "        lo, hi = hi, lo"]
    return (lines, "lower_bound" if span.lo_inclusive else "upper_bound",
            "upper_bound" if span.hi_inclusive else "lower_bound")


def emit_source(spec: RuleSpec, kinds: dict[str, str | None], agg_span: Callable | None = None) -> str:
    """Python source of every njit function of ``spec`` for attribute kinds ``kinds``.

    ``agg_span(k, agg) -> (loop, store)``: how aggregate ``k`` finds the events of its span
    (the streaming fast path walks its own columns, :mod:`cep_gpu.stream_match`): ``loop``
    runs after the function's prologue (it may return early) and ends in a loop header at one
    indent whose body (two indents) sets ``q`` to each event's table row (in time order where
    the order matters: ``Sum``/``Avg`` add in it); ``store`` (when not empty) runs with the
    value in ``res`` before it is returned. The conditions, nulls and the function (one
    implementation, here) stay the same. Their names are checked as the rest: locals ``w<n>``
    are theirs. Default: a binary search of the span in the column that ``env`` holds (the
    CDP kernels)."""
    rule, layout = spec.rule, spec.layout
    agg_inputs = [sorted(aggregate_inputs(a)) for a in rule.aggregates]
    neg_inputs = [sorted(negation_inputs(n)) for n in rule.negations]
    out: list[str] = []

    def body(row: Callable[[int], str]) -> Body:
        b = Body(layout, kinds, row)
        b.agg_inputs = agg_inputs
        return b

    def span_part(kind: str, k: int, part, preds: list[int], base: int) -> tuple[list[str], str]:
        """Prologue of a function over the span of a negation/aggregate: ``s``..``e`` in its column."""
        sig = "".join(f", p{p}" for p in preds)
        span = part.span
        lines = [f"@numba.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)\ndef {kind}{k}(env{sig}):"]
        lines += prologue(layout, kinds)
        if kind == "agg" and agg_span is not None:
            return lines, sig
        lines.append(f"    nr = env[{base}]")
        lines.append(f"    nt = env[{base + 1}]")
        bounds, lo_fn, hi_fn = span_bounds(span)
        lines += bounds
        lines.append(f"    s = {lo_fn}(nt, lo)")
        lines.append(f"    e = {hi_fn}(nt, hi)")
        return lines, sig

    # conditions of negations and aggregates over their own event q
    for kind, parts, inputs_of, checks in (
        ("neg", rule.negations, neg_inputs, spec.neg_checks),
        ("agg", rule.aggregates, agg_inputs, spec.agg_checks),
    ):
        for k, part in enumerate(parts):
            preds = inputs_of[k]
            sig = "".join(f", p{p}" for p in preds)
            b = body(lambda p: "q" if p == SELF else f"p{p}")
            for c in checks[k]:
                b.check(part.conditions[c], "return False")
            out.append(f"@numba.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)\ndef {kind}{k}_cond(env, q{sig}):")
            out += prologue(layout, kinds) + b.lines + ["    return True", ""]

    for k, neg in enumerate(rule.negations):
        lines, sig = span_part("neg", k, neg, neg_inputs[k], layout.neg_at + 2 * k)
        lines.append("    for j in range(s, e):")
        lines.append(f"        if neg{k}_cond(env, nr[j]{sig}):")
        lines.append("            return False")
        lines.append("    return True")
        out += lines + [""]

    for k, agg in enumerate(rule.aggregates):
        lines, sig = span_part("agg", k, agg, agg_inputs[k], layout.agg_at + 2 * k)
        attr_kind = kinds.get(agg.attribute) if agg.attribute is not None else None
        lines.append("    cnt = 0")
        lines.append("    nv = 0")
        lines.append("    tot = 0.0")
        lines.append("    mn = np.inf")
        lines.append("    mx = -np.inf")
        store: list[str] = []
        if agg_span is None:
            lines.append("    for j in range(s, e):")
            lines.append("        q = nr[j]")
        else:
            loop, store = agg_span(k, agg)
            lines += loop
        lines.append(f"        if not agg{k}_cond(env, q{sig}):")
        lines.append("            continue")
        lines.append("        cnt += 1")
        if attr_kind is not None:
            slot = layout.attrs.index(agg.attribute)
            lines.append(f"        if v{slot}[q]:")
            lines.append(f"            x = float(a{slot}[q])")
            lines.append("            if not np.isnan(x):")
            lines.append("                nv += 1")
            lines.append("                tot += x")
            lines.append("                mn = min(mn, x)")
            lines.append("                mx = max(mx, x)")
        fn = agg.function
        if store:  # the value as ``res``, then the hook's lines, then returned
            value = {"count": "float(cnt)", "sum": "tot", "avg": "tot / nv", "min": "mn", "max": "mx"}[fn]
            lines.append(f"    res = {value}" if fn in ("count", "sum") else f"    res = {value} if nv else np.nan")
            lines += store + ["    return res"]
        elif fn == "count":
            lines.append("    return float(cnt)")
        elif fn == "sum":
            lines.append("    return tot")
        else:
            lines.append("    if nv == 0:")
            lines.append("        return np.nan")
            result = {"avg": "tot / nv", "min": "mn", "max": "mx"}[fn]
            lines.append(f"    return {result}")
        out += lines + [""]

    for pi, plan in enumerate(spec.plans):
        for st in plan.steps:
            b = body(lambda p, cur=st.pred: "r" if p == cur else f"seqs[i, {int(p)}]")
            kleene = plan.plan.predicates[st.pred].kleene is not None
            # a Kleene step's set conditions (aggregates over the set) are checked on the host;
            # its negations get the set's first element (r) or its last (a hidden column)
            for c in () if kleene else st.conditions:
                b.check(rule.conditions[c], "return False")
            for n in st.negations:
                last_col = spec.kleene_base(st.pred) + 2 if kleene else 0
                args = "".join(
                    f", seqs[i, {int(last_col)}]"
                    if kleene and p == st.pred and rule.negations[n].span.lo_ref == p
                    else f", {b.row(p)}"
                    for p in neg_inputs[n]
                )
                b.add(f"if not neg{n}(env{args}):")
                b.add("return False", 2)
            out.append(f"@numba.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)\ndef valid_{pi}_{st.step}(seqs, i, r, env):")
            out += prologue(layout, kinds) + b.lines + ["    return True", ""]

    # Kleene positions: per-element (r = the element) and consecutive (r = b[i], q = b[i+1]) checks
    for k in rule.kleene_positions:
        kl = rule.predicates[k].kleene
        for fname, conds in ((f"kel{k}", kl.conditions), (f"kpair{k}", kl.consecutive)):
            b = body(lambda p: "r" if p == SELF else "q" if p == NEXT else f"seqs[i, {int(p)}]")
            for c in conds:
                b.check(c, "return False")
            args = "seqs, i, r, env" if fname.startswith("kel") else "seqs, i, r, q, env"
            out.append(f"@numba.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)\ndef {fname}({args}):")
            out += prologue(layout, kinds) + b.lines + ["    return True", ""]

    out.append("@numba.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)\ndef aggs_all(seqs, i, env, out):")
    for k in range(len(rule.aggregates)):
        if rule.aggregates[k].kleene is not None:
            continue  # over a Kleene set: computed on the host from the sets (cep_gpu.cdp)
        args = "".join(f", seqs[i, {int(p)}]" for p in agg_inputs[k])
        out.append(f"    out[i, {k}] = agg{k}(env{args})")
    out.append("    return")
    return "\n".join(out) + "\n"


def check_source(source: str) -> None:
    """Refuse source with any name, attribute access or call target that the generator does not make."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            name = node.id
            if not (name in ALLOWED_GLOBALS or _LOCAL.match(name) or _FUNC.match(name) or name == "numba"):
                raise CodegenError(f"generated source uses an unexpected name {name!r}")
            if keyword.iskeyword(name) or name.startswith("__"):
                raise CodegenError(f"generated source uses a reserved name {name!r}")
        elif isinstance(node, ast.Attribute):
            if node.attr not in {"njit", "nan", "inf", "isnan", "shape", "int64", "uint64"}:
                raise CodegenError(f"generated source uses an unexpected attribute {node.attr!r}")
        elif isinstance(node, ast.FunctionDef):
            if not _FUNC.match(node.name):
                raise CodegenError(f"generated source defines an unexpected function {node.name!r}")
            for arg in node.args.args:
                if not _LOCAL.match(arg.arg):
                    raise CodegenError(f"generated source has an unexpected argument {arg.arg!r}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            raise CodegenError("generated source contains a string literal")
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.Lambda, ast.Global, ast.Nonlocal)):
            raise CodegenError(f"generated source contains {type(node).__name__}")
