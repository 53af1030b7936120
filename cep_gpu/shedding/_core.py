"""The shedder's per-event machinery, compiled with Numba (no Python per arriving event).

State lives in NumPy arrays (:class:`Core`) so that the same functions serve the virtual-time
loop, the real-time loop and the Spark micro-batch hook. Events are numbered by arrival order
(which is also timestamp order: the engine consumes its input in timestamp order).

Per event ``i``: ``typ`` (type code), ``bkt`` (utility bucket, paper Section 4.4), ``est`` (the
estimated processing time charged to the queue when it arrived), ``status`` (0 not arrived,
1 queued, 2 processed, 3 dropped), ``lo`` (first event index inside its lookback window),
``relevant`` (its type is a column of some rule, so terminators read it), ``evicted`` (the time
the state-side baseline evicted it from the columns; inf = never).

Per type ``T``: the estimated and charged cost ``z_est``/``z_act`` (Z(T) without the window part),
``is_term`` (a terminator type: pays the combination work), the local constraint ``nt`` (N_T),
the auxiliary-structure threshold ``gamma`` (γ_T), the buffer ``size``, ``active`` (buckets built)
and ``minb`` (lowest bucket that may be non-empty).

Buckets are doubly linked lists per (type, bucket): ``head``/``cnt`` indexed ``T * nb + b``,
``nxt``/``prv`` per event.
"""

from __future__ import annotations

import numba
import numpy as np

NONE, RANDOM, DARLING, STATE = 0, 1, 2, 3
POLICY_CODES = {"none": NONE, "random": RANDOM, "darling": DARLING, "state": STATE}

# float scalars F[...]; F_EPS holds the guard's share of L_max (1 - 1e-9 in virtual time, beta in
# real time); F_SHED the shedder's own work per overloaded arrival (real time: it runs on the
# engine's core, so it delays the queued events; 0 in virtual time)
F_TFREE, F_WQ, F_L, F_BETA, F_KEST, F_KACT, F_EPS, F_SHED = range(8)
# int scalars IS[...]
(I_PTR, I_ARRIVED, I_POLICY, I_NB, I_RNG, I_OVERLOADED, I_GUARD, I_EVICTED, I_RING_LO, I_RING_HI,
 I_DEADLINE) = range(11)


@numba.njit(cache=True)
def _rand(IS, n):
    """A uniform integer in [0, n) from the engine's own xorshift64* state (deterministic)."""
    x = np.uint64(IS[I_RNG])
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    IS[I_RNG] = np.int64(x)
    r = x * np.uint64(2685821657736338717)
    return np.int64(r >> np.uint64(33)) % n


@numba.njit(cache=True)
def _fen_add(fen, i, d):
    j = i + 1
    while j < fen.shape[0]:
        fen[j] += d
        j += j & (-j)


@numba.njit(cache=True)
def _fen_prefix(fen, i):
    """Sum of the values of events [0, i) (flags, or the queued terminators' κ)."""
    s = fen[0]  # 0 of the tree's own dtype (slot 0 is never used)
    j = i
    while j > 0:
        s += fen[j]
        j -= j & (-j)
    return s


@numba.njit(cache=True)
def _insert(i, typ, bkt, nxt, prv, head, cnt, minb, nb):
    t = typ[i]
    k = t * nb + bkt[i]
    h = head[k]
    nxt[i] = h
    prv[i] = -1
    if h >= 0:
        prv[h] = i
    head[k] = i
    cnt[k] += 1
    if bkt[i] < minb[t]:
        minb[t] = bkt[i]


@numba.njit(cache=True)
def _remove(i, typ, bkt, nxt, prv, head, cnt, nb):
    k = typ[i] * nb + bkt[i]
    if prv[i] >= 0:
        nxt[prv[i]] = nxt[i]
    else:
        head[k] = nxt[i]
    if nxt[i] >= 0:
        prv[nxt[i]] = prv[i]
    nxt[i] = -1
    prv[i] = -1
    cnt[k] -= 1


