"""Composite events -> Arrow / pandas, in the one output layout of docs/api.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
from pandas.core.arrays.arrow import ArrowExtensionArray

from .events import EventTable, nullable_pandas_type
from .model import Rule

#: The column that says how many ids each position of a match took (only in outputs with a rule
#: that has a Kleene position; docs/language.md, "Kleene closure").
ID_COUNTS = "id_counts"

_ARROW_TYPES = {"string": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}


@dataclass(frozen=True)
class OutputSchema:
    """The attribute columns of the output: every attribute any rule defines, first seen first."""

    attributes: tuple[tuple[str, str], ...]
    #: attributes no rule declares a type for: their kind comes from the values (float if none)
    inferred: frozenset[str] = frozenset()
    #: whether some rule has a Kleene position (then the output has an ``id_counts`` column)
    kleene: bool = False

    @classmethod
    def of(cls, rules: Sequence[Rule]) -> OutputSchema:
        seen: dict[str, str] = {}
        declared = {a.name for r in rules for a in r.attributes if a.type is not None}
        first: dict[str, tuple[Rule, str]] = {}  # attribute -> the rule that first declared it
        for r in rules:
            for a in r.attributes:
                if a.type is not None:
                    other = first.setdefault(a.name, (r, a.type))
                    if other[1] != a.type and {other[1], a.type} != {"int", "float"}:
                        # one output column cannot hold both: int and float join as float
                        raise r.error(
                            f"rule {r.name!r} declares attribute {a.name!r} as {a.type}, but rule "
                            f"{other[0].name!r} declares it as {other[1]}: one output column holds "
                            "every rule's values (int and float join as float)", a.pos)
                t = a.type or "float"
                if a.name in seen and seen[a.name] != t:
                    if {seen[a.name], t} == {"int", "float"}:
                        t = "float"
                    else:
                        t = "string" if "string" in (seen[a.name], t) else t
                seen[a.name] = t
        kleene = any(r.kleene_positions for r in rules)
        return cls(tuple(seen.items()), frozenset(seen) - declared, kleene)

    def arrow_schema(self, ts_type: pa.DataType) -> pa.Schema:
        fields = [pa.field("rule", pa.string()), pa.field("ts", ts_type), pa.field("ids", pa.list_(pa.int64()))]
        if self.kleene:
            fields.append(pa.field(ID_COUNTS, pa.list_(pa.int32())))
        fields += [pa.field(n, _ARROW_TYPES[t]) for n, t in self.attributes]
        return pa.schema(fields)


@dataclass
class _Layout:
    """Every rule's results in output order (ts, rule, ids): what each output form is built from."""

    results: list
    n: int
    ts: np.ndarray  # int64 ns, unordered
    rule_names: list[str]
    name_codes: np.ndarray  # index into rule_names, unordered
    kleene: bool
    order: np.ndarray | slice  # the output order (a slice: the identity)
    lens: np.ndarray  # ids per composite event, ordered
    ids: np.ndarray  # (n, width) int64, ordered, padded with int64 min past lens
    single: bool  # one rule without Kleene positions: ids is the result's own array


