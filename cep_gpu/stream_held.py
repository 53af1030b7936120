"""The streaming fast path for ``consuming`` rules and held terminators (trailing ``NOT``), issue 12.

:class:`HeldMatcher` extends the fast path's :class:`~cep_gpu.stream_match.StreamMatcher` (its
incremental columns, chains and negation columns, and its generated kernels) with the two pieces
of per-rule state the engine's general path keeps as id sets:

* **consumption** (``consuming X``): a stamp per row of the buffer's arrays (``xc``: 0 free, else
  the stamp of the terminator that consumed it). The generated matching (``s_match``/``s_held``)
  skips stamped rows as candidates and as terminators, and stamps the rows a match consumes right
  after the match, in the same compiled call, so that the next terminator of the call already
  sees them; rows stamped by the current terminator stay usable by its own later matches (all
  composite events of one terminator are produced before its consumption applies:
  docs/language.md, Consumption). After the terminator's last match the entries it consumed leave
  their parameter chains (O(1) each), so later chain walks do not pass them (relinks leave
  stamped entries out: an unstamped entry is always in its chain, a stamped one may be or not,
  and every walk checks the stamp). The consumed rows' ids (and timestamps) also go to a log, so
  that the stamps can be rebuilt when the buffer renumbers its rows (growth, compaction, an
  in-place merge) and the engine's sorted id set can be produced when it needs one
  (:meth:`Engine.checkpoint`, a call on the general path): while the matcher owns the
  consumption, the engine's ``_RuleState.consumed`` is left empty (nothing to expire there).
* **held terminators** (a trailing ``NOT``: a match may still be withdrawn by an event up to
  ``delay`` after its terminator): a queue of the pending terminators' ids and timestamps in
  ``(ts, id)`` order; the engine's ``_RuleState.pending`` is a view of its live part and
  ``held_ts`` its head's timestamp, so the engine's checks (nothing ready yet: no call), expiry
  and statistics read them as before. When a publish has moved the newest timestamp past a
  terminator's ``ts + delay`` (or on ``flush``), the ready prefix of the queue is matched by one
  compiled call (``s_held``) over the columns synced up to the end of the buffer, so the
  trailing negation's column holds its whole span; the terminators go in row order, as on the
  general path.

A rule reading composite events whose producer holds (a trailing ``NOT`` upstream) keeps the
general path (``stream_match.unsupported``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .backends import Matches
from .model import Rule
from .stream_buffer import in_order, new_rows_last
from .stream_match import StreamMatcher

_OWNED = np.empty(0, np.int64)  # the engine's consumed set while a matcher owns the consumption
_MIN_TS = -(2**63)
#: the stamp of a consumed row whose stamp was rebuilt (from the log): no terminator's, outside
#: every range a redo clears (terminators stamp ``row + 1``, and ``-(row + 1)`` once unlinked)
_FLAG = -(2**62)


class HeldMatcher(StreamMatcher):
    """A rule's fast path with consumption and/or held terminators (see the module docstring)."""

    def __init__(self, rule: Rule, delay: int, settle: bool = False) -> None:
        super().__init__(rule)
        self.delay = delay
        # terminators are held (queued until ts + delay < newest) with a trailing NOT, and also
        # with delay 0 when the rule depends on composite events of its terminator's timestamp
        # (engine._order_sensitive): then they wait for a later timestamp
        self._holds = bool(delay) or settle
        self._consuming = list(rule.consuming)
        self._xc = np.zeros(0, np.int64)  # consumed stamps per store row
        self._xargs = (self._xc,) if self._consuming else ()
        self._cid = np.empty(64, np.int64)  # the consumption log: ids and timestamps of consumed rows
        self._cts = np.empty(64, np.int64)
        self._nlog = 0
        self._owns = False  # whether the engine's consumed set was taken over
        self._pid = np.empty(64, np.int64)  # the held queue: ids and timestamps, (ts, id) order
        self._pts = np.empty(64, np.int64)
        self._head = self._tail = 0
        self._pview: np.ndarray | None = None  # the engine's ``pending`` while it is our view
        self._codes: tuple = (None, -1, frozenset())  # (store, type names, terminator type codes)

    # -- the engine's side ----------------------------------------------------------------------

    def run(self, st, buf, new_ids: np.ndarray, newest: int | None, final: bool) -> Matches | None:
        """The matches of this publish for rule state ``st``: the new terminators (no delay) or the
        held ones now ready; ``None``: this call takes the general path (after :meth:`hand_back`)."""
        if self._consuming and not self._owns:
            self._adopt_consumed(st, buf)
        if not self._holds:
            m = self.match(buf, new_ids)
            if m is not None and len(m) and self._consuming:
                self._log(m.rows, buf)
            return m
        if st.pending is not self._pview:
            self._adopt_pending(st, buf)
        if len(new_ids):
            self._enqueue(buf, new_ids)
        live = self._pts[self._head:self._tail]
        k = len(live) if final else 0 if newest is None else \
            int(live.searchsorted(max(newest - self.delay, _MIN_TS), "left"))  # ready: ts + delay < newest
        matches = self._held(buf, k) if k else Matches(np.empty((0, self.n_pred), np.int64), np.empty((0, 0)))
        self._terms = int(self._cnt[4, 0]) if k else 0  # (what ``terminators`` reports to ``auto``)
        self._head += k
        self._publish(st)
        return matches

    def _preload(self, store) -> None:
        super()._preload(store)
        if self._holds:  # s_held: the first held terminator's call, on no terminator
            cl, cnt, hd, out = self._empty_state()
            self._fns[4](np.empty(0, np.int64), 0, cl, cnt, hd, self._call_env(), out, *self._xargs)

    def hand_back(self, st, buf) -> None:
        """Give the engine its consumed set back (a call on the general path is coming, or this
        matcher is replaced); the next :meth:`run` takes it over again."""
        if self._owns:
            st.consumed = self.consumed_ids(buf)
            self._owns = False

    def owned_consumed(self, buf) -> np.ndarray | None:
        """The engine's consumed set while this matcher owns it, else ``None``."""
        return self.consumed_ids(buf) if self._owns else None

    def consumed_ids(self, buf) -> np.ndarray:
        """The ids of consumed rows still in the buffer, sorted (the engine's ``consumed``)."""
        store, start, end = buf.store()
        if store is None or end <= start:
            return np.empty(0, np.int64)
        keep = self._cts[:self._nlog] >= store.ts[start]  # (a row is live iff ts >= the first live ts)
        return np.unique(self._cid[:self._nlog][keep])

    # -- consumption ----------------------------------------------------------------------------

    def _adopt_consumed(self, st, buf) -> None:
        """Take over the engine's consumed id set (first call, after the general path, after a
        restore): the log from it, and stamps rebuilt with the columns."""
        ids = st.consumed
        store, start, end = buf.store()
        self._nlog = 0
        if len(ids) and store is not None and end > start:
            live = np.isin(store.ids[start:end], ids)
            self._log_ids(store.ids[start:end][live], store.ts[start:end][live], int(store.ts[start]))
        st.consumed = _OWNED
        self._owns = True
        self._store = None  # rebuild the columns, and with them the stamps (rare)

    def _log(self, rows: np.ndarray, buf) -> None:
        """Log the rows the matches ``rows`` (store rows) consumed."""
        store, start, _ = buf.store()
        used = rows[:, self._consuming].ravel()
        self._log_ids(store.ids[used], store.ts[used], int(store.ts[start]))

    def _log_ids(self, ids: np.ndarray, ts: np.ndarray, first: int) -> None:
        """Append to the log; when it is full, first drop the entries of rows older than ``first``
        (the buffer's first live timestamp: expired), amortised O(1) per entry."""
        n, m = self._nlog, len(ids)
        if n + m > len(self._cid):
            keep = np.flatnonzero(self._cts[:n] >= first)
            cap = max(64, 2 * (len(keep) + m))
            cid, cts = np.empty(cap, np.int64), np.empty(cap, np.int64)
            cid[:len(keep)], cts[:len(keep)] = self._cid[keep], self._cts[keep]
            self._cid, self._cts, n = cid, cts, len(keep)
        self._cid[n:n + m] = ids
        self._cts[n:n + m] = ts
        self._nlog = n + m

    def _flag(self, store, lo: int, hi: int) -> None:
        """Stamp the consumed rows among store rows ``[lo, hi)`` (from the log), clear the rest."""
        self._xc[lo:hi] = 0
        if self._nlog and hi > lo:
            self._xc[lo:hi][np.isin(store.ids[lo:hi], self._cid[:self._nlog])] = _FLAG

    def _rebuild(self, store, start: int, end: int) -> None:
        if self._consuming:
            if len(self._xc) != len(store.ts):
                self._xc = np.zeros(len(store.ts), np.int64)
                self._xargs = (self._xc,)
            else:
                self._xc[:] = 0  # (renumbered: no stamp of the old numbering may stay, even past the end)
        super()._rebuild(store, start, end)
        if self._consuming:
            self._flag(store, start, end)

    def _take_back(self, buf, start: int) -> bool:
        """Rows merged in place renumbered the rows from ``p`` on: their stamps anew (from the
        log; only when some of the renumbered rows carried one). The columns take their entries
        out by the chains' structure (an unlinked consumed entry is not its bucket's head), so
        the stamps may be cleared first."""
        p = buf.renumbered_since(self._serial)
        had = False
        if p is not None and self._consuming:
            p = max(p, start)
            had = bool(self._xc[p:max(p, self._synced)].any())
            self._xc[p:] = 0
        got = super()._take_back(buf, start)
        if got and had:
            self._flag(self._store, p, buf.store()[2])
        return got

    def _redo(self, lo: int, hi: int) -> None:
        """The output was too small: forget the stamps of this call's terminators (rows ``[lo, hi)``)."""
        if self._consuming:
            _clear(self._xc[:hi], lo, hi)

    # -- held terminators -----------------------------------------------------------------------

    def _publish(self, st) -> None:
        """The engine's view of the queue: ``pending`` and ``held_ts``."""
        st.pending = self._pview = self._pid[self._head:self._tail]
        st.held_ts = int(self._pts[self._head]) if self._tail > self._head else None

    def _adopt_pending(self, st, buf) -> None:
        """Take over the engine's pending ids (first call, after the general path, a restore):
        their rows' timestamps from the buffer, in row order."""
        self._head = self._tail = 0
        if len(st.pending):
            store, start, end = buf.store()
            rows = start + np.flatnonzero(np.isin(store.ids[start:end], st.pending))
            self._push(store.ids[rows], store.ts[rows])
        self._publish(st)

    def _enqueue(self, buf, new_ids: np.ndarray) -> None:
        """Queue the new rows that are terminators of the rule."""
        store, start, end = buf.store()
        codes = self._term_codes(store)
        n = len(new_ids)
        if new_rows_last(store.ids, new_ids, start, end):
            if n == 1:  # one event per publish: no array pass
                if int(store.types[end - 1]) in codes:
                    self._push(store.ids[end - 1:end], store.ts[end - 1:end])
                return
            rows = end - n + np.flatnonzero(np.isin(store.types[end - n:end], list(codes)))
        else:  # (the new rows are not the last ones: look them up)
            live = store.ids[start:end]
            rows = start + np.flatnonzero(np.isin(live, new_ids) & np.isin(store.types[start:end], list(codes)))
        if len(rows):
            self._push(store.ids[rows], store.ts[rows])

    def _term_codes(self, store) -> frozenset:
        cached = self._codes
        if cached[0] is store and cached[1] == len(store.type_names):
            return cached[2]
        names = store.type_names
        terms = {plan.predicates[plan.terminator].event_type for plan in self.rule.plans}
        codes = frozenset(names.index(t) for t in terms if t in names)
        self._codes = (store, len(names), codes)
        return codes

    def _push(self, ids: np.ndarray, ts: np.ndarray) -> None:
        h, t, m = self._head, self._tail, len(ids)
        if t + m > len(self._pid):  # move the live part to the front; grow if needed
            live = t - h
            cap = max(64, 2 * (live + m)) if 2 * (live + m) > len(self._pid) else len(self._pid)
            pid, pts = np.empty(cap, np.int64), np.empty(cap, np.int64)
            pid[:live], pts[:live] = self._pid[h:t], self._pts[h:t]
            self._pid, self._pts, h, t = pid, pts, 0, live
        self._pid[t:t + m] = ids
        self._pts[t:t + m] = ts
        sort = t > h and (ts[0] < self._pts[t - 1] or (ts[0] == self._pts[t - 1] and ids[0] < self._pid[t - 1]))
        self._head, self._tail = h, t + m
        if sort or (m > 1 and not in_order(ts, ids)):  # (not for primitive terminators: they come in order)
            order = np.lexsort((self._pid[h:t + m], self._pts[h:t + m]))
            self._pid[h:t + m] = self._pid[h:t + m][order]
            self._pts[h:t + m] = self._pts[h:t + m][order]

    def _rows(self, store, start: int, end: int, k: int) -> np.ndarray:
        """The store rows of the first ``k`` queued terminators (by timestamp, then id)."""
        pid, pts = self._pid[self._head:self._head + k], self._pts[self._head:self._head + k]
        rows = start + store.ts[start:end].searchsorted(pts, "left")
        ok = store.ids[np.minimum(rows, end - 1)] == pid
        for j in np.flatnonzero(~ok).tolist():  # (ties at one timestamp: rows in (ts, id) order)
            lo = int(rows[j])
            hi = lo + int(store.ts[lo:end].searchsorted(pts[j], "right"))
            r = lo + int(store.ids[lo:hi].searchsorted(pid[j]))
            if r >= hi or store.ids[r] != pid[j]:
                raise RuntimeError(f"held terminator id {int(pid[j])} is not in the buffer")  # (a bug: never expected)
            rows[j] = r
        return rows

    def _held(self, buf, k: int) -> Matches:
        """Match the first ``k`` queued terminators: one compiled call over the columns synced to
        the end of the buffer (the trailing negation's rows after each terminator included)."""
        self.skip(buf)  # columns, chains and negation columns up to the buffer's end
        store, start, end = buf.store()
        rows = self._rows(store, start, end, k)
        env = self._call_env()
        s_held = self._fns[4]
        while True:
            n = s_held(rows, k, self._cl, self._cnt, self._hd, env, self._out, *self._xargs)
            if n <= len(self._out):
                break
            self._out = np.empty((2 * n, self.n_pred), np.int64)  # grow and redo: never truncate
            if self._consuming:  # this call's stamps go, and its unlinked entries back into the chains
                self._redo(int(rows[0]), int(rows[-1]) + 1)
                self._fns[1](self._cl, self._cnt, self._hd, self._env, *self._xargs)
        got = self._out[:n].copy()
        if n and self._consuming:
            self._log(got, buf)
        return Matches(got, np.empty((n, 0)))


def _clear(x: np.ndarray, lo: int, hi: int) -> None:
    """Clear the stamps of the terminators at rows ``[lo, hi)`` (``r + 1``, or ``-(r + 1)`` once
    their entries were unlinked)."""
    a = np.abs(x)
    x[(a > lo) & (a <= hi) & (x != _FLAG)] = 0


def settled_states(states: dict, fast: dict, buf) -> dict:
    """The engine's rule states with the consumed sets that fast-path matchers own filled in (for
    a checkpoint; the engine's own states are left as they are)."""
    out = dict(states)
    for i, (_, m) in fast.items():
        consumed = m.owned_consumed(buf)
        if consumed is not None:
            out[i] = replace(states[i], consumed=consumed)
    return out


def matcher_for(rule: Rule, delay: int, settle: bool = False) -> StreamMatcher:
    """The fast path's matcher for ``rule``: with consumption or held terminators (``delay``, or
    ``settle``: held until a later timestamp) a :class:`HeldMatcher`."""
    return HeldMatcher(rule, delay, settle) if rule.consuming or delay or settle else StreamMatcher(rule)


__all__ = ["HeldMatcher", "matcher_for", "settled_states"]