@numba.njit(cache=True)
def _activate(t, IS, typ, bkt, status, nxt, prv, head, cnt, minb, active):
    """Build the utility buckets of buffer ``t`` from its queued events (paper Section 4.4)."""
    if active[t]:
        return
    active[t] = True
    nb = IS[I_NB]
    for i in range(IS[I_PTR], IS[I_ARRIVED]):
        if status[i] == 1 and typ[i] == t:
            _insert(i, typ, bkt, nxt, prv, head, cnt, minb, nb)


@numba.njit(cache=True)
def _lowest(t, IS, cnt, minb):
    """The lowest non-empty bucket of buffer ``t`` (-1: empty)."""
    nb = IS[I_NB]
    b = minb[t]
    while b < nb and cnt[t * nb + b] == 0:
        b += 1
    minb[t] = b
    return b if b < nb else -1


@numba.njit(cache=True)
def _pick(t, b, IS, head, nxt, cnt):
    """A random event of bucket ``b`` of buffer ``t`` (the paper drops a random one there)."""
    nb = IS[I_NB]
    k = t * nb + b
    j = _rand(IS, cnt[k])
    i = head[k]
    for _ in range(j):
        i = nxt[i]
    return i


@numba.njit(cache=True)
def _shrink(v, F, IS, lo, tq):
    """Event ``v`` left the columns (dropped or evicted): every queued terminator whose window
    holds it reads one event less, so the queued work shrinks by their κ (docs/shedding.md,
    resolution 24). ``lo`` is nondecreasing (one lookback for all events), so they are the
    queued terminators in ``(v, J)``, J the first arrived event whose window starts after v."""
    a = v + 1
    b = IS[I_ARRIVED]
    while a < b:
        m = (a + b) // 2
        if lo[m] <= v:
            a = m + 1
        else:
            b = m
    if a > v + 1:
        F[F_WQ] -= _fen_prefix(tq[0], a) - _fen_prefix(tq[0], v + 1)


@numba.njit(cache=True)
def _unqueue(i, F, est, lo, fen, tq):
    """Take queued event ``i``'s estimate off the queued work: for a terminator, its estimate on
    arrival less κ for each event of its window that has left the columns since (those were
    taken off the queued work as they left, by :func:`_shrink`)."""
    k = tq[1, i]
    if k > 0.0:
        w = _fen_prefix(fen, i) - _fen_prefix(fen, lo[i])
        F[F_WQ] -= est[i] - k * (tq[2, i] - w)
        _fen_add(tq[0], i, -k)
        tq[1, i] = 0.0
    else:
        F[F_WQ] -= est[i]
    if F[F_WQ] < 0.0:  # rounding of the float sums only
        F[F_WQ] = 0.0


@numba.njit(cache=True)
def _drop(i, F, IS, typ, bkt, est, status, lo, relevant, nxt, prv, head, cnt, size, active, fen, tq, dropped):
    t = typ[i]
    status[i] = 3
    _unqueue(i, F, est, lo, fen, tq)
    size[t] -= 1
    if active[t]:
        _remove(i, typ, bkt, nxt, prv, head, cnt, IS[I_NB])
        if size[t] == 0:
            active[t] = False
    if relevant[i]:
        _fen_add(fen, i, -1)
        _shrink(i, F, IS, lo, tq)
    dropped[t] += 1


