"""EventTable: events as time-sorted columns of plain NumPy arrays.

A pandas DataFrame or an Arrow table (read column by column, without pandas) with ``type``,
``ts``, optional ``id`` and attribute columns becomes one struct-of-arrays over all events: ``ts`` as int64 nanoseconds, ``type`` as int32 codes
into ``type_names``, ``ids`` as int64, and one :class:`AttributeColumn` per attribute (values plus a
validity mask; strings dictionary-encoded to int32 codes through one table-wide
:class:`StringDictionary`, so that equal strings have equal codes across columns and types).
Kernels index these arrays by row; nothing here knows about rules. Rows are sorted by
``(ts, id)``, so row order is the total order that ``last``/``first`` tie-break on.

Row lineage (:class:`RowTag`, :func:`row_tag`): tables made by :meth:`EventTable.concat` (or
given a lineage by :func:`start_lineage`) and their contiguous slices (:meth:`EventTable.take` of
a range, how the engine drops an expired prefix) record which rows they share with the tables
they came from, so that device copies of the columns (the GPU backend) can be updated with the
new rows only.
"""

from .checks import TS_MAX_NS, TS_MIN_NS, check_ts_range, stream_time, ts_range_text
from .from_arrow import frame_from_arrow, nullable_pandas_type
from .lineage import RowTag
from .table import EventTable
from .values import (
    RESERVED,
    UNIT_NS,
    AttributeColumn,
    Kind,
    StringDictionary,
    TimeFormat,
    column_to_python,
    values_as,
)

__all__ = [
    "RESERVED",
    "TS_MAX_NS",
    "TS_MIN_NS",
    "UNIT_NS",
    "AttributeColumn",
    "EventTable",
    "Kind",
    "RowTag",
    "StringDictionary",
    "TimeFormat",
    "check_ts_range",
    "column_to_python",
    "frame_from_arrow",
    "nullable_pandas_type",
    "stream_time",
    "ts_range_text",
    "values_as",
]
