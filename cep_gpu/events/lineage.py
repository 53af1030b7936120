"""Row lineage: which rows a table's arrays share with the tables they came from.

An :class:`~cep_gpu.events.EventTable` may carry a :class:`Lineage` in its ``lineage`` field
(``None``: nothing is known). :meth:`EventTable.concat` always gives its result one,
:meth:`EventTable.take` of a contiguous range continues its source's, and :func:`start_lineage`
starts one for a table whose columns were put on the device at ingestion. The GPU backend
(:mod:`cep_gpu.kernels.gpu`) owns the meaning: its device copies of the columns are updated with
the new rows only; nothing else reads it.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .table import EventTable


@dataclass(frozen=True)
class RowTag:
    """What is known about one array of a table: its ``ts``, or an attribute's values or validity.

    ``role`` names the array (``"ts"``, ``"values:NAME"``, ``"valid:NAME"``, see :func:`array_role`).
    Row ``r`` of the array is global row ``base + r`` of lineage ``lineage``. Arrays with the same
    ``lineage`` and ``role`` hold the same value at every global row that both have (they differ
    only in which range of rows they hold). ``ancestors``, nearest first, lists ``(lineage, cut)``:
    the arrays of that lineage and this role hold the same values as this one at every global row
    below ``cut`` that both have.

    Only :meth:`EventTable.concat` (it appends, or merges rows in after the first ``kept`` rows of
    ``self``) and :func:`start_lineage` start a lineage, and only :meth:`EventTable.take` of a
    contiguous range continues one. Table arrays are never written in place.
    """

    lineage: int
    base: int
    role: str
    ancestors: tuple[tuple[int, int], ...] = ()


#: How many earlier lineages a tag remembers (each concat adds one).
MAX_ANCESTORS = 16

_LINEAGES = itertools.count(1)


class Lineage:
    """The row tags of one table's arrays, by role.

    A tag describes the array object it was made for: :meth:`tag` answers only for that object
    (held by a weak reference), so an array swapped into the table by other means has no tag and
    is treated as new.
    """

    __slots__ = ("_tags",)

    def __init__(self) -> None:
        self._tags: dict[str, tuple[RowTag, weakref.ref]] = {}

    def set(self, role: str, arr: np.ndarray, tag: RowTag) -> None:
        """Record ``tag`` for ``arr``, the table's array of role ``role``."""
        self._tags[role] = (tag, weakref.ref(arr))

    def tag(self, role: str, arr: np.ndarray) -> RowTag | None:
        """The tag of ``arr`` in role ``role``, or None when ``arr`` is not the array it was made for."""
        hit = self._tags.get(role)
        return hit[0] if hit is not None and hit[1]() is arr else None

    def __len__(self) -> int:
        return len(self._tags)

    def __reduce__(self):
        # tags describe array objects of this process: an unpickled table (an Engine checkpoint
        # restored) knows no lineage, and its columns are uploaded in full once
        return (Lineage, ())


def array_role(part: str, name: str = "") -> str:
    """The role of a table array: ``array_role("ts")``, ``array_role("values", attr)``, ``array_role("valid", attr)``."""
    return part if part == "ts" else f"{part}:{name}"


def tagged_arrays(table: EventTable) -> Iterator[tuple[str, np.ndarray, str | None]]:
    """(role, array, kind) of each array of ``table`` a tag can describe (see :func:`array_role`)."""
    yield "ts", table.ts, None
    for name, col in table.columns.items():
        yield array_role("values", name), col.values, col.kind
        yield array_role("valid", name), col.valid, col.kind


def row_tag(table: EventTable, role: str = "ts") -> RowTag | None:
    """The tag of ``table``'s array of role ``role`` (see :func:`array_role`), or None."""
    if table.lineage is None:
        return None
    arrays = {r: a for r, a, _ in tagged_arrays(table)}
    return table.lineage.tag(role, arrays[role]) if role in arrays else None


def start_lineage(table: EventTable) -> None:
    """Give the arrays of ``table`` a lineage of their own (rows ``0..n-1``, no ancestors).

    For a table whose columns were put on the device at ingestion (:mod:`cep_gpu.ingest_cudf`)
    and for the streaming buffer's store: the GPU backend keeps tagged arrays as device columns,
    which tables concatenated to this one extend instead of uploading again.
    """
    lineage = next(_LINEAGES)
    out = Lineage()
    for role, arr, _ in tagged_arrays(table):
        out.set(role, arr, RowTag(lineage, 0, role))
    table.lineage = out


def is_range(rows: np.ndarray, n: int) -> bool:
    """``rows`` is ``arange(a, b)`` within ``[0, n)``."""
    first, last = int(rows[0]), int(rows[-1])
    if first < 0 or last >= n or last - first != len(rows) - 1:
        return False
    return len(rows) < 2 or bool(np.all(np.diff(rows) == 1))


def slice_lineage(src: EventTable, out: EventTable, start: int) -> Lineage | None:
    """The lineage of ``out``, which holds rows ``start, start + 1, ...`` of ``src``: its arrays
    continue those of src's that have a tag."""
    if src.lineage is None:
        return None
    got = Lineage()
    for (role, a, _), (_, b, _) in zip(tagged_arrays(src), tagged_arrays(out), strict=True):
        tag = src.lineage.tag(role, a)
        if tag is not None:
            got.set(role, b, replace(tag, base=tag.base + start))
    return got if len(got) else None


def concat_lineage(src: EventTable, out: EventTable, kept: int) -> Lineage:
    """The lineage of ``out`` (a new one), which equals ``src`` in its first ``kept`` rows, array by
    array where the array was carried over unchanged (values: same kind and dtype; concat converts
    values when an attribute's kind changes, never validity)."""
    lineage = next(_LINEAGES)
    before = {role: (a, kind) for role, a, kind in tagged_arrays(src)}
    got = Lineage()
    for role, b, kind in tagged_arrays(out):
        a, a_kind = before.get(role, (None, None))
        tag = src.lineage.tag(role, a) if a is not None and src.lineage is not None else None
        converted = role.startswith("values:") and a_kind != kind
        if tag is None or converted or a.dtype != b.dtype:
            got.set(role, b, RowTag(lineage, 0, role))
            continue
        cut = tag.base + kept
        ancestors = ((tag.lineage, cut),) + tuple((lin, min(c, cut)) for lin, c in tag.ancestors)
        got.set(role, b, RowTag(lineage, tag.base, role, ancestors[:MAX_ANCESTORS]))
    return got
