"""The streaming fast path for aggregates and hierarchies (issue 12, ``cep_gpu.stream_match``):
rules with ``Count``/``Sum``/``Avg``/``Min``/``Max`` and rules reading composite events take the
incremental matcher, and give the composite events of batch ``detect`` in every chunking."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, tesla_rules
from test_engine import _publish_as, _record_rows, _records
from test_stream_fast import OUTPUTS, _dicts

import cep_gpu
from cep_gpu import Engine
from cep_gpu.stream_match import Chains

#: rules with aggregates over A: each function with and without a parameter (``A(k=$k)`` on an
#: int key, ``A(kf=$k)`` on a float one, ``A(k=b.k)``), spans from the terminator, from another
#: predicate or between two, with and without the aggregate's own filter, as a condition, as an
#: output attribute or both (a fixed list: each compiles its kernels once per process)
AGG_RULES = [
    "define R(o: int) from C(k=$k) as c and last B(k=$k) as b within 3 s from c "
    "and n = Count(A(k=$k) within 2 s from c) >= 1 where o = n",
    "define R from C(k=$k) as c and each B(k=$k) as b within 3 s from c and n = Count(A() between b and c) != 0",
    "define R(o: float) from C(k=$k) as c and first B(k=$k) as b within 3 s from c "
    "and s = Sum(A(kf=$k and v > 0.0) within 3 s from b).v where o = s",
    "define R(o: float) from C(k=$k) as c and s = Sum(A() within 2 s from c).v > 0.5 where o = s",
    "define R(o: float) from C(k=$k) as c and each B(k=$k) as b within 3 s from c "
    "and a = Avg(A(k=b.k) between b and c).v < 2.0 where o = a",
    "define R(o: float) from C(k=$k) as c and a = Avg(A(k != 1) within 1 s from c).v where o = a",
    "define R(o: float, p: float) from C(k=$k) as c and last B(k=$k) as b within 3 s from c "
    "and lo = Min(A(k=$k) within 3 s from b).v and hi = Max(A(kf=c.k) within 2 s from c).v >= 0.5 "
    "where o = lo, p = hi",
    "define R from C(k=$k) as c and lo = Min(A(v <= 1.0) within 2 s from c).v < 2.0",
    "define R(o: float) from C(k=$k) as c and each B(k=$k) as b within 3 s from c "
    "and hi = Max(A() between b and c).v where o = hi",
    "define R(o: int, p: float) from C(k=$k) as c and n = Count(A(k=$k) within 2 s from c) "
    "and s = Sum(A(k=$k) within 2 s from c).v >= 1 where o = n, p = s",
]


def _stream(seed: int, n: int) -> pd.DataFrame:
    """Events A/B/C with ties, keys 0..2 (some missing), ``kf`` the key as a float, values with
    nulls and NaN."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 3, n).astype(float)
    k[rng.random(n) < 0.1] = np.nan
    v = np.round(rng.normal(size=n), 2)
    v[rng.random(n) < 0.15] = np.nan
    return pd.DataFrame({
        "type": rng.choice(["A", "B", "C"], size=n, p=[0.45, 0.35, 0.2]),
        "ts": np.cumsum(rng.integers(0, 3, n)) * 0.5,  # ties included
        "k": pd.array([None if np.isnan(x) else int(x) for x in k], dtype="Int64"),
        "kf": np.where(np.isnan(k), np.nan, k),
        "v": v,
    })


def _chunked(eng: Engine, events: pd.DataFrame, data, restore: bool) -> tuple[Engine, list]:
    """Publish ``events`` in drawn chunks (one-event publishes, frames, NumPy columns; every
    output form), optionally through a checkpoint and restore at a drawn position, then flush."""
    n = len(events)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    at = data.draw(st.integers(0, n)) if restore else -1
    parts, prev = [], 0
    for c in sorted(set(cuts + [n] + ([at] if restore else []))):
        if c > prev:
            form = data.draw(st.sampled_from(["records", "records", "frame", "columns"]))
            parts += _publish_as(eng, events.iloc[prev:c], form, data.draw(st.sampled_from(OUTPUTS)))
        if c == at:
            eng = Engine.restore(eng.checkpoint())
        prev = c
    parts.append(eng.flush(output=data.draw(st.sampled_from(OUTPUTS))))
    return eng, parts


