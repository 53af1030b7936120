"""The few cep_gpu internals the parallel engine uses, in one place (ingestion and output).

Ingestion goes through ``EventTable`` so that time units, ids, strings and nulls are read
exactly as :func:`cep_gpu.detect` reads them, and is checked by detect's ``check_schema``; composite events are assembled by the same code
as ``detect``'s, so the two outputs are equal row for row, attributes included.
"""

from __future__ import annotations

import numpy as np

from ..backends import Matches
from ..detect import check_attribute_names, check_schema, composite_events, in_time_units
from ..events import AttributeColumn, EventTable, StringDictionary, TimeFormat
from ..output import OutputSchema, assemble
from .kernels import order_matches

__all__ = ["EventTable", "StringDictionary", "TimeFormat", "build_output", "build_sorted", "check_attribute_names",
           "check_schema", "ingest", "match_term", "store_table"]


def ingest(df, time_unit: str, strings: StringDictionary) -> EventTable:
    return EventTable.from_pandas(df, time_unit=time_unit, strings=strings)


def build_output(rules, results, store, strings: StringDictionary, time: TimeFormat, arrow: bool = False):
    """The output frame of ``results`` (per rule, (n, length) absolute store rows), as ``detect``:
    one part, built by the calling thread (sorted by ``kernels.order_matches``)."""
    table = store_table(store, strings, time)
    local = [order_matches(np.ascontiguousarray(rows, dtype=np.int64), match_term(rule), store.ts, store.ids,
                           store.base) for rule, rows in zip(rules, results)]
    return build_sorted(rules, local, table, arrow)


def match_term(rule) -> int:
    """The position whose event is a match's timestamp (``-1``: the latest of its events), as
    ``detect``'s ``match_ts`` reads it."""
    return rule.plans[0].terminator if len(rule.plans) == 1 else -1


def store_table(store, strings: StringDictionary, time: TimeFormat) -> EventTable:
    """The store's events as an ``EventTable`` (its arrays, not copies): output parts index it by
    local row, with no gather of the rows they use."""
    return EventTable(
        ts=store.ts, ids=store.ids, types=store.types, type_names=list(store.type_names) or ["_"],
        columns={k: AttributeColumn(kind, v, ok) for k, (kind, v, ok) in store.columns.items()},
        strings=strings, time=time, schema={},
    )


def build_sorted(rules, local, table: EventTable, arrow: bool = False):
    """The output frame of ``local`` (per rule, (n, length) rows of ``table`` already in (ts, ids)
    order, ``kernels.order_matches``): ``detect``'s composite events, which then skip their sort."""
    res = [composite_events(in_time_units(rule, table.time), table,
                            Matches(rows, np.empty((len(rows), 0), np.float64)))
           for rule, rows in zip(rules, local)]
    return assemble(res, OutputSchema.of(rules), table, arrow=arrow)
