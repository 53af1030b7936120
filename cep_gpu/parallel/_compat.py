"""The few cep_gpu internals the parallel engine uses, in one place (ingestion and output).

Ingestion goes through ``EventTable`` so that time units, ids, strings and nulls are read
exactly as :func:`cep_gpu.detect` reads them; composite events are assembled by the same code
as ``detect``'s, so the two outputs are equal row for row, attributes included.
"""

from __future__ import annotations

import numpy as np

from ..backends import Matches
from ..detect import composite_events, in_time_units
from ..events import AttributeColumn, EventTable, StringDictionary, TimeFormat
from ..output import OutputSchema, assemble

__all__ = ["EventTable", "StringDictionary", "TimeFormat", "build_output", "ingest"]


def ingest(df, time_unit: str, strings: StringDictionary) -> EventTable:
    return EventTable.from_pandas(df, time_unit=time_unit, strings=strings)


def build_output(rules, results, store, strings: StringDictionary, time: TimeFormat, arrow: bool = False):
    """The output frame of ``results`` (per rule, (n, length) absolute store rows), as ``detect``."""
    parts = [r for r in results if len(r)]
    uniq = np.unique(np.concatenate([r.ravel() for r in parts])) if parts else np.empty(0, np.int64)
    local = uniq - store.base
    table = EventTable(
        ts=store.ts[local], ids=store.ids[local], types=store.types[local],
        type_names=list(store.type_names) or ["_"],
        columns={k: AttributeColumn(kind, v[local], ok[local]) for k, (kind, v, ok) in store.columns.items()},
        strings=strings, time=time, schema={},
    )
    res = []
    for rule, rows in zip(rules, results):
        m = Matches(np.searchsorted(uniq, rows).astype(np.int64), np.empty((len(rows), 0), np.float64))
        res.append(composite_events(in_time_units(rule, time), table, m))
    return assemble(res, OutputSchema.of(rules), table, arrow=arrow)