def _all_fast(eng: Engine) -> None:
    """Every rule reports the fast path and did all its matching there."""
    s = eng.stats()
    fast = s["fast_path"]
    assert set(fast["rules"].values()) == {"fast"}, fast["rules"]
    assert fast["fallbacks"] == 0 and fast["calls"] == s["backend_calls"], s


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(AGG_RULES), st.integers(0, 10**6), st.integers(1, 70), st.data())
def test_aggregates_on_the_fast_path_equal_batch(text, seed, n, data):
    events = _stream(seed, n)
    batch = cep_gpu.detect(events, text, backend="reference")
    eng, parts = _chunked(Engine(text, backend="cpu"), events, data, restore=data.draw(st.booleans()))
    assert _record_rows(_dicts(eng, parts)) == _record_rows([batch])
    _all_fast(eng)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(tesla_rules(negations=True, aggregates=True, consuming=False), event_streams(min_events=1, max_events=30),
       st.data())
def test_random_tesla_rules_with_aggregates_equal_batch(text, events, data):
    """The shared rule strategy's aggregates (over composite-free TESLA rules with negations)."""
    rules = cep_gpu.parse_rules(text)
    batch = cep_gpu.detect(events, rules, backend="reference")
    eng, parts = _chunked(Engine(rules, backend="cpu"), events, data, restore=data.draw(st.booleans()))
    assert _record_rows(_dicts(eng, parts)) == _record_rows([batch])
    _all_fast(eng)


_HIERARCHIES = [
    # two levels, a parameter through the composite event
    "define X(k: int) from C(k=$k) and last B(k=$k) within 3 s from C where k = C.k\n\n"
    "define Y from X(k=$k) and each A(k=$k) within 2 s from X",
    # three levels, each reading the one below with a parameter; an ordinary rule beside them
    "define X(k: int, v: float) from C(k=$k) and each B(k=$k) within 3 s from C where k = C.k, v = B.v\n\n"
    "define Y(k: int) from A(k=$k) and last X(k=$k) within 2 s from A where k = A.k\n\n"
    "define Z(k: int) from B(k=$k) and each Y(k=$k) within 2 s from B and first X(k=$k) within 3 s from Y "
    "where k = B.k\n\n"
    "define W from C(k=$k) and each A(k=$k) within 2 s from C",
    # aggregates over composite events, and a composite event carrying an aggregate
    "define X(k: int, n: int) from C(k=$k) and last B(k=$k) within 3 s from C "
    "and n = Count(A(k=$k) within 2 s from C) where k = C.k, n = n\n\n"
    "define Y(s: float) from A(k=$k) and s = Sum(X(k=$k) within 3 s from A).n >= 1 where s = s",
    # a negation over composite events, and a composite event terminating a rule that also reads A
    "define X(k: int) from C(k=$k) and each B(k=$k) within 2 s from C where k = C.k\n\n"
    "define Y from X(k=$k) and last A(k=$k) within 2 s from X and not X(k=$k) between A and X\n\n"
    "define V(m: float) from B(k=$k) and m = Max(A(kf=$k) within 2 s from B).v where m = m",
]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(_HIERARCHIES), st.integers(0, 10**6), st.integers(1, 70), st.data())
def test_hierarchies_on_the_fast_path_equal_batch(text, seed, n, data):
    """Rules reading composite events (two and three levels, parameters through them, next to
    ordinary rules): the composite events merged before their terminators in the buffer are
    read by the incremental columns; checkpoint and restore at a drawn position."""
    events = _stream(seed, n)
    batch = cep_gpu.detect(events, text, backend="reference")
    eng, parts = _chunked(Engine(text, backend="cpu"), events, data, restore=data.draw(st.booleans()))
    assert _record_rows(_dicts(eng, parts)) == _record_rows([batch])
    _all_fast(eng)


def test_aggregates_by_hand():
    """Count/Sum/Avg/Min/Max of A(k=$k) in the 3 s before C: the null value is skipped by all but
    Count, the other key's A is not counted, the A at C's timestamp is not before it; over no
    events Count and Sum are 0 and the others null."""
    text = ("define R(n: int, s: float, a: float, lo: float, hi: float) from C(k=$k) "
            "and n = Count(A(k=$k) within 3 s from C) and s = Sum(A(k=$k) within 3 s from C).v "
            "and a = Avg(A(k=$k) within 3 s from C).v and lo = Min(A(k=$k) within 3 s from C).v "
            "and hi = Max(A(k=$k) within 3 s from C).v where n = n, s = s, a = a, lo = lo, hi = hi")
    events = pd.DataFrame({"type": ["A", "A", "A", "A", "C", "A", "C"],
                           "ts": [0.0, 1.0, 1.5, 2.0, 3.0, 3.0, 10.0],
                           "k": [1, 2, 1, 1, 1, 1, 1],
                           "v": [1.0, 5.0, None, 2.5, 0.0, 7.0, 0.0]})
    eng = Engine(text, backend="cpu")
    got = [r for rec in _records(events) for r in eng.publish(rec, output="records")] + eng.flush(output="records")
    assert got == [{"rule": "R", "ts": 3.0, "ids": (4,), "n": 3, "s": 3.5, "a": 1.75, "lo": 1.0, "hi": 2.5},
                   {"rule": "R", "ts": 10.0, "ids": (6,), "n": 0, "s": 0.0, "a": None, "lo": None, "hi": None}]
    assert _record_rows([got]) == _record_rows([cep_gpu.detect(events, text, backend="reference")])
    _all_fast(eng)