@numba.njit(cache=True)
def arrive(i, now, F, IS, typ, bkt, est, status, lo, relevant, evicted, ring,
           z_est, is_term, nt, gamma, size, active, minb, nxt, prv, head, cnt, fen, tq, dropped):
    """Event ``i`` arrives at time ``now``: the shedding decision (paper Section 4, Figure 3).

    Returns 1 if ``i`` was queued, 0 if it was dropped.
    """
    t = typ[i]
    IS[I_ARRIVED] = i + 1
    status[i] = 0  # not in its buffer until it is queued (bucket builds below must not see it)
    w = 0
    if is_term[t]:
        w = _fen_prefix(fen, i) - _fen_prefix(fen, lo[i])
    est[i] = z_est[t] + F[F_KEST] * w
    policy = IS[I_POLICY]
    nb = IS[I_NB]
    busy = F[F_TFREE] - now
    if busy < 0.0:
        busy = 0.0
    if policy != NONE and busy + F[F_WQ] + est[i] > F[F_BETA] * F[F_L]:
        # the global constraint is violated (Section 4.2.1, with beta as in 4.2.2)
        IS[I_OVERLOADED] += 1
        if F[F_SHED] > 0.0:
            # deciding (and computing the utility) takes the core this long: what is queued waits
            F[F_TFREE] = max(F[F_TFREE], now) + F[F_SHED]
            busy = F[F_TFREE] - now
        if policy == STATE:
            _evict(i, now, F, IS, typ, status, lo, relevant, evicted, ring, is_term, fen, tq,
                   busy + F[F_WQ] + est[i] - F[F_BETA] * F[F_L])
        elif size[t] + 1 > nt[t]:
            # the local constraint of T's buffer is violated: drop its lowest-utility event,
            # the arriving one included (Figure 3 (d))
            _activate(t, IS, typ, bkt, status, nxt, prv, head, cnt, minb, active)
            b = _lowest(t, IS, cnt, minb)
            if b < 0 or bkt[i] < b or (bkt[i] == b and _rand(IS, cnt[t * nb + b] + 1) == 0):
                status[i] = 3
                dropped[t] += 1
                return 0
            v = _pick(t, b, IS, head, nxt, cnt)
            _drop(v, F, IS, typ, bkt, est, status, lo, relevant, nxt, prv, head, cnt, size, active, fen, tq, dropped)
    # queue it
    if is_term[t] and w > 0:  # a drop above may have been inside its window
        w = _fen_prefix(fen, i) - _fen_prefix(fen, lo[i])
        est[i] = z_est[t] + F[F_KEST] * w
    status[i] = 1
    size[t] += 1
    F[F_WQ] += est[i]
    if is_term[t] and F[F_KEST] > 0.0:  # its window may shrink while it waits (_shrink)
        tq[1, i] = F[F_KEST]
        tq[2, i] = w
        _fen_add(tq[0], i, F[F_KEST])
    if relevant[i]:
        _fen_add(fen, i, 1)
    if active[t]:
        _insert(i, typ, bkt, nxt, prv, head, cnt, minb, nb)
    elif size[t] >= gamma[t]:
        _activate(t, IS, typ, bkt, status, nxt, prv, head, cnt, minb, active)
    if policy == DARLING or policy == RANDOM:
        # the hard guard: the estimated latency of i (the work queued ahead of it plus its own)
        # must stay within L_max; drop lowest-utility events until it does (docs/shedding.md)
        limit = F[F_L] * F[F_EPS]
        while busy + F[F_WQ] > limit and status[i] == 1:
            IS[I_GUARD] += 1
            # which buffer: (darling) one holding worthless events (utility exactly 0, array 0)
            # first; else the buffer fullest against its local constraint, size / N_T (N_T = 0:
            # a type no rule reads, first). Utilities of different types are not compared:
            # Eq. 11 ranks the events of one buffer (Section 4.4), and a product over a middle
            # chain position's conditions is small for every value (docs/shedding.md, res. 18)
            best_t = -1
            best_zero = False
            best_fill = -1.0
            tied = 0  # events in the tied buffers seen so far (the victim is uniform over them)
            for u in range(size.shape[0]):
                if size[u] <= 0:
                    continue
                _activate(u, IS, typ, bkt, status, nxt, prv, head, cnt, minb, active)
                zero = policy == DARLING and _lowest(u, IS, cnt, minb) == 0
                fill = np.inf if nt[u] <= 0.0 else size[u] / nt[u]
                c = cnt[u * nb] if zero else size[u]
                if zero and not best_zero:
                    better, same = True, False
                elif best_zero and not zero:
                    better, same = False, False
                elif zero:
                    better, same = False, True
                else:
                    better, same = fill > best_fill, fill == best_fill
                if better or best_t < 0:
                    best_t, best_zero, best_fill, tied = u, zero, fill, c
                elif same:
                    # a tie between buffers: a fixed buffer order would always drain one type
                    tied += c
                    if _rand(IS, tied) < c:
                        best_t = u
            if best_t < 0:
                break
            best_b = _lowest(best_t, IS, cnt, minb)
            v = _pick(best_t, best_b, IS, head, nxt, cnt)
            _drop(v, F, IS, typ, bkt, est, status, lo, relevant, nxt, prv, head, cnt, size, active, fen, tq, dropped)
    return 1 if status[i] == 1 else 0


