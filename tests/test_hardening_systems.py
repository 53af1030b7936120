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


# -- rule, query and network files of the CLI --------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["run", "{bin}", "{ev}"],
    ["parallel", "run", "{bin}", "{ev}"],
    ["decompose", "{bin}", "--rates", "a=1,b=1", "--units", "2", "--iota", "9", "--kappa", "9"],
    ["muse", "plan", "{bin}", "{net}"],
    ["muse", "plan", "{rules}", "{bin}"],
    ["run", "{dir}", "{ev}"],
    ["muse", "plan", "{dir}", "{net}"],
])
def test_cli_binary_or_directory_rule_file_is_one_clear_line(tmp_path, capsys, argv):
    from cep_gpu.cli import main

    (tmp_path / "r.bin").write_bytes(bytes(range(256)))  # was a UnicodeDecodeError traceback
    (tmp_path / "d").mkdir()                                # was an IsADirectoryError traceback
    (tmp_path / "r.txt").write_text("define Q pattern SEQ(A a, B b) within 1 s\n")
    (tmp_path / "net.json").write_text('{"nodes": {"1": ["A", "B"]}, "rates": {"A": 1, "B": 1}}')
    (tmp_path / "ev.csv").write_text("type,ts\nA,0\nB,0.5\n")
    paths = {"bin": tmp_path / "r.bin", "dir": tmp_path / "d", "rules": tmp_path / "r.txt",
             "net": tmp_path / "net.json", "ev": tmp_path / "ev.csv"}
    argv = [a.format(**paths) for a in argv]
    try:
        rc = main(argv)
    except SystemExit as exc:  # subcommands that print through argparse
        rc = exc.code
    err = capsys.readouterr().err
    assert rc != 0
    assert "Traceback" not in err
    assert ("not UTF-8 text" in err) or ("Is a directory" in err), err


# -- cep_gpu.shedding -------------------------------------------------------------------------------

UP = "define Up pattern SEQ(A a, B b, C c) where a.y < b.y and b.y < c.y within 3 s"


@pytest.mark.parametrize("costs", [5, "fast", {"A": -1.0}, {"A": "x"}])
def test_shedder_fit_bad_costs(events, costs):
    from cep_gpu.shedding import Shedder

    with pytest.raises(ArgumentError, match="costs"):  # 5 was AttributeError: 'int' ... 'items'
        Shedder(latency_bound=0.05).fit(UP, events, costs=costs)


def test_shedder_fit_no_rule_and_huge_buckets_and_foreign_sample(events):
    from cep_gpu.shedding import CostModel, Shedder

    with pytest.raises(ArgumentError, match="no rule"):  # was fitted for no rule at all
        Shedder(latency_bound=0.05).fit("", events)
    with pytest.raises(ArgumentError, match="buckets"):  # was a MemoryError at fit (21.8 TiB)
        Shedder(latency_bound=0.05, buckets=10**12)
    with pytest.raises(ArgumentError, match="no event of a type the rules read"):
        Shedder(latency_bound=0.05).fit(UP, events.assign(type="X"), costs=CostModel(default=1e-3))


def test_shedding_engine_arrival_column_of_strings(events):
    from cep_gpu.shedding import CostModel, Shedder, SheddingEngine

    eng = SheddingEngine(UP, shedding=Shedder(latency_bound=0.05), mode="virtual",
                         cost_model=CostModel(default=2e-3, window=1e-4))
    eng.warm_up(events.iloc[:100])
    with pytest.raises(ArgumentError, match="arrival"):  # was ValueError: could not convert ...
        eng.run(events.assign(arr="x"), "arr")