def _layout(results, schema: OutputSchema) -> _Layout:
    results = [r for r in results if len(r.ts)] or list(results[:1])
    n_total = sum(len(r.ts) for r in results)
    width = max((r.ids.shape[1] for r in results), default=1)
    ts = np.concatenate([r.ts for r in results]) if results else np.empty(0, np.int64)
    rule_names = sorted({r.rule.name for r in results})
    name_codes = np.concatenate(
        [np.full(len(r.ts), rule_names.index(r.rule.name), np.int32) for r in results]
    ) if results else np.empty(0, np.int32)
    kleene = schema.kleene or any(getattr(r, "sizes", None) is not None for r in results)
    if len(results) == 1 and not kleene:
        # one rule: composite_events already sorted it by (ts, ids)
        return _Layout(results, n_total, ts, rule_names, name_codes, kleene, slice(None),
                       np.full(n_total, results[0].ids.shape[1], np.int64), results[0].ids, True)
    # pad ids so that a shorter tuple sorts before its extensions, as Python tuples do
    # (Kleene results come padded so already, with their own lengths)
    pad = np.full((n_total, width), np.iinfo(np.int64).min, dtype=np.int64)
    lengths = np.empty(n_total, dtype=np.int64)
    start = 0
    for r in results:
        k = len(r.ts)
        pad[start:start + k, : r.ids.shape[1]] = r.ids
        own = getattr(r, "lengths", None)
        lengths[start:start + k] = r.ids.shape[1] if own is None else own
        start += k
    keys = tuple(pad[:, j] for j in reversed(range(width))) + (name_codes, ts)
    order = np.lexsort(keys) if n_total else np.empty(0, np.int64)
    ids = pad[order]
    lens = lengths[order]
    ids[np.arange(width)[None, :] >= lens[:, None]] = np.iinfo(np.int64).min  # Kleene padding too
    return _Layout(results, n_total, ts, rule_names, name_codes, kleene, order, lens, ids, False)


def composite_count(out) -> int:
    """Composite events in any output form of ``publish``/``flush``/``detect`` (``output="columns"``
    is a dict of arrays, whose ``len`` counts its keys)."""
    return len(out["ts"]) if isinstance(out, dict) else len(out)


def assemble_columns(results, schema: OutputSchema, table: EventTable) -> dict[str, np.ndarray]:
    """The output as a dict of NumPy arrays, with no Python object made per composite event
    (``Engine.publish(..., output="columns")``; docs/api.md):

    ``rule`` (str array), ``ts`` (the stream's time values in its dtype; datetimes as
    ``datetime64`` of the input's unit, in UTC), ``ids`` (int64, one row per composite event, padded with -1 past ``ids_len``),
    ``ids_len`` (int64), ``id_counts`` (int64, one row per composite event, 0-padded; only when
    a rule has a Kleene position), then every attribute as a masked array (masked: null; a
    float NaN is null, as in the other forms)."""
    one = _one_result(results, schema)
    if one is not None:
        return _columns_of_one(one, schema, table)
    lay = _layout(results, schema)
    ts = lay.ts[lay.order]
    ts = table.time.to_numpy(ts)
    names = np.array(lay.rule_names or [""])
    ids = lay.ids if lay.single else np.where(lay.ids == np.iinfo(np.int64).min, -1, lay.ids)
    out = {"rule": names[lay.name_codes[lay.order]] if len(lay.rule_names) > 1 else np.repeat(names, lay.n),
           "ts": ts, "ids": ids, "ids_len": lay.lens}
    if lay.kleene:
        out[ID_COUNTS] = _id_count_rows(lay.results, lay.order)
    for name, kind in schema.attributes:
        if name in schema.inferred:
            kind = value_kind(lay.results, name, kind)
        values, valid = _attribute_values(lay.results, name, kind, lay.order, lay.n)
        if kind == "string":
            values = table.strings.decode(np.where(valid, values, -1))
        null = ~valid | np.isnan(values) if kind == "float" else ~valid
        out[name] = np.ma.MaskedArray(values, mask=null)
    return out


def _one_result(results, schema: OutputSchema):
    """The one result with composite events when it is the only one and no rule has Kleene
    positions (a publish's usual case: its arrays are already in output order); else None."""
    if schema.kleene:
        return None
    one = None
    for r in results:
        if len(r.ts):
            if one is not None:
                return None
            one = r
    return one if one is not None and getattr(one, "sizes", None) is None else None


_NUMPY_TYPES = {"int": np.dtype(np.int64), "float": np.dtype(np.float64), "bool": np.dtype(np.bool_)}


