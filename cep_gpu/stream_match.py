"""The streaming fast path of :class:`cep_gpu.Engine` (issue 12): one compiled call per terminator run.

The general streaming path hands the CDP backend the whole buffer for every publish that brings a
terminator: the backend rebuilds its columns for the window (a filter pass and a sort for the
parameter index), and steps through the plan in Python around the Numba kernels. Here each rule
keeps **incremental candidate columns** instead, and matches with **one compiled call**:

* per positive predicate, the rows of the engine's shared :class:`~cep_gpu.stream_buffer.AppendBuffer`
  that pass its static filters, in row (= time) order: a row is appended to the columns it belongs
  to when a later call first sees it (``sync``, compiled: a type comparison and the predicate's
  generated filter), and the rows that the buffer dropped leave by an offset move. Entries are row
  numbers in the buffer's arrays (the arrays with their spare capacity, so that rows keep their
  numbers while the buffer appends and expires); when the buffer rebuilds its arrays (it grows,
  compacts, or takes a row in the middle by ``concat``) the columns are rebuilt from the live rows
  (O(window), rare: amortised O(1) per event); when it merged rows into its last ones in place (a
  hierarchy's composite event goes before its terminator) the columns take back their entries
  from the first renumbered row on (newest first, each leaving its chain: the work is the
  entries taken back) and sync those rows again;
* an **incremental parameter index** on those columns (:class:`Chains`): where a step's
  candidates must equal a bound value (``k=$k``: ``B.k = C.k``), each entry of the step's column
  is linked, as it is appended, to the previous and the next entry of its hash bucket (of the
  value ``k``); the newest entry per bucket is kept in a table sized with the columns. Entries
  leave with the columns (offset moves); compaction renumbers them and relinks the live ones;
* ``s_match``, generated per rule: each new row joins its columns, and when it is a terminator
  it is matched at once: nested loops over the plan's binding steps, where a step with a chain
  walks the bucket of the bound value (back to the window's start, newest first for ``last``,
  else forward in time order) and a step without one binary-searches its window's edges and scans
  it. Every candidate goes through the rule's generated ``valid`` check
  (:mod:`cep_gpu.codegen.numba_src`, the same functions as the CDP kernels, lowered without the
  parameter index: the equality is checked per candidate, so a hash collision costs a check,
  never a wrong match); ``each`` visits every valid candidate, ``last`` the latest valid one,
  ``first`` the earliest. Complete matches go to a preallocated output array; when it is too
  small the call returns the number it needed, the array grows and the call is repeated (nothing
  is truncated). Matching each terminator as it arrives keeps a large micro-batch's chain walks
  as short as a one-event publish's.

A negation (``not A(...) between b and c``, not trailing) has a column of its own: the rows of
the negated type that pass its own filters, with their timestamps, kept by a compiled sync up to
the end of the buffer before each match, and handed to the rule's generated negation checks
(the CDP kernels' functions, which binary-search its span in it) as views of the live entries.

An aggregate (``n = Count(A(k=$k) within 5 s from c)``, ``Sum``/``Avg``/``Min``/``Max``) has a
column too: the rows of its type that pass its own filters, synced row by row with the
predicates' (its span ends before its terminator's timestamp, so the rows after a terminator
never count for it). Where its conditions hold an equality with a bound value (``A(k=$k)``,
``A(k=b.k)``) the column is chained on that attribute like a predicate's, and the aggregate
walks the bound value's bucket back to its span's first entry, then forward in time order
(``Sum``/``Avg`` add in the order batch adds in; ``Count`` in one pass back): the work is the
events of that key in the span; without one, the span's edges are binary-searched. The function
is the CDP kernels' generated aggregate (:func:`cep_gpu.codegen.numba_src.emit_source`, its
``agg_span`` hook supplies only how the span's events are found: conditions, nulls, empty spans
and the functions are one implementation), kept per aggregate with the rows it was computed for
for the rest of the call (a terminator's checks and its matches' values compute it once); the
values of each match go to ``Matches.aggs`` through the kernels' ``aggs_all``.

Rules reading composite events (hierarchies) take the fast path too: the engine matches its rules
in dependency order per publish, and a composite event is merged into the buffer's last rows
before its terminator (:meth:`~cep_gpu.stream_buffer.AppendBuffer.append`); each matcher takes
back the renumbered entries and syncs them again. Composite ids are negative, so a composite
event goes before older rows of its timestamp: the new rows are then several runs, matched by
one ``s_match`` call each (the rows between join the columns unmatched).

The generated source (the rule's checks plus these functions) goes through the on-disk kernel
cache (:mod:`cep_gpu.codegen.cache`), so a second process loads the machine code.

``consuming`` rules and rules with a trailing ``NOT`` (held terminators) take the fast path
through :class:`cep_gpu.stream_held.HeldMatcher`: the generated matching skips consumed rows and
stamps the rows a match consumes (``xc``, an argument of ``s_match``, ``s_held`` and
``s_relink`` only for consuming rules), and ``s_held`` matches the held terminators that have become ready.

Rules the fast path does not cover take the general path, with identical results (tested):
Kleene closures, a trailing ``NOT`` upstream (a rule reading a holding rule's composite events),
aggregates in a rule that also consumes or holds terminators, unbounded windows, more than
``FAST_PATH_MAX_PLANS`` plans, and every backend but ``cpu`` and ``auto`` (``auto`` takes the fast
path when its planner picks the CPU: one decision per rule and window-occupancy bucket, cached,
see :class:`AutoChoice`).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field

import numba
import numpy as np

from .backends import Matches
from .codegen import RuleSpec, lower
from .codegen import cache as kcache
from .codegen.numba_src import Body, check_source, emit_source, literal, prologue, span_bounds
from .detect import RuleResult, composite_events, sorted_by_ts_ids
from .events import EventTable
from .model import SELF, Attr, Compare, Neg, Rule, aggregate_inputs
from .stream_buffer import new_rows_last

#: Publishes that bring more new rows than this take the general path when the rule has an
#: equality that the batch CDP answers by its parameter index and the fast path has no chain for
#: (an expression such as ``a.x = b.x + 1``): scanning each terminator's window loses to the index
#: once thousands of terminators come at once (measured: docs/performance.md, issue 12).
FAST_PATH_MAX_ROWS = 4096
#: A rule with more plans than this (an ``AND`` of many positions: one plan per order) takes the
#: general path: the fast path compiles kernels per plan (about 1.4 s each), the general path's
#: CDP kernels are shared across plans.
FAST_PATH_MAX_PLANS = 8
_MIN_TS = -(2**63)
_NO_AGGS = np.empty((4096, 0), np.float64)  # Matches.aggs of rules without aggregates (views)


def unsupported(rule: Rule, delay: int) -> str | None:
    """Why ``rule`` takes the general path (None: the fast path covers it). Composite inputs are
    read like primitive ones (see the module docstring), and aggregates, consumption and a
    trailing ``NOT`` of the rule itself are covered."""
    if rule.kleene_positions:
        return "Kleene closure"
    if delay != rule.trailing_horizon():
        return "held terminators (trailing NOT upstream)"
    if rule.aggregates and (rule.consuming or delay):
        # (stream_held's matcher does not carry the aggregates' columns and output)
        return "aggregates in a consuming rule or one with held terminators"
    if len(rule.plans) > FAST_PATH_MAX_PLANS:
        return f"{len(rule.plans)} plans (AND orders) exceed FAST_PATH_MAX_PLANS = {FAST_PATH_MAX_PLANS}"
    for plan in rule.plans:
        for k, p in enumerate(plan.predicates):
            if k != plan.terminator and p.window is None:
                return "unbounded window"
    return None


# -- code generation --------------------------------------------------------------------------------

#: the multiplier of the chains' bucket hash (s_bkt; the aggregates' walk inlines the same hash)
_HASH_MULT = -7046029254386353131
_HELPERS = '''
@numba.njit(cache=True, inline="always")
def s_fkey(x):
    if x == x and -4.6e18 < x < 4.6e18:
        return int(x)
    return 0


@numba.njit(cache=True, inline="always")
def s_bkt(x, mask):
    return ((x * HASH_MULT) >> 32) & mask


@numba.njit(cache=True, inline="always")
def s_lb_ts(cr, p, ts, x, lo, hi):
    while lo < hi:
        mid = (lo + hi) >> 1
        if ts[cr[p, mid]] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, inline="always")
def s_lb_row(cr, p, x, lo, hi):
    while lo < hi:
        mid = (lo + hi) >> 1
        if cr[p, mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo
'''.replace("HASH_MULT", str(_HASH_MULT))

_OWN_FUNC = re.compile(r"^(?:s_fkey|s_bkt|s_lb_ts|s_lb_row|s_filt\d+|s_nfilt\d+|s_afilt\d+|s_sync|s_nsync|s_relink|s_match|s_held|aggs_all)$")
_OWN_LOCAL = re.compile(r"^(?:[a-z]\d+|j\d+|l\d+|h\d+|w\d+|cr|cs|ce|nt|codes|types|start|lo|hi|x|mid|p|n|cap|out|seqs|nlo|nhi|ts|sc|r|t|env|e0|e1|cl|cnt|hd|pv|nx|bk|c|g|b|mask|xc|stp|rows|m|i|q|rr|jj|aa|bb)$")


def _check_own(source: str) -> None:
    """The templates' share of the source uses only our own names (the rule's share is checked by
    :func:`cep_gpu.codegen.numba_src.check_source`)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            if not (node.id in {"numba", "np", "range", "float", "int", "min", "max", "True", "False"} or _OWN_LOCAL.match(node.id)
                    or _OWN_FUNC.match(node.id) or re.match(r"^valid_\d+_\d+$", node.id)):
                raise ValueError(f"stream kernel source uses an unexpected name {node.id!r}")
        elif isinstance(node, ast.Attribute) and node.attr not in {"njit", "nan", "isnan", "inf", "shape", "int64", "uint64"}:
            raise ValueError(f"stream kernel source uses an unexpected attribute {node.attr!r}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            if node.value != "always":
                raise ValueError("stream kernel source contains a string literal")
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.Lambda, ast.Global, ast.Nonlocal)):
            raise ValueError(f"stream kernel source contains {type(node).__name__}")


