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


# -- cep_gpu.decopa and cep_gpu.muse -----------------------------------------------------------------

def test_decopa_refuses_to_execute_kleene_and_plans_from_no_sample(events):
    from cep_gpu import decopa
    from cep_gpu.decopa.errors import DecompositionError

    kl = cep_gpu.parse_rule("define Q pattern SEQ(A a, KL(B b)[1..2], C c) within 1 s")
    stats = decopa.Stats(rates={"a": 10, "b": 10, "c": 10})
    # ran KL as one event: 486 rows, detect 950; then planned as SEQ(a, b, c) and refused at execution
    with pytest.raises(DecompositionError, match="Kleene"):
        decopa.optimize(kl, stats, decopa.Units(4, iota=6000, kappa=60000))
    seq = cep_gpu.parse_rule("define Q pattern SEQ(A a, B b, C c) where a.x < b.x within 1 s")
    with pytest.raises(ArgumentError, match="no events"):  # was rates 0 and a plan with c* = inf
        decopa.Stats.from_sample(events.iloc[:0], seq)


def test_muse_refuses_kleene_queries():
    from cep_gpu import muse
    from cep_gpu.muse.errors import MuseError

    with pytest.raises(MuseError, match="Kleene"):  # was silently the query SEQ(A a, B b, C c)
        muse.Query.from_text("define Q pattern SEQ(A a, KL(B b)[1..2], C c) within 1 s")


@pytest.mark.parametrize("spec, word", [
    ({"nodes": {"1": "ABC"}, "rates": {"A": 1, "B": 1, "C": 1}}, "list"),  # was the types A, B, C
    ({"nodes": {"1": ["A"]}, "rates": {"A": True}}, "rate"),
    ({"nodes": {"1": ["A"]}, "rates": [1]}, "rates"),
])
def test_muse_network_spec_errors(spec, word):
    from cep_gpu import muse
    from cep_gpu.muse.errors import MuseError

    with pytest.raises(MuseError, match=word):
        muse.Network.from_dict(spec)


@pytest.mark.parametrize("kwargs, word", [
    ({"nodes": 2.5}, "nodes"), ({"skew": float("nan")}, "skew"), ({"seed": "x"}, "seed"),
    ({"skew": "x"}, "skew"),
])
def test_muse_generate_bad_arguments(kwargs, word):
    from cep_gpu import muse
    from cep_gpu.muse.errors import MuseError

    args = {"nodes": 3, "types": 3, "event_node_ratio": 0.5, "skew": 1.5, "seed": 0} | kwargs
    with pytest.raises(MuseError, match=word):  # were TypeError / ValueError from numpy
        muse.Network.generate(**args)


def test_muse_streams_and_simulate_bad_inputs():
    from cep_gpu import muse
    from cep_gpu.muse.errors import MuseError

    net = muse.Network.from_dict({"nodes": {"1": ["A", "B"], "2": ["C"]}, "rates": {"A": 1, "B": 2, "C": 0.5}})
    q = muse.Query.from_pattern("SEQ(A, B, C)", window=1.0)
    for duration in (-1, float("nan"), float("inf"), "x", 1e12):  # were numpy errors, a MemoryError
        with pytest.raises(MuseError, match="duration"):
            muse.generate_streams(net, [q], duration=duration, seed=0)
    plan = muse.place(q, net)
    with pytest.raises(MuseError, match="'ts'"):  # was TypeError: unsupported operand ... 'str'
        muse.simulate(plan, pd.DataFrame({"type": ["A"], "ts": ["x"], "node": ["1"]}))
    with pytest.raises(CepError, match="backend"):  # was accepted when no node had events
        muse.simulate(plan, pd.DataFrame({"type": [], "ts": [], "node": []}), backend="nope")


# -- benchmark options (each fails before any run) ---------------------------------------------------