@numba.njit(cache=True)
def arrive_range(lo_i, hi_i, arr, F, IS, typ, bkt, est, status, lo, relevant, evicted, ring,
                 z_est, is_term, nt, gamma, size, active, minb, nxt, prv, head, cnt, fen, tq, dropped):
    """Events ``[lo_i, hi_i)`` arrive, each at its own time ``arr[i]`` (one compiled call)."""
    for i in range(lo_i, hi_i):
        arrive(i, arr[i], F, IS, typ, bkt, est, status, lo, relevant, evicted, ring,
               z_est, is_term, nt, gamma, size, active, minb, nxt, prv, head, cnt, fen, tq, dropped)


@numba.njit(cache=True)
def _evict(i, now, F, IS, typ, status, lo, relevant, evicted, ring, is_term, fen, tq, excess):
    """State-side baseline: evict random stored (processed) events of the current window from the
    columns, enough to cut ``excess`` seconds of combination work (docs/shedding.md)."""
    # the stored events the queued terminators can still read: those inside the window of the
    # next event to process (older ones are out of every queued window)
    p = IS[I_PTR]
    while p < IS[I_ARRIVED] and status[p] != 1:
        p += 1
    first = lo[p] if p < IS[I_ARRIVED] else lo[i]
    while IS[I_RING_LO] < IS[I_RING_HI] and ring[IS[I_RING_LO]] < first:
        IS[I_RING_LO] += 1
    stored = IS[I_RING_HI] - IS[I_RING_LO]
    if stored <= 0 or F[F_KEST] <= 0.0:
        return
    nterm = 0
    for j in range(IS[I_PTR], IS[I_ARRIVED]):
        if status[j] == 1 and is_term[typ[j]]:
            nterm += 1
    per = F[F_KEST] * max(nterm, 1)
    m = int(np.ceil(excess / per))
    if m > stored:
        m = stored
    tries = 0
    while m > 0 and tries < 4 * stored:
        tries += 1
        v = ring[IS[I_RING_LO] + _rand(IS, stored)]
        if evicted[v] < np.inf:
            continue
        evicted[v] = now
        _fen_add(fen, v, -1)
        _shrink(v, F, IS, lo, tq)
        IS[I_EVICTED] += 1
        m -= 1


@numba.njit(cache=True)
def expire(p, F, IS, typ, bkt, est, status, lo, relevant, nxt, prv, head, cnt, size, active, fen, tq, dropped):
    """Drop queued event ``p`` when it comes up for service too late: its measured wait plus
    the tail of its processing time would exceed L_max (real time; docs/shedding.md, resolution 17)."""
    _drop(p, F, IS, typ, bkt, est, status, lo, relevant, nxt, prv, head, cnt, size, active, fen, tq, dropped)
    IS[I_DEADLINE] += 1


@numba.njit(cache=True)
def next_queued(IS, status):
    """The next event the engine consumes (FIFO over all buffers), or -1 when none is queued."""
    p = IS[I_PTR]
    while p < IS[I_ARRIVED] and status[p] != 1:
        p += 1
    IS[I_PTR] = p
    return p if p < IS[I_ARRIVED] else -1


