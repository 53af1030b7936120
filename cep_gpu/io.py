"""Reading events and writing composite events: CSV and Parquet through pyarrow."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .errors import EventError
from .events import frame_from_arrow

FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def file_format(path: str | Path) -> str:
    """``csv`` or ``parquet`` from the file name; a clear error otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise EventError(f"{path}: unknown file type {suffix!r}; use .csv or .parquet")
    return FORMATS[suffix]


def read_table(path: str | Path) -> pa.Table:
    """Events from a CSV or Parquet file (a directory of Parquet files works too) as an Arrow
    table, which ``detect`` and ``EventTable.from_arrow`` read without a pandas frame.

    Parquet string columns are read dictionary-encoded, as they are stored: the engine takes
    their codes, with no Python string per row.
    """
    path = Path(path)
    if not path.exists():
        raise EventError(f"{path}: no such file")
    if not path.is_dir() and file_format(path) == "csv":
        if path.stat().st_size == 0 or not path.read_bytes()[:4096].strip():
            raise EventError(f"{path}: the CSV file is empty; it needs a header row naming at least 'type' and 'ts'")
        try:
            return pacsv.read_csv(path)
        except pa.ArrowInvalid as exc:
            raise EventError(f"{path}: cannot read the CSV file: {exc}") from None
    try:
        schema = pq.ParquetDataset(path).schema
        strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        return pq.read_table(path, read_dictionary=strings)
    except pa.ArrowInvalid as exc:
        raise EventError(f"{path}: cannot read the Parquet data: {exc}") from None


def read_events(path: str | Path) -> pd.DataFrame:
    """:func:`read_table` as a pandas frame; strings come back as categoricals (see
    :func:`cep_gpu.events.frame_from_arrow`)."""
    return frame_from_arrow(read_table(path))


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