def _filter_source(spec, kinds) -> list[str]:
    """``s_filt<p>(r, env)``: predicate ``p``'s static filters for row ``r``; ``s_nfilt<k>`` /
    ``s_afilt<k>``: negation / aggregate ``k``'s own (the negated or aggregated event's, ``SELF``)."""
    rule = spec.rule
    parts = [(f"s_filt{p}", [rule.conditions[c] for c in spec.filters[p]]) for p in range(rule.n_predicates)]
    parts += [(f"s_nfilt{k}", [neg.conditions[c] for c in spec.neg_filters[k]])
              for k, neg in enumerate(rule.negations)]
    parts += [(f"s_afilt{k}", [agg.conditions[c] for c in spec.agg_filters[k]])
              for k, agg in enumerate(rule.aggregates)]
    out = []
    for name, conditions in parts:
        if not conditions:
            continue
        b = Body(spec.layout, kinds, lambda q: "r")
        b.agg_inputs = []
        for cond in conditions:
            b.check(cond, "return False")
        out.append(f"@numba.njit(cache=True)\ndef {name}(r, env):")
        out += prologue(spec.layout, kinds) + b.lines + ["    return True", ""]
    return out


def _nsync_source(spec, kinds) -> list[str]:
    """``s_nsync(lo, hi, types, cl, cnt, env, start)``: the negations' columns (slots after the
    predicates': table rows in plane 0, their timestamps in plane 1, which the generated
    negation checks binary-search): expire the entries before row ``start``, append the rows
    ``[lo, hi)`` of each negated type that pass the negation's own filters."""
    n_pred, n_neg = spec.rule.n_predicates, len(spec.rule.negations)
    lines = ["@numba.njit(cache=True)", "def s_nsync(lo, hi, types, cl, cnt, env, start):",
             *_STATE[:6], *prologue(spec.layout, kinds),
             f"    for p in range({n_pred}, {n_pred + n_neg}):", *_EXPIRE,
             "    for r in range(lo, hi):", "        t = types[r]"]
    for k in range(n_neg):
        q = n_pred + k
        cond = f"t == codes[{q}]" + (f" and s_nfilt{k}(r, env)" if spec.neg_filters[k] else "")
        lines += [f"        if {cond}:", f"            c = ce[{q}]", f"            cr[{q}, c] = r",
                  f"            pv[{q}, c] = ts[r]", f"            ce[{q}] = c + 1"]
    lines += ["    return 0", ""]
    return lines


@dataclass(frozen=True)
class Chains:
    """The incremental parameter index of a rule's fast path, for one set of attribute kinds.

    ``attr[p]``: the attribute whose value chains predicate ``p``'s column entries (each entry
    links to the previous and the next entry of its hash bucket); ``floats[p]``: hash through
    the float key (the attribute or a value it is compared with is a float), so that equal
    values (``3 == 3.0``, ``0.0 == -0.0``) always land in the same bucket. ``steps[(plan,
    step)]``: ``(predicate, attribute)`` of the bound value the step's equality compares with;
    such a step walks the chain of that value's bucket instead of scanning its window. The
    walk only narrows the candidates: each is still checked by the step's ``valid`` function,
    equality included, so a hash collision costs a check, never a wrong match.
    """

    attr: dict
    floats: dict
    steps: dict
    #: aggregate ``k`` -> ``(predicate, attribute)`` of the bound value its own events must equal
    #: (``A(k=$k)``): its column (slot :func:`agg_slot`) is chained on ``attr[slot]``, and the
    #: aggregate walks that value's bucket instead of its whole span
    aggs: dict
    #: the rule lowered with the parameter index (what :meth:`unindexed_keys` compares with)
    indexed: RuleSpec | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, rule: Rule, kinds: dict[str, str | None], indexed: RuleSpec | None = None) -> Chains:
        """The chains of ``rule`` over attributes of ``kinds``; ``indexed``: the rule lowered with
        the parameter index (``lower(rule, use_index=True)``), lowered here when not given."""
        if indexed is None:
            indexed = lower(rule, use_index=True)  # which equality each step could answer by an index
        attr: dict[int, str] = {}
        steps: dict[tuple[int, int], tuple[int, str]] = {}
        for pi, plan in enumerate(indexed.plans):
            for s, st in enumerate(plan.steps):
                key = st.key
                if s == 0 or key is None or not isinstance(key.expr, Attr) or key.expr.pred == SELF:
                    continue  # (an expression other than a plain attribute: the window is scanned)
                if kinds.get(key.attr) is None or kinds.get(key.expr.name) is None:
                    continue  # always null: no candidate either way
                if attr.setdefault(st.pred, key.attr) != key.attr:
                    continue  # one chained attribute per column
                steps[(pi, s)] = (key.expr.pred, key.expr.name)
        floats = {p: kinds[a] == "float" or any(
            kinds[qa] == "float" for (pi, s), (_, qa) in steps.items() if indexed.plans[pi].steps[s].pred == p)
            for p, a in attr.items()}
        aggs: dict[int, tuple[int, str]] = {}
        checks = indexed.agg_checks  # (the same with or without the index)
        for k, agg in enumerate(rule.aggregates):
            for c in checks[k]:
                pair = _own_equality(agg.conditions[c])
                if pair is not None and kinds.get(pair[0]) is not None and kinds.get(pair[1].name) is not None:
                    q = agg_slot(rule, k)
                    attr[q], aggs[k] = pair[0], (pair[1].pred, pair[1].name)
                    floats[q] = kinds[pair[0]] == "float" or kinds[pair[1].name] == "float"
                    break
        return cls(attr, floats, steps, aggs, indexed)

    def unindexed_keys(self) -> bool:
        """Whether some step has an equality the batch CDP answers by its index but this does not."""
        return any(st.key is not None and (pi, s) not in self.steps
                   for pi, plan in enumerate(self.indexed.plans) for s, st in enumerate(plan.steps) if s)


