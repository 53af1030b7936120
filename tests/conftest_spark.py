"""One local Spark session for every Spark test of a pytest process (import the ``spark`` fixture).

``local[2]``, no UI, few shuffle partitions and UTC, so that the Spark tests stay fast and
independent of the machine's time zone. The session is created once and never stopped by a test
(``getOrCreate`` hands the same one to every module); the JVM goes away with the process.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest

pyspark = pytest.importorskip("pyspark")


def make_session():
    """The shared test session (created on first use)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this venv
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("cep-gpu-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@pytest.fixture(scope="session")
def spark():
    return make_session()


def rows(df: pd.DataFrame, columns=None) -> list[tuple]:
    """Composite events as sorted, comparable tuples (ids as tuples, NaN/NA as None)."""
    columns = list(columns or df.columns)
    out = []
    for rec in df[columns].itertuples(index=False, name=None):
        vals = []
        for v in rec:
            if isinstance(v, (list, tuple, np.ndarray)):
                v = tuple(int(i) for i in v)
            elif v is None or (not isinstance(v, str) and pd.isna(v)):
                v = None
            elif isinstance(v, (bool, np.bool_)):
                v = bool(v)
            elif isinstance(v, (int, float, np.integer, np.floating)):
                v = float(v)  # int 1 and float 1.0 are the same attribute value
            vals.append(v)
        out.append(tuple(vals))
    return sorted(out, key=repr)
