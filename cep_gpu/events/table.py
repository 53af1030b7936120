"""EventTable: events as time-sorted columns of plain NumPy arrays."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import EventError
from . import from_arrow as arrow_in
from . import from_pandas as pandas_in
from .checks import check_time_unit, check_unique_columns, require_columns
from .lineage import Lineage, concat_lineage, is_range, slice_lineage
from .values import (
    RESERVED,
    AttributeColumn,
    StringDictionary,
    TimeFormat,
    column_to_python,
    merge_kind,
    values_as,
)


@dataclass
class EventTable:
    """Time-sorted events as NumPy arrays (see module docstring)."""

    ts: np.ndarray
    ids: np.ndarray
    types: np.ndarray
    type_names: list[str]
    columns: dict[str, AttributeColumn]
    strings: StringDictionary
    time: TimeFormat
    #: attribute names present per type name (for schema checks)
    schema: dict[str, set[str]] = field(default_factory=dict)
    #: which rows the arrays share with the tables this one came from (:mod:`.lineage`; for the
    #: GPU backend's incremental device columns); None: nothing known
    lineage: Lineage | None = field(default=None, repr=False, compare=False)
    #: whether ``ids`` are the input's row positions (it had no ``id`` column), so that an error
    #: about an event can name its row; False for tables made otherwise (streams, composite events)
    row_ids: bool = field(default=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.ts)

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_arrow(
        cls,
        table: pa.Table,
        time_unit: str = "s",
        strings: StringDictionary | None = None,
        sort: bool = True,
    ) -> EventTable:
        """Build a table straight from Arrow columns (no pandas frame in between).

        Gives exactly the table that :meth:`from_pandas` builds from :func:`frame_from_arrow`'s
        frame of ``table`` (the same codes, string dictionary, time format and errors; the tests
        compare the two paths on generated tables), column by column in Arrow and NumPy: strings
        (plain or dictionary-encoded) as dictionary indices mapped through the string dictionary
        once per distinct string, numbers and booleans from their buffers with nulls filled,
        timestamps from their integer ticks. Columns of other Arrow types (dates, decimals,
        binary, durations, dictionaries of non-strings, ...), whose conversion pandas decides,
        go through that column's pandas conversion, which rejects most of them.
        """
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise EventError(f"events must be a pyarrow Table, got {type(table).__name__}")
        names = table.column_names
        require_columns(names)
        check_unique_columns(names)
        check_time_unit(time_unit)
        strings = strings if strings is not None else StringDictionary()
        n = table.num_rows

        type_codes, type_names = arrow_in.arrow_types(table.column("type"))
        time, ts = arrow_in.arrow_ts(table.column("ts"), time_unit)
        ids = arrow_in.arrow_ids(table.column("id")) if "id" in names else np.arange(n, dtype=np.int64)
        columns = {
            name: arrow_in.arrow_attribute(name, table.column(name), strings) for name in names if name not in RESERVED
        }
        table = cls._assemble(ts, ids, type_codes, type_names, columns, strings, time, sort)
        table.row_ids = "id" not in names
        return table

    @classmethod
    def from_pandas(
        cls,
        df: pd.DataFrame,
        time_unit: str = "s",
        strings: StringDictionary | None = None,
        sort: bool = True,
    ) -> EventTable:
        """Build a table from a DataFrame; rows are sorted stably by ``ts`` unless ``sort=False``."""
        if not isinstance(df, pd.DataFrame):
            raise EventError(f"events must be a pandas DataFrame, got {type(df).__name__}")
        names = list(map(str, df.columns))
        require_columns(names)
        check_unique_columns(names)
        check_time_unit(time_unit)
        strings = strings if strings is not None else StringDictionary()
        type_codes, type_names = pandas_in.pandas_types(df["type"])
        time, ts = pandas_in.convert_ts(df["ts"], time_unit)
        ids = pandas_in.pandas_ids(df["id"]) if "id" in df.columns else np.arange(len(df), dtype=np.int64)
        columns: dict[str, AttributeColumn] = {}
        for name in df.columns:
            if name in RESERVED:
                continue
            columns[str(name)] = pandas_in.convert_attribute(str(name), df[name], strings)
        table = cls._assemble(ts, ids, type_codes, type_names, columns, strings, time, sort)
        table.row_ids = "id" not in names
        return table

    @classmethod
    def _assemble(
        cls,
        ts: np.ndarray,
        ids: np.ndarray,
        type_codes: np.ndarray,
        type_names: list[str],
        columns: dict[str, AttributeColumn],
        strings: StringDictionary,
        time: TimeFormat,
        sort: bool,
    ) -> EventTable:
        """The table of converted columns: the schema (attributes present per type), then sorted."""
        schema: dict[str, set[str]] = {t: set() for t in type_names}
        codes = type_codes.astype(np.int32, copy=False)
        k = np.int32(len(type_names))
        for name, col in columns.items():
            # rows counted by (valid, type) in one pass: the types with a valid value of ``name``
            present = np.flatnonzero(np.bincount(codes + k * col.valid, minlength=2 * len(type_names))[k:])
            for c in present:
                schema[type_names[c]].add(name)
        table = cls(ts, ids, codes, type_names, columns, strings, time, schema)
        return table.sorted() if sort else table

    @classmethod
    def empty_like(cls, other: EventTable) -> EventTable:
        return other.take(np.empty(0, dtype=np.int64))

    # -- access ---------------------------------------------------------------------------------

    def type_code(self, name: str) -> int:
        """The code of event type ``name`` (-1 if no such event occurs)."""
        try:
            return self.type_names.index(name)
        except ValueError:
            return -1

    def rows_of_type(self, name: str) -> np.ndarray:
        """Row indices (time-sorted) of the events of type ``name``."""
        code = self.type_code(name)
        if code < 0:
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(self.types == code)

    def column(self, name: str) -> AttributeColumn | None:
        return self.columns.get(name)

    def has_attribute(self, type_name: str, attr: str) -> bool:
        return attr in self.schema.get(type_name, set())

    # -- reshaping ------------------------------------------------------------------------------

    def take(self, rows: np.ndarray) -> EventTable:
        """A new table with the given rows (in the given order).

        A contiguous ascending range of rows keeps the row lineage (see :class:`RowTag`).
        """
        rows = np.asarray(rows, dtype=np.int64)
        out = replace(
            self,
            ts=self.ts[rows],
            ids=self.ids[rows],
            types=self.types[rows],
            columns={k: c.take(rows) for k, c in self.columns.items()},
            lineage=None,
        )
        if rows.ndim == 1 and len(rows) and is_range(rows, len(self)):
            out.lineage = slice_lineage(self, out, int(rows[0]))
        return out

    def concat(self, other: EventTable) -> EventTable:
        """This table and ``other`` merged in (ts, id) order.

        Both must share the string dictionary; type codes and attribute columns are unified.
        """
        if other.strings is not self.strings:
            raise ValueError("tables to concatenate must share one StringDictionary")
        type_names = list(self.type_names)
        remap = np.empty(max(len(other.type_names), 1), dtype=np.int32)
        for i, t in enumerate(other.type_names):
            if t not in type_names:
                type_names.append(t)
            remap[i] = type_names.index(t)
        types = np.concatenate([self.types, remap[other.types] if len(other) else other.types])
        columns: dict[str, AttributeColumn] = {}
        for name in list(self.columns) + [k for k in other.columns if k not in self.columns]:
            a, b = self.columns.get(name), other.columns.get(name)
            kind = merge_kind(name, a, b, _first_event(other, b))
            columns[name] = AttributeColumn(
                kind,
                np.concatenate([values_as(a, kind, len(self)), values_as(b, kind, len(other))]),
                np.concatenate([
                    a.valid if a else np.zeros(len(self), bool),
                    b.valid if b else np.zeros(len(other), bool),
                ]),
            )
        schema = {t: set(s) for t, s in self.schema.items()}
        for t, s in other.schema.items():
            schema.setdefault(t, set()).update(s)
        merged = EventTable(
            np.concatenate([self.ts, other.ts]),
            np.concatenate([self.ids, other.ids]),
            types,
            type_names,
            columns,
            self.strings,
            self.time,
            schema,
        )
        order = merged._order()
        if order is None:
            kept = len(self)  # other's rows all come after self's
        else:
            merged = merged.take(order)
            k = min(len(self), len(order))
            moved = np.flatnonzero(order[:k] != np.arange(k))
            kept = int(moved[0]) if len(moved) else k
        merged.lineage = concat_lineage(self, merged, kept)
        return merged

    def check_joinable(self, other: EventTable) -> None:
        """Raise the :class:`EventError` that :meth:`concat` would raise for an attribute whose
        kind ``other`` changes (only int and float mix), without building anything."""
        for name, b in other.columns.items():
            a = self.columns.get(name)
            if a is not None:
                merge_kind(name, a, b, _first_event(other, b))

    def _order(self) -> np.ndarray | None:
        """The (ts, id) sort permutation, or None when the rows are already in that order."""
        if len(self) < 2:
            return None
        d = np.diff(self.ts)
        if np.all((d > 0) | ((d == 0) & (np.diff(self.ids) > 0))):
            return None
        return np.lexsort((self.ids, self.ts))

    def sorted(self) -> EventTable:
        """This table in (ts, id) order: row order is the engine's notion of "earlier".

        With default ids (row positions) this is the stable sort by ``ts`` of the input.
        """
        order = self._order()
        return self if order is None else self.take(order)

    def to_pandas(self) -> pd.DataFrame:
        """Back to a DataFrame (for debugging and for re-ingestion elsewhere)."""
        data = {
            "type": np.array(self.type_names, dtype=object)[self.types] if len(self) else [],
            "ts": self.time.from_ns(self.ts),
            "id": self.ids,
        }
        for name, col in self.columns.items():
            data[name] = column_to_python(col, self.strings)
        return pd.DataFrame(data)


def _first_event(table: EventTable, col: AttributeColumn | None) -> str:
    """' (first in event T(id=…))' for the first row of ``table`` where ``col`` has a value."""
    rows = np.flatnonzero(col.valid) if col is not None else []
    if not len(rows):
        return ""
    r = int(rows[0])
    return f" (first in event {table.type_names[table.types[r]]}(id={int(table.ids[r])}))"
