"""The Spark hook: ``detect_stream(..., shedding=shedder)`` sheds each key's micro-batch.

Structured Streaming hands one key's new events to the state function as one micro-batch; they
all arrive together, so the shedder admits them as a burst behind an idle engine
(:meth:`Shedder.shed_batch`): the kept events' estimated processing time stays within the
shedder's ``latency_bound``, the lowest utilities go first, and the key's buffered events count
as context (terminators of the batch read them). Nothing is dropped below the constraint.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import ArgumentError
from .shedder import Shedder


def check_shedder(shedding) -> Shedder | None:
    """``shedding`` as ``detect_stream`` accepts it: None, or a fitted :class:`Shedder`."""
    if shedding is None:
        return None
    if not isinstance(shedding, Shedder):
        raise ArgumentError(f"shedding must be a cep_gpu.shedding.Shedder or None, got {type(shedding).__name__}")
    shedding._need()
    return shedding


def shed_parts(parts: list[pa.Table], buffer: pa.Table, shedding: Shedder, unit: str) -> list[pa.Table]:
    """The rows of one key's micro-batch (``parts``) that the shedder keeps; ``buffer``: the
    key's events from earlier batches (context); ``unit``: the unit of their ``ts`` column."""
    if not parts:
        return parts
    new = pa.concat_tables(parts)
    frame = new.to_pandas()
    ctx = buffer.to_pandas() if buffer.num_rows else None
    keep = shedding.shed_batch(frame, context=ctx, time_unit=unit)
    shedding.spark_dropped = getattr(shedding, "spark_dropped", 0) + int((~keep).sum())
    return [new.filter(pa.array(np.asarray(keep, bool)))]


def shed_frame(events: pd.DataFrame, shedding: Shedder, context: pd.DataFrame | None = None) -> pd.DataFrame:
    """The kept rows of a micro-batch given as a pandas DataFrame (for ``foreachBatch`` jobs)."""
    keep = shedding.shed_batch(events, context=context)
    return events[keep]
