"""Spark-side schemas: input validation at planning time, engine time, and the output schema.

Validation runs on the driver against the DataFrame's schema only, so bad input fails before any
Spark task starts, with a message that names the column at fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cep_gpu.analysis import rule_order
from cep_gpu.errors import EventError, RuleError
from cep_gpu.events import UNIT_NS
from cep_gpu.model import (
    AggValue,
    Arith,
    Attr,
    Const,
    Expr,
    Neg,
    Rule,
    Timestamp,
    kleene_exprs,
    walk,
)
from cep_gpu.output import OutputSchema

from .checks import check_attribute_types

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_FRACTIONAL = (T.FloatType, T.DoubleType)
_SPARK_OF = {"string": T.StringType(), "int": T.LongType(), "float": T.DoubleType(), "bool": T.BooleanType()}

#: internal column names (never clash with user attributes, which are plain identifiers)
T_NS = "__cep_t"
SLICE = "__cep_slice"


@dataclass(frozen=True)
class TimeSpec:
    """How the input ``ts`` column is handed to the engine and turned back into the input's type.

    ``kind``: ``timestamp`` (Spark TIMESTAMP / TIMESTAMP_NTZ; passed to the engine as int64
    microseconds, exact and independent of the session time zone), ``integral`` or ``fractional``
    (numbers in ``unit``). ``spark_type``: the type of ``ts`` in the input and output.
    """

    kind: str
    unit: str
    spark_type: T.DataType

    @property
    def engine_unit(self) -> str:
        return "us" if self.kind == "timestamp" else self.unit

    @property
    def engine_type(self) -> T.DataType:
        """The type of ``ts`` inside the UDFs."""
        return T.LongType() if self.kind == "timestamp" else (
            T.LongType() if self.kind == "integral" else T.DoubleType()
        )

    def to_engine(self, col: Column) -> Column:
        """``ts`` as the engine reads it in the UDFs. Rows are checked first
        (:func:`cep_gpu.spark_udfs.checks.checked_rows`: null, NaN, infinite and unrepresentable
        values fail the job naming the row), so the conversion meets none of them."""
        if self.kind == "timestamp":
            # NTZ values are wall-clock readings: microseconds as if in UTC, from their fields (a
            # conversion through the session's time zone moves them across a DST change)
            return _ntz_micros(col) if isinstance(self.spark_type, T.TimestampNTZType) else F.unix_micros(col)
        return col.cast("long") if self.kind == "integral" else col.cast("double")

    def from_engine(self, col: Column) -> Column:
        """Engine ``ts`` (as returned by the UDFs) back to the input's type."""
        if self.kind == "timestamp":
            return _micros_ntz(col) if isinstance(self.spark_type, T.TimestampNTZType) else F.timestamp_micros(col)
        return col.cast(self.spark_type)

    def nanos(self, engine_ts: Column) -> Column:
        """Engine ``ts`` as int64 ns, the same arithmetic as :meth:`cep_gpu.events.TimeFormat.to_ns`."""
        scale = UNIT_NS[self.engine_unit]
        if self.kind == "fractional":
            return F.round(engine_ts * F.lit(float(scale))).cast("long")
        return engine_ts.cast("long") * F.lit(scale)


def time_spec(schema: T.StructType, time_unit: str) -> TimeSpec:
    """Check the ``type``, ``ts`` and ``id`` columns of ``schema``; the :class:`TimeSpec` of ``ts``."""
    names = schema.fieldNames()
    for col in ("type", "ts"):
        if col not in names:
            raise EventError(f"events have no {col!r} column (columns: {names})")
    if not isinstance(time_unit, str) or time_unit not in UNIT_NS:
        raise EventError(f"unknown time_unit {time_unit!r}; use one of {sorted(UNIT_NS)}")
    ttype = schema["type"].dataType
    if not isinstance(ttype, T.StringType):
        raise EventError(f"column 'type' must be a string column, got {ttype.simpleString()}")
    if "id" in names and not isinstance(schema["id"].dataType, _INTEGRAL):
        raise EventError(f"column 'id' must hold integers, got {schema['id'].dataType.simpleString()}")
    ts = schema["ts"].dataType
    if isinstance(ts, (T.TimestampType, T.TimestampNTZType)):
        return TimeSpec("timestamp", time_unit, ts)
    if isinstance(ts, _INTEGRAL):
        return TimeSpec("integral", time_unit, ts)
    if isinstance(ts, _FRACTIONAL):
        return TimeSpec("fractional", time_unit, ts)
    raise EventError(
        f"column 'ts' has unsupported type {ts.simpleString()}: use a timestamp, or numbers "
        f"(integer or floating point) in time_unit={time_unit!r}"
        + (" (cast decimals to double)" if isinstance(ts, T.DecimalType) else "")
    )


def read_attributes(rules: Sequence[Rule]) -> set[str]:
    """Every attribute name the rules read (conditions, negations, aggregates, outputs, and the
    conditions of Kleene closures, which live in the predicates, not in ``conditions``)."""
    names: set[str] = set()
    for r in rules:
        exprs = list(r.conditions) + [a.expr for a in r.attributes] + list(kleene_exprs(r))
        for part in list(r.negations) + list(r.aggregates):
            exprs.extend(part.conditions)
        for node in (n for e in exprs for n in walk(e)):
            if isinstance(node, Attr):
                names.add(node.name)
        names.update(a.attribute for a in r.aggregates if a.attribute)
    return names


