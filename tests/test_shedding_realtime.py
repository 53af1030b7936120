"""DARLING in real time with an injected clock (issue 15; docs/shedding.md, resolution 17).

Real time measures the engine (``cep_gpu.shedding.engine._cpu``, this thread's CPU time). Here
that clock is a counter that only the engine's ``publish`` advances, by each event's ``cost``
column (and a full garbage collection by ``PAUSE``), so a real-time run is deterministic and its
processing times are chosen by the test: during the peak every event costs twice its type's mean
but never more than the warm-up's longest, which a mean-based estimate of the queued work
(n·z̄, Sec. 4.2.1) does not see.
"""

from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pytest

from cep_gpu import Engine
from cep_gpu.shedding import Shedder, SheddingEngine
from cep_gpu.shedding import engine as shedding_engine

RULE = "define Q pattern SEQ(A a, B b, C c) where a.price < b.price and b.price < c.price within 3 s"
BOUND = 0.05  # L_max, seconds of the injected clock
PAUSE = 0.2  # what a full garbage collection costs on the injected clock


class _Clock:
    """Seconds of a core that only the engine's work advances."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _events(n: int, seed: int, peak: slice | None = None) -> pd.DataFrame:
    """A, B, C, X events 0.1 s apart; ``cost``: 1 ms, 1 in 10 of them 5 ms (mean 1.4 ms, the
    99th percentile 5 ms); inside ``peak`` every event costs 3 ms."""
    rng = np.random.default_rng(seed)
    ev = pd.DataFrame({"type": np.array(list("ABCX"))[rng.integers(0, 4, n)],
                       "ts": np.arange(n) * 0.1, "price": rng.normal(100, 20, n).round(1)})
    cost = np.where(np.arange(n) % 10 == 3, 5e-3, 1e-3)
    if peak is not None:
        cost[peak] = 3e-3
    return ev.assign(cost=cost)


def _peak() -> tuple[pd.DataFrame, np.ndarray]:
    """600 events; 300 of them (200-499) at 200x the rate, 0.15 s of arrivals and 0.9 s of
    work, each costing 3 ms; and their arrival times."""
    n = 600
    peak = slice(200, 500)
    gap = np.full(n, 0.1)
    gap[peak] /= 200
    return _events(n, seed=1, peak=peak), np.cumsum(gap)


@pytest.fixture
def clocked(monkeypatch):
    clock = _Clock()

    class ClockedEngine(Engine):
        def publish(self, events, *args, **kwargs):
            out = super().publish(events, *args, **kwargs)
            clock.t += events["cost"]  # one event (a record) per publish in real time
            if events.get("collect"):
                gc.collect()  # a full collection inside this publish
            return out

    def pause(phase, info):  # registered first: the engine's tracker reads the clock after it
        if phase == "stop" and info["generation"] == 2:
            clock.t += PAUSE

    monkeypatch.setattr(shedding_engine, "_cpu", clock)
    monkeypatch.setattr(shedding_engine, "Engine", ClockedEngine)
    gc.callbacks.insert(0, pause)
    yield clock
    gc.callbacks.remove(pause)


@pytest.mark.parametrize("policy", ["darling", "random"])
def test_costs_above_their_means_do_not_break_the_bound(clocked, policy):
    """A peak whose events cost twice their measured mean: the guard's estimate of the queued
    work is scaled by the measured ratio of core time to estimate, and an event whose measured
    wait leaves less than its type's processing tail is not processed, so no composite event is
    late. (Before resolution 17 the mean-based estimate let the queue grow to about twice
    β·L_max: DARLING violated the bound here, 45 composite events, and random 11.)"""
    ev, arr = _peak()
    eng = SheddingEngine(RULE, Shedder(BOUND, policy=policy, seed=0), mode="real")
    eng.warm_up(_events(400, seed=2))
    assert eng.shedder.stats.costs["A"] == pytest.approx(1.4e-3, rel=0.2)  # the measured mean
    eng.run(ev, arr)
    s = eng.stats()
    assert s["composites"] > 0 and s["dropped"] > 0
    assert s["violations"] == 0, s
    assert s["latency_s"]["max"] <= BOUND
    assert s["deadline_drops"] > 0  # the check at service start caught what the estimate missed


def test_none_violates_and_the_clock_is_deterministic(clocked):
    """The same peak without shedding is late (the setting is an overload), and two runs on the
    injected clock are identical."""
    ev, arr = _peak()
    none = SheddingEngine(RULE, Shedder(BOUND, policy="none"), mode="real")
    none.warm_up(_events(400, seed=2))
    none.run(ev, arr)
    assert none.stats()["violations"] > 0
    runs = []
    for _ in range(2):
        eng = SheddingEngine(RULE, Shedder(BOUND, policy="darling", seed=3), mode="real")
        eng.warm_up(_events(400, seed=2))
        runs.append(eng.run(ev, arr))
    pd.testing.assert_frame_equal(runs[0], runs[1])


def test_a_full_collection_is_no_events_cost_but_stays_on_the_clock(clocked):
    """A full garbage collection (here 0.2 s, four times L_max) inside one warm-up publish does
    not enter Z(T) or the processing tail; inside the run it delays the queue (the run reports
    it) and the arrivals that would then be late are dropped, not processed late."""
    warm = _events(400, seed=2)
    flag = np.zeros(len(warm), bool)
    flag[101] = True
    eng = SheddingEngine(RULE, Shedder(BOUND, policy="darling", seed=0), mode="real")
    eng.warm_up(warm.assign(collect=flag))
    t = warm["type"].iloc[101]
    assert eng.shedder.stats.costs[t] < 2e-3 and eng._tail[t] <= 5e-3 + 1e-12
    n = 600
    ev = _events(n, seed=1)
    collect = np.zeros(n, bool)
    collect[300] = True
    gap = np.full(n, 0.1)
    gap[250:350] /= 50  # a peak around the pause
    eng.run(ev.assign(collect=collect), np.cumsum(gap))
    s = eng.stats()
    assert s["full_collections"]["on_clock"] >= 1 and s["full_collections"]["longest_s"] >= PAUSE
    assert s["violations"] == 0 and s["composites"] > 0
    assert s["dropped"] > 0


def test_the_processing_tail_is_the_longest_publish_so_far_within_the_margin(clocked):
    """tail(T) (step 3 of *Dropping*): the warm-up's longest publish of T, raised by longer ones
    in the run, at most (1 - β)·L_max; a type the warm-up did not see gets the largest."""
    eng = SheddingEngine(RULE, Shedder(BOUND, beta=0.8, policy="darling"), mode="real")
    eng.warm_up(_events(400, seed=2))
    names = ["A", "B", "C", "X", "Y"]
    warm = eng._tails(names, np.zeros(5))
    assert np.allclose(warm, 5e-3)  # every type has 5 ms publishes in its warm-up sample
    longer = eng._tails(names, np.array([0.0, 0.0, 7e-3, 0.0, 0.0]))
    assert longer[2] == pytest.approx(7e-3) and np.allclose(np.delete(longer, 2), 5e-3)
    capped = eng._tails(names, np.array([0.0, 0.0, 1.0, 0.0, 0.0]))
    assert capped[2] == pytest.approx(0.2 * BOUND)


@pytest.mark.parametrize("mode", ["real", "virtual"])
def test_real_time_runs_freeze_the_heap_they_start_with(mode):
    """In real time the objects alive before the run are frozen out of the collector while it
    runs (a full collection on the clock scans only the run's own objects; resolution 25), and
    unfrozen after it, also when the run fails; virtual time leaves the collector alone."""
    seen = []

    def watch(recent):
        seen.append(gc.get_freeze_count())
        return False

    warm = _events(200, seed=2).drop(columns="cost")
    eng = SheddingEngine(RULE, Shedder(BOUND, policy="darling", seed=0), mode=mode,
                         drift_check=watch, drift_every=50)
    eng.warm_up(warm)
    eng.run(_events(300, seed=1).drop(columns="cost"), np.arange(300) * 0.1)
    assert seen and (min(seen) > 0 if mode == "real" else max(seen) == 0)
    assert gc.get_freeze_count() == 0

    def fail(recent):
        raise RuntimeError("drift check failed")

    eng = SheddingEngine(RULE, Shedder(BOUND, policy="darling", seed=0), mode=mode,
                         drift_check=fail, drift_every=50)
    eng.warm_up(warm)
    with pytest.raises(RuntimeError, match="drift check failed"):
        eng.run(_events(300, seed=1).drop(columns="cost"), np.arange(300) * 0.1)
    assert gc.get_freeze_count() == 0
