"""``cep_gpu.Engine(rules, shedding=Shedder(...))``: the DARLING hook of the streaming engine
(docs/shedding.md, "In cep_gpu.Engine")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu.errors import ArgumentError
from cep_gpu.shedding import CostModel, Shedder, SheddingEngine, SheddingError

RULE = "define Q pattern SEQ(A a, B b, C c) where a.price < b.price and b.price < c.price within 3 s"


def stream(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ty = np.array(["A", "B", "C", "X"])[rng.integers(0, 4, n)]
    return pd.DataFrame({"type": ty, "ts": np.arange(n) * 0.1, "price": rng.normal(100, 20, n).round(1)})


def fitted(bound: float, policy: str = "darling", seed: int = 0) -> Shedder:
    return Shedder(bound, policy=policy, seed=seed).fit(RULE, stream(300, 99), costs=CostModel(default=2e-3))


def batches(ev: pd.DataFrame, size: int):
    return [ev.iloc[lo:lo + size] for lo in range(0, len(ev), size)]


def _ids(out: pd.DataFrame) -> list:
    return sorted(zip(out["rule"], out["ts"], map(tuple, out["ids"])))


def test_no_overload_equals_the_plain_engine():
    ev = stream(400, 1)
    plain = cep_gpu.Engine(RULE, backend="cpu")
    shed = cep_gpu.Engine(RULE, backend="cpu", shedding=fitted(1.0))
    for b in batches(ev, 7):  # 7 events of 2 ms each: far below the 1 s bound
        assert _ids(shed.publish(b)) == _ids(plain.publish(b))
    s = shed.stats()["shedding"]
    assert s["published"] == s["kept"] == 400 and s["dropped"] == 0 and s["dropped_per_type"] == {}
    assert s["composites"] == sum(plain.stats()["composites"].values()) > 0
    assert s["estimated_recall"] == 1.0 and s["violations"] == 0
    assert plain.stats()["shedding"] is None


def test_overload_equals_shedding_engine_and_an_independent_shed_then_publish():
    ev = stream(600, 2)
    bound = 0.02  # 10 events of 2 ms: batches of 40 must shed
    shed = cep_gpu.Engine(RULE, backend="cpu", shedding=fitted(bound, seed=5))
    wrapper = SheddingEngine(RULE, fitted(bound, seed=5), mode="virtual")
    by_hand, plain, pos = fitted(bound, seed=5), cep_gpu.Engine(RULE, backend="cpu"), 0
    kept_all = np.zeros(len(ev), bool)
    for b in batches(ev, 40):
        got = shed.publish(b)
        assert _ids(got) == _ids(wrapper.publish(b))
        keep = by_hand.shed_batch(b)
        kept_all[pos:pos + len(b)] = keep
        assert _ids(got) == _ids(plain.publish(b.assign(id=np.arange(pos, pos + len(b)))[keep]))
        pos += len(b)
    s = shed.stats()["shedding"]
    assert 0 < s["kept"] < s["published"] == 600 and s["dropped"] == int((~kept_all).sum())
    assert s["dropped_per_type"] == wrapper.live_stats()["dropped_per_type"]
    assert "X" in s["dropped_per_type"]  # no rule reads X: it goes first
    # ids are positions in the whole stream: the matches are batch detect's over every event
    # restricted to the kept ones
    ref = cep_gpu.detect(ev.assign(id=np.arange(len(ev)))[kept_all], RULE, backend="cpu")
    assert s["composites"] == len(ref)
    full = set(map(tuple, cep_gpu.detect(ev, RULE, backend="cpu")["ids"]))
    assert set(map(tuple, ref["ids"])) <= full and 0 < s["estimated_recall"] < 1
    assert set(s["latency_s"]) == {"p50", "p95", "p99", "max", "mean"}
    assert s["latency_s"]["p50"] is not None and s["latency_s"]["p50"] <= s["latency_s"]["max"]
    assert s["violations"] >= 0 and s["constraints"]["N_in"] == pytest.approx(bound / 2e-3)


def test_one_event_dicts_and_checkpoints():
    ev = stream(120, 3)
    eng = cep_gpu.Engine(RULE, backend="cpu", shedding=fitted(1.0))
    plain = cep_gpu.Engine(RULE, backend="cpu")
    for r in ev.to_dict("records")[:60]:
        assert _ids(eng.publish(r)) == _ids(plain.publish(r))
    back = cep_gpu.Engine.restore(eng.checkpoint())
    for r in ev.to_dict("records")[60:]:
        assert _ids(back.publish(r)) == _ids(plain.publish(r))
    assert back.stats()["shedding"]["published"] == 120


def test_bad_shedding():
    with pytest.raises(ArgumentError, match="shedding must be"):
        cep_gpu.Engine(RULE, shedding=0.5)
    with pytest.raises(SheddingError, match="fit"):
        cep_gpu.Engine(RULE, shedding=Shedder(1.0))
    other = "define P pattern SEQ(A a, B b) where a.price < b.price within 3 s"
    with pytest.raises(ArgumentError, match="fitted for rules"):
        cep_gpu.Engine(other, shedding=fitted(1.0))
    with pytest.raises(ArgumentError, match="events must be"):
        cep_gpu.Engine(RULE, shedding=fitted(1.0)).publish([1, 2])


def test_a_drift_check_over_a_stretch_without_the_rules_types_keeps_the_statistics():
    """Re-gathering (Sec. 4.1) from events of no type the rules read would fit nothing: the
    current statistics stay, and the run goes on (a first warm-up like that is an error)."""
    ev = stream(400, 3)
    quiet = ev[ev["type"] == "X"]
    eng = SheddingEngine(RULE, Shedder(0.05, seed=1), mode="virtual", cost_model=CostModel(default=2e-3))
    with pytest.raises(ArgumentError, match="the warm-up sample has no event of a type the rules read"):
        eng.warm_up(quiet)
    before = eng.warm_up(ev.iloc[:200])
    assert eng.regather(quiet) is before and eng.shedder.stats is before
    assert eng.regather(ev.iloc[200:]) is not before


@pytest.mark.parametrize("bound", [0.0021, 0.0026, 0.01, 1.0])
def test_the_one_event_fast_path_keeps_only_what_the_batch_path_keeps(bound):
    """The gate publishes one event straight to the engine only when the batch path would keep
    it whatever its type (an idle engine, β·L_max against the costliest Z(T))."""
    ev = stream(200, 4)
    sh = fitted(bound)
    gate = sh.gate([cep_gpu.parse_rule(RULE)])
    # 2 ms per event: it fits 0.8 * 2.6 ms and more, not 0.8 * 2.1 ms (there the batch path decides)
    assert gate._fits_whole(1) == (bound >= 0.0026)
    if gate._fits_whole(1):
        for lo in range(0, len(ev)):
            assert sh.shed_batch(ev.iloc[lo:lo + 1]).all()
