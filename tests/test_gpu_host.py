"""The GPU kernels (cuda/) built for the host and run serially, through the GPU launcher.

docs/gpu.md ("What is proven where"): host-built kernels == CPU backend == reference matcher on
random rules and streams, and the launch path (atomic output index, overflow -> exact regrow ->
relaunch, out-of-memory -> batch split) runs against the host build through the same interface as
the CuPy launch.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest
from cep_gpu.kernels.gpu import DeviceMemoryError, gpu_available
from cep_gpu.kernels.host import HostRuntime, host_backend, host_combiner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import rules_and_streams

import cep_gpu
from cep_gpu.backends import get_backend
from cep_gpu.cdp import register_combiner
from cep_gpu.codegen import lower
from cep_gpu.codegen.cuda import generate
from cep_gpu.errors import BackendUnavailableError
from cep_gpu.events import EventTable, StringDictionary
from cep_gpu.reference import ReferenceBackend

HAVE_CPU = importlib.util.find_spec("cep_gpu.cdp") is not None

# First output buffer of one sequence and a tiny grid: every `each` step with more than one result
# overflows and relaunches, and the grid-stride loops run many rounds.
register_combiner("gpu-host-tiny", lambda: host_combiner(initial_capacity=1, block=4, max_blocks=2))


def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal detect outputs: rule, ts and ids exactly; attributes equal (floats to 1e-9, NaN = NaN)."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b), f"{len(a)} rows != {len(b)} rows"
    assert a["rule"].tolist() == b["rule"].tolist()
    assert a["ts"].tolist() == b["ts"].tolist()
    assert [tuple(x) for x in a["ids"].tolist()] == [tuple(x) for x in b["ids"].tolist()]
    for col in a.columns[3:]:
        x, y = a[col].to_numpy(), b[col].to_numpy()
        if x.dtype.kind == "f" and y.dtype.kind == "f":
            assert np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True), col
        else:
            assert pd.Series(x).equals(pd.Series(y)), col


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules_and_streams())
def test_host_kernels_equal_reference_and_cpu(case):
    text, events = case
    ref = cep_gpu.detect(events, text, backend="reference")
    same(cep_gpu.detect(events, text, backend="gpu-host-tiny"), ref)
    if HAVE_CPU:
        same(cep_gpu.detect(events, text, backend="cpu"), ref)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules_and_streams(syntax=("seq",), hierarchy=False, max_events=40))
def test_host_kernels_equal_reference_on_sequence_patterns(case):
    text, events = case
    same(cep_gpu.detect(events, text, backend="gpu-host"), cep_gpu.detect(events, text, backend="reference"))


# -- hand-worked cases ------------------------------------------------------------------------------

TOUCH = (
    "define Touch(painting: string) from Vibration(painting=$p and value>3.0) and "
    "{policy} PeopleNear(painting=$p) within 2 min. from Vibration where painting=Vibration.painting"
)
AIP_EVENTS = pd.DataFrame({
    "type": ["PeopleNear", "Vibration", "PeopleNear", "PeopleNear", "Vibration"],
    "ts": [1.0, 2.5, 3.5, 4.0, 4.5],
    "painting": ["B"] * 5,
    "value": [None, 1.0, None, None, 5.0],
})


@pytest.mark.parametrize("policy, expected", [("each", [(4, 2), (4, 3)]), ("last", [(4, 3)]), ("first", [(4, 2)])])
def test_chapter_aip_example(policy, expected):
    out = cep_gpu.detect(AIP_EVENTS, TOUCH.format(policy=policy), backend="gpu-host-tiny", time_unit="min")
    assert [tuple(i) for i in out["ids"].tolist()] == expected


def seq3_events(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "type": rng.choice(["A", "B", "C"], n),
        "ts": np.arange(n, dtype=np.int64),
        "k": rng.integers(0, 4, n),
        "v": rng.random(n),
    })


SEQ3 = "define Seq3 from C(k=$k) and {p} B(k=$k) within {w} ms from C and {p} A(k=$k) within {w} ms from B"


def _sorted(rows: np.ndarray) -> np.ndarray:
    return rows[np.lexsort(rows.T[::-1])] if len(rows) else rows


@pytest.mark.parametrize("policy", ["each", "last", "first"])
@pytest.mark.parametrize("use_index", [True, False])
def test_overflow_relaunch_gives_every_result(policy, use_index):
    events = seq3_events(400)
    table = EventTable.from_pandas(events, time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p=policy, w=40))
    backend = host_backend(initial_capacity=2, block=8, max_blocks=3)
    backend.use_index = use_index
    got = backend.match(rule, table)
    ref = ReferenceBackend().match(rule, table)
    assert len(got) == len(ref) > 100
    assert np.array_equal(_sorted(got.rows), _sorted(ref.rows))
    stats = backend.combiner.stats
    if policy == "each":
        assert stats.relaunches >= 1  # the first buffer was too small and grew to the exact count
    # grids were far smaller than the work, so the grid-stride loops took many rounds
    grids = next(iter(backend.combiner.runtime._modules.values())).grids
    assert all(g * b <= 24 for _, g, b in grids) and stats.launches >= 2


def test_each_output_is_in_cpu_order():
    """Sorted by the pair index on the host: (sequence, candidate), whatever the atomics did."""
    events = seq3_events(300, seed=4)
    table = EventTable.from_pandas(events, time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    got = host_backend(initial_capacity=1, block=3, max_blocks=5).match(rule, table)
    if HAVE_CPU:
        assert np.array_equal(got.rows, get_backend("cpu").match(rule, table).rows)
    # terminator-major, then B, then A in row order
    assert np.array_equal(got.rows, got.rows[np.lexsort((got.rows[:, 2], got.rows[:, 1], got.rows[:, 0]))])


@pytest.mark.parametrize("checked", [False, True])
def test_count_builds_no_sequences(checked):
    """``output="count"``: the last ``each`` step is counted on the device (with nothing left to
    check, as the sum of its ranges), so no output buffer grows and nothing is copied back."""
    events = seq3_events(400, seed=2)
    table = EventTable.from_pandas(events, time_unit="ms")
    text = SEQ3.format(p="each", w=40)
    if checked:  # a condition across events: the last step runs its checks in the kernel
        text = text.replace("A(k=$k)", "A(k=$k and v < $v)").replace("B(k=$k)", "B(k=$k and v=$v)")
    rule = cep_gpu.parse_rule(text)
    backend = host_backend(initial_capacity=1, block=8, max_blocks=3)
    want = len(ReferenceBackend().match(rule, table))
    assert want > 100
    assert backend.count(rule, table) == want
    out = backend.combiner._buffers["seqs"]  # (grown for the B step's sequences only)
    assert out.capacity < want * 3
    assert len(backend.match(rule, table)) == want and out.capacity >= want * 3


def test_out_of_memory_splits_the_batch_and_retries():
    events = seq3_events(300, seed=1)
    table = EventTable.from_pandas(events, time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    ref = ReferenceBackend().match(rule, table)
    whole = host_backend(initial_capacity=1)
    whole.match(rule, table)
    peak = whole.combiner.runtime.peak_bytes
    tight = host_backend(initial_capacity=1, memory_limit=peak * 2 // 3)
    got = tight.match(rule, table)
    assert tight.combiner.stats.splits >= 1
    assert np.array_equal(_sorted(got.rows), _sorted(ref.rows))


def test_out_of_memory_for_one_sequence_says_how_much():
    events = seq3_events(200, seed=2)
    table = EventTable.from_pandas(events, time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=50))
    backend = host_backend(memory_limit=20_000)
    with pytest.raises(DeviceMemoryError, match=r"single partial sequence .* asked for \d+ bytes"):
        backend.match(rule, table)


def test_aggregates_and_negations_on_the_device():
    rng = np.random.default_rng(3)
    n = 300
    events = pd.DataFrame({
        "type": rng.choice(["A", "B", "C", "D"], n),
        "ts": np.sort(rng.integers(0, 150, n)),
        "k": rng.integers(0, 3, n),
        "v": np.where(rng.random(n) < 0.1, np.nan, rng.random(n)),
    })
    text = """
