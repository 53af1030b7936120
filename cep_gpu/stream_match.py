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
  compacts, or takes a row in the middle) the columns are rebuilt from the live rows (O(window),
  rare: amortised O(1) per event);
* ``smatch``, generated per rule: for each new terminator, nested loops over the plan's binding
  steps, each a binary search for the window's edges in the step's column and a scan of it with the
  rule's generated ``valid`` check (:mod:`cep_gpu.codegen.numba_src`, the same functions as the
  CDP kernels, lowered without the parameter index: the equality is checked per candidate);
  ``each`` visits every valid candidate, ``last`` the latest valid one, ``first`` the earliest. Complete
  matches go to a preallocated output array; when it is too small the call returns the number it
  needed, the array grows and the call is repeated (nothing is truncated).

The generated source (the rule's checks plus these two functions) goes through the on-disk kernel
cache (:mod:`cep_gpu.codegen.cache`), so a second process loads the machine code.

Rules the fast path does not cover take the general path, with identical results (tested):
``consuming``, aggregates, negations (their spans need columns of their own), a trailing ``NOT`` here
or upstream (held terminators), rules that read composite events (hierarchies), unbounded windows,
and every backend but ``cpu`` and ``auto`` (``auto`` takes the fast path when its planner picks the
CPU: one decision per rule and window-occupancy bucket, cached, see :class:`AutoChoice`).
"""

from __future__ import annotations

import ast
import hashlib
import re

import numba
import numpy as np

from .backends import Matches
from .codegen import cache as kcache
from .codegen import lower
from .codegen.numba_src import Body, check_source, emit_source, literal, prologue
from .detect import RuleResult, composite_events
from .events import EventTable
from .model import Attr, Neg, Rule

#: Publishes that bring more new rows than this take the general path: the fast path scans each
#: terminator's window (O(window) per terminator), which the CDP backend's parameter index beats
#: once thousands of terminators come at once (measured: docs/performance.md, issue 12).
FAST_PATH_MAX_ROWS = 4096
_MIN_TS = -(2**63)
_NO_AGGS = np.empty((4096, 0), np.float64)  # Matches.aggs of rules without aggregates (views)


def unsupported(rule: Rule, delay: int, composite_types: frozenset[str]) -> str | None:
    """Why ``rule`` takes the general path (None: the fast path covers it)."""
    if rule.consuming:
        return "consuming"
    if rule.kleene_positions:
        return "Kleene closure"
    if rule.aggregates:
        return "aggregates"
    if rule.negations:
        return "negations"
    if delay:
        return "held terminators (trailing NOT here or upstream)"
    if rule.input_types & composite_types:
        return "reads composite events (hierarchy)"
    for plan in rule.plans:
        for k, p in enumerate(plan.predicates):
            if k != plan.terminator and p.window is None:
                return "unbounded window"
    return None


# -- code generation --------------------------------------------------------------------------------

_HELPERS = '''
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
'''

_OWN_FUNC = re.compile(r"^(?:s_lb_ts|s_lb_row|s_filt\d+|s_sync|s_match)$")
_OWN_LOCAL = re.compile(r"^(?:[a-z]\d+|j\d+|l\d+|h\d+|w\d+|cr|cs|ce|nt|codes|types|start|lo|hi|x|mid|p|n|cap|out|seqs|nlo|nhi|ts|sc|r|t|env|e0|e1)$")


def _check_own(source: str) -> None:
    """The templates' share of the source uses only our own names (the rule's share is checked by
    :func:`cep_gpu.codegen.numba_src.check_source`)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            if not (node.id in {"numba", "np", "range", "float", "min", "max", "True", "False"} or _OWN_LOCAL.match(node.id)
                    or _OWN_FUNC.match(node.id) or re.match(r"^valid_\d+_\d+$", node.id)):
                raise ValueError(f"stream kernel source uses an unexpected name {node.id!r}")
        elif isinstance(node, ast.Attribute) and node.attr not in {"njit", "nan", "isnan", "inf", "shape"}:
            raise ValueError(f"stream kernel source uses an unexpected attribute {node.attr!r}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            if node.value != "always":
                raise ValueError("stream kernel source contains a string literal")
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.Lambda, ast.Global, ast.Nonlocal)):
            raise ValueError(f"stream kernel source contains {type(node).__name__}")


