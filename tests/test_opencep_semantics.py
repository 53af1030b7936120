"""SEQ semantics where they differ from OpenCEP's and where they agree (docs/language.md,
"How these semantics relate to OpenCEP's"): hand-worked cases modelled on OpenCEP's negation
tests, on every backend."""

from __future__ import annotations

import pytest
from peer_cases import BACKENDS, frame, ids

ABC = "define S pattern SEQ(AAPL a, AMZN b, GOOG c) within 5 min"
MID = ("define N pattern SEQ(AAPL a, NOT(AMZN b), GOOG c) where a.p > b.p and b.p < c.p "
       "within 5 min")
LEAD = "define L pattern SEQ(NOT(TYP1 x), AAPL a, AMZN b) within 5 min"
TRAIL = "define T pattern SEQ(AAPL a, AMZN b, NOT(TYP1 x)) within 5 min"


def _ids(types, minutes, rule, backend, p=None):
    """The matches of events of ``types`` at ``minutes`` (with prices ``p``)."""
    return ids(frame(types, [60.0 * m for m in minutes], **({} if p is None else {"p": p})), rule, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "types, minutes, rule, p, expected",
    [
        # OpenCEP: non-decreasing times in any arrival order; ours strictly increasing
        (["AAPL", "AMZN", "GOOG"], [17, 17, 18], ABC, None, []),
        (["AMZN", "AAPL", "GOOG"], [17, 17, 18], ABC, None, []),
        (["AAPL", "AMZN", "GOOG"], [17, 18, 22], ABC, None, [(0, 1, 2)]),  # exactly W: both match
        (["AAPL", "AMZN", "GOOG"], [17, 18, 23], ABC, None, []),
        # a middle NOT at a neighbour's minute does not block (OpenCEP's simpleNot: it does)
        (["AMZN", "AAPL", "GOOG"], [19, 19, 21], MID, [10.0, 19.0, 20.0], [(1, 2)]),
        (["AAPL", "AMZN", "GOOG"], [19, 21, 21], MID, [19.0, 10.0, 20.0], [(0, 2)]),
        (["AAPL", "AMZN", "GOOG"], [19, 20, 21], MID, [19.0, 10.0, 20.0], []),
        # leading NOT: [last - W, first); OpenCEP: [last - W, first]
        (["TYP1", "AAPL", "AMZN"], [25, 25, 26], LEAD, None, [(1, 2)]),
        (["AAPL", "TYP1", "AMZN"], [25, 25, 26], LEAD, None, [(0, 2)]),
        (["TYP1", "AAPL", "AMZN"], [25, 28, 30], LEAD, None, []),
        (["TYP1", "AAPL", "AMZN"], [24, 28, 30], LEAD, None, [(1, 2)]),
        # trailing NOT: (last, first + W]; OpenCEP: [last, first + W]
        (["AAPL", "AMZN", "TYP1"], [20, 23, 23], TRAIL, None, [(0, 1)]),
        (["AAPL", "AMZN", "TYP1"], [20, 23, 25], TRAIL, None, []),
        (["AAPL", "AMZN", "TYP1"], [20, 23, 26], TRAIL, None, [(0, 1)]),
    ],
)
def test_seq_edges_against_opencep(types, minutes, rule, p, expected, backend):
    assert _ids(types, minutes, rule, backend, p) == expected