def agg_slot(rule: Rule, k: int) -> int:
    """The column slot of aggregate ``k`` (after the predicates' and the negations')."""
    return rule.n_predicates + len(rule.negations) + k


def _own_equality(cond) -> tuple[str, Attr] | None:
    """``(own attribute, bound attribute)`` of a condition ``SELF.a = P.b`` (either side)."""
    if isinstance(cond, Compare) and cond.op == "=":
        for own, other in ((cond.left, cond.right), (cond.right, cond.left)):
            if isinstance(own, Attr) and own.pred == SELF and isinstance(other, Attr) and other.pred >= 0:
                return own.name, other
    return None


def _valid_of(layout, kinds, attr: str, row: str) -> tuple[str, str]:
    """(value, validity) source of ``attr`` at ``row`` (NaN counts as null, as in the checks)."""
    sl = layout.attrs.index(attr)
    ok = f"v{sl}[{row}]" + (f" and not np.isnan(a{sl}[{row}])" if kinds[attr] == "float" else "")
    return f"a{sl}[{row}]", ok


def _key_of_value(value: str, floats: bool) -> str:
    return f"s_fkey({value} * 1.0)" if floats else f"int({value})"  # (numba has no float(bool))


def _link_lines(spec, kinds, chains: Chains, p: int, ind: str) -> list[str]:
    """Append column entry ``c`` (table row ``r``) of predicate ``p`` to its bucket's chain."""
    value, ok = _valid_of(spec.layout, kinds, chains.attr[p], "r")
    return [f"{ind}if {ok}:",
            f"{ind}    b = s_bkt({_key_of_value(value, chains.floats[p])}, mask)",
            f"{ind}    g = hd[{p}, b]",
            f"{ind}    pv[{p}, c] = g",
            f"{ind}    if g >= 0:",
            f"{ind}        nx[{p}, g] = c",
            f"{ind}    hd[{p}, b] = c",
            f"{ind}    bk[{p}, c] = b",
            f"{ind}else:",
            f"{ind}    pv[{p}, c] = -1",
            f"{ind}    bk[{p}, c] = -1",
            f"{ind}nx[{p}, c] = -1"]


_STATE = ["    cr = cl[0]", "    pv = cl[1]", "    nx = cl[2]", "    cs = cnt[0]", "    ce = cnt[1]",
          "    codes = cnt[2]", "    mask = hd.shape[1] - 1", "    bk = cl[3]"]


def _add_lines(spec, kinds, chains: Chains, ind: str) -> list[str]:
    """Append table row ``r`` to the columns of the predicates it passes (and to their chains)."""
    lines = [f"{ind}t = types[r]"]
    for p in range(spec.rule.n_predicates):
        cond = f"t == codes[{p}]" + (f" and s_filt{p}(r, env)" if spec.filters[p] else "")
        lines += [f"{ind}if {cond}:", f"{ind}    c = ce[{p}]", f"{ind}    cr[{p}, c] = r", f"{ind}    ce[{p}] = c + 1"]
        lines += _link_lines(spec, kinds, chains, p, ind + "    ") if p in chains.attr else [f"{ind}    bk[{p}, c] = -1"]
    for k in range(len(spec.rule.aggregates)):  # (their spans end before the terminator's timestamp)
        q = agg_slot(spec.rule, k)
        cond = f"t == codes[{q}]" + (f" and s_afilt{k}(r, env)" if spec.agg_filters[k] else "")
        lines += [f"{ind}if {cond}:", f"{ind}    c = ce[{q}]", f"{ind}    cr[{q}, c] = r", f"{ind}    ce[{q}] = c + 1"]
        lines += _link_lines(spec, kinds, chains, q, ind + "    ") if q in chains.attr else \
            [f"{ind}    pv[{q}, c] = ts[r]", f"{ind}    bk[{q}, c] = -1"]
    return lines


def _expire_lines(spec, ind: str) -> list[str]:
    """Expire the entries before row ``start`` of the columns synced row by row (the predicates'
    and the aggregates')."""
    rule = spec.rule
    lines = [f"{ind}for p in range({rule.n_predicates}):", *[ind[4:] + x for x in _EXPIRE]]
    if rule.aggregates:
        lines += [f"{ind}for p in range({agg_slot(rule, 0)}, {agg_slot(rule, len(rule.aggregates))}):",
                  *[ind[4:] + x for x in _EXPIRE]]
    return lines


def _agg_span(spec, kinds, chains: Chains):
    """The ``agg_span`` of :func:`cep_gpu.codegen.numba_src.emit_source` for the fast path: the
    aggregate's events come from its column in the matcher's state (``env`` ends with ``cl``,
    ``cnt``, ``hd``, the aggregates' output and their memo), synced row by row like the
    predicates'. With an equality to a bound value (``A(k=$k)``) the span is walked along that
    value's chain (back from the bucket's newest entry to the span's first, then forward in time
    order; ``Count`` needs no order: one pass back): the work is the events of that key in the
    span; otherwise its edges are binary-searched (the column's timestamps in plane 1). The
    value is kept per aggregate with the rows it was computed for (the memo, cleared per
    ``s_match`` call: a span ends before its terminator's timestamp, so rows synced later in the
    call are never in it), so that a terminator's checks and its matches' output (``aggs_all``,
    per match of ``each``) compute it once."""
    layout = spec.layout
    ext = layout.agg_at + 2 * layout.n_aggregates

    def lines_of(k: int, agg) -> tuple[list[str], list[str]]:
        q = agg_slot(spec.rule, k)
        ins = sorted(aggregate_inputs(agg))
        bounds, lo_fn, hi_fn = span_bounds(agg.span)
        lines = [f"    w0 = env[{ext}]", f"    w1 = env[{ext + 1}]"]
        store: list[str] = []
        if not agg.span.hi_inclusive:  # (always, in the language: see the docstring)
            same = " and ".join([f"w10[{k}, 0] == 1"] + [f"w10[{k}, {1 + i}] == p{p}" for i, p in enumerate(ins)])
            lines += [f"    w10 = env[{ext + 4}]", f"    w11 = env[{ext + 5}]", f"    if {same}:", f"        return w11[{k}]"]
            store = [f"    w10[{k}, 0] = 1", *[f"    w10[{k}, {1 + i}] = p{p}" for i, p in enumerate(ins)], f"    w11[{k}] = res"]
        lines += [*bounds, f"    nr = w0[0, {q}]", f"    w3 = w1[0, {q}]"]
        key = chains.aggs.get(k)
        if key is None:
            return lines + [f"    nt = w0[1, {q}]", f"    w4 = w1[1, {q}]",
                            f"    s = w3 + {lo_fn}(nt[w3:w4], lo)", f"    e = w3 + {hi_fn}(nt[w3:w4], hi)",
                            "    for j in range(s, e):", "        q = nr[j]"], store
        value, ok = _valid_of(layout, kinds, key[1], f"p{key[0]}")
        past = "ts[nr[j]] > hi" if agg.span.hi_inclusive else "ts[nr[j]] >= hi"
        from_lo = "ts[nr[j]] >= lo" if agg.span.lo_inclusive else "ts[nr[j]] > lo"
        to_hi = "ts[nr[j]] <= hi" if agg.span.hi_inclusive else "ts[nr[j]] < hi"
        as_key = ([f"        w8 = {value} * 1.0", "        w9 = int(w8) if -4.6e18 < w8 < 4.6e18 else 0"]
                  if chains.floats[q] else [f"        w9 = int({value})"])  # (as s_fkey / s_bkt)
        lines += [f"    w2 = env[{ext + 2}]", f"    w5 = w0[1, {q}]", f"    w6 = w0[2, {q}]", "    j = -1",
                  f"    if {ok}:", *as_key,
                  f"        j = w2[{q}, ((w9 * {_HASH_MULT}) >> 32) & (w2.shape[1] - 1)]",
                  f"        while j >= w3 and {past}:", "            j = w5[j]"]
        if agg.function == "count":  # one pass back
            return lines + [f"    while j >= w3 and {from_lo}:", "        q = nr[j]", "        j = w5[j]"], store
        return lines + ["    w7 = -1", f"    while j >= w3 and {from_lo}:", "        w7 = j", "        j = w5[j]",
                        "    j = w7", f"    while j >= 0 and {to_hi}:", "        q = nr[j]", "        j = w6[j]"], store

    return lines_of


