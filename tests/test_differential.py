"""The one differential test: every backend, and the streaming ``Engine`` fed in random chunks,
returns exactly the rows of the reference matcher on generated rules and streams.

``CEP_DEEP=1`` runs it at 10,000 generated cases per backend pair (``CEP_DEEP=<n>``: n cases);
docs/architecture.md records the last deep run. The default is a quick pass that keeps the suite
fast; hand-worked cases live in the feature tests.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest
from conftest import BACKENDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import rules_and_streams

import cep_gpu
from cep_gpu.errors import CepError


def _cases() -> int:
    deep = os.environ.get("CEP_DEEP", "")
    if deep in ("", "0"):
        return 40
    return 10_000 if deep == "1" else int(deep)


CASES = _cases()
SETTINGS = settings(
    max_examples=CASES, deadline=None, suppress_health_check=list(HealthCheck), database=None
)

#: every backend but the oracle, plus the streaming Engine (over the cpu backend) in random chunks
TARGETS = [b for b in BACKENDS if b != "reference"] + ["auto", "engine"]


def rows(out) -> list[tuple]:
    """Output rows as comparable tuples (rule, ts, ids, attributes; NaN/None/NA as None), sorted;
    ``out`` is one frame or a list of frames (successive publishes)."""
    if isinstance(out, list):
        return sorted((r for part in out for r in rows(part)), key=repr)
    cols = [c for c in out.columns if c not in ("rule", "ts", "ids")]
    found = []
    for k in range(len(out)):
        attrs = tuple(None if pd.isna(out[c].iloc[k]) else out[c].iloc[k] for c in cols)
        ids = tuple(int(i) for i in out["ids"].iloc[k])
        found.append((out["rule"].iloc[k], out["ts"].iloc[k], ids, attrs))
    return sorted(found, key=repr)


def run(target: str, events: pd.DataFrame, text: str, cuts: list[int]):
    """The output of ``target`` on ``events``: one ``detect`` call, or for ``"engine"`` the
    publishes of the chunks between ``cuts`` plus the flush."""
    if target != "engine":
        return cep_gpu.detect(events, text, backend=target)
    engine = cep_gpu.Engine(text, backend="cpu")
    parts, prev = [], 0
    for c in sorted(cuts) + [len(events)]:
        parts.append(engine.publish(events.iloc[prev:c]))
        prev = c
    parts.append(engine.flush())
    return parts


@pytest.mark.parametrize("target", TARGETS)
@SETTINGS
@given(case=rules_and_streams(min_events=1), data=st.data())
def test_equals_reference(target, case, data):
    text, events = case
    cuts = data.draw(st.lists(st.integers(0, len(events)), max_size=6), label="cuts")
    try:
        expected = cep_gpu.detect(events, text, backend="reference")
    except CepError as exc:
        # a rule the reference rejects (e.g. an attribute no event has) is rejected everywhere
        with pytest.raises(type(exc)):
            run(target, events, text, cuts)
        return
    assert rows(run(target, events, text, cuts)) == rows(expected), text


def test_targets_cover_the_backends():
    # a backend that disappeared from the candidates would silently leave the differential
    assert {"cpu", "aip", "gpu-host"} <= set(TARGETS)
