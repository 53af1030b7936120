"""DecoPa as a user runs it on their own files: ``cep-gpu decompose``, ``cep-gpu decopa run``,
``Plan.from_json``, and the errors a user sees (they name the user's rule, attribute and option)."""

from __future__ import annotations

import pytest
from cli_helpers import run_cli

import cep_gpu
from cep_gpu import decopa
from cep_gpu.errors import ArgumentError
from cep_gpu.io import read_events

TICKS = "type,ts,price\nGOOG,1,10\nMSFT,2,11\nGOOG,3,12\nMSFT,4,9\nGOOG,5,13\n"
UNITS = ["--units", "4", "--iota", "100", "--kappa", "100"]


@pytest.fixture
def ticks(tmp_path):
    path = tmp_path / "ticks.csv"
    path.write_text(TICKS)
    return path


# -- --rates and --sample -------------------------------------------------------------------------


@pytest.mark.parametrize("option, value", [("--rates", "a=1,b=1"), ("--selectivity", "a:b=0.5")])
def test_rates_or_selectivity_with_sample_is_refused(tmp_path, ticks, capsys, option, value):
    rules = tmp_path / "q.rules"
    rules.write_text("define T pattern SEQ(GOOG a, MSFT b) where a.price < b.price within 10 s\n")
    # was: the sample's measurements silently replaced the given values
    rc, out, err = run_cli(capsys, "decompose", rules, option, value, "--sample", ticks, *UNITS)
    assert rc == 2 and not out
    assert err.strip() == (f"cep-gpu decompose: error: argument {option}: give --rates/--selectivity or "
                           "--sample, not both (--sample measures the rates and selectivities)")


# -- Kleene closure ---------------------------------------------------------------------------------

KLEENE = "define K pattern SEQ(GOOG a, KL(MSFT b), GOOG c) within 10 s"
KLEENE_ERROR = ("rule 'K' has Kleene closure KL(...) at 'b': DecoPa neither plans nor executes Kleene "
                "closure (docs/decopa.md: not built); run the rule with cep_gpu.detect / cep-gpu run")


def test_kleene_is_refused_at_planning_with_the_execution_error(tmp_path, ticks, capsys):
    stats = decopa.Stats(rates={"a": 1, "b": 1, "c": 1})
    # was: planned as the plain SEQ(a, b, c) with no word, refused only by execute
    with pytest.raises(decopa.DecompositionError) as planning:
        decopa.optimize(KLEENE, stats, decopa.Units(4, 100, 100))
    assert str(planning.value) == KLEENE_ERROR
    with pytest.raises(decopa.DecompositionError) as split:
        decopa.plan_from_split(KLEENE, stats, decopa.Units(4, 100, 100),
                               {"abc": ("ab", "c"), "ab": ("a", "b")})
    with pytest.raises(decopa.DecompositionError) as sample:
        decopa.Stats.from_sample(read_events(ticks), cep_gpu.parse_rule(KLEENE))
    assert str(split.value) == str(sample.value) == KLEENE_ERROR
    rules = tmp_path / "k.rules"
    rules.write_text(KLEENE + "\n")
    rc, out, err = run_cli(capsys, "decompose", rules, "--rates", "a=1,b=1,c=1", *UNITS)
    assert rc == 1 and not out
    assert err.strip() == f"cep-gpu: error: {KLEENE_ERROR}"


# -- errors name the user's rule --------------------------------------------------------------------

TYPO = "define T pattern SEQ(GOOG a, MSFT b) where a.prise < b.price within 10 s"
TYPO_ERROR = ("rule 'T' reads attribute 'prise', which no event in the sample has "
              "(the sample's attributes: ['price']) (line 1, column 46)")