_EXPIRE = ["        while cs[p] < ce[p] and cr[p, cs[p]] < start:", "            cs[p] += 1"]


def _sync_source(spec, kinds, chains: Chains) -> list[str]:
    """``s_sync(lo, hi, types, cl, cnt, hd, env, start)``: expire the entries before row
    ``start``, then append rows ``[lo, hi)`` to the columns of the predicates they pass.

    ``cl``: (4, slots, capacity) column entries (table rows), chain links back and forward, and
    each entry's bucket (-1: unchained), a slot per predicate, negation and aggregate; ``cnt``: per
    slot its column's start, end and event type code, then the scratch row of the match and its
    terminator count; ``hd``: (slots, buckets) the newest entry of each bucket. (The state is in
    three arrays: fewer arguments for Numba's dispatch to read.)"""
    return ["@numba.njit(cache=True)", "def s_sync(lo, hi, types, cl, cnt, hd, env, start):",
            *_STATE, *prologue(spec.layout, kinds), *_expire_lines(spec, "    "),
            "    for r in range(lo, hi):", *_add_lines(spec, kinds, chains, "        "),
            "    return 0", ""]


def _relink_source(spec, kinds, chains: Chains) -> list[str]:
    """``s_relink(cl, cnt, hd, env[, xc])``: the chains of every live entry anew (after the columns
    were compacted: entries renumbered); consumed entries of a consumed position stay out."""
    consuming = spec.rule.consuming
    lines = ["@numba.njit(cache=True)", f"def s_relink(cl, cnt, hd, env{', xc' if consuming else ''}):", *_STATE,
             *prologue(spec.layout, kinds), "    hd[:, :] = -1"]
    for p in sorted(chains.attr):
        lines += [f"    for c in range(cs[{p}], ce[{p}]):", f"        r = cr[{p}, c]"]
        if p in consuming:
            lines += ["        if xc[r] != 0:", "            continue"]
        lines += _link_lines(spec, kinds, chains, p, "        ")
    lines += ["    return 0", ""]
    return lines


def _consumed(row: str) -> str:
    """Whether table row ``row`` was consumed by an earlier terminator (``xc[row]``: 0 free, else
    the stamp of the terminator that consumed it; the current one's is ``stp``, for its own
    matches bind what it consumes: consumption applies after all of a terminator's matches)."""
    return f"xc[{row}] != 0 and xc[{row}] != stp"


def _term_lines(spec, kinds, chains: Chains, pi: int, depth: int, skip: str) -> list[str]:
    """The complete matches of plan ``pi`` for the terminator at entry ``j0`` of its column,
    written to ``out[n:]`` while it has room (``n`` counts them all); ``skip`` leaves the
    terminator (its own checks failed). With ``consuming``: consumed rows bind nothing (a
    consumed terminator terminates nothing) and each match stamps the rows it consumes."""
    n_pred = spec.rule.n_predicates
    steps = spec.plans[pi].steps
    consuming = spec.rule.consuming
    tp = steps[0].pred
    ind = "    " * depth
    lines = [f"{ind}nt[0] += 1", f"{ind}for p in range({n_pred}):", f"{ind}    seqs[0, p] = -1",
             f"{ind}seqs[0, {tp}] = cr[{tp}, j0]"]
    if consuming:
        lines += [f"{ind}if {_consumed(f'cr[{tp}, j0]')}:", f"{ind}    {skip}"]
    if not steps[0].trivial:
        lines += [f"{ind}if not valid_{pi}_0(seqs, 0, cr[{tp}, j0], env):", f"{ind}    {skip}"]
    base = depth
    for s in range(1, len(steps)):
        st = steps[s]
        ind = "    " * depth
        p = st.pred
        lines.append(f"{ind}h{s} = ts[seqs[0, {st.before}]]")
        w = int(st.window)
        lines.append(f"{ind}w{s} = ts[seqs[0, {st.anchor}]]")
        lines.append(f"{ind}l{s} = w{s} - {literal(w)} if w{s} >= {literal(_MIN_TS + w)} else {literal(_MIN_TS)}")
        key = chains.steps.get((pi, s))
        if key is None:  # scan the window: its edges by binary search
            lines.append(f"{ind}l{s} = s_lb_ts(cr, {p}, ts, l{s}, cs[{p}], ce[{p}])")
            lines.append(f"{ind}h{s} = s_lb_ts(cr, {p}, ts, h{s}, l{s}, ce[{p}])")
            if st.ties:  # "before" is row order: also earlier rows at ts(before)
                lines.append(f"{ind}h{s} = s_lb_row(cr, {p}, seqs[0, {st.before}], h{s}, ce[{p}])")
            if st.policy == "last":
                lines.append(f"{ind}for j{s} in range(h{s} - 1, l{s} - 1, -1):")
            else:
                lines.append(f"{ind}for j{s} in range(l{s}, h{s}):")
        else:  # walk the chain of the bound value's bucket: entries inside the window, live
            # ("before": an earlier timestamp, or with ties an earlier row; no binary search)
            before = f"cr[{p}, g{s}] < x{s}" if st.ties else f"ts[cr[{p}, g{s}]] < h{s}"
            inside = f"g{s} >= cs[{p}] and ts[cr[{p}, g{s}]] >= l{s}"
            value, ok = _valid_of(spec.layout, kinds, key[1], f"seqs[0, {key[0]}]")
            lines += [f"{ind}x{s} = seqs[0, {st.before}]",
                      f"{ind}g{s} = -1",
                      f"{ind}if {ok}:",
                      f"{ind}    g{s} = hd[{p}, s_bkt({_key_of_value(value, chains.floats[p])}, mask)]",
                      f"{ind}    while g{s} >= cs[{p}] and not ({before}):",
                      f"{ind}        g{s} = pv[{p}, g{s}]"]
            if st.policy == "last":  # newest first, back along the chain
                lines += [f"{ind}while {inside}:", f"{ind}    j{s} = g{s}", f"{ind}    g{s} = pv[{p}, j{s}]"]
            else:  # find the oldest in the window, then forward (time order)
                lines += [f"{ind}f{s} = -1",
                          f"{ind}while {inside}:",
                          f"{ind}    f{s} = g{s}",
                          f"{ind}    g{s} = pv[{p}, g{s}]",
                          f"{ind}g{s} = f{s}",
                          f"{ind}while g{s} >= 0 and {before}:",
                          f"{ind}    j{s} = g{s}",
                          f"{ind}    g{s} = nx[{p}, j{s}]"]
        ind2 = ind + "    "
        if consuming:
            lines += [f"{ind2}if {_consumed(f'cr[{p}, j{s}]')}:", f"{ind2}    continue"]
        if not st.trivial:
            lines += [f"{ind2}if not valid_{pi}_{s}(seqs, 0, cr[{p}, j{s}], env):", f"{ind2}    continue"]
        lines.append(f"{ind2}seqs[0, {p}] = cr[{p}, j{s}]")
        depth += 1
    ind = "    " * depth
    lines += [f"{ind}if n < cap:",
              f"{ind}    for p in range({n_pred}):",
              f"{ind}        out[n, p] = seqs[0, p]"]
    if spec.rule.aggregates:  # the CDP kernels' aggs_all, into the output of env[ext + 3]
        lines.append(f"{ind}    aggs_all(out, n, env, env[{spec.layout.agg_at + 2 * spec.layout.n_aggregates + 3}])")
    lines.append(f"{ind}n += 1")
    for p in consuming:
        lines += [f"{ind}if xc[seqs[0, {p}]] == 0:", f"{ind}    xc[seqs[0, {p}]] = stp"]
    # last/first: stop at the first valid candidate of each such step, whatever follows it
    for s in range(len(steps) - 1, 0, -1):
        if steps[s].policy in ("last", "first"):
            lines.append("    " * (base + s) + "break")
    return lines


