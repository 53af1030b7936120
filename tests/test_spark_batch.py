"""detect_spark == detect on the collected input, for any partitioning (keyed and time-sliced)."""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest
from conftest_spark import rows, spark  # noqa: F401  (the shared session fixture)

import cep_gpu
from cep_gpu.errors import EventError, RuleError

pytestmark = pytest.mark.spark

from cep_gpu.spark_udfs import detect_spark, plan_job  # noqa: E402
from cep_gpu.spark_udfs.batch import slice_bounds, with_row_ids  # noqa: E402
from cep_gpu.spark_udfs.plan import EDGE_SLACK_NS, UNBOUNDED_NS, context_ns, plan_rules  # noqa: E402
from cep_gpu.spark_udfs.schema import T_NS  # noqa: E402

BACKEND = "reference"

# Every rule is tied to k: keyed mode. Windows (20-40 s with the hierarchy) are longer than a time
# slice (80 s / 8); R3 and R4 read R1's composite events (R4 up to 15 s back, and R1 was decided by
# events up to 25 s before that: a slice needs the sum, 40 s, as context); S1 has a trailing
# negation (a slice needs 8 s after its range).
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

define R4(k: int, x: int)
from C(k=$k) and last R1(k=$k) within 15 s from C
where k=C.k and x=R1.x

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


# -- planning: keyed only when every part of every rule is tied to the key; the context a slice needs


TIED = "define T(k: int) from C(k=$k) and each B(k=$k) within 5 s from C where k=C.k"


@pytest.mark.parametrize(
    "text, why",
    [
        ("define R from C(k=$k) and each B(x=$k) within 5 s from C", "B are not tied to C"),
        ("define R from C(k=$k) and each B(k>$k) within 5 s from C", "B are not tied to C"),
        ("define R from C(k=$k) and each B() within 5 s from C", "B are not tied to C"),
        ("define R from C(k=$k) and each B(k=$k) within 5 s from C and not D() within 2 s from C",
         "negation over D is not tied"),
        ("define R from B(k=$k) and c=Count(A() within 25 s from B) > 2", "aggregate over A is not tied"),
        ("define S pattern SEQ(A a, B b, NOT(D d)) where a.k = b.k within 8 s", "negation over D"),
        ("define S pattern SEQ(A a, B b) where a.k = b.k or a.x = b.x within 8 s", "b are not tied"),
        # a producer that does not pass the key on breaks its consumer's equality
        ("define P from C(k=$k) and each B(k=$k) within 5 s from C\n\n"
         "define Q(k: int) from A(k=$k) and last P(k=$k) within 5 s from A where k=A.k",
         "'P' feeds other rules but does not define the attribute 'k'"),
    ],
)
def test_keyed_only_when_every_part_is_tied(text, why):
    rules = cep_gpu.parse_rules(TIED + "\n\n" + text)
    plan = plan_rules(rules, "k", 4)
    assert plan.mode == "sliced" and plan.key is None
    assert why in plan.reason
    tied = plan_rules(cep_gpu.parse_rules(TIED), "k", 4)
    assert tied.mode == "keyed" and tied.key == "k"


def test_keyed_rules_are_planned_keyed():
    rules = cep_gpu.parse_rules(KEYED_RULES)
    assert plan_rules(rules, "k", 8).mode == "keyed"
    assert plan_rules(rules, "x", 8).mode == "sliced"  # tied to k, not to x
    assert plan_rules(rules, None, 8).mode == "sliced"


def test_context_covers_the_longest_chain():
    s = 10**9
    rules = cep_gpu.parse_rules(KEYED_RULES)
    # R1: B 20 s before C, A 5 s before B; R4: R1 15 s before C, so 40 s back; S1's NOT: 8 s after
    assert context_ns(rules) == (40 * s + EDGE_SLACK_NS, 8 * s + EDGE_SLACK_NS)
    by_name = {r.name: r for r in rules}
    assert context_ns([by_name["R1"]])[0] == 25 * s + EDGE_SLACK_NS
    assert context_ns([by_name["R2"]])[0] == 25 * s + EDGE_SLACK_NS  # the aggregate's span
    # a negation span reaching further back than the windows
    neg = cep_gpu.parse_rules("define N from C() and each B() within 2 s from C and not D() within 7 s from C")
    assert context_ns(neg) == (7 * s + EDGE_SLACK_NS, EDGE_SLACK_NS)
    # trailing NOT horizons add up along a hierarchy too
    seq = cep_gpu.parse_rules(
        "define S1 pattern SEQ(A a, B b, NOT(D d)) within 8 s return k := b.k\n\n"
        "define S2 pattern SEQ(S1 s, C c, NOT(D d)) within 3 s"
    )
    assert context_ns(seq) == (11 * s + EDGE_SLACK_NS, 11 * s + EDGE_SLACK_NS)


