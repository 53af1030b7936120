"""The one differential test: every backend, and the streaming ``Engine`` fed in random chunks,
returns exactly the rows of the reference matcher on generated rules and streams.

``detect`` targets must give the reference's rows in the same order (the output contract sorts
them) and the same ``output="count"`` numbers; the Engine's rows arrive over several publishes
and are compared as a set. ``CEP_DEEP=1`` runs 10,000 generated cases per backend pair
(``CEP_DEEP=<n>``: n cases); docs/architecture.md records the last deep run. The default is a
quick pass; hand-worked cases live in the feature tests.
"""

from __future__ import annotations

import math
import os

import pandas as pd
import pytest
from conftest import BACKENDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import rules_and_streams

import cep_gpu
from cep_gpu.errors import CepError

#: every backend but the oracle, and the streaming Engine over the cpu and reference backends
TARGETS = [b for b in BACKENDS if b != "reference"] + ["auto", "engine:cpu", "engine:reference"]

#: quick-pass cases per target: the cheap ones get more (cpu, gpu-host and auto compile kernels
#: per rule); CEP_DEEP raises them all
QUICK = {"aip": 150, "engine:reference": 60, "cpu": 25, "gpu-host": 25, "auto": 15, "engine:cpu": 15}


def cases(target: str) -> int:
    deep = os.environ.get("CEP_DEEP", "")
    if deep in ("", "0"):
        return QUICK.get(target, 25)
    return 10_000 if deep == "1" else int(deep)


def rows(out, ordered: bool = True) -> list[tuple]:
    """Output rows as comparable tuples (rule, ts, ids, attributes; NaN/None/NA as None); in output
    order, or sorted (``ordered=False``); ``out`` is one frame or a list (successive publishes)."""
    if isinstance(out, list):
        return sorted((r for part in out for r in rows(part)), key=repr)
    cols = [c for c in out.columns if c not in ("rule", "ts", "ids")]
    found = []
    for k in range(len(out)):
        attrs = tuple(None if pd.isna(out[c].iloc[k]) else out[c].iloc[k] for c in cols)
        ids = tuple(int(i) for i in out["ids"].iloc[k])
        found.append((out["rule"].iloc[k], out["ts"].iloc[k], ids, attrs))
    return found if ordered else sorted(found, key=repr)


def same_value(a, b) -> bool:
    # aggregates summed in another order (GPU kernels) may differ in the last bits
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def assert_same(got: list[tuple], want: list[tuple], text: str) -> None:
    assert len(got) == len(want), (text, got, want)
    for g, w in zip(got, want):
        assert g[:3] == w[:3] and len(g[3]) == len(w[3]), (text, g, w)
        assert all(same_value(x, y) for x, y in zip(g[3], w[3])), (text, g, w)


def run(target: str, events: pd.DataFrame, text: str, cuts: list[int]):
    """``detect`` on ``target``, or for ``engine:<backend>`` the publishes of the chunks between
    ``cuts`` and the flush."""
    if not target.startswith("engine:"):
        return cep_gpu.detect(events, text, backend=target)
    engine = cep_gpu.Engine(text, backend=target.partition(":")[2])
    parts, prev = [], 0
    for c in sorted(cuts) + [len(events)]:
        parts.append(engine.publish(events.iloc[prev:c]))
        prev = c
    parts.append(engine.flush())
    return parts


def check(target: str, text: str, events: pd.DataFrame, cuts: list[int]) -> None:
    try:
        expected = cep_gpu.detect(events, text, backend="reference")
    except CepError as exc:
        # a rule the reference rejects (e.g. an attribute no event has) is rejected everywhere
        with pytest.raises(type(exc)):
            run(target, events, text, cuts)
        return
    got = run(target, events, text, cuts)
    if isinstance(got, list):
        assert_same(rows(got), rows(expected, ordered=False), text)
        return
    assert_same(rows(got), rows(expected), text)
    # output="count" may count without building the matches: the same numbers per rule
    want = expected["rule"].value_counts().to_dict()
    counted = cep_gpu.detect(events, text, backend=target, output="count")
    assert {k: v for k, v in counted.items() if v} == want, text


@pytest.mark.parametrize("target", TARGETS)
def test_equals_reference(target):
    ran = [0]

    @settings(max_examples=cases(target), deadline=None, suppress_health_check=list(HealthCheck),
              database=None)
    @given(case=rules_and_streams(), data=st.data())
    def differential(case, data):
        text, events = case
        cuts = data.draw(st.lists(st.integers(0, len(events)), max_size=6), label="cuts")
        ran[0] += 1
        check(target, text, events, cuts)

    differential()
    report = os.environ.get("CEP_DEEP_REPORT")
    if report:  # the deep run's record: cases compared (all passed, or the test failed above)
        with open(report, "a", encoding="utf-8") as f:
            f.write(f"{target} cases={ran[0]} mismatches=0\n")


def test_targets_cover_the_backends():
    # a backend that disappeared from the candidates would silently leave the differential
    assert {"cpu", "aip", "gpu-host", "auto", "engine:cpu"} <= set(TARGETS)


def test_the_comparison_can_fail():
    ev = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "y": [0.5, 1.5]})
    out = cep_gpu.detect(ev, "define S(v: float) pattern SEQ(A a, B b) within 5 s return v := a.y",
                         backend="reference")
    assert_same(rows(out), rows(out), "")
    changed = out.assign(v=[0.6])
    with pytest.raises(AssertionError):
        assert_same(rows(changed), rows(out), "")
    with pytest.raises(AssertionError):
        assert_same([], rows(out), "")
