"""Bad and unusual inputs to the systems built on the engine (parallel, shedding, decopa, muse and
the CLI around them): each gets a CepError naming the problem, never a raw traceback or a silently
wrong result. One test per defect found by trying such inputs; each failed before its fix."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu.errors import ArgumentError, CepError


@pytest.fixture(scope="module")
def events() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 300
    return pd.DataFrame({"type": rng.choice(["A", "B", "C"], n), "ts": np.arange(n) * 0.1,
                         "x": rng.integers(0, 4, n), "y": rng.random(n)})


SEQ = "define R pattern SEQ(A a, B b, C c) where a.x = c.x within 1 s"


# -- cep_gpu.parallel -------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", [
    "define K pattern SEQ(KL(B b)[1..2], C c) within 1 s",      # was accepted: 365 rows, detect 922
    "define K pattern SEQ(A a, KL(B b)[1..3], C c) within 1 s",  # was 'a binding order other than SEQ's'
])
def test_parallel_rejects_kleene_by_name(rule):
    from cep_gpu.parallel import HybridEngine, UnsupportedPatternError

    with pytest.raises(UnsupportedPatternError, match=r"Kleene closure KL\(\.\.\.\)"):
        HybridEngine(rule)


@pytest.mark.parametrize("jitter", ["x", None, True, [0.5]])
def test_parallel_bad_jitter_is_an_argument_error(jitter):
    from cep_gpu.parallel import HybridEngine

    with pytest.raises(ArgumentError, match="jitter"):
        HybridEngine(SEQ, jitter=jitter)


def test_parallel_numpy_ints_and_bad_time_unit_and_flush_output(events):
    from cep_gpu.parallel import HybridEngine

    HybridEngine(SEQ, batch_size=np.int64(64), chunk_size=np.int32(4096))  # as units= accepts them
    with pytest.raises(ArgumentError, match="time_unit"):
        HybridEngine(SEQ, time_unit="parsec")  # was accepted, failing only at the first publish
    eng = HybridEngine(SEQ)
    with pytest.raises(ArgumentError, match="output"):
        eng.flush(output="columns")  # was silently ignored
    eng.close()
