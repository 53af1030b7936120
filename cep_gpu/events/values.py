"""The values of an event table: event kinds and time units, the string dictionary, attribute
columns and the time format (how input timestamps map to int64 nanoseconds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import EventError

Kind = Literal["int", "float", "string", "bool"]
RESERVED = ("type", "ts", "id")

UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
UNIT_NS["sec"] = UNIT_NS["s"]  # rule text accepts `sec` too (docs/language.md)


class StringDictionary:
    """Interns strings to int32 codes; grows as new strings arrive (codes never change)."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._strings: list[str] = []

    def encode_one(self, s: str) -> int:
        code = self._codes.get(s)
        if code is None:
            code = len(self._strings)
            self._codes[s] = code
            self._strings.append(s)
        return code

    def lookup(self, s: str) -> int:
        """The code of ``s``, or -2 (matches nothing) when it never occurred."""
        return self._codes.get(s, -2)

    def encode(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Codes and validity for an object array of str/None."""
        uniq, inverse = _unique_objects(values)
        table = np.array([-1 if u is None else self.encode_one(u) for u in uniq], dtype=np.int32)
        codes = table[inverse] if len(values) else np.empty(0, np.int32)
        return codes.astype(np.int32), codes >= 0

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """An object array of str (None where the code is negative)."""
        lut = np.array(self._strings + [None], dtype=object)
        codes = np.asarray(codes)
        return lut[np.where(codes < 0, len(self._strings), codes)]

    def truncate(self, n: int) -> None:
        """Forget every string interned after the first ``n`` (those of a refused input, whose
        codes nothing holds: the codes of the first ``n`` do not change)."""
        for s in self._strings[n:]:
            del self._codes[s]
        del self._strings[n:]

    def __len__(self) -> int:
        return len(self._strings)


def _unique_objects(values: np.ndarray) -> tuple[list, np.ndarray]:
    try:
        # Arrow first: pandas' object hash table cuts strings at a NUL character ('a\x00b' and
        # 'a' would get one code); Arrow's strings carry their length
        enc = pa.array(values, type=pa.string(), from_pandas=True).dictionary_encode()
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        enc = None  # not all strings: pandas' factorize, which takes any hashable
    if enc is not None:
        uniq_list = enc.dictionary.to_pylist() + [None]
        codes = enc.indices.fill_null(len(uniq_list) - 1).to_numpy(zero_copy_only=False).astype(np.int64)
        return uniq_list, codes
    codes, uniq = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    uniq_list = list(uniq) + [None]
    codes = np.where(codes < 0, len(uniq_list) - 1, codes)
    return uniq_list, codes


@dataclass
class AttributeColumn:
    """One attribute over all rows: ``values`` (int64, float64, int32 string codes or bool) and ``valid``."""

    kind: Kind
    values: np.ndarray
    valid: np.ndarray

    def take(self, rows: np.ndarray) -> AttributeColumn:
        return AttributeColumn(self.kind, self.values[rows], self.valid[rows])


@dataclass(frozen=True)
class TimeFormat:
    """How input timestamps map to int64 ns, so output ``ts`` gets the input's dtype back.

    ``dtype``: the NumPy dtype of the input's ``ts`` (``int8`` .. ``uint64``, ``float32``,
    ``float64``; ``datetime64[s]`` .. ``datetime64[ns]`` for datetimes, ``tz`` their zone).
    Inside, timestamps are int64 nanoseconds; :meth:`from_ns` is the one way back, at every
    output boundary (docs/api.md, "Output ts dtype")."""

    kind: Literal["datetime", "numeric"]
    unit: str = "s"
    dtype: str = "float64"
    tz: str | None = None

    def scale_ns(self) -> int:
        """Nanoseconds per unit of the input's ``ts`` (1 for datetimes)."""
        return 1 if self.kind == "datetime" else UNIT_NS[self.unit]

    @property
    def numpy_dtype(self) -> np.dtype:
        """The NumPy dtype of the output's ``ts`` (datetimes: naive, in UTC)."""
        if self.kind == "datetime":
            # (a format of an older checkpoint names no datetime unit: nanoseconds, as it wrote)
            return np.dtype(self.dtype if self.dtype.startswith("datetime64[") else "datetime64[ns]")
        return np.dtype(self.dtype)

    def arrow_type(self) -> pa.DataType:
        """The Arrow type of the output's ``ts``: the input's (a timestamp keeps its unit and zone)."""
        if self.kind == "datetime":
            return pa.timestamp(np.datetime_data(self.numpy_dtype)[0], tz=self.tz)
        return pa.from_numpy_dtype(self.numpy_dtype)

    def to_ns(self, values: np.ndarray) -> np.ndarray:
        if self.kind == "datetime":
            return values.astype("datetime64[ns]").astype(np.int64)
        scale = UNIT_NS[self.unit]
        if np.issubdtype(values.dtype, np.integer):
            return values.astype(np.int64) * scale
        return np.round(values.astype(np.float64) * scale).astype(np.int64)

    def from_ns(self, ns: np.ndarray) -> pd.Series | np.ndarray:
        """Timestamps (int64 ns) in the input's dtype: a NumPy array of numbers, or a pandas
        Series of datetimes (in the input's unit and zone)."""
        ns = np.asarray(ns, dtype=np.int64)
        if self.kind == "datetime":
            out = pd.Series(self.naive_utc(ns))
            return out.dt.tz_localize("UTC").dt.tz_convert(self.tz) if self.tz else out
        scale = UNIT_NS[self.unit]
        # (the usual int64/float64 input by one operation: no dtype inspection, no copy)
        if self.dtype == "int64" or (self.dtype != "float64" and np.issubdtype(np.dtype(self.dtype), np.integer)):
            return (ns // scale).astype(self.dtype, copy=False)
        return (ns / scale).astype(self.dtype, copy=False)

    def to_arrow(self, ns: np.ndarray) -> pa.Array:
        """Timestamps (int64 ns) as an Arrow array of :meth:`arrow_type`."""
        if self.kind == "datetime":
            return pa.array(self.naive_utc(ns), type=pa.timestamp(self.arrow_type().unit)).cast(self.arrow_type())
        return pa.array(self.from_ns(ns), type=self.arrow_type())

    def to_numpy(self, ns: np.ndarray) -> np.ndarray:
        """Timestamps (int64 ns) as a NumPy array of the input's dtype (datetimes: naive, in UTC,
        in the input's unit; NumPy has no time zones)."""
        return self.naive_utc(ns) if self.kind == "datetime" else self.from_ns(ns)

    def naive_utc(self, ns: np.ndarray) -> np.ndarray:
        """Datetime timestamps (int64 ns) as NumPy datetimes in the input's unit, naive, in UTC."""
        dtype = self.numpy_dtype
        out = np.asarray(ns, dtype=np.int64).astype("datetime64[ns]")
        return out if dtype == out.dtype else out.astype(dtype)

    def exact(self, ns: np.ndarray) -> np.ndarray:
        """Where timestamps (int64 ns) convert to this format and back unchanged: what a stream
        of this format can report in its dtype (a later publish's of another dtype)."""
        ns = np.asarray(ns, dtype=np.int64)
        if self.kind == "datetime":
            return self.naive_utc(ns).astype("datetime64[ns]").astype(np.int64) == ns
        dtype = self.numpy_dtype
        scale = UNIT_NS[self.unit]
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            whole = ns // scale
            return (ns % scale == 0) & (whole >= max(info.min, -(2**63))) & (whole <= min(info.max, 2**63 - 1))
        with np.errstate(over="ignore", invalid="ignore"):
            back = self.from_ns(ns).astype(np.float64) * scale
            ok = np.isfinite(back) & (np.abs(back) < 2.0**63)
            return ok & (np.round(np.where(ok, back, 0)).astype(np.int64) == ns)


def column_to_python(col: AttributeColumn, strings: StringDictionary) -> pd.Series:
    """An attribute column as a pandas Series with nulls (strings decoded)."""
    if col.kind == "string":
        return pd.Series(strings.decode(np.where(col.valid, col.values, -1)), dtype=object)
    if col.kind == "float":
        return pd.Series(np.where(col.valid, col.values, np.nan))
    dtype = "Int64" if col.kind == "int" else "boolean"
    return pd.Series(pd.array(col.values, dtype=dtype)).mask(~col.valid)


def merge_kind(name: str, a: AttributeColumn | None, b: AttributeColumn | None, where: str = "") -> Kind:
    """The kind of ``a`` and ``b`` joined (int and float give float); ``where`` names the event
    of ``b`` that an error points at."""
    kinds = {c.kind for c in (a, b) if c is not None and c.valid.any()}
    if not kinds:
        return (a or b).kind  # type: ignore[union-attr]
    if len(kinds) == 1:
        return kinds.pop()
    if kinds == {"int", "float"}:
        return "float"
    raise EventError(
        f"attribute {name!r} holds {b.kind} values{where} but {a.kind} values in earlier events; "  # type: ignore[union-attr]
        "an attribute keeps one kind across events (only int and float mix)")


def values_as(col: AttributeColumn | None, kind: Kind, n: int) -> np.ndarray:
    dtype = {"int": np.int64, "float": np.float64, "string": np.int32, "bool": np.bool_}[kind]
    if col is None:
        return np.full(n, -1 if kind == "string" else 0, dtype=dtype)
    values = col.values
    if values.dtype.kind == "f" and kind != "float":
        # an all-null column read as float (e.g. one event without the attribute): NaN -> filler
        values = np.where(col.valid, values, -1 if kind == "string" else 0)
    return values.astype(dtype, copy=False)
