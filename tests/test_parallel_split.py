"""The parallel splitter (cep_gpu.parallel.runtime.SplitJob): a chunk routed by several threads
gives every queue exactly the batches, in exactly the order, of one splitter; and the engine with
several splitters finds exactly detect's composite events."""

from __future__ import annotations

import itertools
import threading
import time
from unittest import mock

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu.parallel import HybridEngine, runtime
from cep_gpu.parallel.compile import compile_rules
from cep_gpu.parallel.runtime import Layout, Runtime, SplitJob, Store

RULES = [
    "define Q pattern SEQ(A a, B b, A c, C d) where a.x = d.x and b.x != 2 within 4 s",
    "define P pattern SEQ(B b, C c) where c.y > 0.3 within 2 s",
    "define One pattern SEQ(C c) where c.x = 1",
]


def _events(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": np.sort(rng.integers(0, n, n)) * 0.1,
                         "x": rng.integers(0, 3, n), "y": rng.random(n)})


def _runtime(splitters: int, batch: int, split_min: int | None = None):
    from cep_gpu.parallel import _compat

    ev = _events(600, 3)
    strings = _compat.StringDictionary()
    table = _compat.ingest(ev, "s", strings)
    specs = compile_rules(cep_gpu.parse_rules("\n".join(RULES)), table.time.scale_ns())
    store = Store(specs[0].attributes)
    rows = store.append(table)
    groups = [[(p,) for p in range(1, s.length)] for s in specs]
    n_agents = sum(len(g) for g in groups)
    rt = Runtime(specs, store, Layout(groups, [0] * n_agents, 1), [np.empty(0)] * len(specs),
                 dynamic=False, threads=False, batch_size=batch, splitters=splitters, split_min=split_min)
    return rt, rows


def _queues(rt: Runtime) -> list:
    """Every queue's entries (key, rows) in order, and the single-position rules' results."""
    out = []
    for a in rt.agents:
        out.append([(k, b.tolist()) for k, b in a.match_q])
        for p in sorted(a.event_q):
            out.append([(k, b.tolist()) for k, b in a.event_q[p]])
    out.append([r.tolist() for r in rt.take_results()])
    return out


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_slices_in_any_order_give_one_splitters_batches(batch):
    serial, rows = _runtime(1, batch)
    serial.feed(rows)
    want = _queues(serial)
    assert serial.split_slices == 0
    for order in itertools.islice(itertools.permutations(range(5)), 0, 120, 7):
        rt, rows = _runtime(5, batch)
        job = SplitJob(rows, 5)
        rt._pending += 5  # noqa: SLF001 - as feed counts the split tasks
        for j in order:  # slices finish in any order; they are handed over in slice order
            rt._run_split((job, j))  # noqa: SLF001
        assert rt.split_slices == 5 and not job.done and not job.carry
        assert _queues(rt) == want, order


def test_feed_cuts_slices_of_at_least_split_min():
    rt, rows = _runtime(8, 16, split_min=100)
    rt.feed(rows)  # 600 events: 6 slices of 100 (fewer than the 8 splitters)
    assert rt.split_slices == 6
    rt2, rows = _runtime(8, 16)
    rt2.feed(rows)  # below SPLIT_MIN (2048): one splitter routes the chunk alone
    assert rt2.split_slices == 0


@pytest.mark.parametrize("units,splitters,dynamic", [(2, 2, True), (3, 4, False), (4, 3, True), (1, 3, True)])
def test_engine_with_parallel_splitters_equals_detect(units, splitters, dynamic):
    ev = _events(900, units)
    rules = "\n".join(RULES)
    expected = cep_gpu.detect(ev, rules, backend="cpu")
    assert set(expected["rule"]) == {"Q", "P", "One"}
    with mock.patch.object(runtime, "SPLIT_MIN", 16):
        eng = HybridEngine(rules, units=units, splitters=splitters, dynamic=dynamic, batch_size=5,
                           chunk_size=300, jitter=0.5, seed=units)
        cut = int(np.searchsorted(ev["ts"], ev["ts"][500]))  # publish boundaries between timestamps
        got = pd.concat([eng.publish(ev.iloc[:cut]), eng.publish(ev.iloc[cut:])], ignore_index=True)
        eng.close()
    assert eng.stats()["split_slices"] > 0  # the chunks really were cut
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True))


def test_bad_splitters():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(cep_gpu.errors.ArgumentError, match="splitters"):
            HybridEngine(RULES[0], splitters=bad)


def test_idle_units_sleep_until_a_push_wakes_them():
    """While one agent works (0.3 s) the other units have nothing: they sleep on their own
    condition until a push concerns them, instead of polling (a poll every 0.5 ms cost CPU time)."""
    from cep_gpu.parallel import agent

    ev = _events(600, 3)
    rules = RULES[0]
    orig = agent.Stage.process
    slow = {"left": 1}

    def process(self, *a, **k):
        if slow["left"] and threading.current_thread().name.startswith("cep-unit"):
            slow["left"] -= 1
            time.sleep(0.3)  # releases the GIL, as the kernels do
        return orig(self, *a, **k)

    expected = cep_gpu.detect(ev, rules, backend="cpu")
    with mock.patch.object(agent.Stage, "process", process):
        eng = HybridEngine(rules, units=3, dynamic=False, fusion=False, batch_size=8)
        got = eng.publish(ev)
        eng.close()
    pd.testing.assert_frame_equal(got, expected)
    # polling every 0.5 ms would wake the two idle units about 1200 times in 0.3 s
    assert eng.stats()["idle_wakeups"] < 300
