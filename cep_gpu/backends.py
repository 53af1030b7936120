"""The backend contract: what every matcher (reference, cpu, gpu, aip) implements.

A backend finds the matches of one rule over an :class:`~cep_gpu.events.EventTable`. Everything
around that (ingestion, composite-event hierarchies, attributes, sorting, output) is shared and
lives in :mod:`cep_gpu.detect` and :mod:`cep_gpu.output`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .errors import ArgumentError, BackendUnavailableError
from .events import EventTable
from .model import Rule


@dataclass
class Matches:
    """The matches of one rule.

    ``rows``: int64 (n, n_predicates), the table rows bound to each predicate in declaration
    order. ``aggs``: float64 (n, n_aggregates), the value of each aggregate for the match (NaN when
    null). Order does not matter; the caller sorts.

    ``sets``: for rules with Kleene positions, ``{pred: (offsets, flat)}``: match ``m`` bound
    Kleene position ``pred`` to table rows ``flat[offsets[m]:offsets[m + 1]]`` (in row order);
    ``rows[m, pred]`` is the first of them. ``None`` for rules without Kleene positions.
    """

    rows: np.ndarray
    aggs: np.ndarray
    sets: dict[int, tuple[np.ndarray, np.ndarray]] | None = None

    @classmethod
    def empty(cls, rule: Rule) -> Matches:
        sets = {k: (np.zeros(1, np.int64), np.empty(0, np.int64)) for k in rule.kleene_positions}
        return cls(
            np.empty((0, rule.n_predicates), dtype=np.int64),
            np.empty((0, len(rule.aggregates)), dtype=np.float64),
            sets or None,
        )

    def __len__(self) -> int:
        return self.rows.shape[0]

    @classmethod
    def concat(cls, rule: Rule, parts: list[Matches]) -> Matches:
        if not parts:
            return cls.empty(rule)
        sets = None
        if rule.kleene_positions:
            sets = {}
            for k in rule.kleene_positions:
                offs, flats, base = [np.zeros(1, np.int64)], [], 0
                for p in parts:
                    off, flat = p.sets[k]
                    offs.append(off[1:] + base)
                    flats.append(flat)
                    base += int(off[-1])
                sets[k] = (np.concatenate(offs), np.concatenate(flats) if flats else np.empty(0, np.int64))
        return cls(np.concatenate([p.rows for p in parts]), np.concatenate([p.aggs for p in parts]), sets)


class Backend(Protocol):
    """A matcher. ``match`` must be exact: every backend returns the same set of matches."""

    name: str

    def match(
        self,
        rule: Rule,
        table: EventTable,
        lo: int = 0,
        hi: int | None = None,
        excluded: np.ndarray | None = None,
    ) -> Matches:
        """Matches of ``rule`` whose terminator is a row in ``[lo, hi)``.

        Rows before ``lo`` are context (earlier events still inside some window). Rows at or
        after ``hi`` may only serve trailing negations (``SEQ`` ``NOT`` after the last event).
        ``excluded`` (bool per row) marks events consumed by earlier calls: positive predicates
        must not bind them. For rules with ``consuming``, terminators are processed in row order
        and each terminator's composite events consume their bound events before the next one.
        """
        ...

    def explain(self, rule: Rule, sample: EventTable | Mapping[str, float] | None = None) -> str:
        """What this backend does for ``rule``, as text (``Engine.explain``, ``cep-gpu explain``).

        ``sample``: events (an already ingested table) or event type -> events per second, for
        backends whose plan depends on the input (``auto``); the others may ignore it.
        """
        ...


def count_matches(impl: Backend, rule: Rule, table: EventTable, lo: int = 0, hi: int | None = None) -> int:
    """The number of matches of ``rule`` whose terminator is a row in ``[lo, hi)``, nothing
    consumed before (``detect(..., output="count")``).

    Backends may offer ``count(rule, table, lo, hi) -> int`` that counts without building every
    match (CDP counts the pairs of its last step); otherwise the matches are built and counted.
    """
    counter = getattr(impl, "count", None)
    if callable(counter):
        return int(counter(rule, table, lo, hi))
    return len(impl.match(rule, table, lo, hi, None))


_REGISTRY: dict[str, Callable[[], Backend]] = {}


def register(name: str, factory: Callable[[], Backend]) -> None:
    """Make ``backend=name`` available; ``factory`` is called lazily on first use."""
    _REGISTRY[name] = factory


_INSTANCES: dict[str, Backend] = {}

# Modules that register a backend on import. Imported lazily so that importing cep_gpu stays cheap
# and so that a missing optional dependency only affects the backend that needs it.
_PROVIDERS = {
    "reference": "cep_gpu.reference",
    "cpu": "cep_gpu.cdp",
    "gpu": "cep_gpu.kernels.gpu",
    # the GPU kernels compiled for the host and run serially (tests, no GPU needed)
    "gpu-host": "cep_gpu.kernels.host",
    # the same, with the threads of each launch running concurrently (docs/gpu.md)
    "gpu-host-threads": "cep_gpu.kernels.host",
    "auto": "cep_gpu.planner",
    "aip": "cep_gpu.aip",
}


def check_backend_name(name) -> None:
    """Raise :class:`~cep_gpu.errors.ArgumentError` (a ``ValueError``) unless ``name`` names a
    known backend; imports nothing and creates no backend (a driver checks the name its Spark
    tasks will use without needing their GPU)."""
    if not isinstance(name, str) or (name not in _REGISTRY and name not in _PROVIDERS):
        raise _unknown_backend(name)


def _unknown_backend(name) -> ArgumentError:
    known = sorted(set(_REGISTRY) | set(_PROVIDERS))
    return ArgumentError(f"backend: unknown backend {name!r}; choose one of {known}")


def get_backend(name: str) -> Backend:
    """The backend called ``name``; raises :class:`~cep_gpu.errors.ArgumentError` (a ``ValueError``)
    for an unknown name."""
    if name not in _INSTANCES:
        if name not in _REGISTRY and name in _PROVIDERS:
            import importlib

            importlib.import_module(_PROVIDERS[name])
        if name not in _REGISTRY:
            raise _unknown_backend(name)
        _INSTANCES[name] = _REGISTRY[name]()
    return _INSTANCES[name]


def gpu_usable() -> bool:
    """Whether the ``gpu`` backend can run here (a device and its kernels)."""
    try:
        get_backend("gpu")
    except (BackendUnavailableError, ImportError, ValueError):
        return False
    return True
