"""Kernel spec -> the rule header of the CUDA kernels (the ``cuda/cdp.cuh`` hooks), as CUDA C text.

Input is the same lowered spec the Numba generator uses (:func:`cep_gpu.codegen.lower`): per plan
and binding step, the residual conditions and negations the kernel checks for each candidate
(column filters and the parameter-index equality are already answered by the host), and per
negation/aggregate the conditions left for the kernel. The output defines ``CEP_NPRED``,
``CEP_NAGG``, ``cep_rule_check(step_id, ctx, s)`` and ``cep_rule_aggregates(ctx, s, out)``,
specialised to the attribute kinds of the input. It is compiled with ``cuda/cdp.cu`` by NVRTC
(:mod:`cep_gpu.kernels.gpu`) or by g++ (:mod:`cep_gpu.kernels.host`).

Data layout (mirrors the kernel argument tuple of :class:`cep_gpu.codegen.Layout`, ``env`` in generated code): pointer slot 0 holds the
table timestamps (``env[0]``), slot 1 the excluded flags, slot ``e + 1`` holds ``env[e]`` for
``e >= 1`` (attribute values as int64/double/int64 codes/uint8, validity as uint8, negation and
aggregate columns as int64). The scalar table holds the dictionary codes of the string literals,
then the length of each negation column, then of each aggregate column.

Safety: rule text never becomes code. The emitted text contains only our own identifiers, slot
numbers, and numeric literals written from Python ``int``/``float`` values; string literals are
dictionary codes passed at run time.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..model import (
    NEXT,
    SELF,
    Aggregate,
    AggValue,
    Arith,
    Attr,
    BoolOp,
    Compare,
    Const,
    Expr,
    Neg,
    Negation,
    Not,
    Rule,
    Span,
    Timestamp,
)
from ..ranges import shift_limit
from .spec import RuleSpec

#: Steps per plan in ``step_id = plan * MAX_STEPS + step`` (``CEP_MAX_STEPS`` in cdp.cuh).
MAX_STEPS = 64
#: The most predicates a rule may have on the device (the local sequence copy of a thread).
MAX_PREDICATES = 32


def step_id(plan: int, step: int) -> int:
    """The id ``cep_rule_check`` dispatches on."""
    return plan * MAX_STEPS + step


class CudaSlots:
    """Pointer slots and scalar indices of one rule (see module docstring)."""

    def __init__(self, spec: RuleSpec, kinds: Mapping[str, str | None]) -> None:
        self.spec = spec
        self.kinds = dict(kinds)

    def attr_slots(self, name: str) -> tuple[int, int]:
        e = self.spec.layout.values_at(name)
        return e + 1, e + 2

    def string_scalar(self, text: str) -> int:
        return self.spec.layout.strings.index(text)

    def column_slots(self, kind: str, k: int) -> tuple[int, int]:
        e = (self.spec.layout.neg_at if kind == "neg" else self.spec.layout.agg_at) + 2 * k
        return e + 1, e + 2

    def length_scalar(self, kind: str, k: int) -> int:
        base = len(self.spec.layout.strings)
        return base + k if kind == "neg" else base + self.spec.layout.n_negations + k


@dataclass(frozen=True)
class CudaRule:
    """The generated rule header; ``key`` hashes it (the compile caches add the cuda/ sources)."""

    source: str
    n_predicates: int
    n_aggregates: int

    @property
    def key(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:24]


# ----------------------------------------------------------------------------------------------
# Expression emission


def _int_literal(v: int) -> str:
    v = int(v)
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"integer literal {v} does not fit in int64")
    if v == -(2**63):
        return "(-9223372036854775807LL - 1)"
    return f"({v}LL)"


def _float_literal(v: float) -> str:
    v = float(v)
    if math.isnan(v):
        return "cep_nan()"
    if math.isinf(v):
        return "cep_inf()" if v > 0 else "(-cep_inf())"
    text = repr(v)  # shortest text that round-trips exactly
    if not any(ch in text for ch in ".en"):
        text += ".0"
    return f"({text})"


class _Emitter:
    """Emits C statements computing (value, validity) of expressions into temporaries."""

    def __init__(self, layout: CudaSlots, rule: Rule, set_values: bool = False) -> None:
        self.layout = layout
        self.rule = rule
        self.lines: list[str] = []
        self.n = 0
        #: aggregate values come from ``ka`` (a Kleene step's set check), not from their spans
        self.set_values = set_values

    def _tmp(self, ctype: str, value: str, ok: str) -> tuple[str, str]:
        self.n += 1
        v, k = f"v{self.n}", f"k{self.n}"
        self.lines.append(f"{ctype} {v} = {value}; bool {k} = {ok};")
        return v, k

    def expr(self, e: Expr) -> tuple[str, str, str]:
        """(value variable, validity variable, kind) of ``e``; kind in int/float/bool/string."""
        if isinstance(e, Const):
            val = e.value
            if isinstance(val, bool):
                return ("true" if val else "false"), "true", "bool"
            if isinstance(val, int):
                return _int_literal(val), "true", "int"
            if isinstance(val, float):
                return _float_literal(val), "true", "float"
            if isinstance(val, str):
                return f"c.scal[{self.layout.string_scalar(val)}]", "true", "string"
            raise TypeError(f"unsupported literal {val!r}")
        if isinstance(e, Attr):
            row = _row(e.pred)
            kind = self.layout.kinds.get(e.name)
            if kind is None:  # no event has it: null everywhere
                return "0.0", "false", "float"
            vs, ks = self.layout.attr_slots(e.name)
            ok = f"cep_ptr<cep_u8>(c, {ks})[{row}] != 0"
            if kind == "int":
                return (*self._tmp("cep_i64", f"cep_ptr<cep_i64>(c, {vs})[{row}]", ok), "int")
            if kind == "float":
                v, k = self._tmp("double", f"cep_ptr<double>(c, {vs})[{row}]", ok)
                self.lines.append(f"{k} = {k} && !cep_isnan({v});")
                return v, k, "float"
            if kind == "string":
                return (*self._tmp("cep_i64", f"cep_ptr<cep_i64>(c, {vs})[{row}]", ok), "string")
            if kind == "bool":
                return (*self._tmp("bool", f"cep_ptr<cep_u8>(c, {vs})[{row}] != 0", ok), "bool")
            raise ValueError(f"attribute {e.name!r} has unsupported kind {kind!r}")
        if isinstance(e, Timestamp):
            return f"cep_ts(c, {_row(e.pred)})", "true", "int"
        if isinstance(e, AggValue):
            idx = int(e.index)
            self.n += 1
            v, k = f"v{self.n}", f"k{self.n}"
            value = f"ka[{idx}]" if self.set_values else f"cep_agg_{idx}(c, s)"
            self.lines.append(f"double {v} = {value}; bool {k} = !cep_isnan({v});")
            return v, k, "float"
        if isinstance(e, Neg):
            v, k, kind = self.expr(e.arg)
            if kind == "float":
                return (*self._tmp("double", f"-{v}", k), "float")
            return (*self._tmp("cep_i64", f"cep_neg((cep_i64){v})", k), "int")
        if isinstance(e, Arith):
            a, ka, ta = self.expr(e.left)
            b, kb, tb = self.expr(e.right)
            if e.op == "/":
                return (*self._tmp("double", f"(double){a} / (double){b}", f"{ka} && {kb} && ((double){b} != 0.0)"), "float")
            if ta == tb == "int":
                fn = {"+": "cep_add", "-": "cep_sub", "*": "cep_mul"}[e.op]
                return (*self._tmp("cep_i64", f"{fn}({a}, {b})", f"{ka} && {kb}"), "int")
            return (*self._tmp("double", f"(double){a} {e.op} (double){b}", f"{ka} && {kb}"), "float")
        if isinstance(e, Compare):
            a, ka, ta = self.expr(e.left)
            b, kb, tb = self.expr(e.right)
            op = "==" if e.op == "=" else e.op
            if ta == tb and ta in ("int", "string"):
                cmp = f"{a} {op} {b}"
            else:
                cmp = f"(double){a} {op} (double){b}"
            return (*self._tmp("bool", cmp, f"{ka} && {kb}"), "bool")
        if isinstance(e, BoolOp):
            parts = [self.expr(x) for x in e.args]
            join = " && " if e.op == "and" else " || "
            value = join.join(f"({v} != 0)" for v, _, _ in parts)
            ok = " && ".join(k for _, k, _ in parts)
            return (*self._tmp("bool", value, ok), "bool")
        if isinstance(e, Not):
            v, k, _ = self.expr(e.arg)
            return (*self._tmp("bool", f"!({v} != 0)", k), "bool")
        raise TypeError(f"not an expression: {e!r}")

    def condition(self, e: Expr, on_fail: str) -> None:
        """Emit a block that runs ``on_fail`` unless ``e`` holds (null = false)."""
        outer, self.lines = self.lines, []
        v, k, _ = self.expr(e)
        body = self.lines
        self.lines = outer
        self.lines.append("{")
        self.lines.extend("    " + line for line in body)
        self.lines.append(f"    if (!({k} && ({v} != 0))) {on_fail}")
        self.lines.append("}")


def _row(pred: int) -> str:
    """The C expression of the table row of predicate ``pred`` (SELF: the negated/aggregated event
    or a Kleene element; NEXT: the next element of a Kleene set)."""
    if pred == SELF:
        return "self"
    if pred == NEXT:
        return "nxt"
    return f"s[{int(pred)}]"


def _shifted(ts: str, offset: int) -> str:
    """``ts + offset`` saturated at the int64 range (:func:`cep_gpu.ranges.shift_limit`): no wrap-around
    (nor signed overflow) for timestamps near the range's ends."""
    offset = int(offset)
    if offset == 0:
        return ts
    lim = _int_literal(shift_limit(offset))
    past = "<" if offset < 0 else ">"
    return f"(({ts}) {past} {lim} ? {lim} : ({ts})) + {_int_literal(offset)}"


