"""Output parts of cep_gpu.parallel built by several threads: exactly detect's frame, and the replay."""

from __future__ import annotations

import dataclasses
import random
import threading
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep_gpu
from cep_gpu.parallel import HybridEngine, _compat, kernels
from cep_gpu.parallel.bench import stock_events, stock_rule
from cep_gpu.parallel.engine import OUTPUT_PART, as_rule_list, concat_parts, output_parts
from cep_gpu.parallel.runtime import Layout, OutputJob, Runtime, Store
from cep_gpu.parallel.simulate import simulate, trace

RULE = "define Q pattern SEQ(A a, B b, C c) where c.x > a.x within 3 s return d := c.x - a.x, s := b.s"


def events(n: int, seed: int, ties: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, n // 2 if ties else 10 * n, n)).astype(float) / 4
    return pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": ts, "x": rng.integers(0, 9, n),
                         "s": rng.choice(["u", "v"], n), "id": rng.permutation(n) * 3})


def lexsorted(rows: np.ndarray, ts: np.ndarray, ids: np.ndarray, term: int) -> np.ndarray:
    t = ts[rows[:, term]] if term >= 0 else ts[rows].max(axis=1)
    i = ids[rows]
    return rows[np.lexsort(tuple(i[:, j] for j in reversed(range(rows.shape[1]))) + (t,))]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 300), st.integers(1, 4), st.integers(-1, 3), st.integers(0, 2**31 - 1), st.integers(0, 50))
def test_order_matches_is_detects_order(n, width, term, seed, base):
    rng = np.random.default_rng(seed)
    n_ev = 40
    ts = np.sort(rng.integers(0, 12, n_ev)).astype(np.int64)  # many equal timestamps
    ids = rng.permutation(n_ev).astype(np.int64) * 7 - 50
    # distinct matches (as the engine emits them): rows in time order within a match
    rows = np.sort(rng.integers(0, n_ev, (n, width)), axis=1)
    rows = np.unique(rows, axis=0) if n else rows
    rng.shuffle(rows)
    term = min(term, width - 1)
    got = kernels.order_matches(rows + base, term, ts, ids, base)
    assert np.array_equal(got, lexsorted(rows, ts, ids, term))


@settings(max_examples=40, deadline=None)
@given(st.integers(33, 400), st.integers(1, 4), st.integers(0, 3), st.integers(0, 2**31 - 1), st.booleans(),
       st.booleans())
def test_order_matches_counting_path_and_its_fallbacks(n, width, term, seed, sorted_ts, wide):
    """More than 32 matches with a terminator position take the counting sort by row when the
    rows are in timestamp order (the store's) and span few rows; timestamps out of row order or a
    row range far wider than the matches fall back to the merge sort: every case is detect's
    order, ties (duplicate ids) in input order."""
    rng = np.random.default_rng(seed)
    n_ev = 5000 if wide else 60
    ts = rng.integers(0, 20, n_ev).astype(np.int64)
    if sorted_ts:
        ts.sort()
    ids = rng.integers(0, 8, n_ev).astype(np.int64)  # duplicate ids: ties
    rows = np.sort(rng.integers(0, n_ev, (n, width)), axis=1)
    term = min(term, width - 1)
    got = kernels.order_matches(rows, term, ts, ids, 0)
    t_ = ts[rows[:, term]]
    i = ids[rows]
    order = np.lexsort(tuple(i[:, j] for j in reversed(range(width))) + (t_,))  # stable
    assert np.array_equal(got, rows[order])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 200), st.integers(0, 6), st.integers(-1, 1), st.integers(0, 2**31 - 1))
def test_bucket_matches_cuts_at_timestamps(n, n_cuts, term, seed):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 20, 50)).astype(np.int64)
    rows = np.sort(rng.integers(0, 50, (n, 2)), axis=1)
    cuts = np.unique(rng.integers(0, 20, n_cuts)).astype(np.int64)
    out, off = kernels.bucket_matches(rows, term, ts, 0, cuts)
    assert off[0] == 0 and off[-1] == n and (np.diff(off) >= 0).all() and len(off) == len(cuts) + 2
    t = ts[rows[:, term]] if term >= 0 else ts[rows].max(axis=1)
    # every match once, stable within a bucket, and buckets in time order without sharing a ts
    for b in range(len(cuts) + 1):
        mine = np.searchsorted(cuts, t, side="right") == b
        assert np.array_equal(out[off[b]:off[b + 1]], rows[mine])


def _built(seed: int):
    """A store with a stream's events and its matches (detect's rows), and detect's frame."""
    ev = events(400, seed)
    ref = cep_gpu.detect(ev, RULE)
    rules = as_rule_list(RULE)
    strings = _compat.StringDictionary()
    table = _compat.ingest(ev, "s", strings)
    store = Store(("x", "s"))
    store.append(table)
    by_id = {int(i): r for r, i in enumerate(store.ids)}
    rows = np.array([[by_id[i] for i in ids] for ids in ref["ids"]], np.int64).reshape(-1, 3)
    return ev, ref, rules, store, strings, table.time, rows


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1), st.integers(1, 64), st.integers(1, 12), st.booleans())
def test_parts_in_any_finishing_order_are_detects_frame(seed, part, most, arrow):
    ev, ref, rules, store, strings, time_fmt, rows = _built(seed % 1000)
    rng = random.Random(seed)
    shuffled = rows[rng.sample(range(len(rows)), len(rows))]
    table = _compat.store_table(store, strings, time_fmt)
    job = output_parts(rules, [shuffled], store, table, arrow, part, most)
    assert 1 <= len(job.build) <= most
    order = list(range(len(job.build)))
    rng.shuffle(order)
    for j in order:  # built last part first, or in any order
        job.parts[j] = job.build[j]()
    out = concat_parts(job.parts, arrow)
    out = out.to_pandas() if arrow else out
    if arrow:
        ref = cep_gpu.detect(ev, RULE, output="arrow").to_pandas()  # detect's own Arrow output
    pd.testing.assert_frame_equal(out, ref)


