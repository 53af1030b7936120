"""``execute_plan_spark``: a DecoPa plan (:mod:`cep_gpu.decopa`) as Spark stages, one per operator.

* leaves: the events of each position's type pass its own filters in a ``mapInArrow`` task (a
  one-position rule, stateless, so exact over any partitioning) and become rows ``i{p}`` (id),
  ``t{p}`` (ns) and ``a{p}_{attr}``;
* an operator: its two inputs as one DataFrame (``side`` 0/1, ``lo``/``hi`` times); the
  partitioned input goes to unit ``pmod(xxhash64(shared ids), n)``, the other one to every unit
  (``explode``); within a unit, time slices as in ``detect_spark`` (a row is copied to every slice
  whose owned range meets ``[hi, hi + W]``; a match is kept by the slice owning its latest time);
  ``groupBy(unit, slice).applyInArrow`` runs the operator's cep-gpu rule (the same rule as
  :func:`cep_gpu.decopa.execute`) and joins the pairs it finds;
* the root's matches get the rule's ``return`` attributes and ids in a last ``mapInArrow``.

The rows equal ``cep_gpu.detect(df.toPandas(), plan.rule)`` for any partitioning of ``df`` and
any number of slices (unordered: ``orderBy("ts", "rule", "ids")`` for ``detect``'s order).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cep_gpu.backends import check_backend_name
from cep_gpu.decopa.errors import DecompositionError
from cep_gpu.decopa.execute import PlanRules
from cep_gpu.decopa.optimize import Plan
from cep_gpu.events import UNIT_NS

from .batch import checked_events, slice_bounds, slice_of
from .checks import check_column_names, check_unique_ids, require_dataframe
from .schema import T_NS, engine_columns, output_struct, time_spec
from .task import engine_nanos

UNIT = "__decopa_unit"
SIDE = "__decopa_side"


def execute_plan_spark(df: DataFrame, plan: Plan, time_unit: str = "s", backend: str = "auto",
                       slices: int = 1, check_ids: bool = True) -> DataFrame:
    """Run ``plan`` over the Spark DataFrame ``df`` with one stage per operator.

    ``df``: events with ``type``, ``ts`` (timestamp, or numbers in ``time_unit``), optional ``id``
    (else the row position, as ``detect`` numbers them) and attributes. ``slices``: time slices
    per operator unit (>= 1). ``check_ids``: refuse an ``id`` two rows share (one Spark job on
    the driver; ``False`` skips it for ids unique by construction, as in ``detect_spark``).
    Returns a Spark DataFrame with ``detect``'s columns (rule, ts, ids, attributes). Raises
    :class:`~cep_gpu.decopa.DecompositionError` for a rule outside the executable scope or an
    invalid plan, on the driver before any task runs.
    """
    if not isinstance(plan, Plan):
        raise DecompositionError(f"expected a cep_gpu.decopa.Plan, got {type(plan).__name__}")
    if not isinstance(slices, int) or isinstance(slices, bool) or slices < 1:
        raise DecompositionError(f"slices must be an int >= 1, got {slices!r}")
    if not isinstance(check_ids, bool):  # (a string such as "no" would read as True)
        raise DecompositionError(f"check_ids must be True or False, got {check_ids!r}")
    check_backend_name(backend)  # on the driver: an unknown name failed inside every task
    plan.validate()
    pattern = plan.pattern
    pattern.require_executable()
    require_dataframe(df, "execute_plan_spark")
    check_column_names(df)
    spec = time_spec(df.schema, time_unit)
    attrs_in = engine_columns(df, [plan.rule])  # unknown attributes fail here, as in detect_spark
    check_column_names(df, ["type", "ts", "id", *attrs_in])
    scale = UNIT_NS[spec.engine_unit]
    ts_scale = None if spec.kind == "timestamp" or scale == 1 else float(UNIT_NS[time_unit])
    rules = PlanRules(plan, ts_scale)
    if check_ids:
        check_unique_ids(df)  # as in detect_spark: a repeat across partitions reaches no one task
    df = checked_events(df, spec)  # bad rows fail naming the row, as in detect_spark
    events = df.select("type", spec.to_engine(F.col("ts")).alias("ts"), F.col("id").cast("long").alias("id"),
                       *[F.col(f"`{a}`") for a in attrs_in])
    types = {f.name: f.dataType for f in events.schema.fields}

    results: dict[frozenset, DataFrame] = {}
    for p in range(pattern.k):
        fields = [T.StructField(f"i{p}", T.LongType()), T.StructField(f"t{p}", T.LongType())]
        fields += [T.StructField(f"a{p}_{a}", types[a]) for a in rules.attrs[p] if a in types]
        fn = functools.partial(_leaf_task, rule=rules.leaf_rules[p], p=p, attrs=[a for a in rules.attrs[p] if a in types],
                               kind=spec.kind, unit=spec.engine_unit, backend=backend)
        # cached: an input feeds its operators, the slice bounds and the lineage of every later
        # stage, which Spark would otherwise recompute for each of them
        results[frozenset((p,))] = _with_bounds(
            events.where(F.col("type") == F.lit(pattern.types[p])).mapInArrow(fn, T.StructType(fields)), [p]).cache()

    for op in plan.operators:
        a, b = frozenset(op.inputs[0]), frozenset(op.inputs[1])
        left = results[a].withColumn(SIDE, F.lit(0))
        right = results[b].withColumn(SIDE, F.lit(1))
        n = op.n_units
        part = op.partitioned
        keys = sorted(a & b) or list(op.inputs[part])
        hashed = F.array(F.pmod(F.xxhash64(*[F.col(f"i{q}") for q in keys]), F.lit(n)).cast("int"))
        every = F.sequence(F.lit(0), F.lit(n - 1))
        left = left.withColumn(UNIT, F.explode(hashed if part == 0 else every))
        right = right.withColumn(UNIT, F.explode(every if part == 0 else hashed))
        both = left.unionByName(right, allowMissingColumns=True)
        out_fields = [f for f in both.schema.fields if f.name not in (SIDE, UNIT)]
        bounds = slice_bounds(both.withColumn(T_NS, F.col("hi")), slices) if slices > 1 else []
        first = slice_of(F.col("hi"), bounds)
        last = slice_of(F.col("hi") + F.lit(int(pattern.window)), bounds)
        copies = both.withColumn("__slice", F.explode(F.sequence(first, last)))
        fn = functools.partial(_op_task, rule=rules.op_rules[op.name], inputs=(sorted(a), sorted(b)),
                               positions=list(op.positions), bounds=bounds, backend=backend,
                               names=[f.name for f in out_fields])
        struct = T.StructType([f for f in out_fields if _keep(f.name, op.positions)])
        results[frozenset(op.positions)] = copies.groupBy(UNIT, "__slice").applyInArrow(fn, struct).cache()

    root = results[frozenset(plan.root.positions)]
    out_struct = output_struct([plan.rule], spec.engine_type, df.schema)
    fn = functools.partial(_final_task, rule=rules.final_rule, k=pattern.k, name=plan.rule.name,
                           kind=spec.kind, unit=spec.engine_unit, backend=backend, out_struct=out_struct)
    out = root.mapInArrow(fn, out_struct)
    return out.withColumn("ts", spec.from_engine(F.col("ts")))


def _keep(name: str, positions) -> bool:
    if name in ("lo", "hi"):
        return True
    head = name.split("_", 1)[0]
    return head[1:].isdigit() and int(head[1:]) in positions


def _with_bounds(df: DataFrame, positions) -> DataFrame:
    ts = [F.col(f"t{p}") for p in positions]
    lo = F.least(*ts) if len(ts) > 1 else ts[0]
    hi = F.greatest(*ts) if len(ts) > 1 else ts[0]
    return df.withColumn("lo", lo).withColumn("hi", hi)


def _leaf_task(batches, *, rule, p, attrs, kind, unit, backend):
    """Rows of one partition that pass position ``p``'s own filters."""
    from cep_gpu import detect
    from cep_gpu.events import EventTable

    for batch in batches:
        table = pa.Table.from_batches([batch])
        if table.num_rows == 0:
            continue
        ev = EventTable.from_arrow(table, time_unit=unit)
        found = detect(ev, rule, backend=backend, output="arrow")
        ids = found.column("ids").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        keep = np.isin(table.column("id").to_numpy(), ids)
        sub = table.filter(pa.array(keep))
        cols = [sub.column("id"), pa.array(engine_nanos(sub.column("ts").to_numpy(), kind, unit), pa.int64())]
        names = [f"i{p}", f"t{p}"]
        for a in attrs:
            cols.append(sub.column(a))
            names.append(f"a{p}_{a}")
        yield from pa.Table.from_arrays(cols, names=names).to_batches()