def without_windows(rule):
    """``rule`` with its windows removed (only hand-built Rules can be like this)."""
    import dataclasses

    plans = tuple(
        dataclasses.replace(pl, predicates=tuple(
            dataclasses.replace(p, window=None) if p.policy is not None else p for p in pl.predicates
        ))
        for pl in rule.plans
    )
    return dataclasses.replace(rule, plans=plans)


def test_window_less_predicate_runs_in_one_slice():
    (rule,) = cep_gpu.parse_rules(TIED)
    unbounded = without_windows(rule)
    sliced = plan_rules([unbounded], None, 8)
    assert sliced.unbounded and sliced.lookback_ns == UNBOUNDED_NS and sliced.n_slices == 1
    assert "without a window" in sliced.reason
    assert plan_rules([unbounded], "k", 8).mode == "keyed"  # a key group holds all its events
    assert plan_rules([rule], None, 8).n_slices == 8


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
        assert {"R1", "R2", "R3", "R4", "S1"} <= names
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


@pytest.mark.parametrize("partitions", range(1, 9))
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


def test_timestamp_ntz_is_wall_clock_whatever_the_session_time_zone(spark):  # noqa: F811
    # across a DST change of the session's zone: 01:59 and 03:00 are 61 minutes apart as wall-clock
    # readings (was: converted through the zone, 1 minute apart, a match detect does not find)
    rule = ("define Touch(painting: string) from Vibration(painting=$p) and each PeopleNear(painting=$p) "
            "within 2 min. from Vibration where painting=Vibration.painting")
    pdf = pd.DataFrame({"type": ["PeopleNear", "Vibration", "PeopleNear", "Vibration"],
                        "ts": pd.to_datetime(["2024-03-10 01:59:00", "2024-03-10 03:00:00",
                                              "2024-03-10 03:10:00.250000", "2024-03-10 03:11:00"], format="ISO8601"),
                        "painting": ["Mona", "Mona", "Mona", "Mona"]})
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = spark.createDataFrame(pdf, schema="type string, ts timestamp_ntz, painting string")
        out = detect_spark(df, rule, backend=BACKEND, num_slices=1)
        assert dict(out.dtypes)["ts"] == "timestamp_ntz"
        got = out.toPandas()
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    want = cep_gpu.detect(pdf, rule, backend="reference")
    assert rows(got) == rows(want) and len(want) == 1
    assert got["ts"].tolist() == [pd.Timestamp("2024-03-10 03:11:00")]


def test_num_slices_may_be_a_numpy_integer(spark, events):  # noqa: F811
    df = spark.createDataFrame(events).repartition(2)
    got = _spark_rows(detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=np.int64(3)))
    assert got == _spark_rows(detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)) and got


def test_output_schema_comes_from_rules(spark, events):  # noqa: F811
    df = spark.createDataFrame(events)
    out = detect_spark(df, SLICED_RULES, backend=BACKEND)
    assert out.dtypes == [
        ("rule", "string"), ("ts", "bigint"), ("ids", "array<bigint>"),
        ("k", "double"), ("x", "bigint"), ("n", "double"), ("m", "double"),
    ]


@pytest.mark.parametrize("partition_by", [None, "k"])
def test_engine_runs_in_arrow_udfs_only(spark, events, partition_by):  # noqa: F811
    # one Arrow UDF per plan (grouped, or per partition for time-ordered input); no row-at-a-time
    # Python (BatchEvalPython) anywhere
    df = spark.createDataFrame(events)
    out = detect_spark(df, KEYED_RULES, partition_by=partition_by, backend=BACKEND, num_slices=3)
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FlatMapGroupsInArrow") + plan.count("MapInArrow") == 1
    assert "BatchEvalPython" not in plan and "ArrowEvalPython" not in plan


# -- bad input fails on the driver, before any task -------------------------------------------------


def _no_job_runs(spark, call):  # noqa: F811
    """Run ``call`` in its own job group and return the ids of the Spark jobs it started."""
    sc = spark.sparkContext
    # a group of its own: the status tracker keeps a group's jobs, and a call that starts jobs
    # (check_ids=True) must not show up in a later test's list
    group = f"cep-validate-{uuid.uuid4().hex}"
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