def _filter_source(spec, kinds) -> list[str]:
    """``s_filt<p>(r, env)``: predicate ``p``'s static filters for row ``r``."""
    rule = spec.rule
    out = []
    for p in range(rule.n_predicates):
        if not spec.filters[p]:
            continue
        b = Body(spec.layout, kinds, lambda q: "r")
        b.agg_inputs = []
        for c in spec.filters[p]:
            b.check(rule.conditions[c], "return False")
        out.append(f"@numba.njit(cache=True)\ndef s_filt{p}(r, env):")
        out += prologue(spec.layout, kinds) + b.lines + ["    return True", ""]
    return out


def _sync_source(spec) -> list[str]:
    """``s_sync(lo, hi, types, codes, cr, cs, ce, env, start)``: expire entries before ``start``,
    then append rows ``[lo, hi)`` to the columns of the predicates they pass."""
    n_pred = spec.rule.n_predicates
    lines = ["@numba.njit(cache=True)", "def s_sync(lo, hi, types, codes, cr, cs, ce, env, start):",
             f"    for p in range({n_pred}):",
             "        while cs[p] < ce[p] and cr[p, cs[p]] < start:",
             "            cs[p] += 1",
             "    for r in range(lo, hi):",
             "        t = types[r]"]
    for p in range(n_pred):
        cond = f"t == codes[{p}]" + (f" and s_filt{p}(r, env)" if spec.filters[p] else "")
        lines += [f"        if {cond}:", f"            cr[{p}, ce[{p}]] = r", f"            ce[{p}] += 1"]
    lines += ["    return 0", ""]
    return lines


def _match_source(spec) -> list[str]:
    """``s_match(lo, hi, types, codes, start, nlo, nhi, cr, cs, ce, env, out, seqs, nt) -> n``:
    ``s_sync`` of rows ``[lo, hi)`` (one compiled call for both), then the complete matches of
    every plan whose terminator is a row in ``[nlo, nhi)``, written to ``out`` while it has room;
    ``n`` is the number of matches (more than ``out`` holds: call again with a larger ``out``,
    and an empty sync range)."""
    n_pred = spec.rule.n_predicates
    lines = ["@numba.njit(cache=True)",
             "def s_match(lo, hi, types, codes, start, nlo, nhi, cr, cs, ce, env, out, seqs, nt):",
             "    s_sync(lo, hi, types, codes, cr, cs, ce, env, start)",
             "    ts = env[0]", "    n = 0", "    nt[0] = 0", "    cap = out.shape[0]"]
    for pi, plan in enumerate(spec.plans):
        steps = plan.steps
        tp = steps[0].pred
        lines += [f"    e0 = s_lb_row(cr, {tp}, nlo, cs[{tp}], ce[{tp}])",
                  f"    e1 = s_lb_row(cr, {tp}, nhi, e0, ce[{tp}])",
                  "    for j0 in range(e0, e1):",
                  "        nt[0] += 1",
                  f"        for p in range({n_pred}):",
                  "            seqs[0, p] = -1",
                  f"        seqs[0, {tp}] = cr[{tp}, j0]"]
        depth = 2
        if not steps[0].trivial:
            lines += ["    " * depth + f"if not valid_{pi}_0(seqs, 0, cr[{tp}, j0], env):",
                      "    " * (depth + 1) + "continue"]
        for s in range(1, len(steps)):
            st = steps[s]
            ind = "    " * depth
            p = st.pred
            lines.append(f"{ind}h{s} = ts[seqs[0, {st.before}]]")
            w = int(st.window)
            lines.append(f"{ind}w{s} = ts[seqs[0, {st.anchor}]]")
            lines.append(f"{ind}l{s} = w{s} - {literal(w)} if w{s} >= {literal(_MIN_TS + w)} else {literal(_MIN_TS)}")
            lines.append(f"{ind}l{s} = s_lb_ts(cr, {p}, ts, l{s}, cs[{p}], ce[{p}])")
            lines.append(f"{ind}h{s} = s_lb_ts(cr, {p}, ts, h{s}, l{s}, ce[{p}])")
            if st.ties:  # "before" is row order: also earlier rows at ts(before)
                lines.append(f"{ind}h{s} = s_lb_row(cr, {p}, seqs[0, {st.before}], h{s}, ce[{p}])")
            if st.policy == "last":
                lines.append(f"{ind}for j{s} in range(h{s} - 1, l{s} - 1, -1):")
            else:
                lines.append(f"{ind}for j{s} in range(l{s}, h{s}):")
            ind2 = ind + "    "
            if not st.trivial:
                lines += [f"{ind2}if not valid_{pi}_{s}(seqs, 0, cr[{p}, j{s}], env):", f"{ind2}    continue"]
            lines.append(f"{ind2}seqs[0, {p}] = cr[{p}, j{s}]")
            depth += 1
        ind = "    " * depth
        lines += [f"{ind}if n < cap:",
                  f"{ind}    for p in range({n_pred}):",
                  f"{ind}        out[n, p] = seqs[0, p]",
                  f"{ind}n += 1"]
        # last/first: stop at the first valid candidate of each such step, whatever follows it
        for s in range(len(steps) - 1, 0, -1):
            if steps[s].policy in ("last", "first"):
                lines.append("    " * (s + 2) + "break")
    lines += ["    return n", ""]
    return lines