define R(m: float, c: float)
from C(k=$k) as c0 and each B(k=$k) within 6 s from c0
 and not D(k=$k and v > 0.5) between c0 and B
 and m=Avg(A(k=$k) within 5 s from B).v > 0.3
 and c=Count(D() within 4 s from c0) >= 1
where m=m, c=c
"""
    same(cep_gpu.detect(events, text, backend="gpu-host-tiny"), cep_gpu.detect(events, text, backend="reference"))


def test_consuming_runs_terminator_by_terminator():
    events = pd.DataFrame({"type": ["A", "A", "B", "B", "A", "B"], "ts": [0, 1, 2, 3, 4, 5], "x": [1] * 6})
    text = "define R from B(x=$x) and each A(x=$x) within 10 s from B consuming A"
    out = cep_gpu.detect(events, text, backend="gpu-host-tiny")
    assert [tuple(i) for i in out["ids"].tolist()] == [(2, 0), (2, 1), (5, 4)]


# -- code generation safety and errors -----------------------------------------------------------------


def test_rule_text_never_reaches_the_kernel_source():
    evil = 'x"); system("rm -rf /"); //'
    rule = cep_gpu.parse_rule(
        "define R pattern SEQ(B b, A a) where (a.s = '" + evil + "' or a.x > b.x) and b.s = 'u' within 1 s"
    )
    spec = lower(rule)
    code = generate(spec, {"s": "string", "x": "int"})
    assert "system" not in code.source and "rm -rf" not in code.source
    assert "c.scal[" in code.source and evil in spec.layout.strings  # a dictionary code at run time
    events = pd.DataFrame({"type": ["B", "A", "A"], "ts": [0, 0.5, 0.7], "s": ["u", evil, "w"], "x": [5, 1, 2]})
    out = cep_gpu.detect(events, rule, backend="gpu-host")
    assert [tuple(i) for i in out["ids"].tolist()] == [(0, 1)]


def test_gpu_backend_names_what_is_missing():
    ok, why = gpu_available()
    if ok:
        assert get_backend("gpu").name == "gpu"
        return
    with pytest.raises(BackendUnavailableError, match="CuPy|driver|device"):
        get_backend("gpu")
    assert any(word in why for word in ("CuPy", "driver", "device"))


def test_host_runtime_needs_a_compiler(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(BackendUnavailableError, match="no-such-compiler-xyz"):
        HostRuntime()


# -- device data: table columns updated incrementally in streaming ----------------------------------------

_STREAM_BACKENDS = iter(range(1_000_000))


def _fresh_backend(**kwargs) -> str:
    """A new backend name (its own counters) over the host build, checking every device column."""
    from cep_gpu.backends import register

    name = f"gpu-host-stream-{next(_STREAM_BACKENDS)}"
    register(name, lambda: host_backend(check_columns=True, **kwargs))
    return name


def _publish_in_chunks(engine, events: pd.DataFrame, sizes=(1, 3, 7, 2, 1, 5)) -> tuple[list, list]:
    parts, buffered, k, i = [], [], 0, 0
    while k < len(events):
        n = sizes[i % len(sizes)]
        parts.append(engine.publish(events.iloc[k:k + n]))
        buffered.append(engine.stats()["buffered"])
        k, i = k + n, i + 1
    parts.append(engine.flush())
    return parts, buffered


def _joined(parts: list[pd.DataFrame]) -> pd.DataFrame:
    out = pd.concat([p for p in parts if len(p)], ignore_index=True)
    key = out["ids"].map(lambda ids: tuple(ids))
    order = sorted(range(len(out)), key=lambda i: (out["ts"].iloc[i], out["rule"].iloc[i], key.iloc[i]))
    return out.iloc[order].reset_index(drop=True)


def test_streaming_uploads_only_the_new_rows_of_each_column():
    events = seq3_events(900, seed=5)
    rule = SEQ3.format(p="each", w=40)
    name = _fresh_backend()
    eng = cep_gpu.Engine(rule, backend=name, time_unit="ms")
    parts, buffered = _publish_in_chunks(eng, events)
    stream = _joined(parts)
    batch = cep_gpu.detect(events, rule, backend="gpu-host", time_unit="ms")
    assert len(batch) > 500
    same(stream, batch)
    same(stream, cep_gpu.detect(events, rule, backend="reference", time_unit="ms"))
    st = get_backend(name).stats()
    # three columns on the device: ts (8 bytes a row), k's values (8) and validity (1)
    row_bytes = 17
    assert st["columns_on_device"] == 3
    assert st["column_appends"] >= 3 * 100 and st["column_full_uploads"] <= 6
    # what went into the columns grows with the events, not with the buffer at every publish
    assert st["column_bytes_uploaded"] <= row_bytes * len(events) * 1.2
    assert row_bytes * sum(buffered) > 10 * st["column_bytes_uploaded"]  # a whole-buffer upload would
    assert st["column_rows_reused"] > 10 * len(events)
    assert st["launches"] > 0 and st["device_memory_bytes"] >= st["column_memory_bytes"] > 0


_CHECKED = _fresh_backend()  # one backend for every example: streams follow one another on it


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(rules_and_streams(min_events=4), st.data())
def test_random_streams_equal_reference_with_checked_device_columns(case, data):
    """Random rules (hierarchies, negations, aggregates, consuming, trailing NOT) streamed in random
    chunks: equal to the reference, and every device column update equals its host array."""
    from test_engine import _rows

    text, events = case
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=8)))
    eng = cep_gpu.Engine(text, backend=_CHECKED)
    parts, prev = [], 0
    for c in cuts + [len(events)]:
        parts.append(eng.publish(events.iloc[prev:c]))
        prev = c
    parts.append(eng.flush())
    assert _rows(parts) == _rows(cep_gpu.detect(events, text, backend="reference"))


HIERARCHY = """
define P(k: int, v: float) from B(k=$k) as b and last A(k=$k) as a within 20 ms from b where k=b.k, v=a.v
define Q(m: float) from C(k=$k) as c and each P(k=$k) as p within 30 ms from c
 and not A(k=$k and v > 0.9) between p and c
 and m=Avg(B(k=$k) within 25 ms from c).v > 0.2
