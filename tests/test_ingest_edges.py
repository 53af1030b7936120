"""Ingestion edge cases (issue 11): untyped (all-null, empty, absent) columns, timestamp ranges,
duplicate columns, empty files, unusual ``type`` / ``id`` / attribute values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import id_tuples

import cep_gpu
from cep_gpu.io import read_table

TOUCH = """
define Touch(room: string, painting: string)
from   Vibration(painting=$p and value>3.0) and
       each PeopleNear(painting=$p) within 2 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting
"""

EVENTS = pd.DataFrame({
    "type": ["PeopleNear", "Vibration"],
    "ts": [1.0, 2.0],
    "painting": ["M", "M"],
    "room": [None, None],
    "value": [None, 4.2],
})


def _check_touch(out: pd.DataFrame, n: int) -> None:
    assert id_tuples(out) == [(1, 0)][:n]
    assert list(out.columns) == ["rule", "ts", "ids", "room", "painting"]
    assert out["room"].isna().all()
    assert out["room"].dtype == object  # the declared string, not the float pandas reads
    assert out["painting"].tolist() == ["M"][:n]


# -- item 2: an all-null column has no type of its own: it takes the declared one --------------


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(EVENTS, id="all-None"),
        pytest.param(EVENTS.assign(room=[np.nan, np.nan]), id="all-NaN"),
        pytest.param(EVENTS.drop(columns="room"), id="absent"),
        pytest.param(EVENTS.assign(room=pd.Series([None, None], dtype="string")), id="all-NA-string-dtype"),
    ],
)
def test_untyped_output_attribute_takes_declared_type(events, backend):
    out = cep_gpu.detect(events, cep_gpu.parse_rule(TOUCH), backend=backend)
    _check_touch(out, 1)


def test_empty_frame_gives_empty_output_of_declared_types():
    empty = EVENTS.iloc[:0]
    out = cep_gpu.detect(empty, cep_gpu.parse_rule(TOUCH), backend="cpu")
    _check_touch(out, 0)
    arrow = cep_gpu.detect(empty, cep_gpu.parse_rule(TOUCH), backend="cpu", output="arrow")
    assert arrow.schema.field("room").type == pa.string()


def test_csv_with_blank_column(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("type,ts,painting,room,value\nPeopleNear,1.0,M,,\nVibration,2.0,M,,4.2\n")
    out = cep_gpu.detect(read_table(path), cep_gpu.parse_rule(TOUCH), backend="cpu")
    _check_touch(out, 1)


def test_engine_publish_of_events_without_the_attribute():
    # the docs/api.md streaming example: the first event has no `room`, and neither has the second
    engine = cep_gpu.Engine([cep_gpu.parse_rule(TOUCH)], backend="cpu")
    first = engine.publish({"type": "PeopleNear", "ts": 1.0, "painting": "Mona"})
    assert len(first) == 0
    out = engine.publish({"type": "Vibration", "ts": 2.0, "painting": "Mona", "value": 4.0})
    assert id_tuples(out) == [(1, 0)]
    assert out["room"].isna().all()


def test_typed_column_of_another_kind_still_rejected():
    # values present in the input do have a kind: a number where a string is declared is an error
    events = EVENTS.assign(room=[1.5, 2.5])
    with pytest.raises(cep_gpu.RuleError, match="'room' is declared string but its value is float"):
        cep_gpu.detect(events, cep_gpu.parse_rule(TOUCH), backend="cpu")
