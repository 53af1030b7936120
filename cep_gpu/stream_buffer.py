"""The streaming engine's event buffer and its one-event ingestion, without pandas.

:class:`AppendBuffer` holds the rows of the sliding window as column arrays with spare capacity:
appending rows that come after the last one is a copy into the free tail (amortised O(1) per
row: the capacity doubles), and expiry moves a start offset (O(1)); the live rows are compacted
to a fresh array only when the dead prefix outgrows them. :meth:`AppendBuffer.table` hands out an
:class:`~cep_gpu.events.EventTable` whose arrays are views of the live rows, which every rule
reads (the columns are shared, not copied per rule). Rows that must go in the middle (a composite
event released late by a trailing ``NOT``) and attribute kinds that change (an int attribute that
later holds floats) take the general :meth:`EventTable.concat`, so the buffer always equals
what ``concat`` of everything would give.

:func:`table_from_record` turns one event given as a dict into a one-row table directly, for
the plain cases (str type, int/float ts, int/float/str/bool attributes); anything else returns
``None`` and goes through pandas, so both paths give identical tables (tested).
"""

from __future__ import annotations

import math

import numpy as np

from .events import (
    _UNIT_NS,
    RESERVED,
    AttributeColumn,
    EventTable,
    StringDictionary,
    TimeFormat,
    _values_as,
)

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_DTYPES = {"int": np.int64, "float": np.float64, "string": np.int32, "bool": np.bool_}


def table_from_record(
    rec: dict, next_id: int, time_unit: str, strings: StringDictionary
) -> EventTable | None:
    """One event (a dict) as a one-row table, as ``EventTable.from_pandas(DataFrame([rec]))``
    would build it; ``None`` when the record is not one of the plain cases handled here."""
    typ, ts = rec.get("type"), rec.get("ts")
    if type(typ) is not str or "ts" not in rec:
        return None
    tts = type(ts)
    if tts is int or tts is np.int64:
        if not _INT64_MIN <= ts <= _INT64_MAX:
            return None
        time = TimeFormat("numeric", unit=time_unit, dtype="int64")
        ns = int(ts) * _UNIT_NS[time_unit]
        if not _INT64_MIN <= ns <= _INT64_MAX:
            return None  # let the general path report it
    elif tts is float or tts is np.float64:
        if not math.isfinite(ts):
            return None
        time = TimeFormat("numeric", unit=time_unit, dtype="float64")
        ns = np.round(np.float64(ts) * _UNIT_NS[time_unit])
        if not -9.2e18 < ns < 9.2e18:
            return None
        ns = int(ns)
    else:
        return None
    if "id" in rec:
        rid = rec["id"]
        if type(rid) is not int or not 0 <= rid <= _INT64_MAX:
            return None
        ids = np.array([rid], np.int64)
    else:
        ids = np.array([next_id], np.int64)
    columns: dict[str, AttributeColumn] = {}
    present: set[str] = set()
    for name, v in rec.items():
        if name in RESERVED:
            continue
        if type(name) is not str:
            return None
        tv = type(v)
        if tv is float:
            ok = not math.isnan(v)
            columns[name] = AttributeColumn("float", np.array([v], np.float64), np.array([ok]))
        elif tv is int:
            if not _INT64_MIN <= v <= _INT64_MAX:
                return None
            columns[name] = AttributeColumn("int", np.array([v], np.int64), np.array([True]))
            ok = True
        elif tv is str:
            columns[name] = AttributeColumn(
                "string", np.array([strings.encode_one(v)], np.int32), np.array([True])
            )
            ok = True
        elif tv is bool:
            columns[name] = AttributeColumn("bool", np.array([v], np.bool_), np.array([True]))
            ok = True
        else:
            return None
        if ok:
            present.add(name)
    return EventTable(
        ts=np.array([ns], np.int64), ids=ids, types=np.zeros(1, np.int32), type_names=[typ],
        columns=columns, strings=strings, time=time, schema={typ: present},
    )