@pytest.mark.parametrize("num_slices", [0, -2, 1.5, True])
def test_bad_num_slices_is_an_argument_error_before_spark_is_asked(num_slices):
    """It was a plain ValueError (a raw traceback from `cep-gpu spark --slices 0`), raised after the
    input's schema had been read; now the project's ArgumentError (still a ValueError), first."""
    with pytest.raises(cep_gpu.ArgumentError, match=r"num_slices must be a whole number >= 1"):
        plan_job(None, KEYED_RULES, num_slices=num_slices)  # no DataFrame needed to refuse it


@pytest.mark.parametrize("slicing, plan", [("auto", "time-partitioned input"), ("shuffle", "time slices: shuffle")])
def test_cli_spark_subcommand(spark, events, tmp_path, capsys, slicing, plan):  # noqa: F811
    from cep_gpu.cli import main

    (tmp_path / "rules.tesla").write_text(SLICED_RULES)
    events.to_parquet(tmp_path / "events.parquet")
    status = main(["spark", str(tmp_path / "rules.tesla"), (tmp_path / "events.parquet").as_uri(),
                   "--master", "local[2]", "--out", str(tmp_path / "out"), "--backend", BACKEND,
                   "--slices", "3", "--slicing", slicing])
    assert status == 0
    assert f"plan: {plan}" in capsys.readouterr().out
    got = pd.read_parquet(tmp_path / "out" / "composite_events.parquet")
    assert rows(got) == rows(cep_gpu.detect(events, SLICED_RULES, backend=BACKEND))
    assert (tmp_path / "out" / "detections.png").stat().st_size > 1000


def test_cli_spark_no_check_ids_reaches_detect_spark(spark, tmp_path, capsys, monkeypatch):  # noqa: F811
    """``cep-gpu spark --no-check-ids`` is ``detect_spark(check_ids=False)``; without it, True."""
    from cep_gpu.spark_udfs import job

    from cep_gpu.cli import main

    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs["check_ids"])
        return detect_spark(*args, **kwargs)

    monkeypatch.setattr(job, "detect_spark", recording)
    (tmp_path / "rules.tesla").write_text(SLICED_RULES)
    museum_like_stream(n=40).to_parquet(tmp_path / "events.parquet")
    for flag in (["--no-check-ids"], []):
        status = main(["spark", str(tmp_path / "rules.tesla"), str(tmp_path / "events.parquet"),
                       "--out", str(tmp_path / "out"), "--backend", BACKEND, "--no-plot", *flag])
        assert status == 0, capsys.readouterr().err
    assert seen == [False, True]


