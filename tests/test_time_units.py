"""`X.ts` in expressions is in the input's time unit, on every backend, batch and streaming."""

from __future__ import annotations

import pandas as pd

import cep_gpu

SEQ_GAP = """define D
pattern SEQ(A a, B b)
where b.ts - a.ts < 5
within 100 s
return gap := b.ts - a.ts"""

TESLA_TS = """define T(gap: float)
from B(x=$x) and last A(x=$x and ts > 2) within 100 s from B
where gap = B.ts - A.ts"""

EVENTS = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [1, 3, 10, 20], "x": [1, 1, 1, 1]})


def _rows(out):
    return [(r.ts, tuple(r.ids), r.gap) for r in out.itertuples()]


def test_seq_ts_arithmetic_in_seconds(backend):
    # A@1,B@3: gap 2 < 5 matches; A@1/A@10 with B@20: gaps 19 and 10, too large
    assert _rows(cep_gpu.detect(EVENTS, SEQ_GAP, backend=backend)) == [(3, (0, 1), 2.0)]


def test_bare_ts_inside_predicate(backend):
    # `last A(ts > 2)`: for B@3 the only earlier A is at 1 (fails); for B@20 the last A is A@10
    assert _rows(cep_gpu.detect(EVENTS, TESLA_TS, backend=backend)) == [(20, (3, 2), 10.0)]


def test_time_unit_ms_changes_meaning():
    # the same numbers in ms: gaps are 2 ms, 19 ms, 10 ms, all but 2 ms fail "< 5"
    out = cep_gpu.detect(EVENTS, SEQ_GAP, backend="reference", time_unit="ms")
    assert _rows(out) == [(3, (0, 1), 2.0)]
    slow = EVENTS.assign(ts=EVENTS.ts * 1000)  # now in ms: gap 2000 ms
    assert _rows(cep_gpu.detect(slow, SEQ_GAP.replace("< 5", "< 5000"), backend="reference",
                                time_unit="ms")) == [(3000, (0, 1), 2000.0)]


def test_streaming_uses_the_same_units(backend):
    engine = cep_gpu.Engine(SEQ_GAP, backend=backend)
    out = pd.concat([engine.publish(EVENTS.iloc[[i]]) for i in range(len(EVENTS))] + [engine.flush()])
    assert _rows(out) == [(3, (0, 1), 2.0)]


def test_epoch_numbers_read_in_seconds_name_the_unit_that_fits(tmp_path, capsys):
    """Integer epoch timestamps (ns, us, ms) read with the default time_unit='s' only said
    'outside the representable range'; the error now names the unit that fits, on the API and
    the command line."""
    import pytest

    from cep_gpu.cli import main
    from cep_gpu.errors import EventError

    t0 = pd.Timestamp("2025-03-01").value  # epoch nanoseconds
    PAIR = "define P pattern SEQ(A a, B b) within 5 s"  # A@1, B@3 only
    for unit, div in (("ns", 1), ("us", 1000), ("ms", 1_000_000)):
        ev = EVENTS.assign(ts=[(t0 + t * 1_000_000_000) // div for t in EVENTS["ts"]])
        with pytest.raises(EventError, match=rf"time_unit='{unit}' \(--time-unit {unit} "):
            cep_gpu.detect(ev, PAIR, backend="cpu")
        assert len(cep_gpu.detect(ev, PAIR, backend="cpu", time_unit=unit)) == 1
    with pytest.raises(EventError) as err:  # past every unit: no hint
        cep_gpu.detect(EVENTS.assign(ts=[1e300] * 4), PAIR, backend="cpu", time_unit="ns")
    assert "time_unit=" in str(err.value) and "say so" not in str(err.value)
    (tmp_path / "r.txt").write_text(PAIR)
    ev.to_csv(tmp_path / "ev.csv", index=False)
    assert main(["run", str(tmp_path / "r.txt"), str(tmp_path / "ev.csv")]) == 1
    assert "--time-unit ms on the command line" in capsys.readouterr().err
