"""Reading events and writing composite events: CSV and Parquet through pyarrow."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .errors import ArgumentError, CepWarning, EventError, UsageError
from .events import frame_from_arrow

FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}

#: The engine's names of the event columns, each with the command-line option that names the
#: column of a user's file to read as it (``cep-gpu run --type-column kind``): the ``columns``
#: mapping of :func:`read_table`, ``{engine name: file column}``.
COLUMN_OPTIONS = {"type": "--type-column", "ts": "--ts-column", "id": "--id-column"}


def file_format(path: str | Path) -> str:
    """``csv`` or ``parquet`` from the file name; a clear error otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise EventError(f"{path}: unknown file type {suffix!r}; use .csv or .parquet")
    return FORMATS[suffix]


def column_renames(names: Sequence[str], columns: Mapping[str, str] | None,
                   source: str | Path) -> dict[str, str]:
    """``{file column: engine name}``: the renames that read the event file ``source``, whose
    columns are ``names``, with ``columns`` (``{engine name: file column}``, e.g. ``{"type":
    "kind", "ts": "time"}``; the engine names are those of :data:`COLUMN_OPTIONS`; None: none).
    Every subcommand's ``--type-column``/``--ts-column``/``--id-column`` come here, and so does
    the Spark path, which renames a Spark DataFrame.

    A :class:`~cep_gpu.errors.UsageError` naming the option: a given column that ``source``
    lacks (the message lists the columns it has) or has twice, one column given to two options,
    or an engine name that another column of ``source`` already has (``--type-column kind`` on a
    file with a ``type`` column too: which one holds the types is not known)."""
    if not columns:
        return {}
    unknown = sorted(set(columns) - set(COLUMN_OPTIONS))
    if unknown:
        raise ArgumentError(f"columns: unknown event column(s) {', '.join(map(repr, unknown))}; "
                            f"map {', '.join(map(repr, COLUMN_OPTIONS))}")
    names = [str(n) for n in names]
    renames: dict[str, str] = {}
    for target, name in columns.items():
        option = COLUMN_OPTIONS[target]
        count = names.count(name)
        if not count:
            raise UsageError(option, f"{source} has no column {name!r} (its columns: "
                             f"{', '.join(map(repr, names))})")
        if count > 1:
            raise UsageError(option, f"{source} has {count} columns named {name!r}")
        if name in renames:
            raise UsageError(option, f"column {name!r} is given to {COLUMN_OPTIONS[renames[name]]} "
                             "too: give each option its own column")
        renames[name] = target
    for name, target in renames.items():
        # a column that already has the name, unless it is renamed itself (a swap is fine)
        if name != target and target in names and target not in renames:
            raise UsageError(COLUMN_OPTIONS[target], f"{source} has a column {target!r} besides "
                             f"{name!r}, the column given: both would be {target!r}; rename or drop "
                             f"the column {target!r} in the file")
    return {name: target for name, target in renames.items() if name != target}


def rename_columns(table: pa.Table, renames: Mapping[str, str]) -> pa.Table:
    """``table`` with the columns renamed by ``renames`` (:func:`column_renames`): a new schema
    over the same column data, which is not copied."""
    if not renames:
        return table
    return table.rename_columns([renames.get(n, n) for n in table.column_names])


def read_table(path: str | Path, columns: Mapping[str, str] | None = None) -> pa.Table:
    """Events from a CSV or Parquet file (a directory of Parquet files works too) as an Arrow
    table, which ``detect`` and ``EventTable.from_arrow`` read without a pandas frame.

    Parquet string columns are read dictionary-encoded, as they are stored: the engine takes
    their codes, with no Python string per row. The files of a directory are joined column by
    column (:func:`_joined_schema`). A ``ts`` column of dates is read as datetimes at midnight.

    A CSV attribute column that pyarrow reads as text although at least
    :data:`NUMBERS_AS_TEXT_PERCENT` % of its values are numbers (one stray word in a column of
    numbers) gives a :class:`~cep_gpu.errors.CepWarning` naming the file, the column, the count
    and the first value that is not a number, with its row (:func:`_warn_numbers_as_text`).

    ``columns``: ``{engine name: file column}`` for a file whose columns of event types,
    timestamps or ids have other names (``{"type": "kind"}``), renamed on read
    (:func:`column_renames`, which names a bad mapping's option; for Parquet, checked against
    the schema before any data is read); the table has ``type``, ``ts`` and ``id`` then.
    """
    path = Path(path)
    if not path.exists():
        raise EventError(f"{path}: no such file")
    if not path.is_dir() and file_format(path) == "csv":
        table = _read_csv(path, (columns or {}).get("type", "type"))
        table = rename_columns(table, column_renames(table.column_names, columns, path))
        _warn_numbers_as_text(path, table)
        return _dates_as_datetimes(table)
    try:
        if path.is_dir():
            dataset = pq.ParquetDataset(path)
            if not dataset.fragments:
                raise EventError(f"{path}: the folder holds no Parquet file")
            schema = _joined_schema(path, dataset)
            renames = column_renames(schema.names, columns, path)
            try:
                table = pq.read_table(path, schema=schema)
            except pa.ArrowInvalid as exc:  # a value that the joined type cannot hold
                raise _cast_error(path, dataset, schema) or exc from None
            return _dates_as_datetimes(rename_columns(table, renames))
        schema = pq.ParquetDataset(path).schema
        renames = column_renames(schema.names, columns, path)
        strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        table = pq.read_table(path, read_dictionary=strings)
        return _dates_as_datetimes(rename_columns(table, renames))
    except (pa.ArrowException, OSError) as exc:
        # a damaged file (its footer or its pages): pyarrow's message names neither file nor folder
        raise EventError(f"{path}: cannot read the Parquet data: {exc}") from None