class AppendBuffer:
    """The engine's sliding buffer of rows in (ts, id) order (see the module docstring)."""

    def __init__(self) -> None:
        self._store: EventTable | None = None  # arrays of length capacity; rows [start, end) live
        self._start = 0
        self._end = 0
        self._view: EventTable | None = None

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def capacity(self) -> int:
        """Rows the arrays can hold before they grow (for the memory tests)."""
        return 0 if self._store is None else len(self._store.ts)

    def table(self) -> EventTable | None:
        """The live rows as a table of views (valid until the next change), ``None`` if never filled."""
        if self._store is None:
            return None
        if self._view is None:
            s, e, st = self._start, self._end, self._store
            self._view = EventTable(
                st.ts[s:e], st.ids[s:e], st.types[s:e], list(st.type_names),
                {k: AttributeColumn(c.kind, c.values[s:e], c.valid[s:e]) for k, c in st.columns.items()},
                st.strings, st.time, {t: set(v) for t, v in st.schema.items()},
            )
        return self._view

    def set(self, table: EventTable) -> None:
        """Replace the contents by ``table`` (copied into fresh arrays with spare capacity)."""
        n = len(table)
        cap = max(16, 2 * n)
        self._store = EventTable(
            _grow(table.ts, cap), _grow(table.ids, cap), _grow(table.types, cap), list(table.type_names),
            {k: AttributeColumn(c.kind, _grow(c.values, cap), _grow(c.valid, cap)) for k, c in table.columns.items()},
            table.strings, table.time, {t: set(v) for t, v in table.schema.items()},
        )
        self._start, self._end, self._view = 0, n, None

    def append(self, new: EventTable) -> None:
        """Add ``new`` (sorted, sharing the string dictionary) as ``EventTable.concat`` would."""
        if not len(new):
            if self._store is None:
                self.set(new)
            else:
                self.set(self.table().concat(new))  # an empty table may still bring columns
            return
        if self._store is None:
            self.set(new)
            return
        st, n = self._store, len(new)
        if not self._fits(new):
            self.set(self.table().concat(new))
            return
        if self._end + n > len(st.ts):
            self._reserve(n)
            st = self._store
        s, e = self._end, self._end + n
        remap = np.empty(len(new.type_names), np.int32)
        for i, t in enumerate(new.type_names):
            if t not in st.type_names:
                st.type_names.append(t)
            remap[i] = st.type_names.index(t)
        st.ts[s:e] = new.ts
        st.ids[s:e] = new.ids
        st.types[s:e] = remap[new.types]
        cap = len(st.ts)
        for name, c in st.columns.items():
            b = new.columns.get(name)
            c.values[s:e] = _values_as(b, c.kind, n)
            c.valid[s:e] = b.valid if b is not None else False
        for name, b in new.columns.items():
            if name not in st.columns:
                values = np.full(cap, -1 if b.kind == "string" else 0, _DTYPES[b.kind])
                valid = np.zeros(cap, np.bool_)
                values[s:e] = _values_as(b, b.kind, n)
                valid[s:e] = b.valid
                st.columns[name] = AttributeColumn(b.kind, values, valid)
        for t, names in new.schema.items():
            st.schema.setdefault(t, set()).update(names)
        self._end = e
        self._view = None

    def drop_front(self, n: int) -> None:
        """Forget the ``n`` oldest rows (an offset move; compacts when most of the array is dead)."""
        if n <= 0:
            return
        self._start += n
        self._view = None
        live = self._end - self._start
        if self._start > max(1024, 2 * live):
            self.set(self.table())

    def _fits(self, new: EventTable) -> bool:
        """Whether ``new`` can simply go after the live rows: later in (ts, id) order, same
        string dictionary and time format, and attribute kinds that ``concat`` would keep."""
        st = self._store
        if new.strings is not st.strings or new._order() is not None:
            return False
        if self._end > self._start:
            last_ts, last_id = st.ts[self._end - 1], st.ids[self._end - 1]
            if new.ts[0] < last_ts or (new.ts[0] == last_ts and new.ids[0] <= last_id):
                return False
        view = self.table()
        for name, b in new.columns.items():
            a = view.columns.get(name)
            if a is not None and a.kind != b.kind:
                return False
            if a is not None and a.values.dtype != b.values.dtype and b.valid.any():
                return False
        return True

    def _reserve(self, n: int) -> None:
        live = self.table()
        need = len(live) + n
        self.set(live)
        if len(self._store.ts) < need:
            cap = 2 * need
            st = self._store
            k = self._end
            self._store = EventTable(
                _grow(st.ts[:k], cap), _grow(st.ids[:k], cap), _grow(st.types[:k], cap), st.type_names,
                {name: AttributeColumn(c.kind, _grow(c.values[:k], cap), _grow(c.valid[:k], cap))
                 for name, c in st.columns.items()},
                st.strings, st.time, st.schema,
            )
            self._view = None


def _grow(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.empty(max(cap, len(a)), a.dtype)
    out[: len(a)] = a
    if a.dtype == np.bool_:
        out[len(a):] = False
    return out


__all__ = ["AppendBuffer", "table_from_record"]
