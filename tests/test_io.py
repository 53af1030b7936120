"""``cep_gpu.io``: writing composite events."""

from __future__ import annotations

import pandas as pd

import cep_gpu
from cep_gpu.io import write_output


def test_a_pandas_output_written_to_parquet_reads_back_with_pandas(tmp_path):
    events = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [0.5, 1.0, 1.5, 2.0]})
    out = cep_gpu.detect(events, "define Q pattern SEQ(A a, B b) within 1 s", backend="reference")
    path = tmp_path / "out.parquet"
    write_output(out, path)
    # was: TypeError: data type 'list<item: int64>[pyarrow]' not understood (pandas' metadata)
    back = pd.read_parquet(path)
    assert back["rule"].tolist() == ["Q", "Q"]
    assert back["ts"].tolist() == [1.0, 2.0]
    assert [list(i) for i in back["ids"]] == [[0, 1], [2, 3]]
    write_output(out, tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text().splitlines()[1] == '"Q",1,"0 1"'
