"""The planner: ``backend="auto"`` hands each batch of terminators to the CPU or the GPU kernels.

Cost model
----------
Before a batch of terminators runs, the host knows each terminator's window range in every
column (binary search over the time-sorted columns). From those ranges the planner derives the
*work* of the batch as a few counts (:data:`FEATURES`):

``launches``     1 per batch (one launch of the combination kernels);
``terminators``  terminators in the batch;
``events``       column events the batch reads (what a GPU would have to hold);
``pairs``        partial sequences x window candidates, summed over the steps (what a scan of the
                 window touches: the GPU's threads);
``matches``      the pairs that are expected to pass the step's conditions (what a kernel that
                 finds candidates through the parameter index touches);
``outputs``      composite events expected (what goes back to the host).

The estimated cost on a device is the dot product of those counts with that device's
coefficients (seconds per unit), read from a :class:`Profile`. ``auto`` takes the cheaper device,
the CPU on ties, and never the GPU when no GPU is usable. Decisions are made per rule and per
batch of terminators, never per candidate.

Profiles
--------
JSON files (format :data:`PROFILE_FORMAT`). The package ships ``profiles/default.json`` (CPU
coefficients measured on the development machine, GPU coefficients *chosen* so that the GPU wins on
the seq3 workload from windows of about 4000 events, as in the T-Rex chapter). ``cep-gpu calibrate``
writes a profile measured on the current machine to :func:`user_profile_path`. Lookup order of
:func:`load_profile`: an explicit path, ``$CEP_GPU_PROFILE``, the user profile, the default. An
explicit path that is missing or malformed raises :class:`ProfileError`; a malformed *user*
profile (not asked for by name) is skipped with a warning and the default is used.
"""

from __future__ import annotations

import datetime
import json
import math
import numbers
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from .backends import Backend, Matches, count_matches, get_backend, gpu_usable, register
from .columns import filter_rows, type_rows
from .errors import ArgumentError, CepError
from .events import EventTable
from .model import AggValue, Attr, Compare, Plan, Rule, static_conditions, step_checks, walk

FEATURES = ("launches", "terminators", "events", "pairs", "matches", "outputs")
PROFILE_FORMAT = "cep-gpu-profile/1"
DEVICES = ("cpu", "gpu")

#: selectivity assumed for a condition that is not an equality with a known number of values
OTHER_SELECTIVITY = 0.5
#: values sampled per column to count the distinct values of an equality parameter
_SAMPLE = 4096


class ProfileError(CepError, ValueError):
    """A planner profile that cannot be used (missing file, bad JSON, missing or bad constant)."""


# ----------------------------------------------------------------------------------------------
# Profiles


@dataclass(frozen=True)
class Profile:
    """Linear cost coefficients (seconds per unit of each feature) for the CPU and the GPU."""

    cpu: Mapping[str, float]
    gpu: Mapping[str, float]
    source: str = "<memory>"
    meta: Mapping[str, object] = field(default_factory=dict)

    def cost(self, device: str, features: Mapping[str, float]) -> float:
        """Estimated seconds for a batch with these feature counts on ``device``."""
        coef = self.cpu if device == "cpu" else self.gpu
        return float(sum(coef.get(f, 0.0) * float(features.get(f, 0.0)) for f in FEATURES))

    def to_json(self) -> dict:
        return {
            "format": PROFILE_FORMAT,
            "cpu": dict(self.cpu),
            "gpu": dict(self.gpu),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: object, source: str = "<memory>") -> Profile:
        """Validate and build a profile; raises :class:`ProfileError` naming the fault."""
        if not isinstance(data, dict):
            raise ProfileError(f"profile {source}: expected a JSON object, got {type(data).__name__}")
        fmt = data.get("format")
        if fmt != PROFILE_FORMAT:
            raise ProfileError(f"profile {source}: 'format' must be {PROFILE_FORMAT!r}, got {fmt!r}")
        coefs = {}
        for dev in DEVICES:
            block = data.get(dev)
            if not isinstance(block, dict):
                raise ProfileError(f"profile {source}: missing the {dev!r} object of cost coefficients")
            unknown = sorted(set(block) - set(FEATURES))
            if unknown:
                raise ProfileError(
                    f"profile {source}: unknown {dev} coefficient(s) {unknown}; known: {list(FEATURES)}"
                )
            for k, v in block.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise ProfileError(
                        f"profile {source}: {dev}.{k} must be a finite number >= 0 (seconds), got {v!r}"
                    )
            coefs[dev] = {k: float(block.get(k, 0.0)) for k in FEATURES}
        meta = data.get("meta", {})
        if not isinstance(meta, dict):
            raise ProfileError(f"profile {source}: 'meta' must be an object")
        return cls(coefs["cpu"], coefs["gpu"], source, meta)

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")
        return path


