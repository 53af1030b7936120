"""DecoPa as a user runs it on their own files: ``cep-gpu decompose``, ``cep-gpu decopa run``,
``Plan.from_json``, and the errors a user sees (they name the user's rule, attribute and option)."""

from __future__ import annotations

import pytest

import cep_gpu
from cep_gpu import decopa
from cep_gpu.cli import main
from cep_gpu.errors import ArgumentError
from cep_gpu.io import read_events

TICKS = "type,ts,price\nGOOG,1,10\nMSFT,2,11\nGOOG,3,12\nMSFT,4,9\nGOOG,5,13\n"
UNITS = ["--units", "4", "--iota", "100", "--kappa", "100"]


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own checks
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


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
    rc, out, err = run_cli(["decompose", rules, option, value, "--sample", ticks, *UNITS], capsys)
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
    rc, out, err = run_cli(["decompose", rules, "--rates", "a=1,b=1,c=1", *UNITS], capsys)
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
    rc, out, err = run_cli(["decompose", rules, "--sample", ticks, *UNITS], capsys)
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