def test_a_sample_error_names_the_users_rule_and_points_into_it(tmp_path, ticks, capsys):
    rules = tmp_path / "typo_attr.txt"
    rules.write_text(TYPO + "\n")
    # was: rule 'decopa_sample' ..., a made-up rule text and a caret past its end
    rc, out, err = run_cli(capsys, "decompose", rules, "--sample", ticks, *UNITS)
    assert rc == 1 and "decopa_sample" not in err
    first, text, caret = err.rstrip("\n").splitlines()
    assert first == f"cep-gpu: error: {TYPO_ERROR}"
    assert text.strip() == TYPO
    assert text[caret.index("^"):].startswith("prise")
    with pytest.raises(cep_gpu.RuleError) as err:
        decopa.Stats.from_sample(read_events(ticks), cep_gpu.parse_rule(TYPO))
    assert str(err.value).splitlines()[0] == TYPO_ERROR


def test_a_sample_comparing_a_string_with_a_number_names_the_users_rule(ticks):
    rule = cep_gpu.parse_rule("define T pattern SEQ(GOOG a, MSFT b) where a.price = 'x' within 10 s")
    events = read_events(ticks)
    with pytest.raises(cep_gpu.RuleError, match="^rule 'T' compares a string with a number"):
        decopa.Stats.from_sample(events, rule)
    with pytest.raises(ArgumentError, match="no events"):
        decopa.Stats.from_sample(events.iloc[:0], rule)


# -- a plan on the user's own file: Plan.from_json, cep-gpu decopa run --------------------------------

FIG2 = "define Q pattern SEQ(A a, B b, C c) where a.x < b.x and b.x < c.x within 1 min return d := c.x - a.x"