def test_museum_spark_example(spark, tmp_path, capsys):  # noqa: F811
    # `make demo`: museum events as Parquet -> detect_spark -> Parquet, a summary and a PNG
    import importlib.util
    from pathlib import Path

    from cep_gpu.museum import MUSEUM_RULES

    path = Path(__file__).resolve().parents[1] / "examples" / "museum_spark.py"
    spec = importlib.util.spec_from_file_location("museum_spark", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = tmp_path / "museum"
    assert example.main(["--events", "2000", "--seed", "2", "--slices", "3", "--backend", BACKEND,
                         "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Museum: composite events (Spark)" in printed
    assert "\nplan: time-partitioned input: no shuffle" in printed  # (2,000 events: context too big)
    events = pd.read_parquet(out / "events.parquet")
    got = pd.read_parquet(out / "composite_events.parquet")
    want = cep_gpu.detect(events, MUSEUM_RULES, backend=BACKEND)
    assert len(want) and set(want["rule"]) == {"Touch", "Theft", "Alarm"}
    assert rows(got) == rows(want)
    assert (out / "detections.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not spark.sparkContext._jsc.sc().isStopped()  # the example leaves a session it did not start


# -- time-ordered input partitions: no shuffle -------------------------------------------------------


def time_partitions(spark, events, cuts, reverse=False):  # noqa: F811
    """``events`` (sorted by ts) cut at row positions ``cuts``, chunk ``i`` in Spark partition
    ``i`` (deterministic, no shuffle in the plan); ``reverse`` puts later times in lower partitions."""
    data = events.astype(object).where(events.notna(), None)
    chunks = [list(data.iloc[c].itertuples(index=False, name=None)) for c in np.split(np.arange(len(events)), cuts)]
    if reverse:
        chunks.reverse()
    rdd = spark.sparkContext.parallelize(range(len(chunks)), len(chunks)).flatMap(lambda i: chunks[i])
    return spark.createDataFrame(rdd, schema="type string, ts long, id long, k long, x long, v double")


def cuts_between(ts, k):
    """k - 1 row positions near the k-quantiles where ts changes (no tie across a cut)."""
    out = []
    for q in range(1, k):
        i = len(ts) * q // k
        while ts[i - 1] == ts[i]:
            i += 1
        out.append(i)
    return out


@pytest.fixture(scope="module")
def long_events():
    # 2400 s: the 48 s of context a boundary needs (40 s back, 8 s forward) stay well under 10%
    ev = museum_like_stream(n=3000, span=2400, seed=11)
    return ev, rows(cep_gpu.detect(ev, SLICED_RULES, backend=BACKEND))


def _exchanges(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_partition_layout_and_tiles():
    from cep_gpu.spark_udfs.partitioned import PartitionStats as S
    from cep_gpu.spark_udfs.partitioned import layout_problem, tiles_of

    # partition ids need not follow time; empty partitions are ignored
    ok = [S(0, 50, 60, 3), S(1, 0, 10, 2), S(2, 0, 0, 0), S(3, 11, 40, 5)]
    assert layout_problem(ok) is None
    order = sorted((s for s in ok if s.count), key=lambda s: s.min_ns)
    tiles = tiles_of(order)
    assert tiles[1][1] == tiles[3][0] and tiles[3][1] == tiles[0][0]  # they tile all of time
    assert tiles[1][0] < 0 and tiles[1][1] == 11 and tiles[3][1] == 45 and tiles[0][1] > 1 << 62
    assert "equal timestamps" in layout_problem([S(0, 0, 10, 2), S(1, 10, 20, 2)])
    assert "overlap" in layout_problem([S(0, 0, 10, 2), S(1, 5, 20, 2)])


@pytest.mark.parametrize("k, reverse", [(2, False), (3, True), (5, False)])
def test_time_ordered_partitions_run_without_shuffle(spark, long_events, k, reverse):  # noqa: F811
    ev, want = long_events
    cuts = cuts_between(ev["ts"].to_numpy(), k)
    df = time_partitions(spark, ev, cuts, reverse)
    out = detect_spark(df, SLICED_RULES, backend=BACKEND)
    assert out.cep_plan.kind == "partitions", out.cep_plan
    assert "no shuffle" in out.cep_plan.explain()
    plan = _exchanges(out)
    assert "MapInArrow" in plan and "Exchange" not in plan and "FlatMapGroupsInArrow" not in plan
    got = _spark_rows(out)
    assert got == want
    # composite events bind events of two partitions (the context was needed)
    part_of = dict(zip(ev["id"], np.searchsorted(cuts, np.arange(len(ev)), side="right")))
    assert any(len({part_of[i] for i in r[2] if i in part_of}) > 1 for r in got)


def test_windows_longer_than_partitions(spark, events, expected):  # noqa: F811
    # 8 partitions of 10 s, context 40 s back: too much context for auto, exact when forced
    df = time_partitions(spark, events, cuts_between(events["ts"].to_numpy(), 8))
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)
    assert out.cep_plan.kind == "shuffle" and "context" in out.cep_plan.reason
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, slicing="partitions")
    assert out.cep_plan.kind == "partitions"
    assert _spark_rows(out) == expected["sliced"]


def test_partitions_that_are_not_time_ordered_use_the_shuffle(spark, long_events):  # noqa: F811
    ev, want = long_events
    ts = ev["ts"].to_numpy()
    ties = np.flatnonzero(ts[1:] == ts[:-1]) + 1  # ts[i - 1] == ts[i]
    tie = int(ties[len(ties) // 2])
    cases = {
        "equal timestamps": time_partitions(spark, ev, [tie]),
        "overlap": time_partitions(spark, ev.iloc[np.r_[0:len(ev):2, 1:len(ev):2]], [len(ev) // 2 + 1]),
        "shuffles": spark.createDataFrame(ev).repartitionByRange(3, "ts"),  # bounds re-sampled per job
    }
    for why, df in cases.items():
        out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)
        assert out.cep_plan.kind == "shuffle" and why in out.cep_plan.reason, (why, out.cep_plan)
        assert "FlatMapGroupsInArrow" in _exchanges(out)
        if why != "shuffles":  # (the shuffle plan's exactness on shuffled input is tested above)
            assert _spark_rows(out) == want
            with pytest.raises(ValueError, match=why):
                detect_spark(df, SLICED_RULES, backend=BACKEND, slicing="partitions")
    # consuming rules keep needing every earlier match: never the partitions plan
    df = time_partitions(spark, ev, cuts_between(ts, 2))
    with pytest.raises(ValueError, match="consuming"):
        detect_spark(df, CONSUMING_RULE, backend=BACKEND, num_slices=1, slicing="partitions")
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, slicing="shuffle")
    assert out.cep_plan.kind == "shuffle" and "FlatMapGroupsInArrow" in _exchanges(out)


def test_unread_types_stay_in_the_jvm_and_ids_still_match(spark):  # noqa: F811
    # events of types no rule reads are filtered out before the tasks (type travels as a code);
    # row-position ids are taken before that filter, so they are still those of detect
    events = museum_like_stream(n=300, with_id=False, seed=5)
    noise = events.sample(frac=0.3, random_state=1).assign(type="Noise")
    mixed = pd.concat([events, noise]).sort_values("ts", kind="stable").reset_index(drop=True)
    df = spark.createDataFrame(mixed, schema="type string, ts long, k long, x long, v double").repartition(2)
    collected = df.toPandas()
    want = rows(cep_gpu.detect(collected, SLICED_RULES, backend=BACKEND))
    assert want
    assert _spark_rows(detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=2)) == want


def test_null_type_fails_as_in_detect(spark):  # noqa: F811
    events = museum_like_stream(n=50, with_id=True, seed=6).astype({"type": object})
    events.loc[7, "type"] = None
    df = spark.createDataFrame(events, schema="type string, ts long, id long, k long, x long, v double")
    with pytest.raises(Exception, match="column 'type' is null"):
        detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=1).collect()


def test_unknown_backend_fails_on_the_driver_before_any_job(spark, events):  # noqa: F811
    """It failed inside the Spark tasks, behind a Java trace; now the name is checked as
    ``detect`` checks it (cep_gpu.backends), before any job."""
    df = spark.createDataFrame(events).repartition(2)
    for partition_by in ("k", None):
        def call(partition_by=partition_by):
            with pytest.raises(cep_gpu.ArgumentError, match=r"unknown backend 'gpux'"):
                detect_spark(df, KEYED_RULES, partition_by=partition_by, backend="gpux", num_slices=2)

        assert _no_job_runs(spark, call) == []
    with pytest.raises(cep_gpu.ArgumentError, match=r"unknown backend 'gpux'"):
        cep_gpu.detect(events, KEYED_RULES, backend="gpux")  # the same message as detect's


def test_plan_says_why_partition_by_was_not_keyed(spark, events):  # noqa: F811
    """The fallback from partition_by to time slices named only the slicing; plan_rules' reason
    (the rule not tied to the column) was dropped from out.cep_plan."""
    df = spark.createDataFrame(events).repartition(2)
    why = plan_job(df, SLICED_RULES, partition_by="k", backend=BACKEND, num_slices=2).plan.reason
    assert "U1" in why
    for slicing in ("auto", "shuffle"):
        out = detect_spark(df, SLICED_RULES, partition_by="k", backend=BACKEND, num_slices=2, slicing=slicing)
        assert out.cep_plan.kind != "keyed"
        assert out.cep_plan.reason.endswith(f"not keyed: {why}"), out.cep_plan
        assert f"not keyed: {why}" in out.cep_plan.explain()
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=2, slicing="shuffle")
    assert "not keyed: no partition_by column given" in out.cep_plan.explain()


def test_cli_spark_reads_the_files_own_column_names(spark, tmp_path, capsys):  # noqa: F811
    """``cep-gpu spark --type-column ...`` on Parquet that Spark reads as it is: the DataFrame is
    renamed (spark_udfs.cli.rename_columns); the output keeps the engine's columns and rows."""
    from cep_gpu.cli import main

    events = museum_like_stream(n=60)
    (tmp_path / "rules.tesla").write_text(SLICED_RULES)
    events.rename(columns={"type": "kind", "ts": "time", "id": "eid"}).to_parquet(tmp_path / "ev.parquet")
    status = main(["spark", str(tmp_path / "rules.tesla"), str(tmp_path / "ev.parquet"), "--out",
                   str(tmp_path / "out"), "--backend", BACKEND, "--no-plot", "--type-column", "kind",
                   "--ts-column", "time", "--id-column", "eid"])
    assert status == 0, capsys.readouterr().err
    got = pd.read_parquet(tmp_path / "out" / "composite_events.parquet")
    want = cep_gpu.detect(events, SLICED_RULES, backend=BACKEND)
    assert len(want) > 0 and list(got.columns[:3]) == ["rule", "ts", "ids"]
    assert rows(got) == rows(want)