where m=m
"""


def test_streaming_with_composites_negations_and_aggregates_equals_batch():
    """Composite events re-enter the buffer before the newest rows (same ts, negative id): only
    the rows before them can be reused, which every column check verifies."""
    events = seq3_events(420, seed=6)
    name = _fresh_backend()
    eng = cep_gpu.Engine(HIERARCHY, backend=name, time_unit="ms")
    parts, _ = _publish_in_chunks(eng, events, sizes=(2, 5, 1, 9))
    stream = _joined(parts)
    ref = cep_gpu.detect(events, HIERARCHY, backend="reference", time_unit="ms")
    assert set(ref["rule"]) == {"P", "Q"}
    same(stream, ref)
    same(stream, cep_gpu.detect(events, HIERARCHY, backend="gpu-host", time_unit="ms"))
    st = get_backend(name).stats()
    assert st["column_appends"] > 0 and st["column_rows_reused"] > 0


def test_long_stream_keeps_device_columns_bounded():
    """Expired rows leave the device: column memory follows the buffer, not the stream."""
    rng = np.random.default_rng(8)
    n = 2400
    # a burst of 1200 events in 30 ms, then one event a ms: the buffer (20 ms of events) shrinks
    # from ~800 rows to ~20
    ts = np.concatenate([np.sort(rng.integers(0, 30, 1200)), 30 + np.arange(n - 1200)])
    events = pd.DataFrame({"type": rng.choice(["A", "B", "C"], n), "ts": ts, "k": rng.integers(0, 4, n)})
    rule = SEQ3.format(p="last", w=10)
    name = _fresh_backend()
    backend = get_backend(name)
    eng = cep_gpu.Engine(rule, backend=name, time_unit="ms")
    memory, buffered, parts = [], [], []
    for k in range(0, n, 6):
        parts.append(eng.publish(events.iloc[k:k + 6]))
        memory.append(backend.stats()["column_memory_bytes"])
        buffered.append(eng.stats()["buffered"])
    parts.append(eng.flush())
    same(_joined(parts), cep_gpu.detect(events, rule, backend="reference", time_unit="ms"))
    peak = max(memory)
    assert max(buffered[:200]) > 500 and max(buffered[-100:]) < 40
    # at the peak the columns held the burst: ~17 bytes a row, at most 8 times the live rows
    assert 17 * 500 < peak <= 8 * 17 * max(buffered)
    # after the burst expired the columns shrank to (at most 8 times) what is live
    assert max(memory[-100:]) <= max(8 * 17 * max(buffered[-100:]), 3 * 8 * 256 + 256) < peak / 2
    st = backend.stats()
    assert st["column_compactions"] > 0
    assert st["column_bytes_uploaded"] <= 17 * n * 1.5


# -- device data: reuse only where the row lineage proves it ----------------------------------------------


_STRINGS = StringDictionary()


def _table(events: pd.DataFrame) -> EventTable:
    return EventTable.from_pandas(events, time_unit="ms", strings=_STRINGS)


def _part(ev, a: int, b: int) -> EventTable:
    """Rows ``a:b`` of ``ev`` as a table of their own, ids kept as in the whole stream."""
    return _table(ev.iloc[a:b].assign(id=np.arange(a, b)))


def _extended(ev, a: int, b: int) -> EventTable:
    """Rows ``:a`` of ``ev`` concatenated with rows ``a:b``: a table with a row lineage."""
    return _table(ev.iloc[:a]).concat(_part(ev, a, b))


def _match_both(backend, rule, table):
    got = backend.match(rule, table)
    ref = ReferenceBackend().match(rule, table)
    assert np.array_equal(_sorted(got.rows), _sorted(ref.rows))
    return got


def test_unrelated_and_sibling_tables_are_uploaded_in_full():
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    backend = host_backend(check_columns=True)
    ev = seq3_events(400, seed=9)
    base = _extended(ev, 200, 300)
    _match_both(backend, rule, base)
    st = backend.stats()
    assert st["column_full_uploads"] == 3 and st["column_appends"] == 0
    # two tables that both extend `base`, with different new rows (same timestamps, other keys)
    tail = ev.iloc[300:].assign(id=np.arange(300, 400))
    left = base.concat(_table(tail))
    right = base.concat(_table(tail.assign(k=(tail["k"] + 1) % 4, type=tail["type"].iloc[::-1].to_numpy())))
    _match_both(backend, rule, left)
    st = backend.stats()
    assert st["column_appends"] == 3 and st["column_rows_reused"] == 3 * 300
    # right's rows after `base` are not left's: only base's 300 rows may stay on the device
    _match_both(backend, rule, right)
    st2 = backend.stats()
    assert st2["column_full_uploads"] == 3  # still: right and left both descend from base
    assert st2["column_rows_reused"] - st["column_rows_reused"] == 3 * 300
    # an unrelated table of the same shape and timestamps: nothing is reused
    other = _table(ev.assign(k=(ev["k"] + 2) % 4).iloc[:200]).concat(
        _table(ev.iloc[200:].assign(id=np.arange(200, 400), k=0)))
    before = backend.stats()
    _match_both(backend, rule, other)
    after = backend.stats()
    assert after["column_full_uploads"] == before["column_full_uploads"] + 3
    assert after["column_rows_reused"] == before["column_rows_reused"]


def test_expired_prefix_interleaved_rows_and_changed_kinds():
    from cep_gpu.events.lineage import row_tag

    rule = cep_gpu.parse_rule(SEQ3.format(p="first", w=30))
    backend = host_backend(check_columns=True)
    ev = seq3_events(500, seed=10)
    table = _extended(ev, 100, 250)
    _match_both(backend, rule, table)
    # the engine's expiry: a contiguous slice keeps the lineage; the device drops the prefix
    table = table.take(np.arange(60, len(table)))
    assert row_tag(table).base == 60
    table = table.concat(_part(ev, 250, 320))
    before = backend.stats()
    _match_both(backend, rule, table)
    after = backend.stats()
    assert after["column_rows_reused"] - before["column_rows_reused"] == 3 * 190
    assert after["column_bytes_uploaded"] - before["column_bytes_uploaded"] == 17 * 70
    # rows merged in before the newest ones: only the rows before the first of them stay
    late = ev.iloc[320:330].assign(id=np.arange(320, 330), ts=np.arange(300, 310))
    table = table.concat(_table(late))
    kept = int(np.flatnonzero(table.ids >= 320)[0])  # the first merged-in row
    before = backend.stats()
    _match_both(backend, rule, table)
    after = backend.stats()
    assert after["column_rows_reused"] - before["column_rows_reused"] == 3 * kept
    # a non-contiguous take starts no lineage: copied in full
    holes = table.take(np.flatnonzero(np.arange(len(table)) % 7 != 3))
    assert row_tag(holes) is None and holes.lineage is None
    _match_both(backend, rule, holes)
    # k becomes a float column (int64 -> float64 on the device): its values are copied in full
    floats = table.concat(_table(ev.iloc[330:400].assign(id=np.arange(330, 400), k=lambda d: d["k"] + 0.0)))
    assert row_tag(floats, "values:k").ancestors == ()
    before = backend.stats()
    _match_both(backend, rule, floats)
    after = backend.stats()
    assert after["column_full_uploads"] - before["column_full_uploads"] == 1  # k's values only


def test_release_frees_the_device_columns():
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    backend = host_backend(check_columns=True)
    ev = seq3_events(300, seed=11)
    table = _extended(ev, 150, 300)
    _match_both(backend, rule, table)
    assert backend.stats()["column_memory_bytes"] > 0
    backend.release()
    assert backend.stats()["column_memory_bytes"] == 0
    assert backend.stats()["device_memory_bytes"] == 0
    _match_both(backend, rule, table)  # allocated again as needed