def test_runtime_builds_parts_on_idle_units_and_returns_them_in_order():
    store = Store(())
    layout = Layout([[(1,)]], [3], 3)
    from cep_gpu.parallel.compile import compile_rules

    (spec,) = compile_rules(cep_gpu.parse_rules("define Q pattern SEQ(A a, B b) within 1 s"), 1_000_000_000)
    rt = Runtime([spec], store, layout, [np.empty(0)], jitter=0.3, seed=3)
    try:
        who: list[str] = []
        rng = random.Random(0)

        def part(j: int):
            time.sleep(rng.random() * 0.004)  # parts finish out of order
            who.append(threading.current_thread().name)
            return j

        job = rt.submit_output(OutputJob([lambda j=j: part(j) for j in range(40)]))
        time.sleep(0.05)  # idle units take parts before the publishing thread helps
        assert rt.wait_output(job) == list(range(40))
        assert rt.output_parts == 40 and rt.output_by_units >= 1
        assert any(n.startswith("cep-unit-") for n in who)
        # an error in a part reaches the publishing thread
        bad = rt.submit_output(OutputJob([lambda: 1, lambda: 1 / 0]))
        with pytest.raises(ZeroDivisionError):
            rt.wait_output(bad)
    finally:
        rt.close()
    # inline runtime: the publishing thread builds every part; cancelled parts are never built
    inline = Runtime([spec], store, layout, [np.empty(0)], threads=False)
    job = inline.submit_output(OutputJob([lambda j=j: j for j in range(5)]))
    inline.cancel_output()
    inline.help_output()
    assert job.left == 5 and inline.output_parts == 0
    assert inline.wait_output(inline.submit_output(OutputJob([lambda: "a", lambda: "b"]))) == ["a", "b"]
    assert inline.output_by_units == 0


@pytest.mark.parametrize("units", [1, 3])
def test_engine_with_parts_on_several_units_equals_detect(units):
    ev = events(3000, 7)
    ref = cep_gpu.detect(ev, RULE)
    eng = HybridEngine(RULE, units=units, output_part=8, chunk_size=200, batch_size=4, jitter=0.2, seed=units)
    try:
        parts = [eng.publish(ev.iloc[k:k + 700]) for k in range(0, len(ev), 700)]
        st_ = eng.stats()
        assert st_["output_parts"] > len(parts)  # several parts per publish
        if units > 1:
            assert st_["output_parts_by_units"] >= 1
    finally:
        eng.close()
    pd.testing.assert_frame_equal(pd.concat(parts, ignore_index=True), ref)


def test_simulation_charges_the_output_parts_per_unit():
    ev = stock_events(6000, seed=2)
    tr = trace(stock_rule(4, 1.5), ev, chunk_size=4000, batch_size=64)
    finals = tr.outputs[:, -1]
    assert finals[-1] >= 2 * OUTPUT_PART  # the last chunk's output is cut in parts
    assert 0.0 < tr.output_nogil <= 1.0 and tr.output_s > 0
    def with_(t, **kw):  # both traced layouts (simulate picks the split one for several agents)
        return dataclasses.replace(t, split=dataclasses.replace(t.split, **kw), **kw)

    serial = with_(tr, output_nogil=0.0, output_parallel=None, t_opart=0.0)
    spread = with_(tr, output_nogil=1.0, output_parallel=None, t_opart=0.0)
    # a measured parallel share, where there is one, is what the replay uses
    assert simulate(with_(tr, output_nogil=0.0, output_parallel=1.0, t_opart=0.0), "hybrid", 8).seconds == \
        pytest.approx(simulate(spread, "hybrid", 8).seconds)
    for k in (1, 8):
        a, b = simulate(serial, "hybrid", k), simulate(spread, "hybrid", k)
        # the CPU time charged does not depend on how the parts are spread
        assert a.cpu_s == pytest.approx(b.cpu_s)
        last = min(tr.output_s, tr.split.output_s) * finals[-1] / finals.sum()
        n_parts = min(finals[-1] // OUTPUT_PART, k + 1)
        # the last chunk's output after the units: all of it at k = 1, a part per thread at k = 8
        # (the earlier chunks' parts overlap the units' work, and may shorten it too)
        if k == 1:
            assert a.seconds == pytest.approx(b.seconds)
        else:
            assert a.seconds - b.seconds >= last * (1 - 1 / min(n_parts, k)) * (1 - 1e-9) > 0
    # each extra part costs t_opart in CPU time
    dearer = with_(spread, t_opart=1e-3)
    n_parts = np.maximum(np.minimum(finals // OUTPUT_PART, 9), 1)
    assert simulate(dearer, "hybrid", 8).cpu_s - simulate(spread, "hybrid", 8).cpu_s == pytest.approx(
        1e-3 * float((n_parts - 1).sum()))
