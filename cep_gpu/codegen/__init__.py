"""Rule model -> specialised kernels: lowering (:mod:`.spec`), Numba source (:mod:`.numba_src`),
and a cache keyed by a hash of the rule's structure and the kinds of its attribute arrays.

``compile_numba(spec, kinds)`` returns a :class:`NumbaRule` with the generated njit functions.
The source is checked (:func:`.numba_src.check_source`) and executed in a fresh namespace that
holds only NumPy, Numba and the two binary-search helpers: no builtins beyond what it needs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numba
import numpy as np

from ..kernels.cpu import lower_bound, upper_bound
from . import cache
from .numba_src import CodegenError, check_source, emit_source
from .spec import KeySpec, Layout, PlanSpec, RuleSpec, StepSpec, lower

__all__ = [
    "CodegenError",
    "KeySpec",
    "Layout",
    "NumbaRule",
    "PlanSpec",
    "RuleSpec",
    "StepSpec",
    "compile_numba",
    "lower",
    "rule_key",
]


@dataclass
class NumbaRule:
    """The generated functions of one rule: ``valid[plan][step]``, ``aggs_all``, and the source."""

    valid: list[list]
    aggs_all: object
    source: str
    #: Kleene position -> (per-element check ``kel<k>``, consecutive check ``kpair<k>``)
    kleene: dict | None = None


def rule_key(spec: RuleSpec, kinds: dict[str, str | None]) -> str:
    """A hash of what the generated code depends on: the rule's structure (not its name or text)
    and the kind of every attribute array it reads."""
    r = spec.rule
    parts = (
        r.plans, r.conditions, r.negations, r.aggregates, spec.use_index,
        tuple((a, kinds.get(a)) for a in spec.layout.attrs),
    )
    return hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=16).hexdigest()


_CACHE: dict[str, NumbaRule] = {}


def compile_numba(spec: RuleSpec, kinds: dict[str, str | None]) -> NumbaRule:
    """Generate, check and compile the rule's kernels (cached by :func:`rule_key`)."""
    key = rule_key(spec, kinds)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    source = emit_source(spec, kinds)
    check_source(source)
    namespace = {
        "__builtins__": {"float": float, "range": range, "min": min, "max": max},
        "numba": numba,
        "np": np,
        "lower_bound": lower_bound,
        "upper_bound": upper_bound,
    }
    names = [f"valid_{p}_{s.step}" for p, plan in enumerate(spec.plans) for s in plan.steps]
    # the checked source, cached on disk (see .cache): its functions and the generic kernels'
    # wrappers for each of them (trusted template text, names only from the checked source)
    full = "\n\n".join((
        source,  # (its functions are compiled into the cached wrappers that call them)
        cache.wrapper_source(names, cache.STEP_KERNELS),
        cache.wrapper_source(["aggs_all"], cache.AGG_KERNELS),
    )) + "\n"
    namespace = cache.load_kernels(full, f"<cep_gpu kernels {key[:12]}>", namespace)
    cache.specialise_all(namespace, names, cache.STEP_KERNELS)
    cache.specialise_all(namespace, ["aggs_all"], cache.AGG_KERNELS)
    cache.specialise_trivial()
    valid = [
        [namespace[f"valid_{p}_{s.step}"] for s in plan.steps] for p, plan in enumerate(spec.plans)
    ]
    kleene = {k: (namespace[f"kel{k}"], namespace[f"kpair{k}"]) for k in spec.rule.kleene_positions}
    out = NumbaRule(valid, namespace["aggs_all"], source, kleene)
    if len(_CACHE) >= 4096:  # bounded; compiled code of evicted rules is freed with them
        _CACHE.clear()
    _CACHE[key] = out
    return out
