"""Exact across partitions: the Spark plans against ``detect(..., backend="reference")``.

Two layers. The slicing argument itself (a slice reads ``[lo - lookback, hi + horizon]`` and keeps
the composite events whose terminator it owns; docs/spark.md) is checked without Spark, on random
rules from ``strategies`` (TESLA rules, SEQ/AND patterns with leading, middle and trailing NOTs,
Kleene sets, two-level hierarchies, AND over a composite type) and slice boundaries that fall on
event timestamps. The Spark plans (shuffle, time-ordered partitions, Parquet row groups read by the
tasks) then run one rule set with every such feature at once, on events with ties exactly on the
boundaries, ids not in time order, and integer, datetime and float-millisecond times.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cep_gpu.spark_udfs.plan import context_ns
from conftest_spark import rows, spark  # noqa: F401  (the shared session fixture)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, rule_hierarchies, seq_rules, tesla_rules

import cep_gpu

BACKEND = "reference"
S = 10**9

KLEENE = [
    "SEQ(A a, KL(B b), C c)", "SEQ(KL(B b), C c)", "SEQ(NOT(D z), KL(B b), C c)",
    "SEQ(A a, KL(B b)[2..], NOT(D z), C c)", "SEQ(A a, KL(B b), C c, NOT(D z))",
]
TRAILING = ["SEQ(A a, NOT(D z))", "SEQ(A a, B b, NOT(D z))", "SEQ(A a, NOT(D z), C c, NOT(B y))"]
COMPOSITE_AND = ["AND(P p, C c)", "AND(C c, P p, A a)", "AND(P p, P q)", "SEQ(NOT(D z), P p, C c)"]


@st.composite
def sliced_cases(draw):
    """(rule text, events, slice boundaries in seconds): windows of 1-8 s over 0-30 s, so that
    windows span several slices and boundaries fall on timestamps with ties."""
    w = st.sampled_from([1, 2, 3, 5, 8])
    kind = draw(st.sampled_from(["tesla", "seq", "hierarchy", "kleene", "trailing-not", "composite-and"]))
    if kind == "tesla":
        text = draw(tesla_rules(consuming=False))
    elif kind == "seq":
        text = draw(seq_rules())
    elif kind == "hierarchy":
        text = draw(rule_hierarchies()).split("\nconsuming")[0]
    elif kind == "kleene":
        select = draw(st.sampled_from(["", "select greedy"]))
        text = f"define K pattern {draw(st.sampled_from(KLEENE))} within {draw(w)} s {select} return n := count(b)"
    elif kind == "trailing-not":
        text = f"define T pattern {draw(st.sampled_from(TRAILING))} within {draw(w)} s"
    else:
        producer = draw(st.sampled_from(["SEQ(A a, B b)", "AND(A a, B b)", "SEQ(A a, B b, NOT(D z))"]))
        text = (f"define P pattern {producer} within {draw(w)} s return x := a.x, y := b.y\n\n"
                f"define Q pattern {draw(st.sampled_from(COMPOSITE_AND))} within {draw(w)} s")
    events = draw(event_streams(min_events=10, max_events=50, max_ts=30))
    bounds = sorted(set(draw(st.lists(st.integers(1, 30), min_size=2, max_size=12))))
    return text, events, bounds


def emulated_slices(events: pd.DataFrame, text: str, bounds_s: list[int]) -> pd.DataFrame:
    """The shuffle plan without Spark: event ``t`` goes to slices ``owner(t - horizon)`` ..
    ``owner(t + lookback)``, each slice runs ``detect`` and keeps the terminators it owns."""
    rules = cep_gpu.parse_rules(text)
    lookback, horizon = context_ns(rules)
    bounds = np.array(bounds_s, np.int64) * S

    def owner(t_ns):
        return np.searchsorted(bounds, t_ns, side="right")  # boundaries at or before t

    t = events["ts"].to_numpy().astype(np.int64) * S
    events = events.assign(id=np.arange(len(events)))  # row positions, as detect numbers them
    parts = []
    for s in range(len(bounds) + 1):
        mine = (owner(t - horizon) <= s) & (s <= owner(t + lookback))
        out = cep_gpu.detect(events[mine], rules, backend=BACKEND)
        parts.append(out[owner(out["ts"].to_numpy().astype(np.int64) * S) == s])
    return pd.concat([p for p in parts if len(p)]) if any(len(p) for p in parts) else parts[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sliced_cases())
def test_slicing_argument_holds_without_spark(case):
    """Every composite event of ``detect`` comes out of exactly the slice owning its terminator,
    with the same ids and attributes: the context (lookback, horizon) is never too short."""
    text, events, bounds = case
    try:
        want = rows(cep_gpu.detect(events, text, backend=BACKEND))
    except cep_gpu.CepError:  # a generated rule the language refuses: nothing to slice
        return
    assert rows(emulated_slices(events, text, bounds)) == want


# -- the Spark plans: every feature at once ------------------------------------------------------------

# windows spanning several slices (LW reaches 30 s back; slices are 5-10 s), first/last, parameters
# (int and string), negations before, between and after, aggregates over spans, AND with a repeated
# type, Kleene sets, and a hierarchy whose composite events (at their terminator's timestamp, tied
# with input events) feed an AND, a leading NOT and a TESLA rule
FEATURE_RULES = """
define T1(x: int, m: float)
from C(x=$x) and last B(x=$x) within 4 s from C and first A(y > 1.0) within 3 s from B
  and not D(x=$x) between B and C
  and m=Avg(A(x=$x) within 6 s from C).y