def _span_code(span: Span) -> str:
    return (
        f"{_shifted(f'cep_ts(c, s[{int(span.lo_ref)}])', span.lo_offset)}, {str(bool(span.lo_inclusive)).lower()}, "
        f"{_shifted(f'cep_ts(c, s[{int(span.hi_ref)}])', span.hi_offset)}, {str(bool(span.hi_inclusive)).lower()}"
    )


def _negation(j: int, neg: Negation, checks: tuple[int, ...], layout: CudaSlots, rule: Rule) -> list[str]:
    rows, ts = layout.column_slots("neg", j)
    n = layout.length_scalar("neg", j)
    em = _Emitter(layout, rule)
    for i in checks:
        em.condition(neg.conditions[i], "continue;")
    body = [
        f"// negation {j}: true when a forbidden event lies in the span",
        f"CEP_DEVICE bool cep_neg_{j}(const Ctx& c, const cep_i64* s) {{",
        f"    const cep_i64* rows = cep_ptr<cep_i64>(c, {rows});",
        f"    const cep_i64* tss = cep_ptr<cep_i64>(c, {ts});",
        "    cep_i64 first, last;",
        f"    cep_span_range(tss, c.scal[{n}], {_span_code(neg.span)}, &first, &last);",
        "    for (cep_i64 i = first; i < last; ++i) {",
        "        cep_i64 self = rows[i];",
        "        (void)self;",
    ]
    if not em.lines:  # no condition: any event in the span (nvcc warns of an unused `self`)
        return body[:2] + body[3:6] + ["    return last > first;", "}"]
    body += ["        " + line for line in em.lines]
    body += ["        return true;", "    }", "    return false;", "}"]
    return body


