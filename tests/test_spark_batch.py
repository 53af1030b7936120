"""detect_spark == detect on the collected input, for any partitioning (keyed and time-sliced)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest_spark import rows, spark  # noqa: F401  (the shared session fixture)

import cep_gpu
from cep_gpu.errors import EventError, RuleError

pytestmark = pytest.mark.spark

from cep_gpu.spark_udfs import detect_spark, plan_job  # noqa: E402
from cep_gpu.spark_udfs.batch import slice_bounds, with_row_ids  # noqa: E402
from cep_gpu.spark_udfs.schema import T_NS  # noqa: E402

BACKEND = "reference"

# Every rule is tied to k: keyed mode. Windows (20-35 s with the hierarchy) are longer than a time
# slice (80 s / 8), R3 reads R1's composite events, S1 has a trailing negation.
KEYED_RULES = """
define R1(k: int, x: int)
from C(k=$k) and each B(k=$k and x=$x) within 20 s from C
  and last A(k=$k and x=$x) within 5 s from B
  and not D(k=$k) within 3 s from C
where k=C.k and x=B.x

define R2(k: int, n: float)
from B(k=$k and v > 0.3) and c=Count(A(k=$k) within 25 s from B) > 2
where k=B.k and n=c

define R3(k: int)
from R1(k=$k) and first C(k=$k) within 10 s from R1
where k=R1.k

define S1
pattern SEQ(A a, B b, NOT(D d))
where a.k = b.k and d.k = b.k
within 8 s
return k := b.k
"""

# Not tied to one column (U1 joins on x, U2's negation on nothing): time-sliced.
SLICED_RULES = KEYED_RULES + """
define U1(x: int)
from C(x=$x) and each A(x=$x) within 15 s from C and not D() within 2 s from A
where x=C.x

define U2(m: float)
from A() and m=Avg(B(v > 0.1) within 30 s from A).v > 0.5
where m=m
"""

CONSUMING_RULE = """
define K1(k: int)
from C(k=$k) and each B(k=$k) within 10 s from C
where k=C.k
consuming B
"""


def museum_like_stream(n: int = 360, span: int = 80, seed: int = 7, with_id: bool = True) -> pd.DataFrame:
    """Integer-second timestamps with many ties, so slice boundaries fall on event timestamps."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, span, n))
    types = rng.choice(["A", "B", "C", "D"], size=n, p=[0.35, 0.3, 0.2, 0.15])
    x = pd.array(rng.integers(0, 3, n), dtype="Int64")
    x[rng.random(n) < 0.1] = pd.NA
    df = pd.DataFrame({
        "type": types.astype(object),
        "ts": ts.astype(np.int64),
        "k": rng.integers(0, 3, n).astype(np.int64),
        "x": x,
        "v": np.round(rng.random(n), 2),
    })
    if with_id:
        # ids unrelated to row order, to show ids are taken from the column
        df.insert(2, "id", rng.permutation(n).astype(np.int64) * 3 + 1)
    return df


@pytest.fixture(scope="module")
def events():
    return museum_like_stream()


@pytest.fixture(scope="module")
def expected(events):
    return {
        name: rows(cep_gpu.detect(events, text, backend=BACKEND))
        for name, text in (("keyed", KEYED_RULES), ("sliced", SLICED_RULES))
    }


def _spark_rows(out) -> list[tuple]:
    return rows(out.toPandas())


def test_expected_results_are_not_trivial(expected):
    # a test that could pass on empty output proves nothing
    for result in expected.values():
        names = {r[0] for r in result}
        assert {"R1", "R2", "R3", "S1"} <= names
    assert {"U1", "U2"} <= {r[0] for r in expected["sliced"]}


@pytest.mark.parametrize("partitions", range(1, 9))
def test_time_sliced_equals_detect(spark, events, expected, partitions):  # noqa: F811
    df = spark.createDataFrame(events).repartition(partitions)
    job = plan_job(df, SLICED_RULES, partition_by="k", backend=BACKEND, num_slices=partitions)
    assert job.plan.mode == "sliced" and "U1" in job.plan.reason
    out = detect_spark(df, SLICED_RULES, partition_by="k", backend=BACKEND, num_slices=partitions)
    got = _spark_rows(out)
    assert got == expected["sliced"]
    if partitions > 1:
        # composite events exactly on slice boundaries: the owner rule was exercised
        bounds = set(slice_bounds(df.select((df.ts * 10**9).alias(T_NS)), partitions))
        assert len(bounds) == partitions - 1
        assert any(int(r[1]) * 10**9 in bounds for r in got)


@pytest.mark.parametrize("partitions", [1, 2, 3, 5, 8])
def test_keyed_equals_detect(spark, events, expected, partitions):  # noqa: F811
    df = spark.createDataFrame(events).repartition(partitions)
    assert plan_job(df, KEYED_RULES, partition_by="k", backend=BACKEND).plan.mode == "keyed"
    got = _spark_rows(detect_spark(df, KEYED_RULES, partition_by="k", backend=BACKEND))
    assert got == expected["keyed"]


def test_keyed_rules_time_sliced_too(spark, events, expected):  # noqa: F811
    # without partition_by the same rules run in time slices, with the same result
    df = spark.createDataFrame(events).repartition(4)
    got = _spark_rows(detect_spark(df, KEYED_RULES, backend=BACKEND, num_slices=6))
    assert got == expected["keyed"]


