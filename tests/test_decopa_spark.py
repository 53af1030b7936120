"""DecoPa plans as Spark stages (issue 17): the rows of ``detect`` for 1-4 units and 1-3 slices.

Few and small: one Spark session (tests/conftest_spark.py), generated plans over one stream each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest_spark import rows, spark  # noqa: F401  (the fixture)

import cep_gpu
from cep_gpu import decopa

pytestmark = pytest.mark.spark


def stream(n: int = 60, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, n).astype(float)
    x[rng.random(n) < 0.15] = np.nan
    # explicit ids: a repartitioned DataFrame has no row positions to number by
    return pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": np.sort(rng.integers(0, 40, n)),
                         "id": rng.permutation(n) * 3 + 1, "x": x, "s": rng.choice(["u", "v"], n)})


@pytest.mark.parametrize("text, split, units, slices", [
    ("define Q(g: float) pattern SEQ(A a, B b, C c) where a.x < b.x + 1 and c.ts - a.ts > 1 within 4 s "
     "return g := a.x + c.ts", {"abc": ("ac", "bc"), "ac": ("a", "c"), "bc": ("b", "c")},
     {"abc": 3, "ac": 1, "bc": 2}, 2),
    ("define Q pattern AND(A a, B b, A c) where a.s = b.s within 3 s", {"abc": ("ab", "c"), "ab": ("a", "b")},
     {"abc": 4, "ab": 1}, 3),
])
def test_spark_plan_equals_detect(spark, text, split, units, slices):  # noqa: F811
    from cep_gpu.spark_udfs import execute_plan_spark

    events = stream()
    rule = cep_gpu.parse_rule(text)
    expected = cep_gpu.detect(events, rule, backend="reference")
    assert len(expected) > 0
    stats = decopa.Stats(rates={p.alias: 10.0 for p in rule.predicates})
    plan = decopa.plan_from_split(rule, stats, decopa.Units(8, 100, 100), split, units)
    df = spark.createDataFrame(events).repartition(3)
    out = execute_plan_spark(df, plan, backend="reference", slices=slices)
    assert out.columns == list(expected.columns)
    assert rows(out.toPandas()) == rows(expected)


def test_spark_rejects_unsupported_rules(spark):  # noqa: F811
    from cep_gpu.spark_udfs import execute_plan_spark

    rule = cep_gpu.parse_rule("define Q pattern SEQ(A a, B b) within 1 s select first")
    plan = decopa.optimize(rule, decopa.Stats(rates={"a": 1, "b": 1}), decopa.Units(2, 10, 10))
    df = spark.createDataFrame(stream(5))
    with pytest.raises(decopa.DecompositionError, match="select first"):
        execute_plan_spark(df, plan)


def test_an_unknown_backend_fails_on_the_driver(spark):  # noqa: F811
    """The name was checked only inside the tasks (one Java trace per task)."""
    from cep_gpu.spark_udfs import execute_plan_spark

    from cep_gpu.errors import ArgumentError

    plan = decopa.optimize("define Q pattern SEQ(A a, B b) within 1 s", decopa.Stats(rates={"a": 1, "b": 1}),
                           decopa.Units(2, 10, 10))
    df = spark.createDataFrame(stream(5))
    with pytest.raises(ArgumentError, match="unknown backend 'gpux'"):
        execute_plan_spark(df, plan, backend="gpux")