@numba.njit(cache=True)
def begin(p, F, IS, typ, bkt, est, status, lo, relevant, ring, z_act, is_term,
          size, active, nxt, prv, head, cnt, fen, tq):
    """Take queued event ``p`` out of its buffer for processing; returns its charged cost
    (the virtual-time cost model: Z(T) plus the window work of a terminator)."""
    t = typ[p]
    status[p] = 2
    _unqueue(p, F, est, lo, fen, tq)
    size[t] -= 1
    if active[t]:
        _remove(p, typ, bkt, nxt, prv, head, cnt, IS[I_NB])
        if size[t] == 0:
            active[t] = False
    IS[I_PTR] = p + 1
    w = 0
    if is_term[t]:
        w = _fen_prefix(fen, p) - _fen_prefix(fen, lo[p])
    if relevant[p]:
        ring[IS[I_RING_HI]] = p
        IS[I_RING_HI] += 1
    return z_act[t] + F[F_KACT] * w


@numba.njit(cache=True)
def _serve(until, k, arr, F, IS, typ, bkt, est, status, lo, relevant, ring, z_act, is_term,
           size, active, nxt, prv, head, cnt, fen, tq, start, done, order):
    """Process queued events in order while the engine is free by ``until``; returns the new
    count of processed events ``k``."""
    while F[F_TFREE] <= until:
        p = next_queued(IS, status)
        if p < 0:
            break
        s = max(F[F_TFREE], arr[p])
        c = begin(p, F, IS, typ, bkt, est, status, lo, relevant, ring, z_act, is_term,
                  size, active, nxt, prv, head, cnt, fen, tq)
        start[p] = s
        done[p] = s + c
        F[F_TFREE] = s + c
        order[k] = p
        k += 1
    return k


@numba.njit(cache=True)
def simulate_virtual(arr, F, IS, typ, bkt, est, status, lo, relevant, evicted, ring,
                     z_est, z_act, is_term, nt, gamma, size, active, minb, nxt, prv, head, cnt,
                     fen, tq, dropped, start, done, order):
    """The whole virtual-time run without an engine in the loop: fills ``start``/``done`` and
    ``order`` (the events in processing order); returns how many were processed."""
    k = 0
    for i in range(arr.shape[0]):
        now = arr[i]
        k = _serve(now, k, arr, F, IS, typ, bkt, est, status, lo, relevant, ring, z_act, is_term,
                   size, active, nxt, prv, head, cnt, fen, tq, start, done, order)
        arrive(i, now, F, IS, typ, bkt, est, status, lo, relevant, evicted, ring,
               z_est, is_term, nt, gamma, size, active, minb, nxt, prv, head, cnt, fen, tq, dropped)
    return _serve(np.inf, k, arr, F, IS, typ, bkt, est, status, lo, relevant, ring, z_act, is_term,
                  size, active, nxt, prv, head, cnt, fen, tq, start, done, order)