def test_aggregate_and_hierarchy_rules_report_the_fast_path():
    text = ("define G(n: int) from B() as b and n = Count(A() within 4 s from b) >= 1 where n = n;\n"
            "define P from C(x = $k) as c and last B(x = $k) as b within 3 s from c "
            "and s = Sum(A(x = $k) between b and c).y > 1;\n"
            "define H from B() as b and each G() as g within 5 s from b;\n"
            "define K from C() as c and last H() as h within 5 s from c and n = Count(G() within 5 s from c) > 0")
    assert Engine(text, backend="cpu").stats()["fast_path"]["rules"] == {"G": "fast", "P": "fast", "H": "fast", "K": "fast"}


def _long_stream(seed: int, n: int, p: list) -> pd.DataFrame:
    """``n`` events A/B/C (probabilities ``p``), one per second, keys 0..3, normal values."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"type": rng.choice(["A", "B", "C"], n, p=p), "ts": np.arange(n),
                         "k": rng.integers(0, 4, n), "v": rng.normal(size=n)})


@pytest.mark.parametrize("size", [1, 50, 3000])
def test_keyed_aggregate_through_compaction_and_large_publishes(size):
    """A keyed aggregate's chained column through buffer growth, compaction and the column
    reserve, in one-event publishes, micro-batches and one large publish; and a hierarchy beside it."""
    n = 3000
    events = _long_stream(7, n, [0.5, 0.3, 0.2])
    text = ("define X(n: int, s: float) from C(k=$k) and last B(k=$k) within 20 s from C "
            "and n = Count(A(k=$k) within 30 s from C) >= 2 and s = Sum(A(k=$k) within 30 s from B).v "
            "where n = n, s = s\n\n"
            "define Y(m: float) from B(k=$k) and m = Avg(X(k=$k) within 25 s from B).s where m = m")
    cols = {c: events[c].to_numpy() for c in events.columns}
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="cpu")
    parts = [eng.publish({c: v[s:s + size] for c, v in cols.items()}, output="records") for s in range(0, n, size)]
    parts.append(eng.flush(output="records"))
    assert _record_rows(parts) == _record_rows([batch])
    s = eng.stats()
    _all_fast(eng)
    assert s["composites"]["X"] > 50 and s["composites"]["Y"] > 50


class _FilledNumpy:
    """NumPy whose ``empty`` fills with 7 (what uninitialised memory might hold)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float):
        return np.full(shape, 7, dtype)


def test_unchained_entries_keep_no_bucket_through_the_column_reserve(monkeypatch):
    """Entries of columns without a chain carry bucket -1 (plane 3), also after the columns
    were compacted and grown into new arrays (checked after every reserve, with new arrays
    filled with 7): taking entries back (after a merged composite event) must not touch any
    bucket head for them."""
    import cep_gpu.stream_match as sm

    reserve, checked = sm.StreamMatcher._reserve, []

    def reserve_and_check(self, n_new):
        sm.np = _FilledNumpy()  # (only here: the kernels are compiled with the real one)
        try:
            reserve(self, n_new)
        finally:
            sm.np = np
        cs, ce = self._cnt[0], self._cnt[1]
        kinds = {a: self._store.columns[a].kind if a in self._store.columns else None for a in self.spec.layout.attrs}
        for p in set(self._row_slots.tolist()) - set(Chains.of(self.rule, kinds).attr):
            assert (self._cl[3, p, cs[p]:ce[p]] == -1).all(), p
            checked.append(ce[p] - cs[p])

    monkeypatch.setattr(sm.StreamMatcher, "_reserve", reserve_and_check)
    events = _long_stream(3, 2000, [0.4, 0.4, 0.2])
    text = ("define X(k: int) from C(k=$k) and last A() within 5 s from C "
            "and n = Count(A() within 60 s from C) >= 1 where k = C.k\n\n"
            "define Y from X(k=$k) and last B(k=$k) within 6 s from X and s = Sum(B(k=$k) within 6 s from X).v > 0")
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="cpu")
    parts = [eng.publish(r, output="records") for r in _records(events)] + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch])
    _all_fast(eng)
    assert len(checked) > 10 and sum(checked) > 100 and eng.stats()["composites"]["Y"] > 10
