"""The output's ``ts`` has the input's dtype (DESIGN.md §4: "its timestamp, same dtype as the
input's"), on every path: ``detect`` (every backend, pandas and Arrow output, empty results),
``Engine.publish``/``flush`` (every output form, several publishes), the CLI; docs/api.md,
"The dtype of ts".

Inside, timestamps are int64 nanoseconds; ``TimeFormat.from_ns``/``to_arrow``/``to_numpy`` turn
them back at the output boundary. A composite event's ts is one of the input's, so the values
come back exactly (float32 included)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep_gpu
from cep_gpu import Engine, EventError

RULE = "define Out(v: int) from B() and each A() within 5 s from B where v = 1"
TRAIL = "define S pattern SEQ(A a, B b, NOT(C z)) within 3 s return v := 1"

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float32", "float64"]
DATETIMES = ["datetime64[s]", "datetime64[ms]", "datetime64[us]", "datetime64[ns]"]
ZONED = ["datetime64[s, Europe/Paris]", "datetime64[ms, UTC]", "datetime64[ns, America/New_York]"]
DTYPES = INTS + FLOATS + DATETIMES + ZONED
BACKENDS = ["reference", "cpu", "aip"]


def ts_column(dtype: str, seconds) -> pd.Series:
    """Timestamps ``seconds`` (numbers, in s) as a column of ``dtype``."""
    seconds = np.asarray(seconds)
    if dtype.startswith("datetime64"):
        unit, _, tz = dtype[len("datetime64["):-1].partition(", ")
        ns = np.round(seconds.astype(np.float64) * 1e9).astype(np.int64)
        col = pd.Series(ns.astype("datetime64[ns]")).astype(f"datetime64[{unit}]")
        return col.dt.tz_localize("UTC").dt.tz_convert(tz) if tz else col
    return pd.Series(seconds.astype(dtype))


def events_of(dtype: str, seconds, types) -> pd.DataFrame:
    return pd.DataFrame({"type": list(types), "ts": ts_column(dtype, seconds),
                         "id": np.arange(len(types), dtype=np.int64)})


def stream_of(dtype: str, seconds, types) -> pd.DataFrame:
    """:func:`events_of` without ids (the engine numbers a stream's events)."""
    return events_of(dtype, seconds, types).drop(columns="id")


def sample(dtype: str) -> pd.DataFrame:
    """A and B events; float32 times that a float64 holds only approximately (1.1, ...)."""
    seconds = np.array([1, 2, 3.5, 4, 7.25, 8.1, 20, 21]) if dtype.startswith(("float", "datetime")) \
        else np.array([1, 2, 3, 4, 7, 8, 20, 21])
    return events_of(dtype, seconds, "ABABABAB")


def assert_ts_of_terminators(out: pd.DataFrame, events: pd.DataFrame) -> None:
    """``out["ts"]`` has the dtype of ``events["ts"]`` and each value is its terminator's ts."""
    assert out["ts"].dtype == events["ts"].dtype
    want = [events["ts"].iloc[ids[0]] for ids in out["ids"].tolist()]
    assert out["ts"].tolist() == want


# -- detect --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_detect_keeps_the_input_dtype(dtype, backend):
    events = sample(dtype)
    out = cep_gpu.detect(events, RULE, backend=backend)
    assert len(out) > 3
    assert_ts_of_terminators(out, events)
    table = cep_gpu.detect(events, RULE, backend=backend, output="arrow")
    assert table.schema.field("ts").type == pa.Array.from_pandas(events["ts"]).type
    assert table.column("ts").to_pylist() == pa.Array.from_pandas(out["ts"]).to_pylist()


@pytest.mark.parametrize("dtype", ["int16", "uint32", "float32", "datetime64[ms]", "datetime64[us, Europe/Paris]"])
def test_gpu_backend_keeps_the_input_dtype(monkeypatch, dtype):
    """``backend="gpu"``'s launch path (CupyRuntime) on the fake CuPy of tests/fake_cupy.py."""
    import fake_cupy
    from test_gpu_cupy_fake import fake_gpu_backend

    fake_cupy.install(monkeypatch)
    events = sample(dtype)
    name = fake_gpu_backend()
    out = cep_gpu.detect(events, RULE, backend=name)
    assert len(out) > 3
    assert_ts_of_terminators(out, events)
    table = cep_gpu.detect(events, RULE, backend=name, output="arrow")
    assert table.schema.field("ts").type == pa.Array.from_pandas(events["ts"]).type
    eng = Engine(RULE, backend=name)
    assert_ts_of_terminators(pd.concat([eng.publish(events.iloc[:4]), eng.publish(events.iloc[4:])],
                                       ignore_index=True), events)


@pytest.mark.parametrize("output", ["pandas", "arrow"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_results_keep_the_input_dtype(dtype, output):
    events = sample(dtype)
    for frame in (events[events["type"] == "A"], events.iloc[:0]):  # no terminator; no events
        out = cep_gpu.detect(frame, RULE, backend="cpu", output=output)
        if output == "arrow":
            assert out.num_rows == 0 and out.schema.field("ts").type == pa.Array.from_pandas(events["ts"]).type
        else:
            assert len(out) == 0 and out["ts"].dtype == events["ts"].dtype


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(dtype=st.sampled_from(INTS + FLOATS), data=st.data())
def test_generated_timestamps_come_back_exactly(dtype, data):
    """Any values of the dtype (within what int64 ns hold in ``time_unit="ns"``)."""
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        width = 32 if dtype == "float32" else 64
        values = st.floats(-(2.0**60), 2.0**60, width=width, allow_nan=False).map(round)
    else:
        info = np.iinfo(np_dtype)
        values = st.integers(max(int(info.min), -(2**60)), min(int(info.max), 2**60))
    seconds = np.array(sorted(data.draw(st.lists(values, min_size=2, max_size=12))), dtype=dtype)
    types = data.draw(st.lists(st.sampled_from("AB"), min_size=len(seconds), max_size=len(seconds)))
    events = pd.DataFrame({"type": types, "ts": seconds, "id": np.arange(len(seconds))})
    rule = "define Out from B() and each A() within 1000000 h from B"
    out = cep_gpu.detect(events, rule, backend="cpu", time_unit="ns")
    assert_ts_of_terminators(out, events)
    assert cep_gpu.detect(events, rule, backend="reference", time_unit="ns")["ts"].tolist() == out["ts"].tolist()


def test_uint64_above_the_int64_maximum_is_refused_naming_ts():
    events = pd.DataFrame({"type": ["A", "B"], "ts": np.array([1, 2**63 + 5], np.uint64)})
    with pytest.raises(EventError, match="column 'ts' at row 1 holds 9223372036854775813, outside"):
        cep_gpu.detect(events, RULE, time_unit="ns")
    with pytest.raises(EventError, match="column 'ts' at row 1 holds 9223372036854775813, outside"):
        Engine(RULE, time_unit="ns").publish(events)


def test_arrow_input_keeps_its_type():
    """An Arrow table's ``ts`` type is the output's (through ``Engine.publish``, which takes Arrow;
    a date column is read as datetimes at midnight, in seconds)."""
    rule = RULE.replace("5 s", "1000000 s")
    for typ, values in ((pa.int32(), [1, 2, 3, 4]), (pa.float32(), [1.1, 2.2, 3.3, 4.4]),
                        (pa.timestamp("ms", tz="Asia/Tokyo"), [1000, 2000, 3000, 4000]),
                        (pa.date32(), [1, 2, 3, 4])):
        table = pa.table({"type": ["A", "B", "A", "B"], "ts": pa.array(values, typ)})
        out = Engine(rule, backend="cpu").publish(table, output="arrow")
        want = pa.timestamp("s") if pa.types.is_date32(typ) else typ
        assert out.schema.field("ts").type == want
        ts = table.column("ts").cast(want).to_pylist()
        assert out.column("ts").to_pylist() == [ts[1], ts[3], ts[3]]


# -- Engine --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_engine_every_output_form_keeps_the_input_dtype(dtype, backend):
    events = sample(dtype)
    half = len(events) // 2
    forms = {}
    for output in ("pandas", "arrow", "columns", "records", "tuples"):
        eng = Engine(RULE, backend=backend)
        parts = [eng.publish(events.iloc[:half], output=output), eng.publish(events.iloc[half:], output=output)]
        forms[output] = parts
    frames = [p for p in forms["pandas"] if len(p)]
    assert frames
    for part in forms["pandas"]:
        assert part["ts"].dtype == events["ts"].dtype
    assert_ts_of_terminators(pd.concat(frames, ignore_index=True), events)
    want = pa.Array.from_pandas(events["ts"]).type
    for part in forms["arrow"]:
        assert part.schema.field("ts").type == want
    for part in forms["columns"]:
        # NumPy has no zones: datetimes are naive UTC, in the input's unit
        np_dtype = events["ts"].dtype
        np_dtype = np.dtype(f"datetime64[{np_dtype.unit}]") if isinstance(np_dtype, pd.DatetimeTZDtype) else np_dtype
        assert part["ts"].dtype == np_dtype
    records = [r["ts"] for part in forms["records"] for r in part]
    assert records == pd.concat(frames)["ts"].tolist()
    assert [r[1] for part in forms["tuples"] for r in part] == records


@pytest.mark.parametrize("dtype", ["int16", "uint32", "float32", "datetime64[ms]", "datetime64[s, Europe/Paris]"])
def test_flush_and_empty_publishes_keep_the_input_dtype(dtype):
    events = events_of(dtype, [1, 2, 2.5] if "int" not in dtype else [1, 2, 3], "ABA")
    eng = Engine(TRAIL, backend="cpu")
    first = eng.publish(events)
    assert len(first) == 0 and first["ts"].dtype == events["ts"].dtype  # held: trailing NOT
    assert eng.publish(events.iloc[:0])["ts"].dtype == events["ts"].dtype
    out = eng.flush()
    assert len(out) == 1 and out["ts"].dtype == events["ts"].dtype
    assert out["ts"].tolist() == [events["ts"].iloc[1]]
    eng = Engine(TRAIL, backend="cpu")
    eng.publish(events)
    assert eng.flush(output="arrow").schema.field("ts").type == pa.Array.from_pandas(events["ts"]).type


def test_the_first_publish_fixes_the_stream_dtype():
    eng = Engine(RULE, backend="cpu")
    eng.publish(stream_of("int32", [1], "A"))
    out = eng.publish({"type": "B", "ts": 2})  # a Python int (int64): held as int32
    assert out["ts"].dtype == np.int32 and out["ts"].tolist() == [2]
    out = eng.publish({"type": np.array(["A", "B"]), "ts": np.array([3, 4], np.int64)})  # columns
    assert out["ts"].dtype == np.int32 and out["ts"].tolist() == [4, 4]
    out = eng.publish(stream_of("uint8", [5], "B"))
    assert out["ts"].dtype == np.int32 and out["ts"].tolist() == [5, 5]


@pytest.mark.parametrize("first, later, message", [
    ("int32", {"type": "B", "ts": 2**33}, "column 'ts' holds 8589934592 \\(int64\\), which the stream's ts dtype int32"),
    ("int32", {"type": np.array(["B"]), "ts": np.array([2**33])}, "stream's ts dtype int32 cannot hold"),
    ("uint16", {"type": "B", "ts": -1}, "stream's ts dtype uint16 cannot hold"),
    ("float32", {"type": "B", "ts": 0.1 + 5}, "column 'ts' holds 5.1 \\(float64\\), which the stream's ts dtype float32"),
    ("float32", pd.DataFrame({"type": ["B"], "ts": np.array([2**25 + 1])}), "stream's ts dtype float32"),
    ("datetime64[s]", pd.DataFrame({"type": ["B"], "ts": pd.to_datetime(["1970-01-01 00:00:05.5"])}),
     "stream's ts dtype datetime64\\[s\\] cannot hold"),
])
def test_a_later_publish_the_stream_dtype_cannot_hold_is_refused(first, later, message):
    eng = Engine(RULE, backend="cpu")
    eng.publish(stream_of(first, [1], "A"))
    with pytest.raises(EventError, match=message):
        eng.publish(later)
    assert eng.stats()["events"] == 1  # the refused publish left no trace


def test_float_timestamps_in_an_integer_stream_make_it_float64():
    """(As before: a fraction of a unit cannot be held by an integer; docs/api.md.)"""
    eng = Engine(RULE, backend="cpu")
    eng.publish(stream_of("int16", [1], "A"))
    out = eng.publish(stream_of("float32", [2.5], "B"))
    assert out["ts"].dtype == np.float64 and out["ts"].tolist() == [2.5]
    out = eng.publish({"type": "B", "ts": 3})
    assert out["ts"].dtype == np.float64 and out["ts"].tolist() == [3.0]


EPOCH_NS = 1_700_000_000_000_000_001  # an int64 nanosecond epoch: beyond 2**53, no float64 equals it


def test_float_timestamps_cannot_widen_a_stream_that_holds_an_int64_epoch_float64_rounds():
    """A held match (trailing NOT) at an int64 ns epoch, then a float publish: widening the
    stream to float64 would report the match's ts rounded (1.7e18, not ...003). Refused,
    naming the column and the value; the stream stays int64 and reports it exactly."""
    eng = Engine(TRAIL, backend="cpu", time_unit="ns")
    held = eng.publish(pd.DataFrame({"type": ["A", "B"], "ts": np.array([EPOCH_NS, EPOCH_NS + 2])}))
    assert len(held) == 0
    later = pd.DataFrame({"type": ["D"], "ts": np.array([float(EPOCH_NS + 5 * 10**9)])})
    with pytest.raises(EventError, match=r"column 'ts' holds 1.7000000050*e\+18 \(float64\).*"
                                         rf"{EPOCH_NS + 2} \(int64\).*cannot hold that timestamp exactly"):
        eng.publish(later)
    out = eng.publish(pd.DataFrame({"type": ["D"], "ts": np.array([EPOCH_NS + 5 * 10**9])}))
    assert out["ts"].dtype == np.int64 and out["ts"].tolist() == [EPOCH_NS + 2]


def test_float_timestamps_cannot_widen_a_stream_whose_late_buffer_holds_an_int64_epoch():
    eng = Engine(RULE, backend="cpu", time_unit="ns", allowed_lateness=10**9)
    eng.publish(pd.DataFrame({"type": ["A", "B"], "ts": np.array([EPOCH_NS, EPOCH_NS + 2])}))  # buffered
    with pytest.raises(EventError, match=rf"{EPOCH_NS} \(int64\) may still be reported"):
        eng.publish(pd.DataFrame({"type": ["A"], "ts": np.array([float(EPOCH_NS + 4)])}))
    out = eng.flush()
    assert out["ts"].dtype == np.int64 and out["ts"].tolist() == [EPOCH_NS + 2]


def test_float_timestamps_still_widen_a_stream_whose_held_timestamps_float64_holds():
    eng = Engine(TRAIL, backend="cpu")
    assert len(eng.publish(stream_of("int64", [1, 2], "AB"))) == 0  # held
    out = eng.publish(stream_of("float64", [9.5], "D"))
    assert out["ts"].dtype == np.float64 and out["ts"].tolist() == [2.0]


def test_a_refused_publish_does_not_widen_the_stream_dtype():
    """A float publish refused (a repeated id, a late event) left the stream float64: later
    outputs of an int64 stream came back as float64."""
    eng = Engine(RULE, backend="cpu")
    eng.publish(pd.DataFrame({"type": ["A"], "ts": [5], "id": [0]}))
    with pytest.raises(EventError, match="duplicate event id 0"):
        eng.publish(pd.DataFrame({"type": ["B"], "ts": [6.5], "id": [0]}))
    with pytest.raises(cep_gpu.LateEventError, match=r"published \(5\)"):
        eng.publish(pd.DataFrame({"type": ["B"], "ts": [1.5], "id": [7]}))
    out = eng.publish(pd.DataFrame({"type": ["B"], "ts": [7], "id": [1]}))
    assert out["ts"].dtype == np.int64 and out["ts"].tolist() == [7]


def test_a_refused_hybrid_engine_publish_does_not_widen_the_stream_dtype():
    from cep_gpu.parallel import HybridEngine

    eng = HybridEngine(RULE, units=1)
    try:
        eng.publish(stream_of("int64", [5], "A"))
        with pytest.raises(cep_gpu.LateEventError):
            eng.publish(stream_of("float64", [1.5], "B"))
        out = eng.publish(stream_of("int64", [7], "B"))
        assert out["ts"].dtype == np.int64 and out["ts"].tolist() == [7]
    finally:
        eng.close()


def test_datetimes_of_a_coarser_unit_or_another_zone_join_the_first_format():
    eng = Engine(RULE, backend="cpu")
    eng.publish(stream_of("datetime64[ms, Europe/Paris]", [1.5], "A"))
    later = stream_of("datetime64[ns, UTC]", [2.25], "B")
    out = eng.publish(later)
    assert str(out["ts"].dtype) == "datetime64[ms, Europe/Paris]"
    assert out["ts"].tolist() == [later["ts"].iloc[0]]  # the same instant


def test_hybrid_engine_keeps_the_first_publish_dtype():
    """The parallel engine (HYPERSONIC) fixes the dtype as Engine does: an int8 stream given
    int64 values beyond int8 was cast back, wrapped around (-106 for 150)."""
    from cep_gpu.parallel import HybridEngine

    eng = HybridEngine(RULE, units=1)
    try:
        first = stream_of("int8", [1, 2], "AB")
        out = eng.publish(first)
        assert out["ts"].dtype == np.int8 and out["ts"].tolist() == [2]
        with pytest.raises(EventError, match="column 'ts' holds 150 \\(int64\\), which the stream's ts dtype int8"):
            eng.publish(stream_of("int64", [127, 150], "AB"))
        out = eng.publish(stream_of("int64", [100, 101], "AB"))
        assert out["ts"].dtype == np.int8 and out["ts"].tolist() == [101]
    finally:
        eng.close()


# -- CLI -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("typ", [pa.int32(), pa.uint16(), pa.float32(), pa.timestamp("ms"), pa.timestamp("us", tz="UTC")])
def test_cli_run_output_file_keeps_the_parquet_type(tmp_path, capsys, typ):
    values = [1, 2, 3, 4] if not pa.types.is_timestamp(typ) else [10**6 * (k + 1) for k in range(4)]
    if pa.types.is_timestamp(typ) and typ.unit == "ms":
        values = [1000 * (k + 1) for k in range(4)]
    pq.write_table(pa.table({"type": ["A", "B", "A", "B"], "ts": pa.array(values, typ)}), tmp_path / "ev.parquet")
    (tmp_path / "r.cep").write_text(RULE)
    rc, _, err = run_cli(capsys, "run", tmp_path / "r.cep", tmp_path / "ev.parquet", "--backend", "cpu",
                         "--out", tmp_path / "out.parquet")
    assert rc == 0, err
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.schema.field("ts").type == typ
    ts = pa.array(values, typ).to_pylist()
    assert out.column("ts").to_pylist() == [ts[1], ts[3], ts[3]]