def user_cache_dir() -> Path:
    """The per-user cache directory of cep-gpu (``platformdirs`` when installed)."""
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("cep-gpu"))
    except ImportError:  # fall back to the XDG convention
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "cep-gpu"


def user_profile_path() -> Path:
    """Where ``cep-gpu calibrate`` writes its profile by default."""
    return user_cache_dir() / "profile.json"


def default_profile() -> Profile:
    """The profile shipped with the package."""
    text = resources.files("cep_gpu").joinpath("profiles/default.json").read_text()
    return Profile.from_json(json.loads(text), "cep_gpu/profiles/default.json")


def read_profile(path: str | os.PathLike) -> Profile:
    """Read a profile file; :class:`ProfileError` if it is missing or malformed."""
    p = Path(path)
    if not p.is_file():
        raise ProfileError(f"profile {p}: no such file (run `cep-gpu calibrate --out {p}` to write one)")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"profile {p}: not valid JSON ({exc})") from None
    return Profile.from_json(data, str(p))


def load_profile(path: str | os.PathLike | Profile | None = None) -> Profile:
    """The profile to plan with: ``path`` if given (errors raise), else ``$CEP_GPU_PROFILE``
    (errors raise), else the user profile (errors warn and fall back), else the default."""
    if isinstance(path, Profile):
        return path
    if path is not None:
        return read_profile(path)
    env = os.environ.get("CEP_GPU_PROFILE")
    if env:
        return read_profile(env)
    user = user_profile_path()
    if user.is_file():
        try:
            return read_profile(user)
        except ProfileError as exc:
            warnings.warn(f"{exc}; using the default profile instead", stacklevel=2)
    return default_profile()


# ----------------------------------------------------------------------------------------------
# Work estimates


@dataclass
class StepEstimate:
    """The expected work of one binding step, averaged per terminator."""

    pred: int
    event_type: str
    policy: str
    window: int
    events_per_window: float
    selectivity: float
    partials_in: float
    pairs: float
    matches: float
    partials_out: float


@dataclass
class RuleWork:
    """Per-terminator work of one rule over a range of terminators (every plan summed).

    ``per_terminator`` is an array (n_terminators, len(FEATURES)) whose ``launches`` and
    ``events`` columns are 0: those are counted per batch by :meth:`batch_features`.
    """

    rule: Rule
    term_rows: np.ndarray
    term_ts: np.ndarray
    per_terminator: np.ndarray
    steps: list[StepEstimate]
    column_ts: list[np.ndarray]
    lookback: int

    def batch_features(self, i: int, j: int) -> dict[str, float]:
        """Feature counts of one launch over terminators ``i:j`` (indices into ``term_rows``)."""
        f = dict(zip(FEATURES, self.per_terminator[i:j].sum(axis=0).tolist()))
        f["launches"] = 1.0 if j > i else 0.0
        if j > i:
            lo_t, hi_t = self.term_ts[i] - self.lookback, self.term_ts[j - 1]
            f["events"] = float(
                sum(np.searchsorted(c, hi_t, "right") - np.searchsorted(c, lo_t, "left") for c in self.column_ts)
            )
        return f