def _columns_of_one(r, schema: OutputSchema, table: EventTable) -> dict[str, np.ndarray]:
    """:func:`assemble_columns` of one rule's results, from its arrays in place (no layout,
    no gather): the same arrays, dtypes and masks as the general assembly."""
    n = len(r.ts)
    ts = table.time.to_numpy(r.ts)
    out = {"rule": np.full(n, r.rule.name), "ts": ts, "ids": r.ids,
           "ids_len": np.full(n, r.ids.shape[1], np.int64)}
    for name, kind in schema.attributes:
        if name in schema.inferred:
            kind = value_kind((r,), name, kind)
        col = r.attributes.get(name)
        if kind == "string" or col is None:  # (rare here: the general gather, for one rule)
            values, valid = _attribute_values((r,), name, kind, slice(None), n)
            if kind == "string":
                values = table.strings.decode(np.where(valid, values, -1))
        else:
            values, valid = col.values.astype(_NUMPY_TYPES[kind], copy=False), col.valid
        null = ~valid | np.isnan(values) if kind == "float" else ~valid
        out[name] = np.ma.MaskedArray(values, mask=null)
    return out


def assemble(results, schema: OutputSchema, table: EventTable, arrow: bool = False):
    """Concatenate per-rule results, sort by (ts, rule, ids), and build the output table.

    Columnar throughout: rule names and string attributes go through Arrow dictionaries, numbers
    stay NumPy arrays, so no Python object is made per composite event (pandas output excepted,
    where ``ids`` stays Arrow-backed).
    """
    lay = _layout(results, schema)
    results, n_total, ts, rule_names, name_codes, kleene, order, lens = (
        lay.results, lay.n, lay.ts, lay.rule_names, lay.name_codes, lay.kleene, lay.order, lay.lens)
    if lay.single:
        flat_ids = lay.ids.reshape(-1)
    else:
        flat_ids = lay.ids[np.arange(lay.ids.shape[1])[None, :] < lens[:, None]]
    offsets = np.zeros(n_total + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] < 2**31:
        ids_arr = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat_ids, type=pa.int64()))
    else:
        ids_arr = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat_ids, type=pa.int64()))
        ids_arr = ids_arr.cast(pa.list_(pa.int64()))

    ts_arr = table.time.to_arrow(ts[order])
    if len(rule_names) == 1:  # one rule (a publish's usual case): no dictionary to decode
        rule_arr = pa.repeat(pa.scalar(rule_names[0], pa.string()), n_total)
    else:
        rule_arr = pa.DictionaryArray.from_arrays(
            pa.array(name_codes[order], type=pa.int32()), pa.array(rule_names, type=pa.string())
        ).cast(pa.string())
    columns = {"rule": rule_arr, "ts": ts_arr, "ids": ids_arr}
    if kleene:
        columns[ID_COUNTS] = _id_counts(results, order)
    for name, kind in schema.attributes:
        if name in schema.inferred:
            kind = value_kind(results, name, kind)
        columns[name] = _attribute_array(results, name, kind, order, table, n_total)
    out = pa.table(columns)
    if arrow:
        return out
    df = out.to_pandas(types_mapper=_types_mapper)
    df["ids"] = pd.Series(IdsArray(out.column("ids")), index=df.index)
    if kleene:
        df[ID_COUNTS] = pd.Series(IdsArray(out.column(ID_COUNTS)), index=df.index)
    ts_values = table.time.from_ns(ts[order])
    df["ts"] = ts_values.set_axis(df.index) if isinstance(ts_values, pd.Series) else pd.Series(ts_values, index=df.index)
    return df


def _id_counts(results, order: np.ndarray) -> pa.Array:
    """``id_counts``: per match, how many ids each position took, in declaration order."""
    pad, widths = _id_count_rows(results, order, with_widths=True)
    flat = pad[np.arange(pad.shape[1])[None, :] < widths[:, None]]
    offsets = np.zeros(len(widths) + 1, np.int32)
    np.cumsum(widths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat.astype(np.int32), type=pa.int32()))


