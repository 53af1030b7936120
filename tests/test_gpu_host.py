"""The GPU kernels (cuda/) built for the host and run serially, through the GPU launcher.

DESIGN.md section 5, points 2 and 3: host-built kernels == CPU backend == reference matcher on
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
from strategies import rules_and_streams

import cep_gpu
from cep_gpu.backends import get_backend
from cep_gpu.cdp import register_combiner
from cep_gpu.codegen import lower
from cep_gpu.codegen.cuda import generate
from cep_gpu.errors import BackendUnavailableError
from cep_gpu.events import EventTable
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