#: byte order marks of the encodings pyarrow cannot read ("Expected 2 columns, got 1" for UTF-16,
#: a UnicodeDecodeError for UTF-32 BE), longest first: UTF-32 LE's starts with UTF-16 LE's
_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32 (little-endian)"),
    (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)"),
    (b"\xff\xfe", "UTF-16 (little-endian)"),
    (b"\xfe\xff", "UTF-16 (big-endian)"),
)


def _read_csv(path: Path, type_column: str = "type") -> pa.Table:
    with path.open("rb") as f:  # the first bytes only, not the whole file
        head = f.read(4096)
    for bom, encoding in _BOMS:  # pyarrow reads UTF-8 only
        if head.startswith(bom):
            raise EventError(f"{path}: the CSV file is {encoding} text, by its byte order mark; "
                             "save it as UTF-8")
    if not head.removeprefix(b"\xef\xbb\xbf").strip():  # (a UTF-8 byte order mark alone is empty too)
        raise EventError(f"{path}: the CSV file is empty; it needs a header row naming at least 'type' and 'ts'")
    try:
        table = pacsv.read_csv(path)
    except pa.ArrowInvalid as exc:
        raise EventError(f"{path}: cannot read the CSV file: {exc}") from None
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_binary(col.type):  # pyarrow's inference for a column with a non-UTF-8 cell
            row = _first_not_utf8(col)
            raise EventError(f"{path}: column {name!r} is not UTF-8 text: row {row} holds "
                             f"{col[row].as_py()!r}; save the file as UTF-8")
        if pa.types.is_floating(col.type):
            _check_integers(path, name, col)
    if table.column_names.count(type_column) == 1 and pa.types.is_string(table.schema.field(type_column).type):
        # an empty field of a text column is "" (a number column's is null): no type name
        row = pc.index(table.column(type_column), "").as_py()
        if row >= 0:
            raise EventError(f"{path}: column {type_column!r} is empty at row {row}: every event needs a type")
    return table


#: the percentage of an attribute column's values (nulls aside) that must be numbers for
#: :func:`read_table` to warn that a CSV file's column was read as text (one stray word among
#: numbers); a column with more text than that is taken for a text column, without a word. A
#: whole number, so that the comparisons are exact (0.9 * 100 is 90.00000000000001)
NUMBERS_AS_TEXT_PERCENT = 90

#: a number as pyarrow's CSV reader takes one (spaces or tabs around it; an exponent; inf and
#: infinity, any case; hexadecimal integers): what the column would have been read as
_NUMBER = (r"(?i)^[ \t]*(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|[+-]?inf(?:inity)?"
           r"|0x[0-9a-f]+)[ \t]*$")


