"""Events as DecoPa reads them: one time-sorted table, as ``detect`` reads it."""

from __future__ import annotations

import pyarrow as pa

from ..events import EventTable


def ingest(events, time_unit: str) -> EventTable:
    """``events`` (pandas, Arrow or an ingested table) as one time-sorted table, as ``detect`` reads it."""
    if isinstance(events, EventTable):
        return events
    if isinstance(events, (pa.Table, pa.RecordBatch)):
        return EventTable.from_arrow(events, time_unit=time_unit)
    return EventTable.from_pandas(events, time_unit=time_unit)