@pytest.mark.parametrize("argv, word", [
    (["shedding", "bench", "--lengths", "0"], "pattern length"),       # was a ValueError traceback
    (["shedding", "bench", "--lengths", "", "--factors", ""], "both empty"),  # ran nothing, exit 0
    (["shedding", "bench", "--factors", "0"], "factors"),              # ran with a zero peak
    (["decopa", "bench", "--draws", "-1"], "draws"),                    # was KeyError: 'query'
    (["decopa", "bench", "--draws", "0"], "draws"),                     # ran nothing, exit 0
    (["decopa", "bench", "--backend", "nope"], "unknown backend"),      # failed after every draw
    (["muse", "bench", "--seeds", "0"], "seeds"),                       # ran nothing, exit 0
    (["muse", "bench", "--size", "0"], "size"),                         # was ValueError: low >= high
    (["muse", "bench", "--simulate-events", "-1"], "simulate-events"),  # named a rate of type E0
    (["muse", "bench", "--max-rate", "nan"], "max-rate"),
    (["muse", "bench", "--backend", "nope"], "unknown backend"),
])
def test_bench_options_fail_first_naming_the_option(capsys, argv, word):
    from cep_gpu.cli import main

    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc != 0 and word in err and "Traceback" not in err, err


def test_decopa_units_are_bounded():
    from cep_gpu import decopa

    with pytest.raises(ArgumentError, match="at most"):  # 10^12 units planned forever
        decopa.Units(10**12, iota=1, kappa=1)


def test_parallel_units_are_bounded():
    from cep_gpu.parallel import HybridEngine

    with pytest.raises(ArgumentError, match="at most 1024"):  # 50,000 units hung in publish
        HybridEngine(SEQ, units=50_000)


def test_engine_with_shedding_bad_batches_are_event_errors_and_not_counted(events):
    from cep_gpu.errors import EventError, LateEventError
    from cep_gpu.shedding import CostModel, Shedder

    shedder = Shedder(latency_bound=10.0).fit(UP, events.iloc[:100], costs=CostModel(default=1e-6))
    eng = cep_gpu.Engine(UP, backend="cpu", shedding=shedder)
    with pytest.raises(EventError, match="no 'ts' column"):  # was KeyError: 'ts'
        eng.publish({"type": "A", "y": 1.0})
    with pytest.raises(EventError, match="no 'type' column"):  # was KeyError: 'type'
        eng.publish(events.drop(columns="type"))
    eng.publish(events.iloc[100:])
    with pytest.raises(LateEventError):
        eng.publish(events.iloc[:100])
    # the refused batches are not in the counters (they were: published 500 of 200 events)
    assert eng.stats()["shedding"]["published"] == 200


# -- Kleene closure on the command line --------------------------------------------------------------

