"""``backend="auto"``: :class:`AutoBackend` plans each rule's terminators into batches and runs
each batch on the device the cost model picks."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..backends import Backend, Matches, count_matches, get_backend, gpu_usable, register
from ..events import EventTable
from ..model import Rule
from .batches import Decision, check_max_batch_latency, plan_batches
from .explain import explain_plan, fmt_seconds
from .profile import DEVICES, Profile, load_profile
from .work import count_terminators, estimate_work


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
            n_term = count_terminators(rule, table, lo, hi)
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

    def record(self, rule: Rule, device: str, terminators: int, seconds: float, reason: str) -> None:
        """Count a batch that someone else ran for this backend (the engine's streaming fast
        path, :mod:`cep_gpu.stream_match`) in :meth:`stats` and the last decisions."""
        with self._lock:
            s = self._stats[device]
            s.decisions += 1
            s.terminators += terminators
            s.seconds += seconds
        self.last_decisions[rule.name] = [Decision(device, math.nan, math.nan, 0, terminators, reason)]

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

    def explain(self, rule: Rule, sample: EventTable | Mapping[str, float] | None = None) -> str:
        """For :meth:`cep_gpu.Engine.explain`: what CDP does for ``rule`` (the cpu backend's own
        explanation), the decisions of the last ``match`` of this rule, and, given events or rates,
        :func:`explain_plan` with this backend's profile and GPU availability."""
        parts = []
        parts.append(self.cpu.explain(rule))
        if sample is not None:
            parts.append(explain_plan(rule, sample, self.profile, self.gpu_available))
        else:
            parts.append(f"planner: GPU {'usable' if self.gpu_available else 'not usable'}; "
                         f"profile {self.profile.source}")
        latency = ("unbounded (one batch per call)" if self.max_batch_latency is None
                   else "0 (one terminator per batch)" if self.max_batch_latency == 0
                   else fmt_seconds(self.max_batch_latency))
        parts.append(f"planner: max batch latency {latency}")
        last = self.last_decisions.get(rule.name, [])
        for d in last[:5]:
            est = "" if math.isnan(d.cpu_s) else f": cpu {fmt_seconds(d.cpu_s)}, gpu {fmt_seconds(d.gpu_s)}"
            parts.append(f"planner: last run, {d.stop - d.first} terminator(s) -> {d.device} ({d.reason}){est}")
        if len(last) > 5:
            parts.append(f"planner: ... {len(last) - 5} more batch(es) in the last run")
        return "\n".join(parts)

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = {d: BackendStats() for d in DEVICES}



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