def _aggregate(j: int, agg: Aggregate, checks: tuple[int, ...], layout: CudaSlots, rule: Rule) -> list[str]:
    rows, ts = layout.column_slots("agg", j)
    n = layout.length_scalar("agg", j)
    em = _Emitter(layout, rule)
    for i in checks:
        em.condition(agg.conditions[i], "continue;")
    if agg.attribute is not None:
        v, k, _ = em.expr(Attr(SELF, agg.attribute))
        em.lines.append(f"if (!({k})) continue;  // aggregates skip events lacking the attribute")
        em.lines.append(f"double x = (double){v};")
        em.lines.append("sum += x; if (cnt == 0 || x < lo) lo = x; if (cnt == 0 || x > hi) hi = x;")
    em.lines.append("cnt += 1;")
    fn = agg.function
    result = {
        "count": "(double)cnt",
        "sum": "sum",
        "avg": "cnt ? sum / (double)cnt : cep_nan()",
        "min": "cnt ? lo : cep_nan()",
        "max": "cnt ? hi : cep_nan()",
    }[fn]
    body = [
        f"// aggregate {j}: {fn} over its span (NaN = null); sequential sum in time order",
        f"CEP_DEVICE double cep_agg_{j}(const Ctx& c, const cep_i64* s) {{",
        f"    const cep_i64* rows = cep_ptr<cep_i64>(c, {rows});",
        f"    const cep_i64* tss = cep_ptr<cep_i64>(c, {ts});",
        "    cep_i64 first, last, cnt = 0;",
        "    double sum = 0.0, lo = 0.0, hi = 0.0;",
        f"    cep_span_range(tss, c.scal[{n}], {_span_code(agg.span)}, &first, &last);",
        "    for (cep_i64 i = first; i < last; ++i) {",
        "        cep_i64 self = rows[i];",
        "        (void)self;",
    ]
    body += ["        " + line for line in em.lines]
    body += ["    }", "    (void)lo; (void)hi; (void)sum;", f"    return {result};", "}"]
    return body


