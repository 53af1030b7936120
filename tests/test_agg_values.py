"""Value types and exactness of aggregates (docs/language.md, "Aggregate values").

Aggregates (TESLA ``Count``/``Sum``/``Avg``/``Min``/``Max`` and the Kleene set aggregates
``count(b)``/``sum(b.v)``/...) are float64 on every backend, batch and streaming: an undeclared
attribute assigned from one is a float column, a declared ``int`` one an int64 column; ``Sum``
adds in span order (``(ts, id)``) everywhere, so even where float64 rounds (integers beyond 2^53)
every backend gives the very same value. These tests pin that rule with hand-worked large
integers, empty windows and nulls, and compare every backend with ``backend="reference"`` on
random streams of large integers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from cep_gpu.kernels.host import HostRuntime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import _publish_as, _record_rows
from test_stream_fast import OUTPUTS, _dicts

import cep_gpu
from cep_gpu import Engine
from cep_gpu.errors import BackendUnavailableError

try:  # the CUDA kernels built for the host (tests/test_gpu_host.py): needs a C++ compiler
    HostRuntime()
    HAVE_HOST_CXX = True
except BackendUnavailableError:  # no compiler here: the host builds are left out
    HAVE_HOST_CXX = False

#: every backend (serial and threaded host builds of the CUDA kernels where a compiler is found)
BACKENDS = ["reference", "cpu", "aip", "auto"] + (
    ["gpu-host", "gpu-host-threads"] if HAVE_HOST_CXX else []
)

TWO53 = 2**53
TWO60 = 2**60
TWO62 = 2**62
I64_MAX = 2**63 - 1
I64_MIN = -(2**63)

TESLA = (
    "define R from B() as b and s = Sum(A() within 10 s from b).v and n = Count(A() within 10 s from b)"
    " and lo = Min(A() within 10 s from b).v and hi = Max(A() within 10 s from b).v"
    " and m = Avg(A() within 10 s from b).v where s = s, n = n, lo = lo, hi = hi, m = m"
)
KLEENE = (
    "define K pattern SEQ(C a, KL(A b), B c) within 10 s select greedy"
    " return s := sum(b.v), n := count(b), lo := min(b.v), hi := max(b.v), m := avg(b.v)"
)


def _events(vs: list, leading_c: bool = False) -> pd.DataFrame:
    """A run of A events with int64 values ``vs`` (None = null) at ts 1, 2, ..., then a B."""
    types = (["C"] if leading_c else []) + ["A"] * len(vs) + ["B"]
    vals = ([0] if leading_c else []) + list(vs) + [0]
    return pd.DataFrame(
        {
            "type": types,
            "ts": np.arange(len(types), dtype=np.int64),
            "v": pd.array(vals, dtype="Int64"),
        }
    )


def _attrs(out: pd.DataFrame, names=("s", "n", "lo", "hi", "m")) -> list[tuple]:
    """The aggregate columns, row by row, NaN as None (exact floats, no tolerance)."""
    return [
        tuple(None if np.isnan(x) else float(x) for x in row) for row in out[list(names)].to_numpy()
    ]


def _stream(text: str, events: pd.DataFrame, sizes=(1,), output: str = "pandas") -> list[dict]:
    """The composite events of ``Engine(text, backend="cpu")`` fed in chunks of ``sizes``."""
    eng = Engine(text, backend="cpu")
    parts, k, i = [], 0, 0
    while k < len(events):
        n = sizes[i % len(sizes)]
        parts += _publish_as(eng, events.iloc[k : k + n], "pandas", output)
        k, i = k + n, i + 1
    parts.append(eng.flush(output=output))
    return _record_rows(_dicts(eng, parts))


# -- hand-worked cases ---------------------------------------------------------------------------


@pytest.mark.parametrize(("rule", "leading_c"), [(TESLA, False), (KLEENE, True)])
@pytest.mark.parametrize(
    ("vs", "expected"),
    [
        # Sum and Count are float64 (2.0, not 2); 2^60 + 3 rounds to 2^60, as float64 adds
        ([TWO60, 3], (float(TWO60), 2.0, 3.0, float(TWO60), float(TWO60) / 2)),
        # the order of addition is the span's (ts, id) order on every backend: 1 + 1 + 2^53 is
        # exact, 2^53 + 1 + 1 rounds twice (to even) back to 2^53
        ([1, 1, TWO53], (float(TWO53 + 2), 3.0, 1.0, float(TWO53), float(TWO53 + 2) / 3)),
        ([TWO53, 1, 1], (float(TWO53), 3.0, 1.0, float(TWO53), float(TWO53) / 3)),
        # Min/Max of ints beyond 2^53 are the nearest float64: 2^53 + 1 is 2^53
        (
            [TWO53 + 1, TWO53 - 1],
            (float(2 * TWO53), 2.0, float(TWO53 - 1), float(TWO53), float(TWO53)),
        ),
        # int64 extremes do not wrap: 2^62 + 2^62 is 2^63 (a float), not -2^63
        ([TWO62, TWO62], (float(2 * TWO62), 2.0, float(TWO62), float(TWO62), float(TWO62))),
        ([I64_MIN, I64_MAX], (0.0, 2.0, float(I64_MIN), float(I64_MAX), 0.0)),
        # nulls are skipped (Count counts every event, Kleene count every element)
        ([None, 5, None], (5.0, None, 5.0, 5.0, 5.0)),
    ],
)
def test_aggregates_are_float64_and_equal_on_every_backend(rule, leading_c, vs, expected):
    events = _events(vs, leading_c)
    n = float(len(vs))  # Count: every A of the span, its value null or not
    want = [tuple(n if (e is None and j == 1) else e for j, e in enumerate(expected))]
    for backend in BACKENDS:
        out = cep_gpu.detect(events, rule, backend=backend)
        assert _attrs(out) == want, backend
        assert all(out[c].dtype == np.float64 for c in ("s", "n", "lo", "hi", "m")), backend


def test_empty_window_sum_and_count_are_zero_the_others_null():
    events = pd.DataFrame({"type": ["A", "B"], "ts": [0, 20], "v": pd.array([7, 0], dtype="Int64")})
    only_nulls = _events([None, None])
    for backend in BACKENDS:
        assert _attrs(cep_gpu.detect(events, TESLA, backend=backend)) == [
            (0.0, 0.0, None, None, None)
        ], backend
        # values all null: nothing to add (Sum 0, Avg/Min/Max null), but Count counts the events
        assert _attrs(cep_gpu.detect(only_nulls, TESLA, backend=backend)) == [
            (0.0, 2.0, None, None, None)
        ], backend
        # a condition on a null aggregate is false; Sum > -1 over nothing holds (0 > -1)
        cond = "define R from B() as b and m = Max(A() within 10 s from b).v > -1"
        assert len(cep_gpu.detect(events, cond, backend=backend)) == 0, backend
        cond = "define R from B() as b and s = Sum(A() within 10 s from b).v > -1"
        assert len(cep_gpu.detect(events, cond, backend=backend)) == 1, backend


@pytest.mark.parametrize(("rule", "leading_c"), [(TESLA, False), (KLEENE, True)])
@pytest.mark.parametrize(
    ("vs", "expected"),
    [
        # inf + -inf is NaN: a null Sum and Avg (Min/Max keep the infinities)
        ([np.inf, -np.inf], (None, 2.0, -np.inf, np.inf, None)),
        # Avg is Sum / Count in float64: two 1e308 add up to inf, and so average to inf
        ([1e308, 1e308], (np.inf, 2.0, 1e308, 1e308, np.inf)),
        ([-np.inf, np.nan], (-np.inf, 2.0, -np.inf, -np.inf, -np.inf)),
    ],
)
def test_float_aggregates_at_the_edges_of_float64(rule, leading_c, vs, expected):
    types = (["C"] if leading_c else []) + ["A"] * len(vs) + ["B"]
    events = pd.DataFrame(
        {
            "type": types,
            "ts": np.arange(len(types), dtype=np.int64),
            "v": ([0.0] if leading_c else []) + vs + [0.0],
        }
    )
    for backend in BACKENDS:
        assert _attrs(cep_gpu.detect(events, rule, backend=backend)) == [expected], backend
    assert [r[3][-5:] for r in _stream(rule, events, (1,))] == [expected]


def test_kleene_set_of_null_values():
    events = _events([None, None], leading_c=True)
    for backend in BACKENDS:
        assert _attrs(cep_gpu.detect(events, KLEENE, backend=backend)) == [
            (0.0, 2.0, None, None, None)
        ], backend


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize(("rule", "leading_c"), [(TESLA, False), (KLEENE, True)])
def test_streaming_gives_the_same_floats_in_every_output_form(rule, leading_c, output):
    events = _events([TWO53, 1, 1, None, TWO60, 3], leading_c)
    batch = _record_rows([cep_gpu.detect(events, rule, backend="reference")])
    assert batch
    for sizes in ((1,), (2, 3), (len(events),)):
        assert _stream(rule, events, sizes, output) == batch
    # Count and Sum are floats in every form too (2.0 == 2 in Python: compare the types; the
    # list is a Kleene rule's id_counts)
    for _rule, _ts, _ids, attrs in _stream(rule, events, (2,), output):
        assert {type(v) for v in attrs if v is not None and not isinstance(v, list)} <= {
            float,
            np.float64,
        }, attrs


def test_undeclared_count_is_a_float_column_and_declared_int_an_int_column():
    """`n = Count(...)` in an undeclared attribute is a float64 column (2.0); declared `int` it is
    int64 (2), in pandas and Arrow alike; arithmetic on an aggregate is float (no wrap-around)."""
    events = _events([TWO62, TWO62])
    text = (
        "define R(k: int, big: int) from B() as b and n = Count(A() within 10 s from b)"
        " and s = Sum(A() within 10 s from b).v"
        " where n = n, k = n, twice = n * 4611686018427387904, s = s, big = s - 1, half = s / 2"
    )
    for backend in BACKENDS:
        # (a float of an `int` attribute beyond int64 is null, with a warning: docs/language.md,
        # "Header"; the column is the nullable Int64)
        with pytest.warns(cep_gpu.CepWarning, match="'big'"):
            out = cep_gpu.detect(events, text, backend=backend)
        assert out["big"].isna().tolist() == [True], backend
        assert str(out["k"].dtype) == "Int64" and out["k"].tolist() == [2], backend
        assert out["n"].dtype == np.float64 and out["n"].tolist() == [2.0], backend
        # 2 * 2^62 as a float is 2^63; as int64 it would wrap to -2^63
        assert out["twice"].tolist() == [float(2**63)], backend
        assert out["s"].tolist() == [float(2**63)], backend
        assert out["half"].tolist() == [float(2**62)], backend
        with pytest.warns(cep_gpu.CepWarning, match="'big'"):
            arrow = cep_gpu.detect(events, text, backend=backend, output="arrow")
        assert arrow.schema.field("n").type == pa.float64()
        assert arrow.schema.field("k").type == pa.int64()


# -- random streams of large integers --------------------------------------------------------------

_BIG = [0, 1, -1, 3, TWO53 - 1, TWO53, TWO53 + 1, TWO60, TWO62, -TWO62, I64_MAX, I64_MIN, None]

#: each aggregate function over int and float values, as conditions and as outputs, TESLA and Kleene
_RULES = [
    "define R from C(k=$k) as c and s = Sum(A(k=$k) within 3 s from c).v and n = Count(A() within 2 s from c)"
    " where s = s, n = n, t = s + n",
    "define R(o: int) from C() as c and last B() as b within 3 s from c"
    " and lo = Min(A() between b and c).v and hi = Max(A(k = c.k) within 3 s from b).v where o = hi, p = lo",
    "define R from C() as c and m = Avg(A() within 4 s from c).v and f = Sum(A() within 4 s from c).y"
    " where m = m, f = f",
    "define R from C() as c and s = Sum(A() within 4 s from c).v > 9007199254740992 where s = s",
    "define R from C() as c and n = Count(A(v > 0) within 4 s from c) >= 2 where n = n",
    "define K pattern SEQ(C a, KL(A b), B c) within 4 s select greedy"
    " return s := sum(b.v), n := count(b), lo := min(b.v), hi := max(b.v), m := avg(b.v)",
    "define K pattern SEQ(KL(A b), B c) where sum(b.v) > 1152921504606846976 within 3 s"
    " return s := sum(b.v), f := sum(b.y)",
]


@st.composite
def _big_streams(draw) -> pd.DataFrame:
    n = draw(st.integers(1, 12))
    ts = sorted(draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)))
    return pd.DataFrame(
        {
            "type": draw(st.lists(st.sampled_from(["A", "A", "B", "C"]), min_size=n, max_size=n)),
            "ts": np.array(ts, dtype=np.int64),
            "k": pd.array(
                draw(st.lists(st.sampled_from([0, 1, None]), min_size=n, max_size=n)), dtype="Int64"
            ),
            "v": pd.array(
                draw(st.lists(st.sampled_from(_BIG), min_size=n, max_size=n)), dtype="Int64"
            ),
            "y": np.array(
                draw(
                    st.lists(
                        st.sampled_from([1e16, 1.0, -1e16, 0.5, np.nan, np.inf, -np.inf, 1e308]),
                        min_size=n,
                        max_size=n,
                    )
                )
            ),
        }
    )


def _exact(out: pd.DataFrame) -> list[tuple]:
    cols = [c for c in out.columns if c not in ("ids", "id_counts")]
    return [
        (tuple(ids),) + tuple(None if pd.isna(v) else v for v in row)
        for ids, row in zip(out["ids"].tolist(), out[cols].itertuples(index=False, name=None))
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(_RULES), _big_streams(), st.data())
def test_every_backend_equals_reference_exactly_on_large_integers(text, events, data):
    """Exactly equal (no tolerance): every backend adds in the same order, so float64 rounding
    beyond 2^53 gives the same value everywhere; streaming in random chunks gives batch's rows."""
    ref = cep_gpu.detect(events, text, backend="reference")
    for backend in BACKENDS[1:]:
        out = cep_gpu.detect(events, text, backend=backend)
        assert _exact(out) == _exact(ref), backend
        assert list(out.dtypes) == list(ref.dtypes), backend
    sizes = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    assert _stream(text, events, sizes, data.draw(st.sampled_from(OUTPUTS))) == _record_rows([ref])
