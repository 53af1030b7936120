"""DecoPa as a user runs it on their own files: ``cep-gpu decompose``, ``cep-gpu decopa run``,
``Plan.from_json``, and the errors a user sees (they name the user's rule, attribute and option)."""

from __future__ import annotations

import pytest

import cep_gpu
from cep_gpu import decopa
from cep_gpu.cli import main
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