def generate(spec: RuleSpec, kinds: Mapping[str, str | None]) -> CudaRule:
    """The rule header for ``spec`` over attributes of the given kinds (int/float/string/bool/None).

    Raises ``ValueError`` for a rule the kernels cannot take (too many predicates or steps).
    """
    rule = spec.rule
    if spec.width > MAX_PREDICATES:
        raise ValueError(
            f"rule {rule.name!r} has {rule.n_predicates} predicates ({spec.width} sequence columns "
            f"with those of its Kleene positions); the GPU kernels take at most {MAX_PREDICATES}"
        )
    layout = CudaSlots(spec, kinds)
    out = [
        f"// generated by cep_gpu.codegen.cuda for a rule with {rule.n_predicates} predicates",
        "#define CEP_RULE_DEFINED 1",
        # a sequence row: the predicates, then three hidden columns per Kleene position
        f"#define CEP_NPRED {spec.width}",
        f"#define CEP_NAGG {len(rule.aggregates)}",
        '#include "cdp.cuh"',
        "",
    ]
    for j in range(len(rule.aggregates)):
        out += [f"CEP_DEVICE double cep_agg_{j}(const Ctx& c, const cep_i64* s);"]
    for j, agg in enumerate(rule.aggregates):
        if agg.kleene is not None:  # over a Kleene set: cdp_kleene_sets computes it (ka[j])
            out += [f"CEP_DEVICE double cep_agg_{j}(const Ctx& c, const cep_i64* s) {{",
                    "    (void)c; (void)s;", "    return cep_nan();", "}", ""]
            continue
        out += _aggregate(j, agg, spec.agg_checks[j], layout, rule) + [""]
    for j, neg in enumerate(rule.negations):
        out += _negation(j, neg, spec.neg_checks[j], layout, rule) + [""]
    cases = []
    for pi, plan in enumerate(spec.plans):
        if len(plan.steps) > MAX_STEPS:
            raise ValueError(f"rule {rule.name!r}: too many steps for the GPU kernels")
        for st in plan.steps:
            if st.trivial or plan.plan.predicates[st.pred].kleene is not None:
                continue  # a Kleene step's checks are in cep_kleene_check
            sid = step_id(pi, st.step)
            em = _Emitter(layout, rule)
            for ci in st.conditions:
                em.condition(rule.conditions[ci], "return false;")
            for ni in st.negations:
                em.lines.append(f"if (cep_neg_{ni}(c, s)) return false;")
            out.append(f"// plan {pi}, step {st.step}: binds predicate {st.pred}")
            out.append(f"CEP_DEVICE bool cep_check_{sid}(const Ctx& c, const cep_i64* s) {{")
            out += ["    " + line for line in em.lines]
            out += ["    return true;", "}", ""]
            cases.append(f"        case {sid}: return cep_check_{sid}(c, s);")
    out += [
        "CEP_DEVICE bool cep_rule_check(int step_id, const Ctx& c, const cep_i64* s) {",
        "    (void)c; (void)s;",
        "    switch (step_id) {",
        *cases,
        "        default: return true;",
        "    }",
        "}",
        "",
        "CEP_DEVICE void cep_rule_aggregates(const Ctx& c, const cep_i64* s, double* out) {",
        "    (void)c; (void)s; (void)out;",
        *[f"    out[{j}] = cep_agg_{j}(c, s);" for j in range(len(rule.aggregates))],
        "}",
        "",
    ]
    out += _kleene_hooks(spec, layout)
    return CudaRule(source="\n".join(out), n_predicates=rule.n_predicates, n_aggregates=len(rule.aggregates))


#: function codes of ``cep_acc_value`` (cuda/cdp.cuh)
_ACC_CODES = {"count": 0, "sum": 1, "avg": 2, "min": 3, "max": 4}