def engine_columns(df: DataFrame, rules: Sequence[Rule], extra: Sequence[str] = ()) -> list[str]:
    """The attribute columns the engine needs; a rule reading an unknown attribute is an error now."""
    produced = {a.name for r in rules for a in r.attributes}
    have = set(df.columns)
    needed = read_attributes(rules) | set(extra)
    for r in rules:
        for name in sorted(read_attributes([r]) - have - produced):
            raise RuleError(
                f"rule {r.name!r} reads attribute {name!r}, which no event in the input has "
                f"(columns: {sorted(have)})"
            )
    attrs = [c for c in df.columns if c in needed and c not in ("type", "ts", "id")]
    check_attribute_types(df.schema, attrs)  # on the driver: the tasks would fail on the values
    return attrs


def input_kinds(schema: T.StructType) -> dict[str, str]:
    """The engine kind (int, float, string, bool) of each attribute column of a Spark schema."""
    kinds = {}
    for f in schema.fields:
        t = f.dataType
        if isinstance(t, _INTEGRAL):
            kinds[f.name] = "int"
        elif isinstance(t, (*_FRACTIONAL, T.DecimalType)):
            kinds[f.name] = "float"
        elif isinstance(t, T.StringType):
            kinds[f.name] = "string"
        elif isinstance(t, T.BooleanType):
            kinds[f.name] = "bool"
    return kinds


def _expr_kind(expr: Expr, kinds: dict[str, str]) -> str:
    """The kind of an output expression, as :func:`cep_gpu.evaluate.evaluate` computes it."""
    if isinstance(expr, Const):
        v = expr.value
        return "bool" if isinstance(v, bool) else "string" if isinstance(v, str) else (
            "int" if isinstance(v, int) else "float"
        )
    if isinstance(expr, Attr):
        return kinds.get(expr.name, "float")
    if isinstance(expr, Timestamp):
        return "int"
    if isinstance(expr, AggValue):
        return "float"
    if isinstance(expr, Neg):
        return _expr_kind(expr.arg, kinds)
    if isinstance(expr, Arith):
        if expr.op == "/":
            return "float"
        both = {_expr_kind(expr.left, kinds), _expr_kind(expr.right, kinds)}
        return "int" if both == {"int"} else "float"
    return "bool"  # Compare, BoolOp, Not


def attribute_kinds(rules: Sequence[Rule], schema: T.StructType) -> list[tuple[str, str]]:
    """The output attribute columns and their kinds, fixed at planning time.

    Declared types win (as in :class:`cep_gpu.output.OutputSchema`); an undeclared attribute gets
    the kind its expression has over the input's column types (composite attributes included).
    """
    out = OutputSchema.of(rules)
    kinds = input_kinds(schema)
    inferred: dict[str, str] = {}
    for i in rule_order(rules):  # producers first: a consumer's Attr sees the producer's kinds
        r = rules[i]
        for a in r.attributes:
            k = a.type or _expr_kind(a.expr, {**kinds, **inferred})
            prev = inferred.get(a.name)
            if prev and prev != k:
                k = "float" if {prev, k} == {"int", "float"} else "string" if "string" in (prev, k) else k
            inferred[a.name] = k
    return [(n, inferred[n] if n in out.inferred else k) for n, k in out.attributes]


def output_struct(
    rules: Sequence[Rule], ts_type: T.DataType, schema: T.StructType | None = None
) -> T.StructType:
    """The output schema: rule, ts, ids array<bigint>, then every attribute the rules define."""
    fields = [
        T.StructField("rule", T.StringType()),
        T.StructField("ts", ts_type),
        T.StructField("ids", T.ArrayType(T.LongType())),
    ]
    if any(r.kleene_positions for r in rules):  # how many ids each position took (Kleene)
        fields.append(T.StructField("id_counts", T.ArrayType(T.IntegerType())))
    attrs = attribute_kinds(rules, schema or T.StructType([]))
    fields += [T.StructField(n, _SPARK_OF[k]) for n, k in attrs]
    return T.StructType(fields)


__all__ = ["SLICE", "T_NS", "TimeSpec", "engine_columns", "output_struct", "time_spec"]


_DAY_US = 86_400_000_000


def _ntz_micros(col: Column) -> Column:
    """A TIMESTAMP_NTZ as microseconds since 1970-01-01 00:00 read as UTC, from its date and
    time fields, which no time zone touches."""
    return (F.unix_date(F.to_date(col)).cast("long") * F.lit(_DAY_US)
            + (F.hour(col) * 3600 + F.minute(col) * 60).cast("long") * F.lit(1_000_000)
            + (F.extract(F.lit("SECOND"), col) * 1_000_000).cast("long"))


def _micros_ntz(micros: Column) -> Column:
    """The inverse of :func:`_ntz_micros`: a TIMESTAMP_NTZ made from its fields."""
    days = F.floor(micros / F.lit(_DAY_US))
    rem = micros - days * F.lit(_DAY_US)
    date = F.date_from_unix_date(days.cast("int"))
    return F.make_timestamp_ntz(
        F.year(date), F.month(date), F.dayofmonth(date), (rem / 3_600_000_000).cast("int"),
        ((rem % 3_600_000_000) / 60_000_000).cast("int"), ((rem % 60_000_000) / F.lit(1_000_000)).cast("decimal(16,6)"))
