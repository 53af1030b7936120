"""Kleene closure on Spark (issue 19): detect_spark returns detect's rows, id_counts included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest_spark import rows, spark  # noqa: F401  (the shared session fixture)

import cep_gpu
import cep_gpu.kleene

pytestmark = pytest.mark.spark

from cep_gpu.spark_udfs import detect_spark  # noqa: E402

RULES = """
define Rise(k: int, n: int, top: float)
pattern SEQ(A a, KL(B b)[2..3], C c)
where a.k = c.k and b.k = a.k and b[i].v < b[i+1].v
within 6 s
return k := a.k, n := count(b), top := max(b.v)

define Run(k: int, s: float)
pattern SEQ(A a, KL(B b), C c)
where a.k = c.k and b.k = a.k and b.v > 0.2
within 4 s
select greedy
return k := a.k, s := sum(b.v)
"""


def _events(n: int = 300, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "id": np.arange(n, dtype=np.int64),  # explicit: a repartitioned frame has no row order
        "type": rng.choice(["A", "B", "B", "C"], n),
        "ts": np.arange(n, dtype=np.float64) * 0.5,
        "k": rng.integers(0, 3, n),
        "v": rng.random(n).round(2),
    })


@pytest.mark.parametrize(("partition_by", "backend"), [(None, "cpu"), ("k", "cpu"), ("k", "gpu-host"), (None, "aip")])
def test_detect_spark_equals_detect(spark, partition_by, backend):  # noqa: F811
    ev = _events()
    expected = cep_gpu.detect(ev, RULES, backend="reference")
    assert len(expected) > 20 and "id_counts" in expected.columns
    df = spark.createDataFrame(ev).repartition(3)
    got = detect_spark(df, RULES, partition_by=partition_by, backend=backend, num_slices=4).toPandas()
    assert sorted(rows(got, list(expected.columns))) == sorted(rows(expected))


@pytest.mark.parametrize("partition_by", [None, "k"])
def test_the_drivers_limit_reaches_the_tasks(spark, partition_by):  # noqa: F811
    # `with cep_gpu.kleene.limit(N)` around detect_spark applies in the tasks, as around detect:
    # the tasks ran under their own process's default limit (ten million), whatever the driver's
    ev = pd.DataFrame({"type": ["A", "B", "B", "B", "B", "C"], "ts": [1.0, 2, 3, 4, 5, 6], "k": 0})
    text = "define R pattern SEQ(A a, KL(B b), C c) where a.k = c.k and b.k = a.k within 10 s"
    df = spark.createDataFrame(ev)
    with cep_gpu.kleene.limit(3), pytest.raises(Exception, match="MatchLimitError"):
        detect_spark(df, text, partition_by=partition_by, backend="cpu").collect()
    with cep_gpu.kleene.limit(15):
        assert detect_spark(df, text, partition_by=partition_by, backend="cpu").count() == 15


# `b.x = a.x` and `b.k = a.k` live in the Kleene position's own conditions, not in the rule's: x was
# not sent to the tasks (RuleError 'reads attribute x, which no event has' in every task, or, in a
# stream, on the first micro-batch), and the rule was planned time-sliced ("b are not tied to a")
# where k ties every part of it, so detect_stream refused partition_by="k"
TIED_BY_KLEENE = """
define Tied(k: int, n: int)
pattern SEQ(A a, KL(B b)[1..3], C c, NOT(D d))
where a.k = c.k and b.k = a.k and d.k = a.k and b.x = a.x
within 4 s
return k := a.k, n := count(b)
"""


def test_attributes_read_only_by_a_kleene_condition(spark):  # noqa: F811
    from cep_gpu.spark_udfs import plan_job

    rng = np.random.default_rng(3)
    ev = _events(200, seed=3).assign(type=lambda d: rng.choice(["A", "B", "C", "D"], len(d), p=[.3, .4, .25, .05]),
                                     x=rng.integers(0, 2, 200))
    expected = cep_gpu.detect(ev, TIED_BY_KLEENE, backend="reference")
    assert len(expected) > 5
    df = spark.createDataFrame(ev).repartition(3)
    job = plan_job(df, TIED_BY_KLEENE, partition_by="k", backend="cpu")
    assert job.plan.mode == "keyed", job.plan.reason
    assert "x" in job.attributes
    for partition_by in ("k", None):
        got = detect_spark(df, TIED_BY_KLEENE, partition_by=partition_by, backend="cpu", num_slices=3).toPandas()
        assert rows(got, list(expected.columns)) == rows(expected)