def _warn_numbers_as_text(path: Path, table: pa.Table) -> None:
    """Warn about each attribute column (not ``type``, ``ts`` or ``id``, whose text is an error
    of its own later) that pyarrow read as text although at least
    :data:`NUMBERS_AS_TEXT_PERCENT` % of its values are numbers: rules then compare its values
    as text (``'1.0'`` is not ``'1'``) where the user meant numbers.

    In Arrow compute (a compiled regular expression), no Python per row. Values that would have
    been nulls in a numeric column (pyarrow's ``null_values``: ``''``, ``'NA'``, ``'nan'``, ...)
    are not counted. The column is read in steps of just over ``100 - NUMBERS_AS_TEXT_PERCENT``
    % of its rows, so that a text column stops after its first step: more text than that
    already rules the warning out."""
    text_percent = 100 - NUMBERS_AS_TEXT_PERCENT
    nulls = pa.array(pacsv.ConvertOptions().null_values)
    for name, col in zip(table.column_names, table.columns):
        if name in ("type", "ts", "id") or not pa.types.is_string(col.type) or len(col) == 0:
            continue
        step = len(col) * text_percent // 100 + 1
        numbers = missing = 0
        for start in range(0, len(col), step):
            part = col.slice(start, step)
            missing += part.null_count + (pc.sum(pc.is_in(part, value_set=nulls)).as_py() or 0)
            numbers += pc.sum(pc.match_substring_regex(part, _NUMBER)).as_py() or 0
            if (start + len(part) - numbers - missing) * 100 > text_percent * len(col):
                break  # more text than a column of numbers may hold
        else:
            values = len(col) - missing
            if values == 0 or numbers == values or numbers * 100 < NUMBERS_AS_TEXT_PERCENT * values:
                continue
            text = pc.invert(pc.or_kleene(pc.match_substring_regex(col, _NUMBER), pc.is_in(col, value_set=nulls)))
            row = pc.index(pc.fill_null(text, False), True).as_py()
            more = values - numbers - 1
            warnings.warn(
                f"{path}: column {name!r} is read as text, though {numbers} of its {values} values are "
                f"numbers: row {row} holds {col[row].as_py()!r}"
                + (f" (and {more} more row{'s' if more > 1 else ''} hold{'' if more > 1 else 's'} text)" if more else "")
                + ", so rules compare its values as text (with '=', '1.0' is not '1'). Fix the file, "
                "or cast the column to numbers after reading it (the text becoming null: "
                f"pd.to_numeric(frame[{name!r}], errors='coerce'))",
                CepWarning,
                stacklevel=3,
            )


def _first_not_utf8(col: pa.ChunkedArray) -> int:
    """The first row of a binary column that is not valid UTF-8 (on the error path only: halves
    the rows, casting each half in Arrow)."""
    arr = col.combine_chunks()
    lo, hi = 0, len(arr)  # arr[lo:hi] holds a bad value
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            arr.slice(lo, mid - lo).cast(pa.string())
            lo = mid
        except pa.ArrowInvalid:
            hi = mid
    return lo


def _check_integers(path: Path, name: str, col: pa.ChunkedArray) -> None:
    """pyarrow reads a CSV column with an integer beyond int64 as float64, where distinct values
    become equal: an error naming it. One min/max pass in the common case; only a column holding
    a number of magnitude >= 2**63 is read again, as text, for its integer literals."""
    low, high = (v.as_py() for v in pc.min_max(col).values())
    if (high is None or high < 2.0**63) and (low is None or low > -(2.0**63)):
        return
    values = col.to_numpy()
    with np.errstate(invalid="ignore"):
        rows = np.flatnonzero(np.abs(values) >= 2.0**63)
    options = pacsv.ConvertOptions(include_columns=[name], column_types={name: pa.string()})
    text = pacsv.read_csv(path, convert_options=options).column(0).take(pa.array(rows))
    literal = pc.match_substring_regex(text, r"^\s*[+-]?[0-9]+\s*$").to_numpy(zero_copy_only=False)
    for row, cell in zip(rows[literal], text.filter(literal).to_pylist()):
        if not -(2**63) <= int(cell) < 2**63:  # 2**63 - 1 reads as 2.0**63
            raise EventError(f"{path}: column {name!r} holds integers outside the int64 range "
                             f"(e.g. {cell!r} at row {row})")


def _dates_as_datetimes(table: pa.Table) -> pa.Table:
    """A ``ts`` column of dates (a CSV column of 2024-01-01 values) as datetimes at midnight."""
    names = table.column_names
    if names.count("ts") == 1:
        i = names.index("ts")
        t = table.schema.field(i).type
        if pa.types.is_date32(t) or pa.types.is_date64(t):
            # (in seconds, whichever date type: the unit of the output's ts, docs/api.md)
            table = table.set_column(i, "ts", table.column(i).cast(pa.timestamp("s")))
    return table


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _type_name(t: pa.DataType) -> str:
    return "string" if _is_text(t) else str(t)


_TIME_UNITS = ("s", "ms", "us", "ns")  # coarse to fine


