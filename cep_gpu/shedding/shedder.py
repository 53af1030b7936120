"""The :class:`Shedder`: DARLING's settings, its statistics and its constraints (paper Section 4.2).

Global constraint (Section 4.2.1): N_in = L_max / z̄. Local constraints (Section 4.2.2):
N_T = Z(T)·R(T) / Σ_T' Z(T')·R(T') · N_in · β. Buckets (Section 4.4): ξ = ``buckets`` arrays per
type, built when the buffer reaches γ_T = N_T - ⌈N_T·α_T / Z(T)⌉.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from ..errors import ArgumentError, CepError, is_finite_nonnegative, is_finite_positive
from ..events.checks import require_frame
from ..events.values import UNIT_NS  # nanoseconds per ``time_unit`` (the units of detect)
from ..model import Rule
from . import _core
from .gate import ShedGate
from .stats import CostModel, Empirical, Normal, Statistics, gather
from .utility import UTILITIES, UtilityModel

POLICIES = ("darling", "random", "state", "none")
#: most utility buckets per type (the paper uses 100; each type keeps arrays of this length)
MAX_BUCKETS = 1_000_000


class SheddingError(CepError, RuntimeError):
    """The shedder was used before it knew its statistics (call ``fit`` or ``warm_up`` first)."""


#: how N_in is split into the local constraints (docs/shedding.md, resolutions 2 and 26)
ALLOCATIONS = ("paper", "spread")

class Shedder:
    """Input load shedding that keeps the detection latency of composite events below a bound.

    Parameters
    ----------
    latency_bound:
        L_max in seconds (> 0).
    beta:
        The share of the global constraint after which events are dropped, in (0, 1] (paper: 0.8).
    buckets:
        ξ, the number of utility buckets per event type (>= 1; paper: 100).
    policy:
        ``"darling"`` (utility buckets), ``"random"`` (the same constraints, a random victim),
        ``"state"`` (the state-side baseline: evicts random stored events from the columns) or
        ``"none"`` (never drops).
    seed:
        Seeds every random choice: a run in virtual time is a function of its input and the seed.
    distribution:
        ``"auto"``, ``"normal"`` or ``"empirical"`` attribute distributions (docs/shedding.md).
    utility_samples:
        Value tuples of the Monte-Carlo utility estimate for conditions without a closed form.
    utility:
        ``"eq11"`` (the paper's Eq. 11, default); ``"chain"``, an optional extension that
        also counts the conditions between the other roles (docs/shedding.md, resolution 22);
        ``"support"``, an optional extension that also reads time: the partial matches an event
        ends among the events before it, times the chain messages of the later roles
        (resolution 23).
    allocation:
        How N_in is split into the local constraints N_T: ``"paper"`` (default), by Z(T)·R(T)
        as Sec. 4.2.2 writes it; ``"spread"``, an optional extension that spreads the
        combination work, which CDP charges to the terminator, over the events of the types the
        rules read, so N_T follows Z(T)·R(T) with that work shared (docs/shedding.md,
        resolution 26).
    """

    def __init__(
        self,
        latency_bound: float,
        beta: float = 0.8,
        buckets: int = 100,
        policy: str = "darling",
        *,
        seed: int = 0,
        distribution: str = "auto",
        utility_samples: int = 256,
        utility: str = "eq11",
        allocation: str = "paper",
    ) -> None:
        if not is_finite_positive(latency_bound):
            raise ArgumentError(f"latency_bound must be a number of seconds > 0, got {latency_bound!r}")
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not (0 < beta <= 1):
            raise ArgumentError(f"beta must be in (0, 1], got {beta!r}")
        if isinstance(buckets, bool) or not isinstance(buckets, (int, np.integer)) or not 1 <= buckets <= MAX_BUCKETS:
            # the bucket counters are arrays of types x buckets: a huge count is a MemoryError later
            raise ArgumentError(f"buckets must be an int in [1, {MAX_BUCKETS}], got {buckets!r}")
        if policy not in POLICIES:
            raise ArgumentError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        if distribution not in ("auto", "normal", "empirical"):
            raise ArgumentError(f"distribution must be 'auto', 'normal' or 'empirical', got {distribution!r}")
        if utility not in UTILITIES:
            raise ArgumentError(f"utility must be one of {', '.join(UTILITIES)}; got {utility!r}")
        if allocation not in ALLOCATIONS:
            raise ArgumentError(f"allocation must be one of {', '.join(ALLOCATIONS)}; got {allocation!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ArgumentError(f"seed must be an int, got {seed!r}")
        self.latency_bound = float(latency_bound)
        self.beta = float(beta)
        self.buckets = int(buckets)
        self.policy = policy
        self.seed = int(seed)
        self.distribution = distribution
        self.utility_samples = utility_samples
        self.utility_kind = utility
        self.allocation = allocation
        self.rules: list[Rule] = []
        self.stats: Statistics | None = None
        self.utility: UtilityModel | None = None
        self.types: list[str] = []
        self.n_in = math.inf
        self.n_t: dict[str, float] = {}
        self.gamma_t: dict[str, float] = {}
        self.time_unit = "s"

    def __repr__(self) -> str:
        return (f"Shedder(latency_bound={self.latency_bound}, beta={self.beta}, buckets={self.buckets}, "
                f"policy={self.policy!r}, seed={self.seed}, utility={self.utility_kind!r}, "
                f"allocation={getattr(self, 'allocation', 'paper')!r})")

    # -- statistics -------------------------------------------------------------------------------

    @property
    def column_types(self) -> frozenset[str]:
        """The event types the fitted rules read in their positive positions (the buffered ones)."""
        return self._column_types

    def fit(
        self,
        rules,
        sample: pd.DataFrame | None = None,
        *,
        arrival: np.ndarray | None = None,
        costs: CostModel | Mapping[str, float] | None = None,
        window_cost: float | None = None,
        stats: Statistics | None = None,
        distributions: Mapping[tuple[str, str], Normal | Empirical] | None = None,
        time_unit: str = "s",
    ) -> Shedder:
        """Gather statistics from a warm-up ``sample`` (or take ``stats``) and set the constraints.

        ``costs``: a :class:`CostModel` (virtual time) or measured seconds per type; ``window_cost``
        overrides κ (seconds per event a terminator reads). Call again to re-gather after a drift.
        """
        self.rules = as_rules(rules)
        if time_unit not in UNIT_NS:
            raise ArgumentError(f"time_unit: unknown unit {time_unit!r}; use one of {sorted(UNIT_NS)}")
        self.time_unit = time_unit
        self._lookback_ns = max((r.lookback() for r in self.rules), default=0)
        self._term_types = frozenset(p.predicates[p.terminator].event_type for r in self.rules for p in r.plans)
        self._column_types = frozenset(p.event_type for r in self.rules for p in r.predicates)
        if stats is None:
            if sample is None:
                raise ArgumentError("fit needs a warm-up sample (a DataFrame of events) or stats=")
            stats = gather(sample, arrival, costs=costs, distribution=self.distribution,
                           distributions=distributions, time_unit_ns=UNIT_NS[time_unit],
                           lookback_ns=self._lookback_ns, terminator_types=self._term_types,
                           column_types=self._column_types, seed=self.seed)
            if not self._column_types & set(stats.rates):
                # no statistics for any type the rules read: every utility would be a guess
                raise ArgumentError(
                    f"the warm-up sample has no event of a type the rules read ({sorted(self._column_types)}); "
                    f"its types are {sorted(stats.rates)[:10]}")
        elif not isinstance(stats, Statistics):
            raise ArgumentError(f"stats must be a Statistics, got {type(stats).__name__}")
        if window_cost is not None:
            if not is_finite_nonnegative(window_cost):
                raise ArgumentError(f"window_cost must be a finite number of seconds >= 0, got {window_cost!r}")
            stats.window_cost = float(window_cost)
        self.stats = stats
        self.utility = UtilityModel(self.rules, stats, self.utility_samples, self.seed, self.utility_kind,
                                    time_unit_ns=UNIT_NS[time_unit])
        self._constraints()
        return self

    def _constraints(self) -> None:
        st = self.stats
        self.types = sorted(set(st.rates) | set(st.costs))
        zbar = st.z_mean()
        self.z_mean = zbar
        self.n_in = self.latency_bound / zbar if zbar > 0 else math.inf
        # TYPES of Section 4.2.2 are the types of the patterns: a type no rule reads gets no share
        # of the budget (N_T = 0), so under overload it is dropped on arrival
        read = {t for r in self.rules for t in r.input_types}
        z_alloc = self._z_alloc(read)
        weights = {t: z_alloc(t) * st.rates.get(t, 0.0) if t in read else 0.0 for t in self.types}
        total = sum(weights.values())
        self.n_t, self.gamma_t = {}, {}
        for t in self.types:
            share = weights[t] / total if total > 0 else float(t in read) / max(len(read), 1)
            nt = share * self.n_in * self.beta
            alpha = self.utility.conditions_of(t) * st.utility_cost
            z = st.z_full(t)
            lead = math.ceil(nt * alpha / z) if z > 0 and math.isfinite(nt) else 0
            self.n_t[t] = nt
            self.gamma_t[t] = max(nt - lead, 0.0)

    def _z_alloc(self, read: set[str]) -> Callable[[str], float]:
        """Z(T) as the split of N_in weighs it: the paper's Z(T) (``allocation="paper"``), or
        (``"spread"``) Z(T) without its combination work plus the combination work of all read
        types per read event (resolution 26: in CDP the terminator does the work every role's
        events cause; the paper's tree engine charges each event its share)."""
        st = self.stats
        if getattr(self, "allocation", "paper") == "paper":  # (shedders pickled before the option)
            return st.z_full
        rate = sum(st.rates.get(u, 0.0) for u in read)
        work = sum(st.rates.get(u, 0.0) * (st.z_full(u) - st.costs.get(u, 0.0)) for u in read)
        shared = work / rate if rate > 0 else 0.0
        return lambda t: st.costs.get(t, 0.0) + shared

    def constraints(self) -> dict:
        """N_in, z̄, and per type R(T), Z(T), N_T and γ_T."""
        self._need()
        return {
            "N_in": self.n_in,
            "z_mean_s": self.z_mean,
            "per_type": {t: {"R": self.stats.rates.get(t, 0.0), "Z_s": self.stats.z_full(t),
                             "N_T": self.n_t[t], "gamma_T": self.gamma_t[t]} for t in self.types},
        }

    def _need(self) -> None:
        if self.stats is None or self.utility is None:
            raise SheddingError("the shedder has no statistics yet: call Shedder.fit(rules, sample) "
                                "or SheddingEngine.warm_up(sample) first")

    # -- runs -------------------------------------------------------------------------------------

    def utilities(self, events: pd.DataFrame, context: pd.DataFrame | None = None) -> np.ndarray:
        """U_T(e) of every row of ``events`` (Eq. 11 or the chosen extension; max over roles and
        rules). ``context``: the events that arrived before them, which the ``support`` utility
        reads."""
        self._need()
        return self.utility.compute(require_frame(events, "utilities", ("type",)), context)

    def buckets_of(self, utilities: np.ndarray) -> np.ndarray:
        """The auxiliary array of each utility: 0 for u = 0 (the event can be in no match), else
        1 + ⌊u·ξ⌋ (UtilArr^⌊u·ξ⌋ of Section 4.4, ⌊u·ξ⌋ in 0 .. ξ)."""
        u = np.asarray(utilities, np.float64)
        b = np.clip(np.floor(u * self.buckets), 0, self.buckets).astype(np.int64) + 1
        return np.where(u > 0, b, 0)

    def make_core(self, events: pd.DataFrame, ts_ns: np.ndarray, cost_model: CostModel | None,
                  utilities: np.ndarray | None = None, context: int = 0,
                  guard: float = 1.0 - 1e-9) -> _core.Core:
        """The compiled state of one run over ``events`` (arrival order; ``context`` leading rows
        are already-processed events that terminators may read; ``guard``: the share of L_max
        the hard guard keeps each event's estimated latency within)."""
        self._need()
        types = events["type"].astype(str).to_numpy()
        names = list(self.types) + sorted(set(np.unique(types)) - set(self.types))
        code = {t: i for i, t in enumerate(names)}
        typ = np.array([code[t] for t in types], np.int64) if len(types) < 64 else \
            pd.Index(names).get_indexer(types).astype(np.int64)
        st = self.stats
        z_est = self.z_estimates(names, cost_model)
        if cost_model is not None:
            z_act = np.array([cost_model.z(t) for t in names], np.float64)
            kappa_act = cost_model.window
        else:
            z_act, kappa_act = z_est.copy(), st.window_cost
        is_term = np.array([t in self._term_types for t in names], np.bool_)
        nt = np.array([self.n_t.get(t, 0.0) for t in names], np.float64)
        gamma = np.array([self.gamma_t.get(t, 0.0) for t in names], np.float64)
        relevant = np.isin(types, list(self._column_types))
        lo = np.searchsorted(ts_ns, ts_ns - self._lookback_ns, "left")
        if self.policy == "darling":
            bkt = self.buckets_of(self.utility.compute(events) if utilities is None else utilities)
        else:  # one bucket: the victim is a random event of the buffer
            bkt = np.ones(len(events), np.int64)
        core = _core.Core(typ, bkt, lo, relevant, z_est, z_act, is_term, nt, gamma,
                          latency_bound=self.latency_bound, beta=self.beta,
                          kappa_est=st.window_cost, kappa_act=kappa_act,
                          policy=_core.POLICY_CODES[self.policy], buckets=self.buckets, seed=self.seed,
                          guard=guard)
        core.type_names = names
        if context:
            core.preload(context)
        return core

    def z_estimates(self, names: list[str], cost_model: CostModel | None) -> np.ndarray:
        """Z(T) the shedder charges per type (without the window part). A type the warm-up never
        saw costs z̄ in real time (a guess, which the deadline check backs up); in virtual time the
        cost model is the engine, so its charge for that type is known exactly (else the hard guard
        under-charges it and the bound can be missed: tests/test_shedding_props.py)."""
        st = self.stats
        return np.array([st.costs[t] if t in st.costs else
                         (cost_model.z(t) if cost_model is not None else self.z_mean) for t in names],
                        np.float64)

    def gate(self, rules, time_unit: str = "s") -> ShedGate:
        """The hook of ``cep_gpu.Engine(rules, shedding=shedder)``: each publish is shed as a
        micro-batch (:meth:`shed_batch`) before the engine sees it; the engine's
        ``stats()["shedding"]`` is :meth:`ShedGate.stats`. The shedder must be fitted on the
        engine's rules (:meth:`fit`)."""
        if time_unit not in UNIT_NS:
            raise ArgumentError(f"time_unit: unknown unit {time_unit!r}; use one of {sorted(UNIT_NS)}")
        return ShedGate(self, as_rules(rules), time_unit)

    def shed_batch(self, events: pd.DataFrame, context: pd.DataFrame | None = None,
                   time_unit: str | None = None, utilities: np.ndarray | None = None) -> np.ndarray:
        """The rows of a micro-batch to keep (a boolean mask), all arriving at once.

        The batch's events queue in timestamp order behind an idle engine; the shedder admits
        them as in a stream (same constraints, same victims), so the kept rows' estimated
        processing time stays within ``latency_bound``. ``context``: earlier events still in the
        engine's buffer (terminators of the batch read them: they count in the window work).
        This is the hook ``detect_stream(..., shedding=...)`` applies per key and micro-batch.
        ``time_unit``: the unit of numeric ``ts`` (default: the one given to :meth:`fit`).
        ``utilities``: the batch's utilities when the caller has them (one per row of ``events``).
        """
        self._need()
        return self.keep_mask(require_frame(events, "shed_batch"), context, time_unit, utilities)

    def keep_mask(self, events: pd.DataFrame, context: pd.DataFrame | None = None,
                  time_unit: str | None = None, utilities: np.ndarray | None = None) -> np.ndarray:
        """:meth:`shed_batch` without its input check, for a caller that checked ``events`` (a
        DataFrame with ``type`` and ``ts``): the gate checks each publish once."""
        self._need()
        n = len(events)
        if n == 0:
            return np.zeros(0, bool)
        ctx = context if context is not None and len(context) else None
        frame = events if ctx is None else pd.concat([ctx, events], ignore_index=True)
        m = 0 if ctx is None else len(ctx)
        unit = time_unit or self.time_unit
        if unit not in UNIT_NS:
            raise ArgumentError(f"time_unit: unknown unit {unit!r}; use one of {sorted(UNIT_NS)}")
        ts_ns = _ts(frame["ts"], UNIT_NS[unit])
        order = np.concatenate([np.arange(m), m + np.argsort(ts_ns[m:], kind="stable")])
        frame = frame.iloc[order].reset_index(drop=True)
        ts_ns = ts_ns[order]
        # a batch event older than the newest context event (late, within a stream's watermark)
        # counts its window from the newest context time: the lookback search needs sorted times
        ts_ns = np.maximum.accumulate(ts_ns)
        util = None
        if utilities is not None and self.policy == "darling":
            util = np.concatenate([np.zeros(m), np.asarray(utilities, np.float64)])[order]
        core = self.make_core(frame, ts_ns, None, utilities=util, context=m)
        core.arrive_range(m, len(frame), np.zeros(len(frame)))
        keep = np.zeros(n, bool)
        keep[order[m:] - m] = core.status[m:] == 1
        self.last_batch = core.counters | {"dropped": int(n - keep.sum())}
        return keep


def as_rules(rules) -> list[Rule]:
    """A Rule, rule text, or a list of Rules and rule texts, as a list of Rules (what ``detect``
    takes), of at least one rule."""
    from ..detect import as_rules as detect_rules

    out = detect_rules(rules)
    if not out:
        raise ArgumentError("rules: the rules given hold no rule")
    return out


def _ts(ts: pd.Series, unit_ns: int) -> np.ndarray:
    from .stats import times_ns

    return times_ns(ts, unit_ns)