def test_consuming_runs_keyed_and_refuses_slices(spark, events):  # noqa: F811
    df = spark.createDataFrame(events).repartition(3)
    want = rows(cep_gpu.detect(events, CONSUMING_RULE, backend=BACKEND))
    assert want
    assert _spark_rows(detect_spark(df, CONSUMING_RULE, partition_by="k", backend=BACKEND)) == want
    with pytest.raises(RuleError, match="consuming.*partition_by"):
        detect_spark(df, CONSUMING_RULE, backend=BACKEND, num_slices=3)
    # one slice sees every earlier terminator: exact again
    assert _spark_rows(detect_spark(df, CONSUMING_RULE, backend=BACKEND, num_slices=1)) == want


def test_row_positions_are_ids_without_id_column(spark):  # noqa: F811
    events = museum_like_stream(n=200, with_id=False, seed=3)
    df = spark.createDataFrame(events, schema="type string, ts long, k long, x long, v double")
    df = df.repartition(3)
    collected = df.toPandas()
    assert (with_row_ids(df).toPandas()["id"].to_numpy() == np.arange(len(events))).all()
    want = rows(cep_gpu.detect(collected, SLICED_RULES, backend=BACKEND))
    assert _spark_rows(detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)) == want


def test_timestamps_and_float_seconds(spark, events):  # noqa: F811
    # datetime ts comes back as a Spark timestamp; float seconds with a time_unit as doubles
    ev = events.copy()
    ev["ts"] = pd.Timestamp("2024-03-31 00:59:00") + pd.to_timedelta(ev["ts"], unit="s")
    df = spark.createDataFrame(ev).repartition(2)
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)
    assert dict(out.dtypes)["ts"] == "timestamp"
    assert _spark_rows(out) == rows(cep_gpu.detect(df.toPandas(), SLICED_RULES, backend=BACKEND))

    ev = events.copy()
    ev["ts"] = ev["ts"] * 1000.0 + 0.25
    df = spark.createDataFrame(ev).repartition(2)
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, time_unit="ms", num_slices=3)
    assert dict(out.dtypes)["ts"] == "double"
    assert _spark_rows(out) == rows(cep_gpu.detect(ev, SLICED_RULES, backend=BACKEND, time_unit="ms"))


def test_output_schema_comes_from_rules(spark, events):  # noqa: F811
    df = spark.createDataFrame(events)
    out = detect_spark(df, SLICED_RULES, backend=BACKEND)
    assert out.dtypes == [
        ("rule", "string"), ("ts", "bigint"), ("ids", "array<bigint>"),
        ("k", "double"), ("x", "bigint"), ("n", "double"), ("m", "double"),
    ]


# -- bad input fails on the driver, before any task -------------------------------------------------


def _no_job_runs(spark, call):  # noqa: F811
    """Run ``call`` in its own job group and return the ids of the Spark jobs it started."""
    sc = spark.sparkContext
    group = "cep-validate"
    sc.setJobGroup(group, "validation must not start jobs")
    try:
        call()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return list(sc.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize(
    "schema, data, message",
    [
        ("ts long, k long", [(1, 1)], "no 'type' column"),
        ("type string, k long", [("A", 1)], "no 'ts' column"),
        ("type string, ts string, k long", [("A", "12:00", 1)], "'ts' has unsupported type string"),
        ("type string, ts date, k long", None, "'ts' has unsupported type date"),
        ("type long, ts long, k long", [(1, 1, 1)], "'type' must be a string"),
        ("type string, ts long, id string, k long", [("A", 1, "x", 1)], "'id' must hold integers"),
        ("type string, ts long, q long", [("A", 1, 1)], "reads attribute 'v'"),
    ],
)
def test_bad_input_fails_before_any_task(spark, schema, data, message):  # noqa: F811
    if data is None:
        import datetime

        data = [("A", datetime.date(2024, 1, 1), 1)]
    df = spark.createDataFrame(data, schema=schema)
    errors = []

    def call():
        with pytest.raises((EventError, RuleError), match=message) as info:
            detect_spark(df, KEYED_RULES, backend=BACKEND, num_slices=4)
        errors.append(info.value)

    assert _no_job_runs(spark, call) == []
    assert errors


def test_unknown_partition_column_and_bad_rules(spark, events):  # noqa: F811
    df = spark.createDataFrame(events)
    with pytest.raises(EventError, match="partition_by column 'room'"):
        detect_spark(df, KEYED_RULES, partition_by="room")
    with pytest.raises(cep_gpu.RuleSyntaxError):
        detect_spark(df, "define X from")


def test_cli_spark_subcommand(spark, events, tmp_path):  # noqa: F811
    from cep_gpu.cli import main

    (tmp_path / "rules.tesla").write_text(SLICED_RULES)
    events.to_parquet(tmp_path / "events.parquet")
    status = main(["spark", str(tmp_path / "rules.tesla"), str(tmp_path / "events.parquet"),
                   "--master", "local[2]", "--out", str(tmp_path / "out"), "--backend", BACKEND,
                   "--slices", "3"])
    assert status == 0
    got = pd.read_parquet(tmp_path / "out" / "composite_events.parquet")
    assert rows(got) == rows(cep_gpu.detect(events, SLICED_RULES, backend=BACKEND))
    assert (tmp_path / "out" / "detections.png").stat().st_size > 1000
