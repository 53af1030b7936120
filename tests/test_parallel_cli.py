"""``cep-gpu parallel run`` as a user meets it: errors, files and printing as ``cep-gpu run``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cep_gpu.cli import main

RULE = "define T pattern SEQ(GOOG a, MSFT b) where a.price < b.price within 5 s\n"
TYPO = RULE.replace("a.price", "a.prise")


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    ev = pd.DataFrame({"type": rng.choice(["GOOG", "MSFT", "IBM"], n), "ts": np.arange(n) * 0.1,
                       "price": rng.normal(100, 5, n).round(2)})
    (tmp_path / "rules.txt").write_text(RULE)
    (tmp_path / "typo.txt").write_text(TYPO)
    ev.to_csv(tmp_path / "ticks.csv", index=False)
    return tmp_path, ev


def cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own checks
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


# -- 1. a rule reading an attribute no event has --------------------------------------------------

def test_an_attribute_no_event_has_is_the_error_run_reports(files, capsys):
    d, _ = files
    rc, out, err = cli(capsys, "run", d / "typo.txt", d / "ticks.csv")
    assert rc == 1 and "reads attribute 'prise', which no event in the input has" in err
    want = err.split("error: ", 1)[1]
    rc, out, perr = cli(capsys, "parallel", "run", d / "typo.txt", d / "ticks.csv")
    assert rc == 1, perr  # was: "(no composite events)" and 0
    assert perr.startswith("cep-gpu parallel: error: ") and perr.split("error: ", 1)[1] == want
    assert "composite events" not in out