def _column_rows(
    rule: Rule, table: EventTable, pred: int, event_type: str, lo: int = 0, hi: int | None = None
) -> np.ndarray:
    """Rows of ``event_type`` in ``[lo, hi)`` that pass the static filters of predicate ``pred``."""
    rows = type_rows(table, event_type, lo, len(table) if hi is None else hi)
    for ci in static_conditions(rule, pred):
        if any(isinstance(node, AggValue) for node in walk(rule.conditions[ci])):
            continue  # an aggregate's value is known only once its span is bound: an upper bound
        try:
            rows = filter_rows(table, rows, (rule.conditions[ci],), pred, rule.n_predicates)
        except (KeyError, IndexError, TypeError):  # cannot evaluate here: do not filter (upper bound)
            pass
    return rows


def _selectivity(rule: Rule, table: EventTable, pred: int, cond_ids, column: np.ndarray) -> float:
    """Expected fraction of (partial, candidate) pairs that pass the step's non-static conditions."""
    static = set(static_conditions(rule, pred))
    sel = 1.0
    for ci in cond_ids:
        if ci in static:
            continue
        cond = rule.conditions[ci]
        own = None
        if isinstance(cond, Compare) and cond.op == "=":
            for side in (cond.left, cond.right):
                if isinstance(side, Attr) and side.pred == pred:
                    own = side.name
        col = table.columns.get(own) if own else None
        if col is not None and len(column):
            sample = column[:: max(1, len(column) // _SAMPLE)]
            vals = col.values[sample][col.valid[sample]]
            sel *= 1.0 / max(1, len(np.unique(vals)))
        else:
            sel *= OTHER_SELECTIVITY
    return sel


def estimate_work(rule: Rule, table: EventTable, lo: int = 0, hi: int | None = None) -> RuleWork:
    """The expected work of ``rule`` for each of its terminators in rows ``[lo, hi)``.

    Window ranges are exact per terminator (binary search); a predicate anchored on another
    predicate uses the terminator's time as a proxy for its anchor's. Partial sequences propagate
    with the conditions' expected selectivity (equality: 1 / distinct values; other: 0.5).
    """
    hi = len(table) if hi is None else hi
    all_term_rows, all_ts, parts, steps_all, col_ts = [], [], [], [], []
    for plan in rule.plans:
        term_rows, per, steps, cts = _plan_work(rule, plan, table, lo, hi)
        all_term_rows.append(term_rows)
        parts.append(per)
        steps_all.extend(steps)
        col_ts.extend(cts)
    term_rows = np.concatenate(all_term_rows) if all_term_rows else np.empty(0, np.int64)
    per = np.concatenate(parts) if parts else np.empty((0, len(FEATURES)))
    order = np.argsort(term_rows, kind="stable")
    term_rows, per = term_rows[order], per[order]
    all_ts = table.ts[term_rows] if len(term_rows) else np.empty(0, np.int64)
    return RuleWork(rule, term_rows, all_ts, per, steps_all, col_ts, rule.lookback())


def _plan_work(rule: Rule, plan: Plan, table: EventTable, lo: int, hi: int):
    term = plan.terminator
    tcol = _column_rows(rule, table, term, plan.predicates[term].event_type)
    term_rows = tcol[(tcol >= lo) & (tcol < hi)]
    t = table.ts[term_rows]
    n = len(term_rows)
    idx = {f: k for k, f in enumerate(FEATURES)}
    per = np.zeros((n, len(FEATURES)))
    per[:, idx["terminators"]] = 1.0
    partials = np.ones(n)
    checks = step_checks(rule, plan)
    steps, col_ts = [], [table.ts[tcol]]
    for s in range(1, len(plan.order)):
        p = plan.order[s]
        pred = plan.predicates[p]
        col = _column_rows(rule, table, p, pred.event_type)
        cts = table.ts[col]
        col_ts.append(cts)
        w = int(pred.window or 0)
        r = (np.searchsorted(cts, t, "left") - np.searchsorted(cts, t - w, "left")).astype(np.float64)
        sel = _selectivity(rule, table, p, checks[s].conditions, col)
        pairs = partials * r
        matches = pairs * sel
        out = matches if pred.policy == "each" else partials * np.minimum(1.0, r * sel)
        per[:, idx["pairs"]] += pairs
        per[:, idx["matches"]] += matches
        steps.append(
            StepEstimate(
                p, pred.event_type, pred.policy or "each", w, float(r.mean()) if n else 0.0, sel,
                float(partials.mean()) if n else 0.0, float(pairs.mean()) if n else 0.0,
                float(matches.mean()) if n else 0.0, float(out.mean()) if n else 0.0,
            )
        )
        partials = out
    per[:, idx["outputs"]] = partials
    return term_rows, per, steps, col_ts


# ----------------------------------------------------------------------------------------------
# Decisions and batches


def check_max_batch_latency(value) -> float | None:
    """``max_batch_latency`` as seconds: ``None`` (or infinity) for unbounded, else a number >= 0.

    Accepts a number of seconds or a ``datetime.timedelta`` / ``pandas.Timedelta`` /
    ``numpy.timedelta64``; anything else (negative, NaN, text, bool) raises :class:`~cep_gpu.errors.ArgumentError`
    (a ``ValueError``).
    """
    if value is None:
        return None
    secs = math.nan  # anything not understood below is rejected
    if isinstance(value, datetime.timedelta):
        secs = value.total_seconds()
    elif isinstance(value, np.timedelta64):
        secs = float(value / np.timedelta64(1, "ns")) / 1e9
    elif isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        secs = float(value)
    if math.isnan(secs) or secs < 0:
        raise ArgumentError(f"max_batch_latency must be None (unbounded) or a number of seconds >= 0, got {value!r}")
    return None if math.isinf(secs) else secs


@dataclass(frozen=True)
class Decision:
    """The planner's choice for one batch of terminators, with the two estimates behind it."""

    device: str
    cpu_s: float
    gpu_s: float
    first: int
    stop: int
    reason: str


def decide(profile: Profile, features: Mapping[str, float], gpu_usable: bool) -> tuple[str, float, float, str]:
    """``(device, cpu_estimate_s, gpu_estimate_s, reason)``: the GPU only when usable and cheaper."""
    cpu_s = profile.cost("cpu", features)
    gpu_s = profile.cost("gpu", features)
    if not gpu_usable:
        return "cpu", cpu_s, gpu_s, "no usable GPU"
    if gpu_s < cpu_s:
        return "gpu", cpu_s, gpu_s, "GPU estimate lower"
    return "cpu", cpu_s, gpu_s, "CPU estimate lower or equal"


def _largest_batch(work: RuleWork, profile: Profile, dev: str, cum: np.ndarray, i: int, bound: float) -> int:
    """The largest ``j > i`` such that the batch ``i:j`` is estimated within ``bound`` on ``dev``
    (``i + 1`` when even one terminator exceeds it)."""
    n = len(work.term_rows)
    coef = profile.cpu if dev == "cpu" else profile.gpu
    # without the per-batch features (launch, events read) the cost is a prefix sum
    j = min(n, int(np.searchsorted(cum, cum[i] + bound - coef["launches"], "right")) - 1)
    if j <= i:
        return i + 1
    if coef["events"] == 0.0:
        return j
    # the events a batch reads only grow with it: binary search for the largest batch that fits
    lo, hi = i, j
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if profile.cost(dev, work.batch_features(i, mid)) <= bound:
            lo = mid
        else:
            hi = mid - 1
    return max(lo, i + 1)


def plan_batches(
    work: RuleWork, profile: Profile, gpu_usable: bool, max_batch_latency: float | None = None
) -> list[Decision]:
    """Split the terminators into launches and decide each one.

    ``max_batch_latency`` (seconds): a batch grows while the estimate of the device it would
    use stays within the bound (at least one terminator per batch); ``None``: one batch with every
    terminator; ``0``: one terminator per batch.
    """
    n = len(work.term_rows)
    if n == 0:
        return []
    bounds: list[tuple[int, int]]
    if max_batch_latency is None or math.isinf(max_batch_latency):
        bounds = [(0, n)]
    elif max_batch_latency <= 0:
        bounds = [(i, i + 1) for i in range(n)]
    else:
        devices = DEVICES if gpu_usable else ("cpu",)
        cum = {}
        for dev in devices:
            coef = np.array([(profile.cpu if dev == "cpu" else profile.gpu)[f] for f in FEATURES])
            cum[dev] = np.concatenate([[0.0], np.cumsum(work.per_terminator @ coef)])
        bounds, i = [], 0
        while i < n:
            # as many terminators as some device can take within the bound; the cheaper device
            # of that batch is then within the bound too
            stop = max(_largest_batch(work, profile, dev, cum[dev], i, max_batch_latency) for dev in devices)
            bounds.append((i, stop))
            i = stop
    out = []
    for i, j in bounds:
        dev, c, g, why = decide(profile, work.batch_features(i, j), gpu_usable)
        out.append(Decision(dev, c, g, i, j, why))
    return out


# ----------------------------------------------------------------------------------------------
# The auto backend


@dataclass
class BackendStats:
    """What one device did for an :class:`AutoBackend` (see :meth:`AutoBackend.stats`)."""

    decisions: int = 0
    terminators: int = 0
    seconds: float = 0.0
    estimated_s: float = 0.0


_KEEP = object()


class AutoBackend:
    """``backend="auto"``: plans each rule's terminators into batches, runs each batch on the
    device the cost model picks, and keeps per-device statistics.

    ``cpu``/``gpu`` may be given (backend objects) for testing; by default they are the registered
    ``cpu`` and ``gpu`` backends, and the GPU is used only if it can be created here.
    ``max_batch_latency`` (seconds, see :func:`plan_batches`): ``None`` plans every terminator of
    a call as one batch. :func:`cep_gpu.backends.get_backend` returns one shared instance (with
    ``None``); :meth:`with_options` gives a separately configured one with its own statistics.
    """

    name = "auto"

    def __init__(
        self,
        profile: Profile | str | os.PathLike | None = None,
        max_batch_latency: float | None = None,
        cpu: Backend | None = None,
        gpu: Backend | None = None,
        gpu_available: bool | None = None,
    ) -> None:
        self.profile = load_profile(profile)
        self.max_batch_latency = check_max_batch_latency(max_batch_latency)
        self._cpu = cpu
        self._gpu = gpu
        self._gpu_available = gpu_available if gpu_available is not None else (True if gpu else None)
        self._lock = threading.Lock()
        self._stats = {d: BackendStats() for d in DEVICES}
        self.last_decisions: dict[str, list[Decision]] = {}

    def with_options(self, max_batch_latency=_KEEP, profile=_KEEP) -> AutoBackend:
        """A new auto backend with these settings and its own statistics; it shares this one's
        device backends and its answer to whether a GPU is usable (nothing is re-probed)."""
        return AutoBackend(
            self.profile if profile is _KEEP else profile,
            self.max_batch_latency if max_batch_latency is _KEEP else max_batch_latency,
            self._cpu, self._gpu, self.gpu_available,
        )

    # -- devices ----------------------------------------------------------------------------------

    @property
    def cpu(self) -> Backend:
        if self._cpu is None:
            self._cpu = get_backend("cpu")
        return self._cpu

    @property
    def gpu_available(self) -> bool:
        if self._gpu_available is None:
            self._gpu_available = gpu_usable()
        return self._gpu_available

    @property
    def gpu(self) -> Backend:
        if self._gpu is None:
            self._gpu = get_backend("gpu")
        return self._gpu

    # -- the backend contract ---------------------------------------------------------------------

    def match(
        self,
        rule: Rule,
        table: EventTable,
        lo: int = 0,
        hi: int | None = None,
        excluded: np.ndarray | None = None,
    ) -> Matches:
        return Matches.concat(rule, self._dispatch(rule, table, lo, hi, excluded, counting=False))

    def count(self, rule: Rule, table: EventTable, lo: int = 0, hi: int | None = None) -> int:
        """``len(self.match(rule, table, lo, hi))`` (``detect(..., output="count")``), planned and
        counted like ``match``; each batch uses its device backend's own ``count`` where it has
        one (CDP counts without building the matches of the last step)."""
        return int(sum(self._dispatch(rule, table, lo, hi, None, counting=True)))

    def _dispatch(self, rule, table, lo, hi, excluded, counting: bool) -> list:
        if not self.gpu_available:
            # Nothing to choose: one CPU call over the whole range (splitting it could not lower
            # the latency of events handed over together), and no estimate (it could not change
            # the choice; `explain` shows it). Still counted as one decision.
            n_term = _count_terminators(rule, table, lo, hi)
            self.last_decisions[rule.name] = [Decision("cpu", math.nan, math.nan, 0, n_term, "no usable GPU")]
            return [self._run("cpu", rule, table, lo, hi, excluded, n_term, 0.0, counting)]
        hi = len(table) if hi is None else hi
        work = estimate_work(rule, table, lo, hi)
        # consuming rules: one batch, so that consumption stays in terminator order on one device
        latency = None if rule.consuming else self.max_batch_latency
        decisions = plan_batches(work, self.profile, True, latency)
        self.last_decisions[rule.name] = decisions
        parts = []
        n = len(work.term_rows)
        for d in decisions:
            # a batch owns the rows from its first terminator up to the next batch's first one
            b_lo = lo if d.first == 0 else int(work.term_rows[d.first])
            b_hi = hi if d.stop >= n else int(work.term_rows[d.stop])
            est = d.gpu_s if d.device == "gpu" else d.cpu_s
            parts.append(self._run(d.device, rule, table, b_lo, b_hi, excluded, d.stop - d.first, est, counting))
        return parts

    def _run(self, device, rule, table, lo, hi, excluded, n_term, est, counting=False):
        impl = self.cpu if device == "cpu" else self.gpu
        t0 = time.perf_counter()
        # counting: `excluded` is None (count_matches is only used without consumption)
        out = count_matches(impl, rule, table, lo, hi) if counting else impl.match(rule, table, lo, hi, excluded)
        dt = time.perf_counter() - t0
        with self._lock:
            s = self._stats[device]
            s.decisions += 1
            s.terminators += n_term
            s.seconds += dt
            s.estimated_s += est
        return out

    # -- reporting --------------------------------------------------------------------------------

    def stats(self) -> dict[str, dict]:
        """Per device (``"cpu"``, ``"gpu"``): ``decisions`` (batches run there), ``terminators``,
        ``seconds`` (measured in its ``match``) and ``estimated_s`` (the planner's estimates of
        those batches; 0 where no GPU is usable, as nothing is estimated then). Where the device's
        backend object has been created and has a ``stats()`` of its own (device memory, ...),
        it is included under ``"backend"``."""
        with self._lock:
            out: dict[str, dict] = {d: dict(vars(s)) for d, s in self._stats.items()}
        for dev, impl in (("cpu", self._cpu), ("gpu", self._gpu)):
            own = getattr(impl, "stats", None) if impl is not None else None
            if callable(own):
                out[dev]["backend"] = own()
        return out

    def explain(self, rule: Rule, table_or_rates: EventTable | Mapping[str, float] | None = None) -> str:
        """For :meth:`cep_gpu.Engine.explain`: what CDP does for ``rule`` (the cpu backend's own
        explanation), the decisions of the last ``match`` of this rule, and, given events or rates,
        :func:`explain_plan` with this backend's profile and GPU availability."""
        parts = []
        cpu_explain = getattr(self.cpu, "explain", None)
        if callable(cpu_explain):
            parts.append(cpu_explain(rule))
        if table_or_rates is not None:
            parts.append(explain_plan(rule, table_or_rates, self.profile, self.gpu_available))
        else:
            parts.append(f"planner: GPU {'usable' if self.gpu_available else 'not usable'}; "
                         f"profile {self.profile.source}")
        latency = ("unbounded (one batch per call)" if self.max_batch_latency is None
                   else "0 (one terminator per batch)" if self.max_batch_latency == 0
                   else _fmt_s(self.max_batch_latency))
        parts.append(f"planner: max batch latency {latency}")
        last = self.last_decisions.get(rule.name, [])
        for d in last[:5]:
            est = "" if math.isnan(d.cpu_s) else f": cpu {_fmt_s(d.cpu_s)}, gpu {_fmt_s(d.gpu_s)}"
            parts.append(f"planner: last run, {d.stop - d.first} terminator(s) -> {d.device} ({d.reason}){est}")
        if len(last) > 5:
            parts.append(f"planner: ... {len(last) - 5} more batch(es) in the last run")
        return "\n".join(parts)

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = {d: BackendStats() for d in DEVICES}


def _count_terminators(rule: Rule, table: EventTable, lo: int, hi: int | None) -> int:
    """Terminators of ``rule`` in rows ``[lo, hi)`` (events of a terminator type that pass its
    static filters), summed over the rule's plans as :func:`estimate_work` counts them."""
    return sum(
        len(_column_rows(rule, table, plan.terminator, plan.predicates[plan.terminator].event_type, lo, hi))
        for plan in rule.plans
    )


def backend_for(name: str, max_batch_latency=None, private: bool = False) -> Backend:
    """The backend called ``name``, configured with ``max_batch_latency`` (seconds; ``None``:
    unbounded), for one ``detect`` call or one :class:`~cep_gpu.Engine`.

    Only the planner batches: for ``"auto"`` this is the shared instance when it already has that
    setting (and ``private`` is false), else a separately configured copy
    (:meth:`AutoBackend.with_options`), so that a setting never leaks into other calls or threads.
    Other backends process every range of terminators they are handed in one call: they accept the
    setting and ignore it (it is still checked). ``private``: a copy with its own statistics even
    when the setting matches (an Engine's ``stats()`` counts only its own decisions).
    """
    latency = check_max_batch_latency(max_batch_latency)
    impl = get_backend(name)
    configure = getattr(impl, "with_options", None)
    if not callable(configure):
        return impl
    if not private and latency == getattr(impl, "max_batch_latency", _KEEP):
        return impl
    return configure(max_batch_latency=latency)


register("auto", AutoBackend)


# ----------------------------------------------------------------------------------------------
# explain


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def _fmt_ns(ns: int) -> str:
    for unit, size in (("h", 3_600_000_000_000), ("min", 60_000_000_000), ("s", 1_000_000_000), ("ms", 1_000_000)):
        if ns >= size and ns % size == 0:
            return f"{ns // size} {unit}"
    return f"{ns / 1e9:g} s"


def explain_plan(
    rule: Rule,
    table_or_rates: EventTable | Mapping[str, float] | None = None,
    profile: Profile | str | os.PathLike | None = None,
    gpu_available: bool | None = None,
) -> str:
    """Per rule: its columns, windows, expected events per window, the decision and both estimates.

    ``table_or_rates``: an :class:`EventTable` (exact window ranges of every terminator), a mapping
    event type -> events per second (expected ranges), or ``None`` (structure only).
    """
    prof = load_profile(profile)
    usable = gpu_usable() if gpu_available is None else gpu_available
    lines = [f"rule {rule.name} ({rule.syntax}, {len(rule.plans)} plan{'s' if len(rule.plans) > 1 else ''})"]
    work = None
    if isinstance(table_or_rates, EventTable):
        work = estimate_work(rule, table_or_rates)
    elif table_or_rates is not None:
        work = _work_from_rates(rule, table_or_rates)
    steps = {s.pred: s for s in work.steps} if work is not None else {}
    for k, plan in enumerate(rule.plans):
        if len(rule.plans) > 1:
            lines.append(f"  plan {k + 1}: binding order {list(plan.order)}")
        for s, p in enumerate(plan.order):
            pred = plan.predicates[p]
            nfilt = len(static_conditions(rule, p))
            head = f"  column {s}: {pred.event_type}"
            head += f" as {pred.alias}" if pred.alias and pred.alias != pred.event_type else ""
            if s == 0:
                lines.append(f"{head}  terminator, {nfilt} filter(s)")
                continue
            anchor = plan.predicates[pred.anchor].alias if pred.anchor is not None else "?"
            line = f"{head}  {pred.policy} within {_fmt_ns(int(pred.window or 0))} from {anchor}, {nfilt} filter(s)"
            st = steps.get(p)
            if st is not None:
                line += (
                    f"; expected {st.events_per_window:.1f} events per window, selectivity "
                    f"{st.selectivity:.3g}, {st.partials_out:.3g} partial sequences out"
                )
            lines.append(line)
    for neg in rule.negations:
        lines.append(f"  not {neg.event_type} ({len(neg.conditions)} condition(s))")
    for agg in rule.aggregates:
        lines.append(f"  {agg.function}({agg.event_type}{'.' + agg.attribute if agg.attribute else ''})")
    if work is None:
        lines.append("  planner: no events or rates given, so no estimate")
        return "\n".join(lines)
    n = len(work.term_rows)
    if n == 0:
        lines.append("  planner: no terminators in the input")
        return "\n".join(lines)
    dev1, c1, g1, why1 = decide(prof, _average_launch(work, isinstance(table_or_rates, EventTable)), usable)
    lines.append(
        f"  per terminator (one launch each): cpu {_fmt_s(c1)}, gpu {_fmt_s(g1)} -> {dev1} ({why1})"
    )
    if isinstance(table_or_rates, EventTable):
        feats = work.batch_features(0, n)
        dev, c, g, why = decide(prof, feats, usable)
        lines.append(
            f"  all {n} terminators in one batch: cpu {_fmt_s(c)}, gpu {_fmt_s(g)} -> {dev} ({why})"
        )
    lines.append(f"  profile: {prof.source}")
    return "\n".join(lines)


def _average_launch(work: RuleWork, from_table: bool) -> dict[str, float]:
    """Features of a launch holding one average terminator (streaming, one event at a time):
    the events to move are the new ones since the previous terminator (columns stay resident)."""
    n = len(work.term_rows)
    f = dict(zip(FEATURES, work.per_terminator.mean(axis=0).tolist()))
    f["launches"] = 1.0
    if from_table:
        f["events"] = work.batch_features(0, n)["events"] / n
    return f


def _work_from_rates(rule: Rule, rates: Mapping[str, float]) -> RuleWork:
    """Expected work of one terminator from event rates (events per second of event time)."""
    idx = {f: k for k, f in enumerate(FEATURES)}
    per = np.zeros((1, len(FEATURES)))
    per[0, idx["terminators"]] = 1.0
    steps: list[StepEstimate] = []
    events = 0.0
    for plan in rule.plans:
        partials = 1.0
        checks = step_checks(rule, plan)
        for s in range(1, len(plan.order)):
            p = plan.order[s]
            pred = plan.predicates[p]
            w = int(pred.window or 0)
            r = float(rates.get(pred.event_type, 0.0)) * w / 1e9
            events += r
            nonstatic = [c for c in checks[s].conditions if c not in static_conditions(rule, p)]
            sel = OTHER_SELECTIVITY ** len(nonstatic)
            pairs = partials * r
            matches = pairs * sel
            out = matches if pred.policy == "each" else partials * min(1.0, r * sel)
            per[0, idx["pairs"]] += pairs
            per[0, idx["matches"]] += matches
            steps.append(StepEstimate(p, pred.event_type, pred.policy or "each", w, r, sel, partials, pairs, matches, out))
            partials = out
        per[0, idx["outputs"]] += partials
    per[0, idx["events"]] = events
    return RuleWork(rule, np.zeros(1, np.int64), np.zeros(1, np.int64), per, steps, [], rule.lookback())


def explain_rules(rules, table_or_rates=None, profile=None, gpu_available: bool | None = None) -> str:
    """:func:`explain_plan` for several rules, separated by blank lines."""
    return "\n\n".join(explain_plan(r, table_or_rates, profile, gpu_available) for r in rules)


if __name__ == "__main__":  # pragma: no cover - convenience: print the active profile
    json.dump(load_profile().to_json(), sys.stdout, indent=2)