def _op_task(key, table, *, rule, inputs, positions, bounds, backend, names):
    """One unit and time slice of an operator: the pairs its rule finds, joined."""
    from cep_gpu import detect
    from cep_gpu.events import EventTable

    slice_id = int(key[1].as_py())
    out_names = [n for n in names if _keep(n, positions)]
    side = table.column(SIDE).to_numpy()
    n = table.num_rows
    ev = pa.table({
        "type": pa.array(np.where(side == 0, "L", "R")),
        "ts": table.column("hi"),
        "id": pa.array(np.arange(n, dtype=np.int64)),
        **{c: table.column(c) for c in names},
    })
    found = detect(EventTable.from_arrow(ev, time_unit="ns"), rule, backend=backend, output="arrow")
    pairs = found.column("ids").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, 2)
    cols = {}
    s1 = set(inputs[0])
    for c in out_names:
        if c in ("lo", "hi"):
            continue
        head = int(c.split("_", 1)[0][1:])
        rows = pairs[:, 0] if head in s1 else pairs[:, 1]
        cols[c] = table.column(c).take(pa.array(rows, pa.int64()))
    ts = np.stack([cols[f"t{q}"].to_numpy() for q in positions]) if len(pairs) else np.empty((len(positions), 0), np.int64)
    lo = ts.min(axis=0) if len(pairs) else np.empty(0, np.int64)
    hi = ts.max(axis=0) if len(pairs) else np.empty(0, np.int64)
    cols["lo"] = pa.array(lo, pa.int64())
    cols["hi"] = pa.array(hi, pa.int64())
    owner = np.searchsorted(np.asarray(bounds, np.int64), hi, "right") if bounds else np.zeros(len(hi), np.int64)
    keep = pa.array(owner == slice_id)
    result = pa.table({c: cols[c] for c in out_names})
    return result.filter(keep)