def _id_count_rows(results, order, with_widths: bool = False):
    """``id_counts`` as one 0-padded int64 row per match, in output order (and each row's
    number of positions, with ``with_widths``)."""
    parts = []
    for r in results:
        sizes = getattr(r, "sizes", None)
        if sizes is None:
            sizes = np.ones((len(r.ts), r.ids.shape[1]), np.int64)
        parts.append(sizes)
    widths = np.concatenate([np.full(len(p), p.shape[1], np.int64) for p in parts]) if parts else np.empty(0, np.int64)
    width = max([p.shape[1] for p in parts] + [1])
    pad = np.zeros((len(widths), width), np.int64)
    start = 0
    for p in parts:
        pad[start:start + len(p), : p.shape[1]] = p
        start += len(p)
    return (pad[order], widths[order]) if with_widths else pad[order]


def value_kind(results, name: str, default: str) -> str:
    """The kind of an undeclared attribute from its computed values (int + float -> float)."""
    kinds = {r.attributes[name].kind for r in results if name in r.attributes and len(r.ts)}
    if len(kinds) == 1:
        return kinds.pop()
    if kinds == {"int", "float"}:
        return "float"
    return "string" if "string" in kinds else default


class IdsArray(ArrowExtensionArray):
    """The output's ``ids``: an Arrow-backed ``list<int64>`` column (dtype ``pd.ArrowDtype``) that
    prints each entry as a Python list, ``[4, 2]``, as the docs show (pandas would print NumPy's
    ``[4 2]``). Slices, filters and concatenations keep the class; the values are the same."""

    def _formatter(self, boxed: bool = False):
        return _format_ids


def _format_ids(ids) -> str:
    try:
        return "[" + ", ".join(str(int(i)) for i in ids) + "]"
    except TypeError:  # not a list (a null)
        return str(ids)


def _types_mapper(t: pa.DataType):
    # ids stay Arrow-backed lists; integers and booleans stay nullable, as on the way in
    return pd.ArrowDtype(t) if pa.types.is_list(t) else nullable_pandas_type(t)


def _attribute_array(results, name: str, kind: str, order, table: EventTable, n: int) -> pa.Array:
    """One attribute column over every rule's results (null where a rule does not define it)."""
    values, valid = _attribute_values(results, name, kind, order, n)
    if kind == "string":
        # decode through an Arrow dictionary of the strings in use (no Python object per row)
        used, inverse = np.unique(values[valid], return_inverse=True)
        dictionary = pa.array(list(table.strings.decode(used)), type=pa.string())
        local = np.zeros(n, np.int32)
        local[valid] = inverse
        return pa.DictionaryArray.from_arrays(
            pa.array(local, type=pa.int32(), mask=~valid), dictionary
        ).cast(pa.string())
    null = ~valid | np.isnan(values) if kind == "float" else ~valid  # NaN is null, as in pandas
    return pa.array(values, type=_ARROW_TYPES[kind], mask=null if null.any() else None)


def _attribute_values(results, name: str, kind: str, order, n: int) -> tuple[np.ndarray, np.ndarray]:
    """One attribute over every rule's results, in output order: its values (string codes for
    strings, -1 for null) and where it is defined (a rule may not define it)."""
    valid = np.zeros(n, dtype=bool)
    if kind == "string":
        codes = np.full(n, -1, np.int64)
    else:
        values = np.zeros(n, dtype={"int": np.int64, "float": np.float64, "bool": np.bool_}[kind])
    start = 0
    for r in results:
        k = len(r.ts)
        col = r.attributes.get(name)
        if col is not None and k:
            valid[start:start + k] = col.valid
            if kind == "string":
                if col.kind != "string":
                    raise TypeError(f"attribute {name!r} mixes strings with {col.kind} values")
                codes[start:start + k] = np.where(col.valid, col.values, -1)
            else:
                values[start:start + k] = col.values
        start += k
    return (codes if kind == "string" else values)[order], valid[order]