def test_cli_run_max_matches(tmp_path, capsys):
    """The MatchLimitError told a CLI user to call detect(..., max_matches=N): run had no way to."""
    from cep_gpu.cli import main

    rules = tmp_path / "k.txt"
    rules.write_text("define K pattern SEQ(A a, KL(B b)[1..3], C c) within 1 s\n")
    ev = tmp_path / "ev.csv"
    ev.write_text("type,ts\nA,0\nB,0.1\nB,0.2\nB,0.3\nC,0.4\n")  # 7 sets
    assert main(["run", str(rules), str(ev), "--max-matches", "5"]) == 1
    assert "max_matches=5" in capsys.readouterr().err
    assert main(["run", str(rules), str(ev), "--max-matches", "7", "--out", str(tmp_path / "o.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "o.csv")) == 7
    with pytest.raises(SystemExit) as bad:  # a bad argument: argparse's one line, exit 2
        main(["run", str(rules), str(ev), "--max-matches", "0"])
    assert bad.value.code == 2 and "argument --max-matches: must be >= 1" in capsys.readouterr().err


def test_shedder_fit_arrival_window_cost_and_frames(events):
    from cep_gpu.shedding import CostModel, Shedder, SheddingEngine

    costs = CostModel(default=1e-3)
    sample = events.iloc[:100]
    with pytest.raises(ArgumentError, match="arrival"):  # 3 times for 100 events: silently fitted
        Shedder(latency_bound=0.05).fit(UP, sample, arrival=np.arange(3.0), costs=costs)
    with pytest.raises(ArgumentError, match="arrival"):  # was ValueError: could not convert
        Shedder(latency_bound=0.05).fit(UP, sample, arrival=["a"] * 100, costs=costs)
    for bad in ("x", -1.0):  # 'x' was a ValueError, -1 accepted
        with pytest.raises(ArgumentError, match="window_cost"):
            Shedder(latency_bound=0.05).fit(UP, sample, costs=costs, window_cost=bad)
    sh = Shedder(latency_bound=0.05).fit(UP, sample, costs=costs)
    with pytest.raises(ArgumentError, match="DataFrame"):  # was TypeError: list indices ...
        sh.utilities([{"type": "A", "ts": 0.0}])
    with pytest.raises(ArgumentError, match="'ts'"):  # was KeyError: 'ts'
        sh.shed_batch(events.drop(columns="ts"))
    eng = SheddingEngine(UP, shedding=Shedder(latency_bound=0.05), mode="virtual",
                         cost_model=CostModel(default=2e-3, window=1e-4))
    eng.warm_up(sample)
    with pytest.raises(ArgumentError, match="utilities"):  # was ValueError: could not convert
        eng.run(events, utilities=["a"] * len(events))


# -- durations and costs: one test of "a finite number >= 0" everywhere ----------------------------

@pytest.mark.parametrize("bad", [True, -1e-3, float("nan"), float("inf"), "1e-3", None])
def test_costs_and_durations_reject_the_same_values(bad):
    from cep_gpu.shedding import CostModel

    with pytest.raises(ArgumentError, match=r"CostModel.default must be a finite number >= 0"):
        CostModel(default=bad)


# -- bounds, rates and capacities: one test of "a finite number > 0" everywhere ----------------------

@pytest.mark.parametrize("bad", [True, 0, 0.0, -1e-3, float("nan"), float("inf"), "1", None])
def test_positive_numbers_reject_the_same_values(bad):
    from cep_gpu import decopa
    from cep_gpu.errors import is_finite_positive
    from cep_gpu.muse.errors import MuseError
    from cep_gpu.muse.network import Network
    from cep_gpu.shedding import Shedder

    assert not is_finite_positive(bad)
    with pytest.raises(ArgumentError, match="latency_bound"):
        Shedder(latency_bound=bad)
    with pytest.raises(ArgumentError, match="iota must be a finite number > 0"):
        decopa.Units(2, iota=bad, kappa=1)
    with pytest.raises(MuseError, match="rate of type 'A'"):
        Network({"n": frozenset({"A"})}, {"A": bad})
    from cep_gpu.muse.simulate import generate_streams

    # a duration of 0 simulated nothing: "0 events, 0 matches"
    with pytest.raises(MuseError, match="duration must be a finite number of seconds > 0"):
        generate_streams([], None, duration=bad)


@pytest.mark.parametrize("good", [1, 2e-3, np.float32(2e-3), np.float64(0.5), np.int64(3)])
def test_positive_numbers_take_numpy_scalars(good):
    from cep_gpu import decopa
    from cep_gpu.errors import is_finite_positive
    from cep_gpu.muse.network import Network
    from cep_gpu.shedding import Shedder

    assert is_finite_positive(good)
    assert Shedder(latency_bound=good).latency_bound == float(good)  # np.float32 was refused
    assert decopa.Units(2, iota=good, kappa=good).iota == good
    assert Network({"n": frozenset({"A"})}, {"A": good}).rate("A") == float(good)


@pytest.mark.parametrize("good", [0, 2e-3, np.float32(2e-3), np.int64(1)])
def test_costs_take_numpy_scalars(good):
    from cep_gpu.shedding import CostModel

    assert CostModel(default=good).z("A") == float(good)  # a np.float32 cost was refused before