where x=C.x and m=m

define T2(n: int)
from C() and each A(s=$q) within 3 s from C and each B(s=$q and y >= A.y) within 2 s from A
  and c=Count(D() within 5 s from A) < 2
where n=c

define LW
from C(s='u') and each A(x=0) within 30 s from C and not D(x=1) within 25 s from C

define S1 pattern SEQ(NOT(D z), A a, B b) where z.x = a.x within 3 s

define S2 pattern SEQ(A a, NOT(D z), B b, C c) within 5 s select last

define S3 pattern SEQ(A a, B b, NOT(D z)) where a.s = b.s within 4 s select first return x := a.x

define AN pattern AND(A a, B b, A c) within 2 s

define K1 pattern SEQ(A a, KL(B b), C c) where b.x != 2 within 4 s select greedy return n := count(b)

define K2 pattern SEQ(NOT(D z), KL(B b)[1..3], C c) within 3 s return n := count(b)

define P pattern SEQ(A a, B b, NOT(D z)) within 3 s return x := a.x, y := b.y

define Q pattern AND(P p, C c) within 2 s

define R pattern SEQ(NOT(D z), P p, C c) within 3 s

define H from C(x=$x) and last P(x=$x) within 5 s from C where x=C.x
"""


def boundary_events(n: int = 300, span: int = 120, seed: int = 3) -> pd.DataFrame:
    """Integer-second times with many ties (so boundaries fall on them), ids unrelated to time."""
    rng = np.random.default_rng(seed)
    x = pd.array(rng.choice([0, 1, 2, 0, 1], n), dtype="Int64")
    x[rng.random(n) < 0.1] = pd.NA
    y = rng.choice([0.0, 1.5, 3.0, 1.5], n)
    y[rng.random(n) < 0.1] = np.nan
    s = rng.choice(["u", "v", "u"], n).astype(object)
    s[rng.random(n) < 0.1] = None
    return pd.DataFrame({
        "type": rng.choice(list("AABBCCD"), n).astype(object),
        "ts": np.sort(rng.integers(0, span, n)).astype(np.int64),
        "id": (rng.permutation(n) * 7 + 3).astype(np.int64),
        "x": x, "y": y, "s": s,
    })


def as_time(events: pd.DataFrame, time: str) -> tuple[pd.DataFrame, str]:
    """``events`` with integer seconds as datetimes, or as float milliseconds (time_unit ms)."""
    if time == "datetime":
        return events.assign(ts=pd.Timestamp("2024-03-31 00:59:00") + pd.to_timedelta(events["ts"], unit="s")), "s"
    if time == "ms":
        return events.assign(ts=events["ts"] * 1000.0 + 0.25), "ms"
    return events, "s"


def time_ordered_partitions(spark, events: pd.DataFrame, k: int):  # noqa: F811
    """``events`` cut into ``k`` time-ordered Spark partitions, never between equal times."""
    from test_spark_batch import cuts_between

    cuts = cuts_between(events["ts"].to_numpy(), k)
    data = events.astype(object).where(events.notna(), None)
    at = list(events.columns).index("ts")

    def plain(row):  # Spark takes datetime.datetime, not pandas.Timestamp
        return tuple(v.to_pydatetime() if i == at and isinstance(v, pd.Timestamp) else v for i, v in enumerate(row))

    chunks = [[plain(r) for r in data.iloc[c].itertuples(index=False, name=None)]
              for c in np.split(np.arange(len(events)), cuts)]
    rdd = spark.sparkContext.parallelize(range(k), k).flatMap(lambda i: chunks[i])
    return spark.createDataFrame(rdd, schema=spark.createDataFrame(events.iloc[:2]).schema)


@pytest.mark.spark
@pytest.mark.parametrize("plan, time", [
    ("shuffle", "int"), ("shuffle", "datetime"), ("partitions", "ms"), ("partitions", "datetime"), ("parquet", "int"),
])
def test_every_plan_equals_detect(spark, tmp_path, plan, time):  # noqa: F811
    from cep_gpu.spark_udfs import detect_spark

    events, unit = as_time(boundary_events(), time)
    want = rows(cep_gpu.detect(events, FEATURE_RULES, backend=BACKEND, time_unit=unit))
    names = {r[0] for r in want}
    assert names == {"T1", "T2", "LW", "S1", "S2", "S3", "AN", "K1", "K2", "P", "Q", "R", "H"}
    if plan == "shuffle":
        df, kw = spark.createDataFrame(events).repartition(3), {"num_slices": 16}
    elif plan == "partitions":
        df, kw = time_ordered_partitions(spark, events, 8), {}
    else:
        pq.write_table(pa.Table.from_pandas(events, preserve_index=False), tmp_path / "ev.parquet",
                       row_group_size=20, coerce_timestamps="us")
        df, kw = spark.read.parquet(str(tmp_path)), {"num_slices": 8}
    out = detect_spark(df, FEATURE_RULES, backend=BACKEND, time_unit=unit, slicing=plan, **kw)
    assert out.cep_plan.kind == plan
    got = rows(out.toPandas())
    assert len(got) == len(set(got)), "a composite event came out of two slices"
    assert got == want


@pytest.mark.spark
@pytest.mark.parametrize("plan", ["shuffle", "partitions", "parquet"])
def test_times_at_the_ends_of_the_int64_range(spark, tmp_path, plan):  # noqa: F811
    """Events at the largest and smallest int64 ns, with leading and trailing NOTs whose context
    (``max + horizon``, ``min - lookback``) lies past the range. Was: a composite event at
    2**63 - 1 ns was owned by no tile (``[lo, hi)`` with ``hi`` = int64 max): the Parquet plan
    dropped it silently, the partitions plan failed its own layout check."""
    from cep_gpu.spark_udfs import detect_spark

    rules = "define S pattern SEQ(A a, B b, NOT(D d)) within 8 s\n\ndefine N pattern SEQ(NOT(D d), A a, B b) within 8 s"
    top, n = 2**63 - 1, 40
    rng = np.random.default_rng(1)
    ts = np.sort(top - rng.integers(0, 30, n).astype(np.int64) * 10**9)
    ts[-1], ts[0] = top, -(2**63) + 5
    types = rng.choice(list("AABBD"), n).astype(object)
    types[[-3, -1]] = ["A", "B"]  # composite events at the largest time
    events = pd.DataFrame({"type": types, "ts": ts, "id": np.arange(n) * 3})
    want = rows(cep_gpu.detect(events, rules, backend=BACKEND, time_unit="ns"))
    assert any(r[1] == float(top) for r in want)  # (rows() gives numbers as floats)
    if plan == "shuffle":
        df, kw = spark.createDataFrame(events).repartition(3), {"num_slices": 5}
    elif plan == "partitions":
        df, kw = time_ordered_partitions(spark, events, 4), {}
    else:
        pq.write_table(pa.Table.from_pandas(events, preserve_index=False), tmp_path / "ev.parquet", row_group_size=5)
        df, kw = spark.read.parquet(str(tmp_path)), {"num_slices": 4}
    out = detect_spark(df, rules, backend=BACKEND, time_unit="ns", slicing=plan, **kw)
    assert out.cep_plan.kind == plan
    assert rows(out.toPandas()) == want


@pytest.mark.spark
def test_consuming_over_composite_events_keyed(spark):  # noqa: F811
    """``consuming`` with a composite terminator (C1) and consuming a composite type (C2), over
    an AND producer, ids not in time order: exact keyed, and in one slice."""
    from cep_gpu.spark_udfs import detect_spark

    rules = """
define P(k: int, x: int) pattern AND(A a, B b) where a.k = b.k within 3 s return k := a.k, x := a.x

define C1(k: int) from P(k=$k) and each A(k=$k) within 4 s from P where k=P.k consuming A

define C2(k: int) from C(k=$k) and each P(k=$k) within 5 s from C and last B(k=$k) within 3 s from C
where k=C.k consuming P, B
"""
    rng = np.random.default_rng(5)
    n = 300
    events = pd.DataFrame({"type": rng.choice(list("AABBC"), n).astype(object), "ts": np.sort(rng.integers(0, 100, n)),
                           "id": rng.permutation(n) * 2, "k": rng.integers(0, 3, n)})
    want = rows(cep_gpu.detect(events, rules, backend=BACKEND))
    assert {r[0] for r in want} == {"P", "C1", "C2"}
    df = spark.createDataFrame(events).repartition(3)
    for kw in ({"partition_by": "k"}, {"num_slices": 1}):
        assert rows(detect_spark(df, rules, backend=BACKEND, **kw).toPandas()) == want