def _unlink_lines(spec, kinds, chains: Chains, ind: str) -> list[str]:
    """After a terminator's last match: take the entries it consumed (at a consumed position
    whose column is chained) out of their chains (O(1) each: the links go both ways), so that
    later walks do not pass them; their stamp becomes ``-stp`` (still consumed, done). Only the
    matches written to ``out`` are seen: a call whose output was too small runs again anyway."""
    lines = []
    for p in spec.rule.consuming:
        if p not in chains.attr:
            continue  # (scanned, not chained: skipped by its stamp)
        value, ok = _valid_of(spec.layout, kinds, chains.attr[p], "rr")
        lines += [f"{ind}for q in range(n0, min(n, cap)):",
                  f"{ind}    rr = out[q, {p}]",
                  f"{ind}    if xc[rr] == stp:",
                  f"{ind}        xc[rr] = -stp",
                  f"{ind}        if {ok}:",
                  f"{ind}            jj = s_lb_row(cr, {p}, rr, cs[{p}], ce[{p}])",
                  f"{ind}            if jj < ce[{p}] and cr[{p}, jj] == rr:",
                  f"{ind}                aa = pv[{p}, jj]",
                  f"{ind}                bb = nx[{p}, jj]",
                  f"{ind}                if bb >= 0:",
                  f"{ind}                    pv[{p}, bb] = aa",
                  f"{ind}                else:",
                  f"{ind}                    hd[{p}, s_bkt({_key_of_value(value, chains.floats[p])}, mask)] = aa",
                  f"{ind}                if aa >= 0:",
                  f"{ind}                    nx[{p}, aa] = bb"]
    return lines
def _memo_clear(spec) -> list[str]:
    """Clear the aggregates' memo (see :func:`_agg_span`) at the start of a matching call."""
    n_agg = spec.layout.n_aggregates
    if not n_agg:
        return []
    return [f"    w10 = env[{spec.layout.agg_at + 2 * n_agg + 4}]", f"    for p in range({n_agg}):", "        w10[p, 0] = 0"]


def _match_source(spec, kinds, chains: Chains) -> list[str]:
    """``s_match(lo, hi, types, start, nlo, nhi, cl, cnt, hd, env, out[, xc]) -> n``: ``s_sync`` of
    rows ``[lo, hi)`` and the complete matches of every plan whose terminator is a row in
    ``[nlo, nhi)`` (inside ``[lo, hi)``), written to ``out`` while it has room; ``n`` is the
    number of matches (more than ``out`` holds: take the rows out of the columns again, see
    :meth:`StreamMatcher._rollback`, and call again with a larger ``out``).

    Each row is matched as soon as it has joined its columns, so that a chain walk starts at the
    newest entry before the terminator (a large micro-batch costs what its events' windows
    hold, not the rest of the batch)."""
    xc = ", xc" if spec.rule.consuming else ""  # (consumed stamps per table row: stream_held)
    lines = ["@numba.njit(cache=True)",
             f"def s_match(lo, hi, types, start, nlo, nhi, cl, cnt, hd, env, out{xc}):",
             *_STATE, *prologue(spec.layout, kinds),
             "    seqs = cnt[3:4]", "    nt = cnt[4]", "    n = 0", "    nt[0] = 0", "    cap = out.shape[0]",
             *_memo_clear(spec),
             "    if lo < hi and lo <= nlo and nhi <= hi:",
             *_expire_lines(spec, "        "),
             "        for r in range(lo, hi):", *_add_lines(spec, kinds, chains, "            "),
             "            if nlo <= r < nhi:", "                stp = r + 1", "                n0 = n"]
    for pi, plan in enumerate(spec.plans):
        tp = plan.steps[0].pred
        lines += [f"                j0 = ce[{tp}] - 1",
                  f"                if j0 >= cs[{tp}] and cr[{tp}, j0] == r:",
                  "                    for o1 in range(1):",  # (a loop to leave: the terminator's "skip")
                  *_term_lines(spec, kinds, chains, pi, 6, "break")]
    lines += _unlink_lines(spec, kinds, chains, "                ")
    lines += ["        return n", "    s_sync(lo, hi, types, cl, cnt, hd, env, start)  # (no terminator among them)",
              "    return n", ""]
    return lines


def _held_source(spec, kinds, chains: Chains) -> list[str]:
    """``s_held(rows, m, cl, cnt, hd, env, out[, xc]) -> n``: the complete matches of every plan
    whose terminator is one of the table rows ``rows[:m]`` (ascending, already in the columns:
    terminators held back by a trailing ``NOT``, matched once the negation's span has passed;
    see :mod:`cep_gpu.stream_held`), in that order, written to ``out`` while it has room."""
    xc = ", xc" if spec.rule.consuming else ""
    lines = ["@numba.njit(cache=True)", f"def s_held(rows, m, cl, cnt, hd, env, out{xc}):",
             *_STATE, *prologue(spec.layout, kinds),
             "    seqs = cnt[3:4]", "    nt = cnt[4]", "    n = 0", "    nt[0] = 0", "    cap = out.shape[0]",
             *_memo_clear(spec),
             "    for i in range(m):", "        r = rows[i]", "        stp = r + 1", "        n0 = n"]
    for pi, plan in enumerate(spec.plans):
        tp = plan.steps[0].pred
        lines += [f"        j0 = s_lb_row(cr, {tp}, r, cs[{tp}], ce[{tp}])",
                  f"        if j0 < ce[{tp}] and cr[{tp}, j0] == r:",
                  "            for o1 in range(1):",
                  *_term_lines(spec, kinds, chains, pi, 4, "break")]
    lines += _unlink_lines(spec, kinds, chains, "        ")
    lines += ["    return n", ""]
    return lines