def _final_task(batches, *, rule, k, name, kind, unit, backend, out_struct):
    """The rule's rows from the root's matches: ts, ids in declaration order, ``return`` values."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from cep_gpu import detect
    from cep_gpu.events import EventTable

    from .task import conform

    schema = to_arrow_schema(out_struct)
    scale = UNIT_NS[unit]
    for batch in batches:
        table = pa.Table.from_batches([batch])
        n = table.num_rows
        if n == 0:
            continue
        ev = pa.table({"type": pa.array(["L"] * n), "ts": table.column("hi"),
                       "id": pa.array(np.arange(n, dtype=np.int64)),
                       **{c: table.column(c) for c in table.column_names}})
        out = detect(EventTable.from_arrow(ev, time_unit="ns"), rule, backend=backend, output="arrow")
        rows = out.column("ids").combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(np.int64)
        ids = np.stack([table.column(f"i{p}").to_numpy()[rows] for p in range(k)], axis=1)
        hi = table.column("hi").to_numpy()[rows]
        ts = hi / scale if kind == "fractional" else hi // scale
        flat = pa.array(ids.reshape(-1), pa.int64())
        ids_arr = pa.ListArray.from_arrays(pa.array(np.arange(0, len(rows) * k + 1, k, dtype=np.int32)), flat)
        res = out.set_column(out.schema.get_field_index("ids"), "ids", ids_arr)
        res = res.set_column(res.schema.get_field_index("ts"), "ts", pa.array(ts))
        res = res.set_column(res.schema.get_field_index("rule"), "rule", pa.array([name] * len(rows), pa.string()))
        yield from conform(res, schema).to_batches()