def stream_source(spec, kinds) -> str:
    """The whole generated source of one rule's fast path (checked)."""
    rule_src = emit_source(spec, kinds)
    check_source(rule_src)
    own = "\n".join([_HELPERS] + _filter_source(spec, kinds) + _sync_source(spec) + _match_source(spec))
    _check_own(own)
    return rule_src + "\n" + own + "\n"


_KERNELS: dict[str, tuple] = {}


def compile_stream(spec, kinds: dict[str, str | None]) -> tuple:
    """``(s_sync, s_match)`` of the rule, compiled once per process (keyed by their source) and
    cached on disk by :mod:`cep_gpu.codegen.cache`."""
    source = stream_source(spec, kinds)
    key = hashlib.blake2b(source.encode("utf-8"), digest_size=16).hexdigest()
    hit = _KERNELS.get(key)
    if hit is None:
        from .kernels.cpu import lower_bound, upper_bound

        ns = {
            "__builtins__": {"float": float, "range": range, "min": min, "max": max},
            "numba": numba, "np": np, "lower_bound": lower_bound, "upper_bound": upper_bound,
        }
        ns = kcache.load_kernels(source, f"<cep_gpu stream kernels {key[:12]}>", ns)
        if len(_KERNELS) >= 1024:
            _KERNELS.clear()
        hit = _KERNELS[key] = (ns["s_sync"], ns["s_match"])
    return hit


# -- the per-rule matcher ---------------------------------------------------------------------------