def _switch(signature: str, unused: str, cases: list[tuple[int, list[str]]], default: str) -> list[str]:
    """A hook dispatching on its first argument to one block of lines per case."""
    var = signature.split("(")[1].split(",")[0].split()[-1]
    out = [f"CEP_DEVICE {signature} {{", f"    (void){var}; {unused}"]
    if cases:
        out.append(f"    switch ({var}) {{")
        for case, lines in cases:
            out.append(f"        case {case}: {{")
            out += ["            " + line for line in lines]
            out.append("        }")
        out.append("        default: break;")
        out.append("    }")
    out += [f"    {default}", "}", ""]
    return out


def _kleene_hooks(spec: RuleSpec, layout: CudaSlots) -> list[str]:
    """The Kleene hooks of cdp.cuh (``cep_kleene_elem/pair/add/values/check``) for ``spec``'s
    Kleene positions (trivial bodies for a rule without them)."""
    rule = spec.rule
    elem, pair, add, values, checks = [], [], [], [], []
    for k in rule.kleene_positions:
        kl = rule.predicates[k].kleene
        for conds, target in ((kl.conditions, elem), (kl.consecutive, pair)):
            if conds:
                em = _Emitter(layout, rule)
                for cond in conds:
                    em.condition(cond, "return false;")
                target.append((k, em.lines + ["return true;"]))
        acc_lines, value_lines = [], []
        for j, agg in enumerate(rule.aggregates):
            if agg.kleene != k:
                continue
            kind = layout.kinds.get(agg.attribute) if agg.attribute is not None else None
            if kind in ("int", "float"):  # a value to add (count-only otherwise, as on the host)
                em = _Emitter(layout, rule)
                v, ok, _ = em.expr(Attr(SELF, agg.attribute))
                acc_lines += ["{", *("    " + x for x in em.lines), f"    cep_acc_add(&acc[{j}], {ok}, (double){v});", "}"]
            else:
                acc_lines.append(f"cep_acc_add(&acc[{j}], false, 0.0);")
            value_lines.append(f"ka[{j}] = cep_acc_value(&acc[{j}], {_ACC_CODES[agg.function]});")
        if acc_lines:
            add.append((k, acc_lines + ["return;"]))
            values.append((k, value_lines + ["return;"]))
    for pi, plan in enumerate(spec.plans):
        for st in plan.steps:
            k = st.pred
            if plan.plan.predicates[k].kleene is None or st.trivial:
                continue
            em = _Emitter(layout, rule, set_values=True)
            for ci in st.conditions:
                em.condition(rule.conditions[ci], "return false;")
            last = spec.kleene_base(k) + 2
            for ni in st.negations:
                if rule.negations[ni].span.lo_ref == k:
                    # a span that starts at the set starts after its last element
                    em.lines += ["{", "    cep_i64 s2[CEP_NPRED];", "    for (int j = 0; j < CEP_NPRED; ++j) s2[j] = s[j];",
                                 f"    s2[{int(k)}] = s[{int(last)}];", f"    if (cep_neg_{ni}(c, s2)) return false;", "}"]
                else:
                    em.lines.append(f"if (cep_neg_{ni}(c, s)) return false;")
            checks.append((step_id(pi, st.step), em.lines + ["return true;"]))
    return [
        "// Kleene closure hooks (cuda/cdp.cuh)",
        *_switch("bool cep_kleene_elem(int k, const Ctx& c, const cep_i64* s, cep_i64 self)",
                 "(void)c; (void)s; (void)self;", elem, "return true;"),
        *_switch("bool cep_kleene_pair(int k, const Ctx& c, const cep_i64* s, cep_i64 self, cep_i64 nxt)",
                 "(void)c; (void)s; (void)self; (void)nxt;", pair, "return true;"),
        *_switch("void cep_kleene_add(int k, const Ctx& c, cep_i64 self, CepAcc* acc)",
                 "(void)c; (void)self; (void)acc;", add, "return;"),
        *_switch("void cep_kleene_values(int k, const CepAcc* acc, double* ka)",
                 "(void)acc; (void)ka;", values, "return;"),
        *_switch("bool cep_kleene_check(int step_id, const Ctx& c, const cep_i64* s, const double* ka)",
                 "(void)c; (void)s; (void)ka;", checks, "return true;"),
    ]
