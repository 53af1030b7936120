"""Kleene closure (``KL(T b)`` in ``SEQ`` patterns): the output limit and backend support.

The semantics are in docs/language.md ("Kleene closure"); the reference matcher defines them.
This module holds what the backends share about Kleene positions besides the model:

* :func:`max_matches` / :func:`limit`: the documented limit on the estimated number of matches of
  one rule in one call (``detect``, one ``Engine.publish``); :func:`check_estimate` raises
  :class:`~cep_gpu.errors.MatchLimitError` before the matches are built.
* :func:`require_support`: the clear error of a backend that does not evaluate Kleene positions.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterator
from contextvars import ContextVar

from .errors import ArgumentError, MatchLimitError, UnsupportedFeatureError
from .model import Rule

#: The default limit on the estimated matches of one rule in one call.
DEFAULT_MAX_MATCHES = 10_000_000

#: Backends that evaluate Kleene positions.
KLEENE_BACKENDS = ("reference", "cpu", "auto", "aip", "gpu", "gpu-host", "gpu-host-threads")

_LIMIT: ContextVar[int] = ContextVar("cep_gpu_max_matches", default=DEFAULT_MAX_MATCHES)


def max_matches() -> int:
    """The limit in force (``DEFAULT_MAX_MATCHES`` unless set with :func:`limit`)."""
    return _LIMIT.get()


@contextlib.contextmanager
def limit(n: int) -> Iterator[None]:
    """Set the limit on the estimated matches of one rule in one call, for the ``with`` block.

    >>> import cep_gpu.kleene
    >>> with cep_gpu.kleene.limit(10**8):
    ...     pass
    """
    # any integer (a NumPy one included), not a bool (np.bool_ is no Integral)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ArgumentError(f"max_matches must be a positive int, got {n!r}")
    token = _LIMIT.set(int(n))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def limit_or_default(n: int | None) -> contextlib.AbstractContextManager:
    """:func:`limit` of ``n``, or the limit in force unchanged when ``n`` is None."""
    return contextlib.nullcontext() if n is None else limit(n)


def check_estimate(rule: Rule, pred: int, estimate: float) -> None:
    """Raise :class:`MatchLimitError` when ``estimate`` (the matches so far estimated for
    ``rule`` in this call, with Kleene position ``pred``'s sets) exceeds the limit."""
    cap = max_matches()
    if estimate <= cap:
        return
    p = rule.predicates[pred]
    k = p.kleene
    # the reference counts exactly (a Python int, possibly past float64's range); the compiled
    # backends in float64 (inf past 2^1023): both read the same
    try:
        shown = float(estimate)
    except OverflowError:
        shown = math.inf
    amount = f"about {shown:.3g}" if math.isfinite(shown) else "more than 1e+308"
    bound = "" if k is None or k.max_size is None else f" (now [{k.min_size}..{k.max_size}])"
    raise MatchLimitError(
        f"rule {rule.name!r}: Kleene position {p.alias!r} may produce {amount} matches "
        f"(every subset of its candidates, before consecutive and set conditions), over the limit "
        f"max_matches={cap}. Bound it: cap the set size, KL({p.event_type} {p.alias})[1..4]"
        f"{bound}; use 'select greedy' (one set per match); add conditions on {p.alias}'s elements "
        f"or shorten the window; or raise the limit (detect(..., max_matches=N), "
        f"cep_gpu.kleene.limit(N), cep-gpu run --max-matches N)"
    )


def require_support(rule: Rule, backend: str) -> None:
    """Raise :class:`UnsupportedFeatureError` when ``rule`` has a Kleene position: for backends
    that do not evaluate Kleene closure (never wrong rows)."""
    if rule.kleene_positions:
        raise UnsupportedFeatureError(
            f"rule {rule.name!r} uses Kleene closure (KL(...)), which backend {backend!r} does not "
            f"support yet; use one of {', '.join(KLEENE_BACKENDS)} (auto picks cpu or gpu)"
        )
