"""The streaming engine's event buffer and its one-event ingestion, without pandas.

:class:`AppendBuffer` holds the rows of the sliding window as column arrays with spare capacity:
appending rows that come after the last one is a copy into the free tail (amortised O(1) per
row: a full buffer is compacted into arrays of four times its live rows, at least 1,024), and
expiry moves a start offset (O(1)); after a burst, when the arrays are far larger than the live
rows, expiry compacts them to fit. :meth:`AppendBuffer.table` hands out an
:class:`~cep_gpu.events.EventTable` whose arrays are views of the live rows, which every rule
reads (the columns are shared, not copied per rule). Rows that belong among the last 64 (a
hierarchy's composite event: its terminator's timestamp, a smaller id) are merged into them in
place when the buffer carries no row lineage (``backend="cpu"``); rows further in the middle (a
composite event released late by a trailing ``NOT``) and attribute kinds that change (an int
attribute that later holds floats) take the general :meth:`EventTable.concat`, so the buffer
always equals what ``concat`` of everything would give.

:func:`table_from_record` turns one event given as a dict into a one-row table directly, for
the plain cases (str type, int/float ts, int/float/str/bool attributes); anything else returns
``None`` and goes through pandas, so both paths give identical tables (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .events import (
    RESERVED,
    UNIT_NS,
    AttributeColumn,
    EventTable,
    RowTag,
    StringDictionary,
    TimeFormat,
    values_as,
)
from .events.lineage import array_role, concat_lineage, row_tag, slice_lineage, start_lineage
from .jit import cached_njit

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _in_order_py(ts: np.ndarray, ids: np.ndarray) -> bool:
    """Whether the rows are in strictly increasing (ts, id) order (one pass; what a handful of
    NumPy calls per micro-batch would cost several times over)."""
    for i in range(1, len(ts)):
        if ts[i] < ts[i - 1] or (ts[i] == ts[i - 1] and ids[i] <= ids[i - 1]):
            return False
    return True


def _int_ns_py(ts: np.ndarray, mult: int, lim: int) -> tuple[np.ndarray, bool]:
    """Integer timestamps times ``mult`` (ns), and whether every one was within ``[-lim, lim]``
    (so that the product fits in 64 bits)."""
    ns = np.empty(len(ts), np.int64)
    ok = True
    for i in range(len(ts)):
        x = ts[i]
        if x < -lim or x > lim:
            ok = False
        ns[i] = x * mult
    return ns, ok


def _put_rows_py(ts, mult, lim, ids, next_id, codes, st_ts, st_ids, st_types, s, last_ts, last_id,
                 newest, max_id, seen):
    """The rows of a columnar micro-batch straight into the buffer's arrays from row ``s`` on:
    timestamps times ``mult`` (ns), ids (``ids``, or ``next_id`` on when it is empty), type
    codes, and per type code its count in ``seen``. First every check, then the writes: when a
    row cannot simply go last (a timestamp outside ``[-lim, lim]``, an id not above ``max_id``,
    rows out of (ts, id) order, the first row before the buffer's last ``(last_ts, last_id)``
    or before ``newest``) nothing is written and the result is -1 (the caller takes the general
    path, which sorts or reports); else the largest id."""
    n = ts.shape[0]
    own = ids.shape[0] == n
    top = -1
    pt = last_ts
    pr = last_id
    for i in range(n):
        x = ts[i]
        if x < -lim or x > lim:
            return -1
        t = x * mult
        r = ids[i] if own else next_id + i
        if r <= max_id or r <= top or (i == 0 and t < newest) or t < pt or (t == pt and r <= pr):
            return -1  # (ids not rising through the batch may repeat: the general path checks)
        pt = t
        pr = r
        if r > top:
            top = r
    for i in range(n):
        st_ts[s + i] = ts[i] * mult
        st_ids[s + i] = ids[i] if own else next_id + i
        c = codes[i]
        st_types[s + i] = c
        seen[c] += 1
    return top


in_order = cached_njit(_in_order_py)  # (public: stream_held's queue uses it too)
_int_ns = cached_njit(_int_ns_py)
_put_rows = cached_njit(_put_rows_py)
_NO_IDS = np.empty(0, np.int64)
_FLOAT_EXACT = 2**53  # ns: the integers up to here are exact in a float64
_NEAR_END = 64  # rows: how far back from the end AppendBuffer merges new rows in place
_DTYPES = {"int": np.int64, "float": np.float64, "string": np.int32, "bool": np.bool_}


@dataclass(frozen=True)
class Row:
    """One event read from a dict: timestamp (ns) and its input dtype, id, type, attributes as
    ``(name, kind, value, valid)``."""

    ts: int
    ts_dtype: str
    id: int
    type: str
    attrs: tuple


# NumPy scalars whose .item() is the Python value the pandas path would read
_NUMPY_SCALARS = frozenset({
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.float16, np.float32, np.float64, np.bool_, np.str_,
})


def parse_record(rec: dict, next_id: int, time_unit: str, strings: StringDictionary) -> Row | None:
    """One event (a dict) as a :class:`Row`, as the pandas path would read it; ``None`` when the
    record is not one of the plain cases handled here (it then goes through pandas)."""
    typ, ts = rec.get("type"), rec.get("ts")
    if type(typ) is not str:
        if not isinstance(typ, str):  # np.str_ (a row of a NumPy array) is a str
            return None
        typ = str(typ)
    if "ts" not in rec:
        return None
    tts = type(ts)
    if tts is int or tts is np.int64:
        if not _INT64_MIN <= ts <= _INT64_MAX:
            return None
        dtype = "int64"
        ns = int(ts) * UNIT_NS[time_unit]
        if not _INT64_MIN <= ns <= _INT64_MAX:
            return None  # let the general path report it
    elif tts is float or tts is np.float64:
        if not math.isfinite(ts):
            return None
        dtype = "float64"
        f = np.round(np.float64(ts) * UNIT_NS[time_unit])
        if not -9.2e18 < f < 9.2e18:
            return None
        ns = int(f)
    else:
        return None
    if "id" in rec:
        rid = rec["id"]
        if isinstance(rid, np.integer):
            rid = int(rid)
        if type(rid) is not int or not 0 <= rid <= _INT64_MAX:
            return None
    else:
        rid = next_id
    attrs = []
    for name, v in rec.items():
        if name in RESERVED:
            continue
        if type(name) is not str:
            return None
        tv = type(v)
        if tv in _NUMPY_SCALARS:  # values taken from NumPy arrays or pandas rows
            v = v.item()
            tv = type(v)
        if v is None:  # pandas reads a lone None as a null float
            attrs.append((name, "float", math.nan, False))
        elif tv is float:
            attrs.append((name, "float", v, not math.isnan(v)))
        elif tv is int:
            if not _INT64_MIN <= v <= _INT64_MAX:
                return None
            attrs.append((name, "int", v, True))
        elif tv is str:
            attrs.append((name, "string", strings.encode_one(v), True))
        elif tv is bool:
            attrs.append((name, "bool", v, True))
        else:
            return None
    return Row(ns, dtype, rid, typ, tuple(attrs))


def table_from_record(
    rec: dict, next_id: int, time_unit: str, strings: StringDictionary
) -> EventTable | None:
    """One event (a dict) as a one-row table, as ``EventTable.from_pandas(DataFrame([rec]))``
    would build it; ``None`` when the record is not one of the plain cases (see :func:`parse_record`)."""
    row = parse_record(rec, next_id, time_unit, strings)
    if row is None:
        return None
    return EventTable(
        ts=np.array([row.ts], np.int64), ids=np.array([row.id], np.int64), types=np.zeros(1, np.int32),
        type_names=[row.type],
        columns={n: AttributeColumn(k, np.array([v], _DTYPES[k]), np.array([ok])) for n, k, v, ok in row.attrs},
        strings=strings, time=TimeFormat("numeric", unit=time_unit, dtype=row.ts_dtype),
        schema={row.type: {n for n, _, _, ok in row.attrs if ok}},
    )


_NUMERIC_KIND = {np.dtype(np.int64): "int", np.dtype(np.float64): "float", np.dtype(np.bool_): "bool"}


def table_from_columns(
    cols, next_id: int, time_unit: str, strings: StringDictionary
) -> EventTable | None:
    """A columnar micro-batch (a mapping of NumPy arrays) as a table, as the Arrow path would
    build it, without Arrow or pandas; ``None`` when it is not one of the plain cases handled
    here (then the Arrow path reads it, errors included): ``type`` a str/object array of str,
    ``ts`` int64 or float64 (finite) in non-decreasing order, optional ``id`` int64 (>= 0, and
    increasing where ``ts`` ties), attributes int64 / float64 / bool arrays or object arrays of
    str, all of one length."""
    typ, ts = cols.get("type"), cols.get("ts")
    if not isinstance(typ, np.ndarray) or not isinstance(ts, np.ndarray) or typ.ndim != 1:
        return None
    n = len(typ)
    if n == 0 or typ.dtype.kind not in "OU" or ts.shape != (n,):
        return None
    if ts.dtype == np.int64:
        ns, ok = _int_ns(ts, UNIT_NS[time_unit], _INT64_MAX // UNIT_NS[time_unit])
        if not ok:
            return None
        dtype = "int64"
    elif ts.dtype == np.float64:
        if not np.isfinite(ts).all():
            return None
        f = np.round(ts * UNIT_NS[time_unit])
        if not ((f > -9.2e18) & (f < 9.2e18)).all():
            return None
        ns = f.astype(np.int64)
        dtype = "float64"
    else:
        return None
    if "id" in cols:
        ids = cols["id"]
        if not isinstance(ids, np.ndarray) or ids.dtype != np.int64 or ids.shape != (n,) or int(ids.min()) < 0:
            return None
    else:
        ids = np.arange(next_id, next_id + n, dtype=np.int64)
    if n > 1 and not in_order(ns, ids):
        return None  # unsorted (or ids against the order at a tied ts): the general path sorts
    if n >= 512:  # a hash pass in C (one comparison pass per type costs more from here on)
        import pandas as pd

        try:
            found, uniq = pd.factorize(typ)  # codes in order of first occurrence
        except TypeError:
            return None
        names = list(uniq)
        if any(type(t) is not str for t in names) or (found < 0).any():
            return None
        codes = found.astype(np.int32)
    else:
        try:
            names = list(dict.fromkeys(typ.tolist()))  # in order of first occurrence
        except TypeError:
            return None
        if any(type(t) is not str for t in names):
            return None
        codes = np.zeros(n, np.int32)
        for c in range(1, len(names)):
            codes[typ == names[c]] = c
    columns = {}
    full = set()  # columns without nulls
    for name, v in cols.items():
        if name in RESERVED:
            continue
        if type(name) is not str or not isinstance(v, np.ndarray) or v.shape != (n,):
            return None
        kind = _NUMERIC_KIND.get(v.dtype)
        if kind is not None:
            if kind == "float":
                valid = ~np.isnan(v)
            else:
                valid = np.ones(n, np.bool_)
                full.add(name)
            columns[name] = AttributeColumn(kind, v.copy(), valid)
        elif v.dtype.kind == "O":
            values = v.tolist()
            if any(type(x) is not str for x in values):
                return None
            codes_s = np.fromiter((strings.encode_one(x) for x in values), np.int32, n)
            columns[name] = AttributeColumn("string", codes_s, np.ones(n, np.bool_))
            full.add(name)
        else:
            return None
    full |= {k for k, col in columns.items() if k not in full and col.valid.all()}
    if len(names) == 1 or len(full) == len(columns):  # no nulls: every type has every column
        schema = {t: {k for k, col in columns.items() if k in full or col.valid.any()} for t in names}
    else:
        schema = {}
        for c, t in enumerate(names):
            rows = codes == c
            schema[t] = {k for k, col in columns.items() if col.valid[rows].any()}
    return EventTable(
        ts=ns, ids=ids, types=codes, type_names=names, columns=columns, strings=strings,
        time=TimeFormat("numeric", unit=time_unit, dtype=dtype), schema=schema,
    )


class AppendBuffer:
    """The engine's sliding buffer of rows in (ts, id) order (see the module docstring)."""

    def __init__(self, lineage: bool = True) -> None:
        #: whether the arrays carry a row lineage (:mod:`cep_gpu.events.lineage`), which only a
        #: device backend reads; the engine turns it off for ``backend="cpu"`` (it costs tens of
        #: microseconds per compaction and per view)
        self._lineage = lineage
        self._store: EventTable | None = None  # arrays of length capacity; rows [start, end) live
        self._start = 0
        self._end = 0
        self._view: EventTable | None = None
        self._type_codes: tuple | None = None  # (store, event type -> code) for append_columns
        #: in-place merges (:meth:`_insert_near_end`): their count, and the last ones as
        #: (count after it, first store row it renumbered)
        self.serial = 0
        self._merges: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return self._end - self._start

    def __getstate__(self) -> dict:
        # only the live rows travel (a checkpoint does not carry the spare capacity)
        return {"table": self.table(), "lineage": self._lineage}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state.get("lineage", True))
        if state["table"] is not None:
            self.set(state["table"])

    @property
    def filled(self) -> bool:
        """Whether a table was ever set (even an empty one: it fixes the columns)."""
        return self._store is not None

    @property
    def capacity(self) -> int:
        """Rows the arrays can hold before they grow (for the memory tests)."""
        return 0 if self._store is None else len(self._store.ts)

    def store(self) -> tuple[EventTable | None, int, int]:
        """The arrays with their spare capacity and the live rows ``[start, end)`` in them.

        Rows keep their numbers in these arrays while rows are appended or expired; a new
        store object (after :meth:`set`: growth, compaction, a row in the middle) renumbers
        them. For the streaming fast path (:mod:`cep_gpu.stream_match`); do not modify.
        """
        return self._store, self._start, self._end

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
            # the views continue the store's row lineage, so that a device backend keeps the
            # rows it already holds and uploads only the new ones (see cep_gpu.events.lineage)
            if st.lineage is not None:
                self._view.lineage = slice_lineage(st, self._view, s)
        return self._view

    def set(self, table: EventTable, cap: int | None = None) -> None:
        """Replace the contents by ``table`` (copied into fresh arrays with spare capacity)."""
        n = len(table)
        cap = max(16, 2 * n, cap or 0)
        self._store = EventTable(
            _grow(table.ts, cap), _grow(table.ids, cap), _grow(table.types, cap), list(table.type_names),
            {k: AttributeColumn(c.kind, _grow(c.values, cap), _grow(c.valid, cap)) for k, c in table.columns.items()},
            table.strings, table.time, {t: set(v) for t, v in table.schema.items()},
        )
        self._start, self._end, self._view = 0, n, None
        # stored rows are written once and never change: the store is one lineage, which
        # continues the rows of ``table`` (a view of the old store when compacting), so that a
        # device backend keeps what it holds across compactions
        if not self._lineage:
            return
        if n and row_tag(table) is not None:
            self._store.lineage = concat_lineage(table, self._store, n)
        else:
            start_lineage(self._store)

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
            if not self._insert_near_end(new):
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
            c.values[s:e] = values_as(b, c.kind, n)
            c.valid[s:e] = b.valid if b is not None else False
        for name, b in new.columns.items():
            if name not in st.columns:
                values = np.full(cap, -1 if b.kind == "string" else 0, _DTYPES[b.kind])
                valid = np.zeros(cap, np.bool_)
                values[s:e] = values_as(b, b.kind, n)
                valid[s:e] = b.valid
                st.columns[name] = AttributeColumn(b.kind, values, valid)
                ts_tag = row_tag(st)  # a new column: same lineage and row numbering as ts
                for part, arr in (("values", values), ("valid", valid)) if ts_tag is not None else ():
                    role = array_role(part, name)
                    st.lineage.set(role, arr, RowTag(ts_tag.lineage, ts_tag.base, role))
        for t, names in new.schema.items():
            st.schema.setdefault(t, set()).update(names)
        self._end = e
        self._view = None

    @property
    def ts(self) -> np.ndarray:
        """The live rows' timestamps (a view)."""
        return np.empty(0, np.int64) if self._store is None else self._store.ts[self._start:self._end]

    def last_ts(self) -> int:
        """The last row's timestamp (ns); the buffer must not be empty."""
        return self._store.ts[self._end - 1]

    def append_row(self, row: Row) -> bool:
        """Append one event in place when it simply goes last (later than the last row, its
        attributes already columns of the same kind, room left); ``False`` (nothing changed)
        otherwise, and the caller takes the general path."""
        st, e = self._store, self._end
        if st is None or e >= len(st.ts):
            return False
        if e > self._start:
            last = st.ts[e - 1]
            if row.ts < last or (row.ts == last and row.id <= st.ids[e - 1]):
                return False
        cols = st.columns
        for name, kind, _, _ in row.attrs:
            c = cols.get(name)
            if c is None or c.kind != kind:
                return False
        try:
            code = st.type_names.index(row.type)
        except ValueError:
            code = len(st.type_names)
            st.type_names.append(row.type)
        st.ts[e] = row.ts
        st.ids[e] = row.id
        st.types[e] = code
        for c in cols.values():  # then overwritten for the attributes the event has
            c.valid[e] = False
            c.values[e] = -1 if c.kind == "string" else 0
        seen = st.schema.setdefault(row.type, set())
        for name, _, value, ok in row.attrs:
            c = cols[name]
            c.values[e] = value
            c.valid[e] = ok
            if ok:
                seen.add(name)
        self._end = e + 1
        self._view = None
        return True

    def append_columns(self, cols: dict, next_id: int, mult: int, ts_dtype: str, newest: int,
                       max_id: int) -> tuple[np.ndarray, list[str], int] | None:
        """A columnar micro-batch (a dict of NumPy arrays) straight into the arrays, in the
        plain case only: rows in (ts, id) order after the last row and not before ``newest``,
        ids above ``max_id`` (``next_id`` on when there is no ``id``), known event types,
        attributes that are columns already with the same dtype (int64, float64 without NaN,
        bool), timestamps of the stream's dtype ``ts_dtype`` when it is int64 or float64 (and
        int64 ones in a float64 stream up to 2**53 ns, which it holds exactly) in the range
        ``mult`` (ns per unit) allows. Then this is what :func:`table_from_columns`
        and :meth:`append` give, without the table in between; the result: the new rows' ids,
        the event types among them, the largest id. Otherwise ``None``, with nothing changed
        (the caller takes the general path, which sorts, converts and reports errors)."""
        st = self._store
        typ, ts = cols.get("type"), cols.get("ts")
        if st is None or type(typ) is not np.ndarray or type(ts) is not np.ndarray or typ.ndim != 1:
            return None
        n = len(typ)
        if n == 0 or typ.dtype.kind not in "OU" or ts.shape != (n,):
            return None
        if ts.dtype == np.int64 and ts_dtype == "int64":
            lim = _INT64_MAX // mult
        elif ts.dtype == np.int64 and ts_dtype == "float64":
            lim = _FLOAT_EXACT // mult  # (a float64 holds these ns, and so their value, exactly)
        elif ts.dtype == np.float64 and ts_dtype == "float64":
            f = np.round(ts * mult)  # as table_from_columns converts them
            if not ((f > -9.2e18) & (f < 9.2e18)).all():  # (NaN and inf fail too)
                return None
            ts, mult, lim = f.astype(np.int64), 1, _INT64_MAX
        else:
            return None
        ids = cols.get("id", _NO_IDS)
        if ids is not _NO_IDS and (type(ids) is not np.ndarray or ids.dtype != np.int64 or ids.shape != (n,)):
            return None
        columns = st.columns
        for name, v in cols.items():
            if name in RESERVED:
                continue
            c = columns.get(name)
            if c is None or type(v) is not np.ndarray or v.dtype != c.values.dtype or v.shape != (n,) \
                    or _NUMERIC_KIND.get(v.dtype) != c.kind or (c.kind == "float" and np.isnan(v).any()):
                return None  # a new column, another kind, nulls, strings: the general path
        names = st.type_names
        code_of = self._type_codes
        if code_of is None or code_of[0] is not st or len(code_of[1]) != len(names):
            code_of = self._type_codes = (st, {t: c for c, t in enumerate(names)})
        try:
            codes = np.fromiter(map(code_of[1].__getitem__, typ.tolist()), np.int32, n)
        except (KeyError, TypeError):
            return None  # a new event type (or not a name): the general path adds it
        if self._end + n > len(st.ts):
            self._reserve(n)
            st = self._store
        s, e = self._end, self._end + n
        last_ts, last_id = (st.ts[s - 1], st.ids[s - 1]) if s > self._start else (_INT64_MIN, -1)
        seen = np.zeros(len(names), np.int64)
        top = _put_rows(ts, mult, lim, ids, next_id, codes, st.ts, st.ids, st.types, s, last_ts, last_id,
                        newest, max_id, seen)
        if top < 0:
            return None
        for name, c in st.columns.items():
            v = cols.get(name)
            if v is None:
                c.values[s:e] = -1 if c.kind == "string" else 0
                c.valid[s:e] = False
            else:
                c.values[s:e] = v
                c.valid[s:e] = True
        present = [names[c] for c, k in enumerate(seen.tolist()) if k]
        attrs = [name for name in cols if name not in RESERVED]
        for t in present:
            st.schema.setdefault(t, set()).update(attrs)
        self._end = e
        self._view = None
        return (ids if ids is not _NO_IDS else np.arange(next_id, next_id + n, dtype=np.int64)), present, int(top)

    def drop_front(self, n: int) -> None:
        """Forget the ``n`` oldest rows (an offset move; compacts when most of the array is dead
        and the arrays are far larger than the live rows need: after a burst)."""
        if n <= 0:
            return
        self._start += n
        self._view = None
        live = self._end - self._start
        # (otherwise the next append that finds no room compacts: see _reserve)
        if self._start > max(1024, 2 * live) and len(self._store.ts) > 8 * max(live, 256):
            self.set(self.table())

    def _fits(self, new: EventTable) -> bool:
        """Whether ``new`` can simply go after the live rows: later in (ts, id) order, same
        string dictionary and time format, and attribute kinds that ``concat`` would keep."""
        st = self._store
        if new.strings is not st.strings or (len(new) > 1 and not in_order(new.ts, new.ids)):
            return False
        if self._end > self._start:
            last_ts, last_id = st.ts[self._end - 1], st.ids[self._end - 1]
            if new.ts[0] < last_ts or (new.ts[0] == last_ts and new.ids[0] <= last_id):
                return False
        for name, b in new.columns.items():  # (the store's columns: same kinds as the view's)
            a = st.columns.get(name)
            if a is not None and a.kind != b.kind:
                return False
            if a is not None and a.values.dtype != b.values.dtype and b.valid.any():
                return False
        return True

    def _insert_near_end(self, new: EventTable) -> bool:
        """Merge ``new`` into the last rows in place when it belongs among the last
        ``_NEAR_END`` of them (a composite event of a hierarchy: the terminator's timestamp, an
        id below the terminator's), as ``concat`` would order it: the tail is merged and
        rewritten, instead of a copy and a sort of the whole buffer per composite event.
        ``False`` (nothing changed) for what only ``concat`` does: new columns, kinds that
        change, other dictionaries, rows further back, and buffers with a row lineage (a device
        backend relies on stored rows never changing). :attr:`serial` counts the merges and
        :meth:`renumbered_since` says from which row on the rows moved, so that whoever numbered
        them (the fast path's columns) takes back only the entries from there."""
        st, n, s, e = self._store, len(new), self._start, self._end
        if self._lineage or n > _NEAR_END or new.strings is not st.strings or \
                (n > 1 and not in_order(new.ts, new.ids)):
            return False
        for name, b in new.columns.items():
            a = st.columns.get(name)
            if a is None or a.kind != b.kind or (a.values.dtype != b.values.dtype and b.valid.any()):
                return False
        t0, i0 = int(new.ts[0]), int(new.ids[0])
        ts, ids = st.ts, st.ids
        p = e  # the first live row after new's first row in (ts, id) order
        while p > s and (int(ts[p - 1]) > t0 or (int(ts[p - 1]) == t0 and int(ids[p - 1]) > i0)):
            p -= 1
            if e - p > _NEAR_END:
                return False
        if e + n > len(ts):
            self._reserve(n)
            p += self._start - s
            st, s, e = self._store, self._start, self._end
        remap = np.empty(len(new.type_names), np.int32)
        for i, t in enumerate(new.type_names):
            if t not in st.type_names:
                st.type_names.append(t)
            remap[i] = st.type_names.index(t)
        all_ts = np.concatenate([st.ts[p:e], new.ts])
        all_ids = np.concatenate([st.ids[p:e], new.ids])
        order = np.lexsort((all_ids, all_ts))
        st.ts[p:e + n] = all_ts[order]
        st.ids[p:e + n] = all_ids[order]
        st.types[p:e + n] = np.concatenate([st.types[p:e], remap[new.types]])[order]
        for name, c in st.columns.items():
            b = new.columns.get(name)
            c.values[p:e + n] = np.concatenate([c.values[p:e], values_as(b, c.kind, n)])[order]
            c.valid[p:e + n] = np.concatenate([c.valid[p:e], b.valid if b is not None else np.zeros(n, np.bool_)])[order]
        for t, names in new.schema.items():
            st.schema.setdefault(t, set()).update(names)
        self.serial += 1
        self._merges.append((self.serial, p))
        del self._merges[:-_NEAR_END]
        self._end = e + n
        self._view = None
        return True

    def renumbered_since(self, serial: int) -> int | None:
        """The first store row that in-place merges after merge number ``serial`` renumbered
        (rows before it kept their numbers); ``None`` when those merges are no longer known."""
        if serial >= self.serial:
            return self._end
        if not self._merges or self._merges[0][0] > serial + 1:
            return None
        return min(p for k, p in self._merges if k > serial)

    def _reserve(self, n: int) -> None:
        # room for four times the live rows (at least 1,024): a compaction copies the live rows
        # and makes every rule's fast path rebuild its columns (about 0.1 ms at 2,000 rows), so
        # its cost per appended row is a third of a row copy or less, plus little fixed cost
        live = self.table()
        self.set(live, cap=max(4 * (len(live) + n), 1024))


def _grow(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.empty(max(cap, len(a)), a.dtype)
    out[: len(a)] = a
    if a.dtype == np.bool_:
        out[len(a):] = False
    return out


def new_rows_last(ids: np.ndarray, new_ids: np.ndarray, lo: int, end: int) -> bool:
    """Whether the rows with ids ``new_ids`` are rows ``[end - n, end)`` of ``ids``, all at or
    after row ``lo``, in any order: the usual case of a publish, with the composite events it
    made merged among its rows (ids are unique, so equal sorted ids are the same rows)."""
    n = len(new_ids)
    if end - n < lo:
        return False
    if n == 1:  # one event per publish: no array comparison
        return bool(ids[end - 1] == new_ids[0])
    tail = ids[end - n:end]
    return np.array_equal(tail, new_ids) or np.array_equal(np.sort(tail), np.sort(new_ids))


__all__ = ["AppendBuffer", "Row", "new_rows_last", "parse_record", "table_from_columns", "table_from_record"]