def stream_source(spec: RuleSpec, kinds: dict[str, str | None], indexed: RuleSpec | None = None) -> str:
    """The whole generated source of one rule's fast path (checked); ``indexed``: as in
    :meth:`Chains.of`."""
    chains = Chains.of(spec.rule, kinds, indexed)
    rule_src = emit_source(spec, kinds, _agg_span(spec, kinds, chains) if spec.rule.aggregates else None)
    check_source(rule_src)
    own = "\n".join([_HELPERS] + _filter_source(spec, kinds) + _sync_source(spec, kinds, chains)
                    + _nsync_source(spec, kinds) + _relink_source(spec, kinds, chains)
                    + _match_source(spec, kinds, chains) + _held_source(spec, kinds, chains))
    _check_own(own)
    return rule_src + "\n" + own + "\n"


_KERNELS: dict[str, tuple] = {}
_BY_RULE: dict[tuple, tuple] = {}  # (rule, kinds) -> kernels: no source generation per engine


def compile_stream(spec: RuleSpec, kinds: dict[str, str | None], indexed: RuleSpec | None = None) -> tuple:
    """``(s_sync, s_relink, s_match, s_nsync, s_held)`` of the rule, compiled once per process (keyed by their
    source) and cached on disk by :mod:`cep_gpu.codegen.cache`; ``indexed``: as in :meth:`Chains.of`."""
    by_rule = (spec.rule, tuple(sorted(kinds.items(), key=lambda kv: kv[0])))
    hit = _BY_RULE.get(by_rule)
    if hit is not None:
        return hit
    source = stream_source(spec, kinds, indexed)
    key = hashlib.blake2b(source.encode("utf-8"), digest_size=16).hexdigest()
    hit = _KERNELS.get(key)
    if hit is None:
        from .kernels.cpu import lower_bound, upper_bound

        ns = {
            "__builtins__": {"float": float, "int": int, "range": range, "min": min, "max": max},
            "numba": numba, "np": np, "lower_bound": lower_bound, "upper_bound": upper_bound,
        }
        ns = kcache.load_kernels(source, f"<cep_gpu stream kernels {key[:12]}>", ns)
        if len(_KERNELS) >= 1024:
            _KERNELS.clear()
        hit = _KERNELS[key] = (ns["s_sync"], ns["s_relink"], ns["s_match"], ns["s_nsync"], ns["s_held"])
    if len(_BY_RULE) >= 1024:
        _BY_RULE.clear()
    _BY_RULE[by_rule] = hit
    return hit


# -- the per-rule matcher ---------------------------------------------------------------------------


@numba.njit(cache=True)
def _take_out(cl, cnt, hd, slots, row):
    """Take the entries of table rows ``>= row`` out of the columns ``slots``, newest first, so
    that each is its bucket's newest entry when it leaves its chain (``cl[3]``: its bucket, -1
    for none): the bucket's head goes back to the entry before it."""
    for i in range(slots.shape[0]):
        p = slots[i]
        a, b = cnt[0, p], cnt[1, p]
        hi = b
        while a < b:  # the first entry at or after ``row``
            m = (a + b) >> 1
            if cl[0, p, m] < row:
                a = m + 1
            else:
                b = m
        for c in range(hi - 1, a - 1, -1):
            k = cl[3, p, c]
            # (newest first, a chained entry is its bucket's head; one that is not was unlinked
            # already: a consumed entry, see cep_gpu.stream_held)
            if k >= 0 and hd[p, k] == c:
                g = cl[1, p, c]
                hd[p, k] = g
                if g >= 0:
                    cl[2, p, g] = -1
        cnt[1, p] = a
    return 0



