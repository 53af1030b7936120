"""Shared test fixtures: the backends every semantic test runs on, and small output helpers."""

from __future__ import annotations

import importlib.util
import os

import pandas as pd
import pytest
from hypothesis import settings

# Hypothesis profiles. "repeatable" (the default, so `make test` and CI run the same examples):
# each test draws its examples from a seed fixed by the test's own code, so a suite that passed
# here passes on a clean clone, and a change to a test draws new examples. "explore": fresh
# random examples per run (`--hypothesis-profile=explore`, with `--hypothesis-seed=N` to pick them);
# run it over several seeds after touching a module that property tests cover (docs/architecture.md).
settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

#: (backend name, module that provides it). A backend joins the parametrised tests as soon as its
#: module exists, so every backend must pass the chapter examples and the hand-worked cases.
_CANDIDATES = [
    ("reference", "cep_gpu.reference"),
    ("cpu", "cep_gpu.cdp"),
    ("aip", "cep_gpu.aip"),
    ("gpu-host", "cep_gpu.kernels.host"),
]


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


BACKENDS = [name for name, module in _CANDIDATES if _available(module)]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Each available backend name in turn."""
    return request.param


def id_tuples(out: pd.DataFrame, rule: str | None = None) -> list[tuple[int, ...]]:
    """The ``ids`` of a detect/publish output as tuples (optionally of one rule), in output order."""
    if rule is not None:
        out = out[out["rule"] == rule]
    return [tuple(int(i) for i in ids) for ids in out["ids"].tolist()]