def fig2_events(n: int = 300, seed: int = 0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    return pd.DataFrame({"type": rng.choice(["A", "B", "C"], n, p=[0.45, 0.45, 0.1]),
                         "ts": np.sort(rng.integers(0, 600, n)), "x": rng.random(n).round(3)})


@pytest.mark.parametrize("strategy", ["decopa", "hybrid", "centralized"])
def test_plan_from_json_round_trips_and_executes_to_the_same_rows(strategy):
    import json

    import pandas as pd

    stats = decopa.Stats(rates={"a": 1000, "b": 1000, "c": 30},
                         selectivity={("a", "b"): 0.01, ("a", "c"): 0.01, ("b", "c"): 0.01})
    plan = decopa.optimize(FIG2, stats, decopa.Units(4, 6000, 60000), strategy=strategy)
    text = json.dumps(plan.to_json())
    again = decopa.Plan.from_json(text)
    assert again == plan
    assert decopa.Plan.from_json(json.loads(text)) == plan
    assert again.explain() == plan.explain()
    events = fig2_events()
    rows = decopa.execute(events, again, backend="reference")
    pd.testing.assert_frame_equal(rows, decopa.execute(events, plan, backend="reference"))
    pd.testing.assert_frame_equal(rows, cep_gpu.detect(events, FIG2, backend="reference"))
    assert len(rows) > 100


def test_plan_from_json_refuses_malformed_fields_by_name():
    """Malformed plans escaped as AttributeError/TypeError (a traceback from cep-gpu decopa run)
    or were taken silently (a unit 0.7 became 0; an unknown strategy)."""
    stats = decopa.Stats(rates={"a": 1000, "b": 1000, "c": 30},
                         selectivity={("a", "b"): 0.01, ("a", "c"): 0.01, ("b", "c"): 0.01})
    good = decopa.optimize(FIG2, stats, decopa.Units(4, 6000, 60000)).to_json()
    op0 = dict(good["operators"][0])
    for change, words in (({"operators": [1]}, "operator 1: expected an object"),
                          ({"stats": [1]}, "'stats'"),
                          ({"rule_text": None}, "'rule_text' must be the rule's text"),
                          ({"strategy": "bogus"}, "'strategy' must be one of"),
                          ({"estimate": "bogus"}, "'estimate' must be one of"),
                          ({"operators": [{**op0, "units": [0.7]}] + good["operators"][1:]},
                           "'units' must be whole unit numbers")):
        with pytest.raises(decopa.DecompositionError, match=words):
            decopa.Plan.from_json({**good, **change})


def test_plan_from_json_of_a_split_of_ones_own():
    plan = decopa.plan_from_split(FIG2, decopa.Stats(rates={"a": 5, "b": 5, "c": 1}), decopa.Units(5, 50, 50),
                                  {"abc": ("ac", "bc"), "ac": ("a", "c"), "bc": ("b", "c")},
                                  {"abc": 2, "ac": 1, "bc": 2})
    assert decopa.Plan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize("edit, message", [
    (lambda j: j.pop("rule_text"), "no 'rule_text' (the plan was written by an older cep-gpu)"),
    (lambda j: j.update(rule="P"), "'rule' is 'P' but 'rule_text' defines 'Q'"),
    (lambda j: j["operators"][0].update(inputs=[["a"], ["z"]]), "operator 'o1': unknown alias 'z'"),
    (lambda j: j["operators"][0].pop("units"), "operator 'o1': missing field 'units'"),
    (lambda j: j["units"].update(n=0), "'units': Units: n must be an int >= 1"),
    (lambda j: j.update(bottleneck="o9"), "'bottleneck' 'o9' names no operator"),
    (lambda j: j.update(c_star=99.0), "does not follow from the operators"),
    (lambda j: j.update(rule="K", rule_text=KLEENE), "Kleene"),
])
def test_plan_from_json_names_the_bad_field(edit, message):
    import re

    plan = decopa.optimize(FIG2, decopa.Stats(rates={"a": 5, "b": 5, "c": 1}), decopa.Units(4, 50, 50))
    data = plan.to_json()
    edit(data)
    with pytest.raises(decopa.DecompositionError, match=re.escape(message)):
        decopa.Plan.from_json(data)
    with pytest.raises(decopa.DecompositionError, match="not JSON"):
        decopa.Plan.from_json("{")


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_decopa_run_on_a_file_writes_what_cep_gpu_run_writes(tmp_path, capsys, suffix):
    import pandas as pd

    events = tmp_path / "events.csv"
    fig2_events(400).to_csv(events, index=False)
    rules = tmp_path / "q.rules"
    rules.write_text(FIG2 + "\n")
    plan = tmp_path / "plan.json"
    rc, out, err = run_cli(capsys, "decompose", rules, "--sample", events, *UNITS, "--json", plan)
    assert rc == 0, err
    got, want = tmp_path / f"decopa.{suffix}", tmp_path / f"run.{suffix}"
    rc, out, err = run_cli(capsys, "decopa", "run", plan, events, "--out", got, "--backend", "cpu", "--report")
    assert rc == 0, err
    assert "composite events of Q from 400 events" in err and "o1 SEQ(" in err
    assert run_cli(capsys, "run", rules, events, "--out", want, "--backend", "cpu")[0] == 0
    if suffix == "csv":
        assert got.read_bytes() == want.read_bytes()
        assert len(want.read_text().splitlines()) > 100
    else:
        pd.testing.assert_frame_equal(pd.read_parquet(got), pd.read_parquet(want))
    streamed = tmp_path / f"stream.{suffix}"
    rc, out, err = run_cli(capsys, "decopa", "run", plan, events, "--out", streamed, "--chunk", "64",
                            "--backend", "reference")
    assert rc == 0, err
    if suffix == "csv":
        assert streamed.read_bytes() == want.read_bytes()
    else:  # (the streamed Parquet went unchecked)
        pd.testing.assert_frame_equal(pd.read_parquet(streamed), pd.read_parquet(want))


def test_decopa_run_prints_rows_and_reports_errors(tmp_path, capsys):
    events = tmp_path / "events.csv"
    fig2_events(100).to_csv(events, index=False)
    plan = decopa.optimize(FIG2, decopa.Stats(rates={"a": 5, "b": 5, "c": 1}), decopa.Units(4, 50, 50))
    path = tmp_path / "plan.json"
    import json

    path.write_text(json.dumps(plan.to_json()))
    rc, out, err = run_cli(capsys, "decopa", "run", path, events, "--limit", "2", "--backend", "reference")
    expected = cep_gpu.detect(read_events(events), FIG2, backend="reference")
    assert rc == 0 and f"... {len(expected) - 2} more rows" in out
    rules = tmp_path / "q.rules"
    rules.write_text(FIG2 + "\n")
    assert run_cli(capsys, "run", rules, events, "--limit", "2", "--backend", "reference")[1] == out
    rc, out, err = run_cli(capsys, "decopa", "run", tmp_path / "nope.json", events)
    assert (rc, err.strip()) == (1, f"cep-gpu: error: {tmp_path / 'nope.json'}: no such plan file")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    rc, out, err = run_cli(capsys, "decopa", "run", bad, events)
    assert rc == 1 and err.startswith(f"cep-gpu: error: {bad}: plan JSON: not JSON")
    rc, out, err = run_cli(capsys, "decopa", "run", path, events, "--chunk", "10", "--report")
    assert rc == 2 and "argument --report" in err
    rc, out, err = run_cli(capsys, "decopa", "run", path, events, "--out", tmp_path / "x.txt")
    assert rc == 2 and "argument --out" in err and "use .csv or .parquet" in err
    rc, out, err = run_cli(capsys, "decopa", "run", path, events, "--out", tmp_path / "no" / "x.csv")
    assert rc == 2 and "argument --out" in err and "does not exist" in err
    rc, out, err = run_cli(capsys, "decompose", rules, "--rates", "a=1,b=1,c=1", *UNITS, "--json", tmp_path / "no" / "p.json")
    assert rc == 2 and not out and "argument --json" in err
    types = tmp_path / "types.csv"
    types.write_text("type,ts,x\nA,0,1\nB,1,2\n")
    rc, out, err = run_cli(capsys, "decopa", "run", path, types, "--backend", "reference")
    assert rc == 0 and f"cep-gpu decopa run: warning: rule 'Q' reads type 'C', which no event in {types} has" in err
    other = tmp_path / "other.csv"
    other.write_text("type,ts,y\nA,0,1\n")
    rc, out, err = run_cli(capsys, "decopa", "run", path, other)
    assert rc == 1 and "rule 'Q' reads attribute 'x', which no event in the input has" in err


# -- a value given twice, a sample without the rule's types ---------------------------------------


@pytest.mark.parametrize("option, value, message", [
    ("--rates", "a=1,a=2,b=5", "argument --rates: 'a' given twice (a=1, then a=2)"),
    ("--selectivity", "a:b=0.1,a:b=0.5", "argument --selectivity: 'a:b' given twice (a:b=0.1, then a:b=0.5)"),
    ("--selectivity", "a:b=0.1, b:a=0.5",
     "argument --selectivity: selectivity of the pair ('a', 'b') given twice: ('a', 'b') = 0.1, then ('b', 'a') = 0.5"),
])
def test_a_value_given_twice_is_a_usage_error(tmp_path, capsys, option, value, message):
    rules = tmp_path / "q.rules"
    rules.write_text("define T pattern SEQ(GOOG a, MSFT b) where a.price < b.price within 10 s\n")
    args = ["--rates", value] if option == "--rates" else ["--rates", "a=1,b=5", option, value]
    # was: the last value silently won
    rc, out, err = run_cli(capsys, "decompose", rules, *args, *UNITS)
    assert rc == 2 and not out
    assert err.strip().splitlines()[-1] == f"cep-gpu decompose: error: {message}"


def test_decompose_reads_its_rule_file_as_every_subcommand(tmp_path, ticks, capsys):
    """An empty rule file was '0 rules given: pick one with --rule ([])'; an event file given in
    its place a parse error about its first line."""
    (tmp_path / "empty.rules").write_text("\n# nothing here\n")
    rc, out, err = run_cli(capsys, "decompose", tmp_path / "empty.rules", "--rates", "a=1,b=1", *UNITS)
    assert rc == 1 and err.strip() == f"cep-gpu: error: {tmp_path / 'empty.rules'} holds no rule"
    rc, out, err = run_cli(capsys, "decompose", ticks, "--rates", "a=1,b=1", *UNITS)
    assert rc == 1 and "looks like an event file, where the rule file is expected" in err


def test_decompose_names_an_empty_sample_file(tmp_path, capsys):
    rules = tmp_path / "q.rules"
    rules.write_text("define T pattern SEQ(GOOG a, MSFT b) where a.price < b.price within 10 s\n")
    (tmp_path / "header.csv").write_text("type,ts,price\n")
    rc, out, err = run_cli(capsys, "decompose", rules, "--sample", tmp_path / "header.csv", *UNITS)
    assert rc == 2 and not out
    assert err.strip().splitlines()[-1] == (f"cep-gpu decompose: error: argument --sample: "
                                            f"{tmp_path / 'header.csv'} holds no event: rates and "
                                            "selectivities need some")


def test_stats_refuses_a_pair_given_in_both_orders():
    with pytest.raises(ArgumentError, match=r"selectivity of the pair \('a', 'b'\) given twice"):
        decopa.Stats(rates={"a": 1, "b": 1}, selectivity={("a", "b"): 0.1, ("b", "a"): 0.5})


def test_decompose_on_a_sample_without_the_rules_types_warns(tmp_path, capsys):
    rules = tmp_path / "q.rules"
    rules.write_text("define T pattern SEQ(GOOG a, MSFT b) where a.price < b.price within 10 s\n")
    sample = tmp_path / "other.csv"
    sample.write_text("type,ts,price\nIBM,1,10\nGOOG,2,11\nIBM,3,12\n")
    # was: no word, and a plan of rate 0 for MSFT (c* = inf when no type is there)
    rc, out, err = run_cli(capsys, "decompose", rules, "--sample", sample, *UNITS)
    assert rc == 0
    assert (f"cep-gpu decompose: warning: rule 'T' reads type 'MSFT', which no event in {sample} has "
            "(types: GOOG, IBM)") in err


def test_decompose_sample_and_decopa_run_read_the_files_own_column_names(tmp_path, capsys):
    import pandas as pd

    events = fig2_events(300)
    events.to_csv(tmp_path / "std.csv", index=False)
    names = {"type": "what", "ts": "at"}
    events.rename(columns=names).to_csv(tmp_path / "mine.csv", index=False)
    rules = tmp_path / "q.rules"
    rules.write_text(FIG2 + "\n")
    opts = ["--type-column", "what", "--ts-column", "at"]
    plans = tmp_path / "std.json", tmp_path / "mine.json"
    assert run_cli(capsys, "decompose", rules, "--sample", tmp_path / "std.csv", *UNITS, "--json", plans[0])[0] == 0
    rc, _, err = run_cli(capsys, "decompose", rules, "--sample", tmp_path / "mine.csv", *UNITS, *opts,
                         "--json", plans[1])
    assert rc == 0, err
    assert plans[0].read_text() == plans[1].read_text()  # the same rates and selectivities measured
    rc, _, err = run_cli(capsys, "decopa", "run", plans[1], tmp_path / "mine.csv", *opts, "--backend",
                         "reference", "--out", tmp_path / "mine_out.csv")
    assert rc == 0, err
    assert run_cli(capsys, "run", rules, tmp_path / "std.csv", "--backend", "reference",
                   "--out", tmp_path / "want.csv")[0] == 0
    assert (tmp_path / "mine_out.csv").read_text() == (tmp_path / "want.csv").read_text()
    assert len(pd.read_csv(tmp_path / "want.csv")) > 10
    rc, out, err = run_cli(capsys, "decompose", rules, "--rates", "a=1,b=1,c=1", *UNITS, "--ts-column", "at")
    assert rc == 2 and "argument --ts-column: names a column of the sample: give --sample EVENTS" in err