def _joined_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type of a column that is ``a`` in one file and ``b`` in another (None: none), as
    cep-gpu joins kinds elsewhere: integers and floats give a float. Timestamps of one time zone
    (or none) in different units give the finer unit (no value loses precision; one beyond its
    range is an error naming the file, :func:`_cast_error`); dates join timestamps without a time
    zone (dates are datetimes at midnight, :func:`_dates_as_datetimes`). A time zone in one file
    and none, or another, in the other is no join: which one the output shows is not known."""
    if a == b or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    def number(t: pa.DataType) -> bool:
        return pa.types.is_integer(t) or pa.types.is_floating(t)

    if number(a) and number(b):
        return pa.int64() if pa.types.is_integer(a) and pa.types.is_integer(b) else pa.float64()
    if pa.types.is_date(a) and pa.types.is_date(b):
        return pa.date64()
    if pa.types.is_date(a) or pa.types.is_date(b):
        a, b = (a, b) if pa.types.is_timestamp(a) else (b, a)
        return a if pa.types.is_timestamp(a) and a.tz is None else None
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b) and a.tz == b.tz:
        return pa.timestamp(max(a.unit, b.unit, key=_TIME_UNITS.index), tz=a.tz)
    return None


def _cast_error(path: Path, dataset: pq.ParquetDataset, schema: pa.Schema) -> EventError | None:
    """The error naming the file and column whose values the joined ``schema`` cannot hold (an
    integer beyond a float's exact range, a uint64 beyond int64, a timestamp beyond the finer
    unit's range); only on the error path: each file's columns are cast one by one."""
    for fragment in dataset.fragments:
        for f in fragment.physical_schema:
            target = schema.field(f.name).type
            if pa.types.is_dictionary(target):
                continue  # strings: read as strings in every file
            try:
                fragment.to_table(columns=[f.name]).column(0).cast(target)
            except pa.ArrowInvalid as exc:
                other = next((g.path, g.physical_schema.field(f.name).type) for g in dataset.fragments
                             if f.name in g.physical_schema.names
                             and g.physical_schema.field(f.name).type != f.type)
                return EventError(f"{path}: column {f.name!r} is {_type_name(f.type)} in {fragment.path} "
                                  f"but {_type_name(other[1])} in {other[0]}, and not every value can be "
                                  f"read as {_type_name(target)} ({exc}); give it one type in every file")
    return None


def _joined_schema(path: Path, dataset: pq.ParquetDataset) -> pa.Schema:
    """The schema of a directory of Parquet files: every file's columns (null in the files
    without them), strings dictionary-encoded, and a column's types joined by
    :func:`_joined_type`; any other difference is an error naming the column, files and types.
    (pyarrow takes the first file's schema: the others' extra columns were dropped, and their
    values cast to the first file's types, a text "1" to the integer 1.)"""
    dictionary = pa.dictionary(pa.int32(), pa.string())
    fields: dict[str, tuple[pa.DataType, str]] = {}  # name -> (type, a file that has it)
    for fragment in dataset.fragments:
        for f in fragment.physical_schema:
            t = dictionary if _is_text(f.type) else f.type
            if f.name not in fields:
                fields[f.name] = (t, fragment.path)
                continue
            known, where = fields[f.name]
            joined = _joined_type(known, t)
            if joined is None:
                raise EventError(f"{path}: column {f.name!r} is {_type_name(known)} in {where} but "
                                 f"{_type_name(t)} in {fragment.path}; give it one type in every file")
            if joined != known:
                fields[f.name] = (joined, fragment.path)
    # hive keys (k=v folders), given as plain values: a scan with a schema has no dictionary for them
    partitions = [pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
                  for f in dataset.schema if f.name not in fields]
    return pa.schema([pa.field(n, t) for n, (t, _) in fields.items()] + partitions)


def read_events(path: str | Path, columns: Mapping[str, str] | None = None) -> pd.DataFrame:
    """:func:`read_table` (``columns`` too) as a pandas frame; strings come back as categoricals
    (see :func:`cep_gpu.events.frame_from_arrow`)."""
    return frame_from_arrow(read_table(path, columns))


def write_output(out: pd.DataFrame | pa.Table, path: str | Path) -> None:
    """Composite events to CSV (ids as space-separated text) or Parquet (ids as list<int64>).

    A pandas frame is written without pandas' schema metadata, as an Arrow table is: pandas
    cannot read back the dtype name it records for the Arrow-backed ``ids``
    (``data type 'list<item: int64>[pyarrow]' not understood``)."""
    if isinstance(out, pa.Table):
        table = out
    else:
        table = pa.Table.from_pandas(out, preserve_index=False).replace_schema_metadata(None)
    if file_format(path) == "parquet":
        pq.write_table(table, path)
        return
    for name in ("ids", "id_counts"):  # id_counts: rules with Kleene closure (docs/language.md)
        if name in table.column_names:
            text = pa.array([" ".join(map(str, v)) for v in table.column(name).to_pylist()], pa.string())
            table = table.set_column(table.schema.get_field_index(name), name, text)
    pacsv.write_csv(table, path)
