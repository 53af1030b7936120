"""Helpers of the cases modelled on other engines' published test outputs
(tests/test_opencep_semantics.py, test_flink_semantics.py, test_siddhi_semantics.py,
test_trex_semantics.py, test_esper_semantics.py): the backends, events from columns, and the matches
as sorted row numbers."""

from __future__ import annotations

import pandas as pd

import cep_gpu

BACKENDS = ["reference", "cpu", "aip", "gpu-host", "auto"]


def frame(types, ts, **attrs) -> pd.DataFrame:
    """Events of ``types`` at times ``ts`` (seconds), with attribute columns ``attrs``."""
    events = pd.DataFrame({"type": types, "ts": [float(t) for t in ts]})
    for name, values in attrs.items():
        events[name] = values
    return events


def ids(events: pd.DataFrame, rules, backend: str) -> list[tuple[int, ...]]:
    """Every match of every rule (one rule text or a list of them), as sorted row numbers (a
    Kleene set's order is its time order)."""
    out = []
    for rule in [rules] if isinstance(rules, str) else rules:
        out += [tuple(int(i) for i in row) for row in cep_gpu.detect(events, rule, backend=backend)["ids"]]
    return sorted(out)