class StreamMatcher:
    """One rule's incremental columns and compiled matcher over an engine's buffer.

    Not saved in checkpoints: a restored engine makes new ones, which build their columns from
    the buffer on first use.
    """

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        # lowered once per setup (the kernels scan; the chains mirror the index's equalities)
        self.spec = lower(rule, use_index=False)
        self._indexed = lower(rule, use_index=True)
        self.n_pred = n = rule.n_predicates
        self.n_neg = len(rule.negations)
        self.n_agg = len(rule.aggregates)
        slots = n + self.n_neg + self.n_agg  # a column per predicate, then one per negation and aggregate
        #: the columns synced row by row (``s_sync``/``s_match``): the predicates' and the aggregates'
        self._row_slots = np.array(list(range(n)) + list(range(n + self.n_neg, slots)), np.int64)
        self._neg_at = self.spec.layout.neg_at
        #: most new rows one call takes (None: any): where some equality of the rule has no chain,
        #: the batch CDP's parameter index beats scanning windows for large micro-batches
        every = {a: "int" for a in self.spec.layout.attrs}
        chains = Chains.of(rule, every, self._indexed)
        self.max_rows = FAST_PATH_MAX_ROWS if chains.unindexed_keys() else None
        self._store: EventTable | None = None  # the buffer arrays the columns point into
        self._n_cols = -1
        self._n_strings = -1
        self._n_types = -1
        self._synced = 0  # store rows below this are in the columns (or not theirs)
        self._nsynced = 0  # the same for the negations' columns
        self._ce_bound = 0  # >= the largest column end (room check without a reduction)
        self._kernels: dict[tuple, tuple] = {}
        self._fns: tuple | None = None
        self._env: tuple = ()
        # the state the kernels share, in three arrays (fewer arguments to dispatch): see s_sync
        self._cl = np.empty((4, slots, 64), np.int64)
        self._cnt = np.zeros((5, slots), np.int64)
        self._cnt[2] = -1
        self._hd = np.full((slots, 64), -1, np.int64)
        self._out = np.empty((16, n), np.int64)
        self._aout = np.empty((16, self.n_agg), np.float64)  # the aggregates of each match
        # the aggregates' memo: per aggregate a flag and the rows its value was computed for
        width = max((len(aggregate_inputs(a)) for a in rule.aggregates), default=0)
        self._memo = np.zeros((max(self.n_agg, 1), 1 + width), np.int64)
        self._memo_v = np.zeros(max(self.n_agg, 1), np.float64)
        self.rebuilds = 0
        self._serial = -1  # the buffer's merge count when the columns were last synced
        self._terms = 0  # terminators the last match took
        self._store_ok = False
        self._empty = RuleResult(rule, np.empty(0, np.int64), np.empty((0, n), np.int64), {})
        self._xargs: tuple = ()  # more kernel arguments (consumed stamps: cep_gpu.stream_held)

    def _redo(self, lo: int, hi: int) -> None:
        """Before a call over rows ``[lo, hi)`` runs again (its output array was too small)."""

    # -- the engine's side: every matcher answers these (stream_held overrides them) --------------

    def run(self, st, buf, new_ids: np.ndarray, newest: int | None, final: bool) -> Matches | None:
        """The matches of this publish for the engine's rule state ``st``: here those of the new
        terminators (:meth:`match`); ``None``: this call takes the general path."""
        return self.match(buf, new_ids)

    def hand_back(self, st, buf) -> None:
        """Give the engine back the rule state this matcher owns, before the general path uses
        ``st`` or the matcher is replaced: here nothing."""

    def owned_consumed(self, buf) -> np.ndarray | None:
        """The engine's consumed id set while this matcher owns it (for a checkpoint); ``None``:
        the engine's own set is the one."""
        return None

    def match(self, buf, new_ids: np.ndarray) -> Matches | None:
        """The matches of the rule's new terminators (rows of ``new_ids``) as rows of
        ``buf.table()``; ``None`` when this call cannot take the fast path (some new row is not
        among the rows since the columns' last sync: not the usual case): then the caller
        takes the general path (the columns are up to date either way).

        The new rows are usually the buffer's last rows; a hierarchy's composite event merged
        before an older row of its timestamp (composite ids are negative) splits them into
        runs: each run is matched by one ``s_match`` call (the rows between runs join the
        columns unmatched)."""
        store, start, end = self._columns_for(buf)
        runs = self._runs(store, start, end, new_ids)
        if runs is None:
            self._sync(self._synced, end, start)
            if self.n_neg:
                self._nsync(end, start)
            return None
        s_lo = self._synced
        if self._ce_bound + (end - s_lo) > self._cl.shape[2]:
            self._reserve(end - s_lo)
        self._ce_bound += end - s_lo
        if self.n_neg:  # the negations' columns hold every row up to the end
            self._nsync(end, start)
        env = self._call_env()
        s_match = self._fns[2]
        parts, aggs = [], []
        self._terms = 0
        for lo, hi in runs:  # (one run but after a merge among older rows of one timestamp)
            while True:
                n = s_match(s_lo, hi, store.types, start, lo, hi, self._cl, self._cnt, self._hd, env, self._out,
                            *self._xargs)
                if n <= len(self._out):
                    break
                self._out = np.empty((2 * n, self.n_pred), np.int64)  # grow and redo: never truncate
                self._aout = np.empty((2 * n, self.n_agg), np.float64)
                self._redo(s_lo, hi)
                self._rollback(s_lo)
                if self._xargs:  # (the call's consumed entries, unstamped again, back into their chains)
                    self._fns[1](self._cl, self._cnt, self._hd, self._env, *self._xargs)
                env = self._call_env()
            self._terms += int(self._cnt[4, 0])
            parts.append(self._out[:n].copy())
            if self.n_agg:
                aggs.append(self._aout[:n].copy())
            s_lo = self._synced = hi
        if s_lo < end:
            self._sync(s_lo, end, start)
        self._synced = end
        if len(parts) != 1:
            parts, aggs = [np.concatenate(parts or [self._out[:0]])], [np.concatenate(aggs or [self._aout[:0]])]
        n = len(parts[0])
        if self.n_agg:
            return Matches(parts[0], aggs[0])
        return Matches(parts[0], _NO_AGGS[:n] if n <= len(_NO_AGGS) else np.empty((n, 0)))

    def _call_env(self) -> tuple:
        """The kernels' ``env`` for a matching call: the negations' live columns as views, and
        for aggregates the matcher's state and the aggregates' output at the end."""
        env = self._env
        if self.n_neg:
            env = env[:self._neg_at] + self._neg_views() + env[self._neg_at + 2 * self.n_neg:]
        if self.n_agg:
            env = env[:-6] + (self._cl, self._cnt, self._hd, self._aout) + env[-2:]
        return env

    def _columns_for(self, buf) -> tuple:
        """The columns over the buffer's current arrays: after in-place merges the entries from
        the first renumbered row on are taken out (:meth:`_take_back`), after a new store the
        columns start empty (:meth:`_rebuild`); ``(store, start, end)``."""
        store, start, end = buf.store()
        if buf.serial != self._serial and store is self._store and not self._take_back(buf, start):
            self._store = None  # (merges no longer known: rebuild)
        self._serial = buf.serial
        if store is not self._store or len(store.columns) != self._n_cols:
            self._rebuild(store, start, end)
        elif len(store.strings) != self._n_strings or len(store.type_names) != self._n_types:
            self._set_env(store)  # a new string constant or event type may now occur
        return store, start, end

    def _runs(self, store: EventTable, start: int, end: int, new_ids: np.ndarray) -> list | None:
        """The new rows as runs ``[(lo, hi), ...]`` of rows in ``[synced, end)`` (every new row
        is there: appended or merged since the last sync, or renumbered and taken back);
        ``None`` when some is not."""
        lo, n = self._synced, len(new_ids)
        if not n:
            return []
        if new_rows_last(store.ids, new_ids, lo, end):
            return [(end - n, end)]  # the usual case
        is_new = np.isin(store.ids[lo:end], new_ids)
        if int(is_new.sum()) != n:
            return None
        edges = np.flatnonzero(np.diff(np.concatenate([[False], is_new, [False]]).astype(np.int8)))
        return [(lo + int(a), lo + int(b)) for a, b in zip(edges[::2], edges[1::2])]

    @property
    def terminators(self) -> int:
        """How many terminators the last :meth:`match` took."""
        return self._terms

    def composites(self, buf, matches: Matches) -> RuleResult:
        """The composite events of ``matches`` (rows of the store, from :meth:`match`)."""
        if not len(matches):
            return self._empty
        if self._store_ok:  # gathers by row: the store's arrays serve as well as the live view
            return composite_events(self.rule, self._store, matches)
        start = buf.store()[1]
        return composite_events(self.rule, buf.table(), Matches(matches.rows - start, matches.aggs))

    # -- columns ----------------------------------------------------------------------------------

    def _sync(self, lo: int, hi: int, start: int) -> None:
        if self._ce_bound + (hi - lo) > self._cl.shape[2]:
            self._reserve(hi - lo)
        self._fns[0](lo, hi, self._store.types, self._cl, self._cnt, self._hd, self._env, start)
        self._ce_bound += hi - lo
        self._synced = hi

    def _rollback(self, row: int) -> None:
        """Take the rows from ``row`` on out of the predicates' and aggregates' columns again
        (and out of their chains), as if they had not been synced (after an in-place merge
        renumbered them, or an output array too small): the work is the entries taken out."""
        _take_out(self._cl, self._cnt, self._hd, self._row_slots, row)

    def _take_back(self, buf, start: int) -> bool:
        """After in-place merges (a composite event put before its terminator): take the
        entries from the first renumbered row on out of the columns (and relink the chains);
        ``False`` when those merges are no longer known (then :meth:`_rebuild`)."""
        p = buf.renumbered_since(self._serial)
        if p is None:
            return False
        p = max(p, start)  # (rows before start are expired, whatever their numbers)
        if p < self._synced:
            self._rollback(p)
            self._synced = p
        if p < self._nsynced:
            cs, ce = self._cnt[0], self._cnt[1]
            for q in range(self.n_pred, self.n_pred + self.n_neg):
                ce[q] = cs[q] + int(np.searchsorted(self._cl[0, q, cs[q]:ce[q]], p))
            self._nsynced = p
        return True

    def _nsync(self, end: int, start: int) -> None:
        """The negations' columns up to row ``end`` (entries before row ``start`` expire)."""
        n_new = end - self._nsynced
        if self._ce_bound + n_new > self._cl.shape[2]:
            self._reserve(n_new)
        self._fns[3](self._nsynced, end, self._store.types, self._cl, self._cnt, self._env, start)
        self._ce_bound += n_new
        self._nsynced = end

    def _neg_views(self) -> tuple:
        """Per negation its live column: table rows and their timestamps (views)."""
        cs, ce, cl = self._cnt[0], self._cnt[1], self._cl
        out: tuple = ()
        for q in range(self.n_pred, self.n_pred + self.n_neg):
            out += (cl[0, q, cs[q]:ce[q]], cl[1, q, cs[q]:ce[q]])
        return out

    def _reserve(self, n_new: int) -> None:
        """Room for ``n_new`` more entries per column: drop the expired prefixes, grow if needed,
        and link the renumbered entries anew."""
        cs, ce = self._cnt[0], self._cnt[1]
        live = ce - cs
        need, cap = 2 * (int(live.max()) + n_new), self._cl.shape[2]
        if not need <= cap < 4 * need:  # grow, or shrink after a burst (memory follows the window)
            cap = max(64, need)
        cl = np.empty((4, len(live), cap), np.int64)
        for p in range(len(live)):
            cl[0, p, : live[p]] = self._cl[0, p, cs[p]: ce[p]]
            # a negation's or aggregate's column: its timestamps too (or links: relinked below); the
            # bucket of each entry (-1 where unchained: s_relink sets the chained ones)
            cl[1, p, : live[p]] = self._cl[1, p, cs[p]: ce[p]]
            cl[3, p, : live[p]] = self._cl[3, p, cs[p]: ce[p]]
        self._cl = cl
        cs[:] = 0
        ce[:] = live
        buckets = 1 << max(6, (cap - 1).bit_length())  # about one entry per bucket at most
        if self._hd.shape[1] != buckets:
            self._hd = np.empty((len(live), buckets), np.int64)
        self._fns[1](self._cl, self._cnt, self._hd, self._env, *self._xargs)
        self._ce_bound = int(live.max())

    def _rebuild(self, store: EventTable, start: int, end: int) -> None:
        """New buffer arrays: the columns start empty at the live rows' start (the next sync or
        :meth:`match` fills them; ``end``, the live rows' end, is for subclasses' per-row state)."""
        self.rebuilds += 1
        self._store = store
        self._set_env(store)
        self._cnt[:2] = 0
        self._hd[:] = -1
        self._ce_bound = 0
        self._synced = self._nsynced = start

    def _set_env(self, store: EventTable) -> None:
        """The kernel arguments over the store's arrays, and the kernels for their kinds."""
        layout = self.spec.layout
        kinds = {a: (store.columns[a].kind if a in store.columns else None) for a in layout.attrs}
        key = tuple(kinds.values())
        fns = self._kernels.get(key)
        first = fns is None
        if first:
            fns = self._kernels[key] = compile_stream(self.spec, kinds, self._indexed)
        # (kinds only change with a new store object, and then _rebuild relinks from scratch)
        self._fns = fns
        self._env = self._env_of(store)
        if first:
            self._preload(store)
        self._n_cols = len(store.columns)
        self._n_strings = len(store.strings)
        self._store_ok = _attributes_from_columns(self.rule, store)
        names = store.type_names
        self._n_types = len(names)
        self._cnt[2] = [names.index(t) if t in names else -1
                        for t in [p.event_type for p in self.rule.predicates] + [g.event_type for g in self.rule.negations]
                        + [a.event_type for a in self.rule.aggregates]]

    def _preload(self, store: EventTable) -> None:
        """Load every kernel's compiled code now, not on the stream: the first terminator
        (``s_match``), sync (``s_sync``, ``s_nsync``), compaction (``s_relink``), output overflow
        (``_take_out``) and unsorted output would each load it from the disk cache mid-stream,
        a latency spike of 2-200 ms (a real-time latency bound sees it: docs/shedding.md). Each
        call runs on empty copies of the state: no entry, no row."""
        cl, cnt, hd, out = self._empty_state()
        self._fns[2](0, 0, store.types, 0, 0, 0, cl, cnt, hd, self._call_env(), out, *self._xargs)
        self._fns[0](0, 0, store.types, cl, cnt, hd, self._env, 0)
        self._fns[1](cl, cnt, hd, self._env, *self._xargs)
        if self.n_neg:
            self._fns[3](0, 0, store.types, cl, cnt, self._env, 0)
        _take_out(cl, cnt, hd, self._row_slots, 0)
        sorted_by_ts_ids(np.empty(0, np.int64), np.empty((0, 1), np.int64))

    def _empty_state(self) -> tuple:
        """``(cl, cnt, hd, out)`` of the kernels' types holding no entry (for :meth:`_preload`)."""
        cnt = self._cnt.copy()
        cnt[:2] = 0
        return (np.empty((4, self._cl.shape[1], 0), np.int64), cnt, np.full_like(self._hd, -1),
                np.empty((0, self.n_pred), np.int64))

    def _env_of(self, store: EventTable) -> tuple:
        layout = self.spec.layout
        env: list = [store.ts]
        for a in layout.attrs:
            col = store.columns.get(a)
            env += [np.zeros(1, np.float64), np.zeros(1, np.bool_)] if col is None else [col.values, col.valid]
        codes = [store.strings.lookup(s) for s in layout.strings]
        env.append(np.array(codes or [-2], np.int64))
        for q in range(self.n_pred, self.n_pred + self.n_neg):  # (replaced per call: _neg_views)
            env += [self._cl[0, q, :0], self._cl[1, q, :0]]
        if self.n_agg:  # the layout's aggregate columns (unread: the fast path's aggregates walk
            # the matcher's own, in the state at the end, replaced per call: _call_env)
            env += [self._cl[0, 0, :0]] * (2 * self.n_agg) + [self._cl, self._cnt, self._hd, self._aout,
                                                               self._memo, self._memo_v]
        return tuple(env)

    def skip(self, buf) -> None:
        """Bring the columns up to the buffer's end without matching (the general path matched
        these terminators)."""
        store, start, end = self._columns_for(buf)
        self._sync(self._synced, end, start)
        if self.n_neg:
            self._nsync(end, start)


