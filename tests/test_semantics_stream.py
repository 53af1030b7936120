"""Semantics, hand-worked, through the streaming ``Engine``: the cases of docs/language.md where the
streaming path has logic of its own (held matches of trailing negations, consumption across
publishes, composite events at an input's timestamp), on each Engine backend, one event per
publish and in chunks. Each expected result is the batch one (``detect``), worked out by hand.

How the cases are written: tests/semantics_cases.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from semantics_cases import E

import cep_gpu

ENGINE_BACKENDS = ["reference", "cpu", "aip"]


def stream_ids(events: pd.DataFrame, rules, backend: str, mode: str, **kw) -> list[tuple[int, ...]]:
    """The ``ids`` of every composite event an Engine produces for ``events`` (published in
    ``(ts, id)`` order: one row per publish, or in three chunks), flush included, in output order
    (ts, rule, ids)."""
    ev = events.copy()
    if "id" not in ev.columns:
        ev["id"] = np.arange(len(ev), dtype=np.int64)
    ev = ev.sort_values(["ts", "id"], kind="stable").reset_index(drop=True)
    eng = cep_gpu.Engine(rules, backend=backend, **kw)
    if mode == "rows":
        cuts = list(range(len(ev) + 1))
    else:
        cuts = sorted({0, len(ev) // 3, 2 * len(ev) // 3, len(ev)})
    outs = [eng.publish(ev.iloc[a:b]) for a, b in zip(cuts, cuts[1:])] + [eng.flush()]
    out = pd.concat([o for o in outs if len(o)] or [outs[-1]], ignore_index=True)
    keys = [(r["ts"], r["rule"], tuple(int(i) for i in r["ids"])) for _, r in out.iterrows()]
    return [k[2] for k in sorted(keys)]


@pytest.fixture(params=ENGINE_BACKENDS)
def engine_backend(request) -> str:
    return request.param


@pytest.fixture(params=["rows", "chunks"])
def mode(request) -> str:
    return request.param


# A trailing NOT holds a match back until its span (ts(last), ts(first) + W] has passed. Near the end
# of the int64 nanosecond range ts(first) + W saturates (docs/language.md, "Time"): the span never
# passes, the C inside it rejects the match, and flush must not release it either.
_LATE = E(
    ("A", pd.Timestamp("2260-01-01")),
    ("B", pd.Timestamp("2260-06-01")),
    ("C", pd.Timestamp("2260-07-01")),
)
_HIGH = E(("A", 9.2e9), ("B", 9.2e9 + 1), ("C", 9.2e9 + 2))


@pytest.mark.parametrize("events", [_LATE, _HIGH], ids=["2260", "high"])
def test_trailing_not_near_the_end_of_the_timestamp_range(engine_backend, mode, events):
    rule = "define ET pattern SEQ(A a, B b, NOT(C n)) within 87600 h"
    assert cep_gpu.detect(events, rule, backend="reference").empty
    assert stream_ids(events, rule, engine_backend, mode) == []
    # without the C, the match is released on flush
    assert stream_ids(events.iloc[:2], rule, engine_backend, mode) == [(0, 1)]