class StreamMatcher:
    """One rule's incremental columns and compiled matcher over an engine's buffer.

    Not saved in checkpoints: a restored engine makes new ones, which build their columns from
    the buffer on first use.
    """

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.spec = lower(rule, use_index=False)
        self.n_pred = rule.n_predicates
        self._store: EventTable | None = None  # the buffer arrays the columns point into
        self._n_cols = -1
        self._n_strings = -1
        self._n_types = -1
        self._synced = 0  # store rows below this are in the columns (or not theirs)
        self._ce_bound = 0  # >= the largest column end (room check without a reduction)
        self._kernels: dict[tuple, tuple] = {}
        self._fns: tuple | None = None
        self._env: tuple = ()
        self._codes = np.full(self.n_pred, -1, np.int32)
        self._cr = np.empty((self.n_pred, 64), np.int64)
        self._cs = np.zeros(self.n_pred, np.int64)
        self._ce = np.zeros(self.n_pred, np.int64)
        self._out = np.empty((16, self.n_pred), np.int64)
        self._seqs = np.empty((1, self.n_pred), np.int64)
        self._nt = np.zeros(1, np.int64)  # terminators of the last call
        self.rebuilds = 0
        self._store_ok = False
        self._empty = RuleResult(rule, np.empty(0, np.int64), np.empty((0, self.n_pred), np.int64), {})

    def match(self, buf, new_ids: np.ndarray) -> Matches | None:
        """The matches of the rule's new terminators (rows of ``new_ids``) as rows of
        ``buf.table()``; ``None`` when this call cannot take the fast path (the new rows are
        not one run at the end of the buffer after a rebuild): then the caller takes the
        general path (the columns are up to date either way)."""
        store, start, end = buf.store()
        if store is not self._store or len(store.columns) != self._n_cols:
            lo, hi = self._rebuild(buf, store, start, end, new_ids)
            s_lo = s_hi = end  # synced by the rebuild
        else:
            if len(store.strings) != self._n_strings or len(store.type_names) != self._n_types:
                self._set_env(store)  # a new string constant or event type may now occur
            lo, hi = self._synced, end
            s_lo, s_hi = lo, end  # synced by s_match itself
            if self._ce_bound + (end - lo) > self._cr.shape[1]:
                self._reserve(end - lo)
            self._ce_bound += end - lo
            self._synced = end
        if lo is None:
            return None
        s_match = self._fns[1]
        while True:
            n = s_match(s_lo, s_hi, store.types, self._codes, start, lo, hi, self._cr, self._cs, self._ce,
                        self._env, self._out, self._seqs, self._nt)
            if n <= len(self._out):
                break
            self._out = np.empty((2 * n, self.n_pred), np.int64)  # grow and redo: never truncate
            s_lo = s_hi  # (synced already)
        return Matches(self._out[:n].copy(), _NO_AGGS[:n] if n <= len(_NO_AGGS) else np.empty((n, 0)))

    @property
    def terminators(self) -> int:
        """How many terminators the last :meth:`match` took."""
        return int(self._nt[0])

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
        if self._ce_bound + (hi - lo) > self._cr.shape[1]:
            self._reserve(hi - lo)
        self._fns[0](lo, hi, self._store.types, self._codes, self._cr, self._cs, self._ce, self._env, start)
        self._ce_bound += hi - lo
        self._synced = hi

    def _reserve(self, n_new: int) -> None:
        """Room for ``n_new`` more entries per column: drop the expired prefixes, grow if needed."""
        live = self._ce - self._cs
        cap = max(self._cr.shape[1], 2 * (int(live.max()) + n_new))
        cr = np.empty((self.n_pred, cap), np.int64)
        for p in range(self.n_pred):
            cr[p, : live[p]] = self._cr[p, self._cs[p]: self._ce[p]]
        self._cr, self._cs, self._ce = cr, np.zeros(self.n_pred, np.int64), live.astype(np.int64)
        self._ce_bound = int(live.max())

    def _rebuild(self, buf, store: EventTable, start: int, end: int, new_ids: np.ndarray):
        """New buffer arrays: columns from the live rows; the new terminators' row run."""
        self.rebuilds += 1
        self._store = store
        self._set_env(store)
        self._cs[:] = 0
        self._ce[:] = 0
        self._ce_bound = 0
        self._synced = start
        self._sync(start, end, start)
        if not len(new_ids):
            return end, end
        is_new = np.flatnonzero(np.isin(store.ids[start:end], new_ids))
        if not len(is_new):
            return end, end
        lo, hi = start + int(is_new[0]), start + int(is_new[-1]) + 1
        if hi - lo != len(is_new):
            return None, None  # new rows in the middle of the window: the general path
        return lo, hi

    def _set_env(self, store: EventTable) -> None:
        """The kernel arguments over the store's arrays, and the kernels for their kinds."""
        layout = self.spec.layout
        kinds = {a: (store.columns[a].kind if a in store.columns else None) for a in layout.attrs}
        key = tuple(kinds.values())
        fns = self._kernels.get(key)
        if fns is None:
            fns = self._kernels[key] = compile_stream(self.spec, kinds)
        self._fns = fns
        env: list = [store.ts]
        for a in layout.attrs:
            col = store.columns.get(a)
            env += [np.zeros(1, np.float64), np.zeros(1, np.bool_)] if col is None else [col.values, col.valid]
        codes = [store.strings.lookup(s) for s in layout.strings]
        env.append(np.array(codes or [-2], np.int64))
        self._env = tuple(env)
        self._n_cols = len(store.columns)
        self._n_strings = len(store.strings)
        self._store_ok = _attributes_from_columns(self.rule, store)
        names = store.type_names
        self._n_types = len(names)
        self._codes = np.array(
            [names.index(p.event_type) if p.event_type in names else -1 for p in self.rule.predicates], np.int32
        )

    def skip(self, buf) -> None:
        """Bring the columns up to the buffer's end without matching (the general path matched
        these terminators)."""
        store, start, end = buf.store()
        if store is not self._store or len(store.columns) != self._n_cols:
            self._rebuild(buf, store, start, end, np.empty(0, np.int64))
        else:
            if len(store.strings) != self._n_strings or len(store.type_names) != self._n_types:
                self._set_env(store)
            self._sync(self._synced, end, start)


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