def _attributes_from_columns(rule: Rule, store: EventTable) -> bool:
    """Whether :func:`composite_events` gives the same over the store's arrays as over the
    live view: it only looks at values beyond the matched rows for an attribute whose declared
    kind differs from its column's (is the column null throughout?), so not for these rules."""
    for a in rule.attributes:
        e = a.expr
        while isinstance(e, Neg):
            e = e.arg
        if a.type is not None and isinstance(e, Attr):
            col = store.columns.get(e.name)
            if col is None or col.kind != a.type:
                return False
    return True


class AutoChoice:
    """``backend="auto"``: CPU (the fast path) or GPU (the general path) for a rule's terminators,
    decided once per rule and window-occupancy bucket (live rows, by powers of two) and cached, so
    that a decision costs a dictionary look-up per call."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self._cache: dict[tuple[int, int], str] = {}
        self.decisions = 0  # times the planner was asked (the rest were cache hits)

    def record(self, rule: Rule, terminators: int, seconds: float) -> None:
        """Count a fast-path (CPU) call in the auto backend's statistics."""
        rec = getattr(self.backend, "record", None)
        if callable(rec):
            gpu = getattr(self.backend, "gpu_available", False)
            rec(rule, "cpu", terminators, seconds, "stream fast path: CPU chosen" if gpu else "no usable GPU")

    def device(self, i: int, rule: Rule, buf, lo: int, hi: int) -> str:
        if not getattr(self.backend, "gpu_available", False):
            return "cpu"
        key = (i, len(buf).bit_length())
        dev = self._cache.get(key)
        if dev is None:
            from . import planner

            self.decisions += 1
            work = planner.estimate_work(rule, buf.table(), lo, hi)
            dev = planner.decide(self.backend.profile, work.batch_features(0, len(work.term_rows)), True)[0] \
                if len(work.term_rows) else "cpu"
            self._cache[key] = dev
        return dev


__all__ = ["FAST_PATH_MAX_ROWS", "AutoChoice", "StreamMatcher", "compile_stream", "stream_source", "unsupported"]