class Core:
    """The arrays of one shedding run (see the module docstring)."""

    def __init__(self, typ, bkt, lo, relevant, z_est, z_act, is_term, nt, gamma, *,
                 latency_bound: float, beta: float, kappa_est: float, kappa_act: float,
                 policy: int, buckets: int, seed: int, guard: float = 1.0 - 1e-9) -> None:
        n = len(typ)
        k = len(z_est)
        # array 0: utility exactly 0; array b + 1: UtilArr^b, b = floor(u * xi) in 0 .. xi
        # (Section 4.4; docs/shedding.md, resolutions 4 and 18)
        nb = buckets + 2
        self.n = n
        self.typ = np.ascontiguousarray(typ, np.int64)
        self.bkt = np.ascontiguousarray(bkt, np.int64)
        self.lo = np.ascontiguousarray(lo, np.int64)
        self.relevant = np.ascontiguousarray(relevant, np.bool_)
        self.z_est = np.ascontiguousarray(z_est, np.float64)
        self.z_act = np.ascontiguousarray(z_act, np.float64)
        self.is_term = np.ascontiguousarray(is_term, np.bool_)
        self.nt = np.ascontiguousarray(nt, np.float64)
        self.gamma = np.ascontiguousarray(gamma, np.float64)
        self.est = np.zeros(n, np.float64)
        self.status = np.zeros(n, np.int8)
        self.evicted = np.full(n, np.inf)
        self.ring = np.zeros(max(n, 1), np.int64)
        self.size = np.zeros(k, np.int64)
        self.active = np.zeros(k, np.bool_)
        self.minb = np.full(k, nb, np.int64)
        self.nxt = np.full(n, -1, np.int64)
        self.prv = np.full(n, -1, np.int64)
        self.head = np.full(k * nb, -1, np.int64)
        self.cnt = np.zeros(k * nb, np.int64)
        self.fen = np.zeros(n + 1, np.int64)
        # queued terminators: a Fenwick tree of their κ (row 0), κ and window size on arrival
        # (rows 1, 2): the queued work follows their windows as events leave (resolution 24)
        self.tq = np.zeros((3, n + 1), np.float64)
        self.dropped = np.zeros(k, np.int64)
        self.F = np.array([0.0, 0.0, latency_bound, beta, kappa_est, kappa_act, guard, 0.0], np.float64)
        self.IS = np.zeros(11, np.int64)
        self.IS[I_POLICY] = policy
        self.IS[I_NB] = nb
        # a non-zero xorshift state from the seed (splitmix-style mixing)
        self.IS[I_RNG] = np.int64((int(seed) * 0x9E3779B97F4A7C15 + 0x2545F4914F6CDD1D) % (1 << 63)) | 1

    def preload(self, m: int) -> None:
        """Mark events ``[0, m)`` as already processed context (in the columns, not queued)."""
        self.status[:m] = 2
        for i in np.flatnonzero(self.relevant[:m]):
            _fen_add(self.fen, int(i), 1)
        self.IS[I_PTR] = m
        self.IS[I_ARRIVED] = m

    def arrive(self, i: int, now: float) -> int:
        return arrive(i, now, self.F, self.IS, self.typ, self.bkt, self.est, self.status, self.lo,
                      self.relevant, self.evicted, self.ring, self.z_est, self.is_term, self.nt,
                      self.gamma, self.size, self.active, self.minb, self.nxt, self.prv,
                      self.head, self.cnt, self.fen, self.tq, self.dropped)

    def arrive_range(self, lo_i: int, hi_i: int, arr: np.ndarray) -> None:
        arrive_range(lo_i, hi_i, arr, self.F, self.IS, self.typ, self.bkt, self.est, self.status,
                     self.lo, self.relevant, self.evicted, self.ring, self.z_est, self.is_term,
                     self.nt, self.gamma, self.size, self.active, self.minb, self.nxt, self.prv,
                     self.head, self.cnt, self.fen, self.tq, self.dropped)

    def next_queued(self) -> int:
        return next_queued(self.IS, self.status)

    def expire(self, p: int) -> None:
        expire(p, self.F, self.IS, self.typ, self.bkt, self.est, self.status, self.lo, self.relevant,
               self.nxt, self.prv, self.head, self.cnt, self.size, self.active, self.fen, self.tq,
               self.dropped)

    def begin(self, p: int) -> float:
        return begin(p, self.F, self.IS, self.typ, self.bkt, self.est, self.status, self.lo,
                     self.relevant, self.ring, self.z_act, self.is_term, self.size, self.active,
                     self.nxt, self.prv, self.head, self.cnt, self.fen, self.tq)

    def simulate(self, arr: np.ndarray):
        start = np.full(self.n, np.nan)
        done = np.full(self.n, np.nan)
        order = np.zeros(self.n, np.int64)
        k = simulate_virtual(np.ascontiguousarray(arr, np.float64), self.F, self.IS, self.typ,
                             self.bkt, self.est, self.status, self.lo, self.relevant,
                             self.evicted, self.ring, self.z_est, self.z_act, self.is_term,
                             self.nt, self.gamma, self.size, self.active, self.minb, self.nxt,
                             self.prv, self.head, self.cnt, self.fen, self.tq, self.dropped, start, done,
                             order)
        return start, done, order[:k]

    @property
    def counters(self) -> dict:
        return {"overloaded_arrivals": int(self.IS[I_OVERLOADED]),
                "guard_drops": int(self.IS[I_GUARD]),
                "evicted": int(self.IS[I_EVICTED]),
                "deadline_drops": int(self.IS[I_DEADLINE])}
