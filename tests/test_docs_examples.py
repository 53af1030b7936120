"""Every example in the user docs runs (issue 11, item 2).

The ```python blocks of README.md and docs/*.md run in order, one namespace per file (a block may
use what an earlier block of its file defined), in a temporary directory that holds
``examples/museum.tesla`` and an ``events.parquet`` of museum events. A line
``<!-- docs-test: KIND -->`` right before a block says what it needs:

- ``spark``: a local Spark session, given to the block as ``spark``; run where PySpark and Java
  are installed, skipped (with that reason) elsewhere;
- ``cluster``: a Spark cluster (RAPIDS jars, a ``spark://`` master, a live stream source); never
  run by the tests, and the skip says so.

Every ```tesla and ```seq block must parse as rules.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shutil
from pathlib import Path

import pytest

import cep_gpu

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_BLOCK = re.compile(
    r"(?:<!--\s*docs-test:\s*(?P<kind>[\w-]+)\s*-->\s*\n)?^```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^```",
    re.S | re.M,
)
KINDS = ("spark", "cluster")


def blocks(path: Path, langs: tuple[str, ...]) -> list[tuple[int, str, str | None]]:
    """(line, source, kind) of each fenced block of ``path`` in one of ``langs``."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        if m.group("lang") in langs:
            line = text.count("\n", 0, m.start("body"))  # the fence line, 1-based
            out.append((line, m.group("body"), m.group("kind")))
    return out


def _has_spark() -> bool:
    return importlib.util.find_spec("pyspark") is not None and shutil.which("java") is not None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A directory with what the examples read: examples/museum.tesla and events.parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cep_gpu.museum import generate_museum

    d = tmp_path_factory.mktemp("docs")
    (d / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "museum.tesla", d / "examples" / "museum.tesla")
    events = generate_museum(2_000, seed=1)
    # microsecond timestamps: what Spark reads from Parquet
    pq.write_table(pa.Table.from_pandas(events, preserve_index=False), d / "events.parquet", coerce_timestamps="us", allow_truncated_timestamps=True)
    return d


def _python_files() -> list:
    params = []
    for path in DOCS:
        found = blocks(path, ("python",))
        if found:
            marks = [pytest.mark.spark] if any(kind == "spark" for _, _, kind in found) else []
            params.append(pytest.param(path, found, id=str(path.relative_to(ROOT)), marks=marks))
    return params


def test_the_docs_have_python_examples():
    names = {p.id for p in _python_files()}
    assert {"README.md", "docs/api.md", "docs/language.md", "docs/spark.md"} <= names


def test_every_marker_names_a_known_kind():
    for path in DOCS:
        for m in re.finditer(r"<!--\s*docs-test:\s*([\w-]+)\s*-->", path.read_text(encoding="utf-8")):
            assert m.group(1) in KINDS, f"{path.name}: unknown docs-test kind {m.group(1)!r}"


@pytest.mark.parametrize(("path", "found"), _python_files())
def test_python_examples_run(path, found, workdir, tmp_path, monkeypatch):
    # a fresh directory per docs file (examples write their outputs), with the shared inputs
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "museum.tesla").symlink_to(workdir / "examples" / "museum.tesla")
    (tmp_path / "events.parquet").symlink_to(workdir / "events.parquet")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    skipped = []
    for line, source, kind in found:
        where = f"{path.relative_to(ROOT)}:{line}"
        if kind == "cluster":
            continue  # test_cluster_examples_compile: compiled, and skipped with the reason
        if kind == "spark":
            if not _has_spark():
                skipped.append(f"{where} needs PySpark and Java")
                continue
            if "spark" not in namespace:
                from conftest_spark import make_session

                namespace["spark"] = make_session()
                _spark_cwd(namespace["spark"], tmp_path, monkeypatch)
        code = compile(source, where, "exec")
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            try:
                exec(code, namespace)
            except Exception as exc:  # the block and its output say which example broke
                pytest.fail(f"docs example {where} failed: {type(exc).__name__}: {exc}\n{source}")
        _check_output(path, line, printed.getvalue())
    if skipped:
        # every block that can run here ran; say which could not, and why
        pytest.skip("; ".join(skipped))


def _cluster_blocks() -> list:
    params = []
    for path in DOCS:
        for line, source, kind in blocks(path, ("python",)):
            if kind == "cluster":
                params.append(pytest.param(path, line, source, id=f"{path.relative_to(ROOT)}:{line}"))
    return params


@pytest.mark.parametrize(("path", "line", "source"), _cluster_blocks())
def test_cluster_examples_compile(path, line, source):
    compile(source, f"{path.name}:{line}", "exec")  # at least valid Python
    pytest.skip(f"{path.relative_to(ROOT)}:{line} needs a Spark cluster (RAPIDS jars, a spark:// master, a stream source)")


def _spark_cwd(spark, path: Path, monkeypatch) -> None:
    """Resolve Spark's relative paths against ``path`` (the JVM keeps the directory it started in)."""
    jvm = spark.sparkContext._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    before = fs.getWorkingDirectory()
    fs.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(path.as_uri()))
    _RESTORE.append(lambda: fs.setWorkingDirectory(before))


_RESTORE: list = []


@pytest.fixture(autouse=True)
def _restore_spark_cwd():
    yield
    while _RESTORE:
        _RESTORE.pop()()


def _check_output(path: Path, line: int, printed: str) -> None:
    """Where a block shows its output as ``# `` comments, the printed text must match it."""
    text = path.read_text(encoding="utf-8").splitlines()
    shown = []
    i = line  # first line of the block body (0-based index of the line after the fence)
    while i < len(text) and not text[i].startswith("```"):
        if text[i].startswith("# ") and shown is not None:
            shown.append(text[i][2:])
        i += 1
    lines = [s.rstrip() for s in printed.splitlines()]
    for want in shown:
        if want.strip() and not want.lstrip().startswith(("minutes", "Figure")) and _is_table_row(want):
            assert want.rstrip() in lines, f"{path.name}:{line}: printed output lacks {want!r}:\n{printed}"


def _is_table_row(comment: str) -> bool:
    # a printed DataFrame row or header: starts with spaces or an index number
    return bool(re.match(r"^\s+\S|^\d+\s", comment))


def _rule_blocks() -> list:
    params = []
    for path in DOCS:
        for line, source, _ in blocks(path, ("tesla", "seq")):
            params.append(pytest.param(source, id=f"{path.relative_to(ROOT)}:{line}"))
    return params


@pytest.mark.parametrize("source", _rule_blocks())
def test_rule_examples_parse(source):
    rules = cep_gpu.parse_rules(source)
    assert rules and all(r.name for r in rules)
