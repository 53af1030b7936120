"""Statistics gathering (paper Section 4.1): arrival rates R(T), processing times Z(T) and the
attribute distributions the utility functions are built from.

Distributions: the paper fits normals. A normal is a poor model for skewed or multi-modal
attributes (prices of many tickers, distances), so ``distribution="auto"`` (the default) keeps a
normal where its Kolmogorov-Smirnov distance to the sample is below :data:`KS_NORMAL`, and the
sample's empirical CDF otherwise; ``"normal"`` and ``"empirical"`` force one. Equality conditions
always use the value frequencies of the sample (a normal gives every value probability 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numba
import numpy as np
import pandas as pd

from ..errors import ArgumentError, is_finite_nonnegative
from ..events.checks import require_frame
from ..events.from_pandas import convert_ts
from ..events.values import UNIT_NS

#: largest KS distance at which ``distribution="auto"`` keeps a normal fit
KS_NORMAL = 0.05
#: rows kept per event type as the sample the distributions are fitted on
MAX_SAMPLE = 20_000

_SQRT2 = math.sqrt(2.0)


@numba.vectorize(["float64(float64)"], cache=True)
def ndtr(x):
    """The standard normal CDF, Φ(x) = erfc(-x/√2)/2 (compiled; no Python per value)."""
    return 0.5 * math.erfc(-x / _SQRT2)


@dataclass(frozen=True)
class Normal:
    """A normal distribution N(mu, sigma²) of an attribute."""

    mu: float
    sigma: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mu) and math.isfinite(self.sigma) and self.sigma >= 0):
            raise ArgumentError(f"Normal(mu={self.mu}, sigma={self.sigma}): need finite mu and sigma >= 0")

    def below(self, t: np.ndarray, inclusive: bool) -> np.ndarray:
        """P(Y < t) (or <= t: the same for a continuous Y)."""
        t = np.asarray(t, np.float64)
        if self.sigma == 0:
            return ((self.mu <= t) if inclusive else (self.mu < t)).astype(np.float64)
        return ndtr((t - self.mu) / self.sigma)


@dataclass(frozen=True)
class Empirical:
    """The empirical distribution of a sample (sorted values, NaN-free)."""

    values: np.ndarray = field(repr=False)

    def below(self, t: np.ndarray, inclusive: bool) -> np.ndarray:
        """P(Y < t) or P(Y <= t) under the sample."""
        n = len(self.values)
        if n == 0:
            return np.zeros(np.shape(t))
        side = "right" if inclusive else "left"
        return np.searchsorted(self.values, np.asarray(t, np.float64), side=side) / n

    def equal(self, t: np.ndarray) -> np.ndarray:
        n = len(self.values)
        if n == 0:
            return np.zeros(np.shape(t))
        t = np.asarray(t, np.float64)
        return (np.searchsorted(self.values, t, "right") - np.searchsorted(self.values, t, "left")) / n


def fit(values: np.ndarray, distribution: str = "auto") -> Normal | Empirical:
    """A distribution for numeric ``values`` (NaNs ignored), chosen as the module docstring says."""
    v = np.sort(np.asarray(values, np.float64))
    v = v[~np.isnan(v)]
    emp = Empirical(v)
    if distribution == "empirical" or len(v) < 2:
        return emp
    mu, sigma = float(v.mean()), float(v.std())
    norm = Normal(mu, sigma)
    if distribution == "normal":
        return norm
    if sigma == 0:
        return emp
    n = len(v)
    cdf = ndtr((v - mu) / sigma)
    ks = max(float(np.max(np.arange(1, n + 1) / n - cdf)), float(np.max(cdf - np.arange(n) / n)))
    return norm if ks <= KS_NORMAL else emp


@dataclass(frozen=True)
class CostModel:
    """The virtual-time cost model: seconds charged per processed event.

    ``per_type``: Z(T) without the combination work, per type (``default`` for the others);
    ``window``: seconds per event that a terminator's combination reads (every kept event of a
    rule's column types inside the lookback before it; docs/shedding.md, "Cost model");
    ``utility``: seconds per evaluated condition of a utility function (the paper's ``y``,
    so that α_T = |C_type(T)| · y).
    """

    per_type: Mapping[str, float] = field(default_factory=dict)
    default: float = 1e-3
    window: float = 0.0
    utility: float = 0.0

    def __post_init__(self) -> None:
        for name, v in [("default", self.default), ("window", self.window), ("utility", self.utility),
                        *((f"per_type[{k!r}]", v) for k, v in dict(self.per_type).items())]:
            if not is_finite_nonnegative(v):
                raise ArgumentError(f"CostModel.{name} must be a finite number >= 0 (seconds), got {v!r}")

    def z(self, event_type: str) -> float:
        return float(self.per_type.get(event_type, self.default))


@dataclass
class Statistics:
    """What the shedder knows about the stream (gathered by :func:`gather` or given).

    ``rates``: R(T), events per second of arrival time; ``costs``: Z(T) in seconds without the
    combination work; ``window_cost``: seconds per event a terminator reads (κ); ``utility_cost``:
    seconds per condition of a utility function (y); ``samples``: per type, a DataFrame of sample
    events the attribute distributions are fitted on; ``distributions``: fixed distributions
    ``{(type, attribute): Normal | Empirical}`` that override the fits (the paper's worked
    example gives its normals this way); ``distribution``: ``"auto"``, ``"normal"`` or
    ``"empirical"`` for the fits.
    """

    rates: dict[str, float] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    window_cost: float = 0.0
    utility_cost: float = 0.0
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)
    distributions: dict[tuple[str, str], Normal | Empirical] = field(default_factory=dict)
    distribution: str = "auto"
    mean_window: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.distribution not in ("auto", "normal", "empirical"):
            raise ArgumentError(f"distribution must be 'auto', 'normal' or 'empirical', got {self.distribution!r}")
        for (t, a), d in self.distributions.items():
            if not isinstance(d, (Normal, Empirical)):
                raise ArgumentError(f"distributions[({t!r}, {a!r})] must be a Normal or an Empirical, got {d!r}")

    def z_mean(self) -> float:
        """z̄: the mean processing time per event, arrival-rate weighted (Section 4.2.1)."""
        total = sum(self.rates.values())
        if total <= 0:
            return float(np.mean(list(self.costs.values()))) if self.costs else 0.0
        return sum(r * self.z_full(t) for t, r in self.rates.items()) / total

    def z_full(self, t: str) -> float:
        """Z(T) with the mean combination work of a type-T event (Eq. 7 in this engine's terms)."""
        return self.costs.get(t, 0.0) + self.window_cost * self.mean_window.get(t, 0.0)


def gather(
    events: pd.DataFrame,
    arrival: np.ndarray | None = None,
    *,
    costs: CostModel | Mapping[str, float] | None = None,
    distribution: str = "auto",
    distributions: Mapping[tuple[str, str], Normal | Empirical] | None = None,
    time_unit_ns: int = 1_000_000_000,
    lookback_ns: int = 0,
    terminator_types: frozenset[str] = frozenset(),
    column_types: frozenset[str] = frozenset(),
    seed: int = 0,
) -> Statistics:
    """Statistics of a warm-up sample: R(T) over the arrival span, the attribute samples, the
    mean number of column events inside a terminator's lookback, and Z(T) from ``costs`` (a
    :class:`CostModel` in virtual time; a mapping of measured seconds in real time)."""
    require_frame(events, "statistics")
    if len(events) < 2:
        raise ArgumentError(f"statistics need a sample of at least 2 events, got {len(events)}")
    types = events["type"].astype(str).to_numpy()
    ts = times_ns(events["ts"], time_unit_ns)
    # a shorter arrival array gave rates over the wrong span, silently
    arr = ts / 1e9 if arrival is None else arrival_seconds(arrival, len(events))
    span = float(arr.max() - arr.min())
    if not span > 0:
        raise ArgumentError("statistics need a sample spanning some time (all arrivals are equal)")
    names, counts = np.unique(types, return_counts=True)
    rates = {str(t): float(c) / span for t, c in zip(names, counts)}
    rng = np.random.default_rng(seed)
    samples = {}
    for t in names:
        rows = np.flatnonzero(types == t)
        if len(rows) > MAX_SAMPLE:
            rows = np.sort(rng.choice(rows, MAX_SAMPLE, replace=False))
        samples[str(t)] = events.iloc[rows].reset_index(drop=True)
    # mean number of column events within the lookback before an event of each terminator type
    order = np.argsort(ts, kind="stable")
    ts_s, ty_s = ts[order], types[order]
    rel = np.isin(ty_s, list(column_types)).astype(np.int64)
    pref = np.concatenate([[0], np.cumsum(rel)])
    lo = np.searchsorted(ts_s, ts_s - lookback_ns, "left")
    w = pref[np.arange(len(ts_s))] - pref[lo]
    mean_window = {str(t): float(w[ty_s == t].mean()) for t in names if t in terminator_types}
    st = Statistics(rates=rates, samples=samples, distribution=distribution,
                    distributions=dict(distributions or {}), mean_window=mean_window)
    if isinstance(costs, CostModel):
        st.costs = {str(t): costs.z(str(t)) for t in names}
        st.window_cost = costs.window
        st.utility_cost = costs.utility
    elif costs is not None:
        if not isinstance(costs, Mapping):
            raise ArgumentError(f"costs must be a CostModel or a mapping type -> seconds per event, "
                                f"got {type(costs).__name__}")
        st.costs = {}
        for t, v in costs.items():
            if not is_finite_nonnegative(v):
                raise ArgumentError(f"costs[{t!r}] must be a finite number of seconds >= 0, got {v!r}")
            st.costs[str(t)] = float(v)
    return st


def arrival_seconds(arrival, n: int) -> np.ndarray:
    """``arrival`` as ``n`` finite float64 seconds; an ArgumentError naming the problem otherwise."""
    try:
        arr = np.asarray(arrival, np.float64)
    except (TypeError, ValueError) as err:
        raise ArgumentError(f"arrival times must be numbers of seconds ({err})") from None
    if arr.shape != (n,):
        raise ArgumentError(f"arrival must have one time per event ({n}), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ArgumentError("arrival times must be finite numbers of seconds")
    return arr


def times_ns(ts: pd.Series, time_unit_ns: int) -> np.ndarray:
    """The ``ts`` column as int64 ns (numbers in the unit of ``time_unit_ns`` ns, or datetimes),
    as ``detect`` reads it: the same errors naming the row and the value (a text value such as
    ``'abc'``, a null, a NaN, a time out of range: was ``'ts' must be numbers or datetimes, got
    dtype category``, and NaN or NaT became the int64 minimum), and integers exactly (they went
    through float64, which rounds an int64 nanosecond epoch beyond 2**53)."""
    unit = next(u for u, n in UNIT_NS.items() if n == time_unit_ns)
    return convert_ts(ts, unit)[1]
