"""The ``cep-gpu`` command line.

    cep-gpu run RULES EVENTS [--backend auto] [--out FILE] [--time-unit s] [--max-batch-latency S]
                 [--type-column NAME] [--ts-column NAME] [--id-column NAME]
    cep-gpu explain RULES [EVENTS] [--backend auto] [--time-unit s] [--type-column NAME] ...
    cep-gpu bench WORKLOAD ...      (see ``cep-gpu bench --help``)
    cep-gpu calibrate ...
    cep-gpu spark RULES EVENTS --master URL --out DIR

Exit status: 0 done; 1 an error while running (a file, a rule, the events); 2 a bad argument,
reported on one line as argparse reports its own (``PROG: error: argument OPTION: MESSAGE``).
Every subcommand checks its arguments with the helpers here: argparse types (:func:`at_least`,
:func:`number`) while parsing, :class:`UsageError` (or :func:`argument`, :func:`writable` for an
output path) after it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from .errors import ArgumentError, CepError, CepWarning, UsageError

BACKENDS = ["auto", "cpu", "gpu", "aip", "reference"]
PROGRESS_THRESHOLD = 1_000_000


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cep-gpu`` script; returns the exit status."""
    parser = build_parser()
    return run_command(parser, parser.parse_args(argv))


def run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the parsed subcommand; errors are one line on stderr and an exit status (see above)."""
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with _one_line_warnings(getattr(args, "prog", parser.prog)):
            return int(args.func(args) or 0)
    except UsageError as err:
        print(f"{getattr(args, 'prog', parser.prog)}: error: {err}", file=sys.stderr)
        return 2
    except (CepError, OSError) as err:
        print(f"cep-gpu: error: {err}", file=sys.stderr)
        return 1


@contextmanager
def _one_line_warnings(prog: str) -> Iterator[None]:
    """Inside: a :class:`~cep_gpu.errors.CepWarning` is one line on stderr, ``PROG: warning:
    MESSAGE``, as errors are (not Python's ``file:line: CepWarning:`` and the source line, which
    point into cep-gpu's code, not at the user's input). Other warnings keep Python's format."""
    import warnings

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CepWarning):
            print(f"{prog}: warning: {message}", file=sys.stderr if file is None else file)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


@contextmanager
def argument(option: str) -> Iterator[None]:
    """Inside: an :class:`ArgumentError` (a library's check of the value given to ``option``)
    becomes a :class:`UsageError` naming ``option``."""
    try:
        yield
    except UsageError:
        raise
    except ArgumentError as err:
        message = str(err)
        param = option.lstrip("-").replace("-", "_") + ": "  # the library's name for it, said once
        raise UsageError(option, message.removeprefix(param)) from None


def set_command(parser: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Run ``func`` for ``parser``'s subcommand; its :class:`UsageError` names the subcommand."""
    parser.set_defaults(func=func, prog=parser.prog)


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def number(check: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse type: a number that ``check`` accepts (``expected`` says which ones)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not check(value):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
        return value

    return parse


def time_unit(text: str) -> str:
    """An argparse type: a unit of numeric timestamps (``--time-unit``), checked while parsing:
    a typo was found only after the whole events file was read."""
    from .events.values import UNIT_NS

    if text not in UNIT_NS:
        units = ", ".join(sorted(UNIT_NS))
        raise argparse.ArgumentTypeError(f"unknown unit {text!r}; use one of {units}")
    return text


def nonempty_path(text: str) -> str:
    """An argparse type: a path that is not empty (``--out ''`` was taken as no ``--out``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    return text


def column_name(text: str) -> str:
    """An argparse type: the name of a column (``--type-column ''`` named none)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a column name, got {text!r}")
    return text


#: what each engine column holds, for the options' help
_COLUMN_HELP = {"type": "event type names", "ts": "timestamps", "id": "event ids"}


def add_column_options(parser: argparse.ArgumentParser, files: str = "the event file") -> None:
    """Add ``--type-column``, ``--ts-column`` and ``--id-column`` to a subcommand that reads
    event files (``files``: which ones, for the help): the columns of the user's file read as
    ``type``, ``ts`` and ``id``. :func:`event_columns` gives them to ``cep_gpu.io.read_table``,
    which renames on read; the output keeps the engine's columns (``rule``, ``ts``, ``ids``)."""
    from .io import COLUMN_OPTIONS

    for target, option in COLUMN_OPTIONS.items():
        parser.add_argument(option, type=column_name, default=None, metavar="NAME",
                            help=f"the column of {files} holding the {_COLUMN_HELP[target]} "
                            f"(default: {target})")


def event_columns(args: argparse.Namespace) -> dict[str, str]:
    """The column mapping of :func:`add_column_options`' options as given (``{engine name: file
    column}``; an option not given is not in it), for ``cep_gpu.io.read_table(path, columns)``."""
    from .io import COLUMN_OPTIONS

    out = {}
    for target, option in COLUMN_OPTIONS.items():
        value = getattr(args, option.lstrip("-").replace("-", "_"), None)
        if value is not None:
            out[target] = value
    return out


def writable(option: str, path: str | Path, *, folder: bool = False, of: str | Path | None = None) -> Path:
    """``path``, the value of ``option``, once it is known that it can be written; a
    :class:`UsageError` naming ``option`` otherwise. For the output of a subcommand, checked
    before any work, so that a typo in a folder name does not cost a whole run.

    A file (``folder=False``): not a folder, in a folder that exists and may be written (or an
    existing file that may be written). A folder (``folder=True``, made with its parents by the
    subcommand): not a file, and the nearest folder that exists above it may be written (``of``:
    the file to be written in it, which a failed try to make a file there names)."""
    p = Path(path)
    if folder:
        if p.exists() and not p.is_dir():
            raise UsageError(option, f"{path} is a file, not a folder")
        above = p
        while not above.exists() and above != above.parent:
            above = above.parent
        if not above.is_dir():
            raise UsageError(option, f"cannot make the folder {path}: {above} is a file")
        if not os.access(above, os.W_OK | os.X_OK):
            raise UsageError(option, f"cannot write to {path}: {above} is not writable")
        _try_create(option, path if of is None else of, above)
        return p
    if p.is_dir():
        raise UsageError(option, f"{path} is a folder: give a file name")
    parent = p.parent
    if not parent.exists():
        raise UsageError(option, f"cannot write {path}: the folder {parent} does not exist")
    if not parent.is_dir():
        raise UsageError(option, f"cannot write {path}: {parent} is not a folder")
    if p.exists() and not os.access(p, os.W_OK):
        raise UsageError(option, f"cannot write {path}: the file is not writable")
    if not p.exists():
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UsageError(option, f"cannot write {path}: the folder {parent} is not writable")
        _try_create(option, path, parent)
    return p


def _try_create(option: str, path: str | Path, folder: Path) -> None:
    """Create a file in ``folder`` and remove it; a :class:`UsageError` naming ``option`` and
    ``path`` when that fails. ``os.access`` says yes to root for every folder, even ``/proc``
    (where no file can be made), and cannot know a file system that refuses new files:
    ``calibrate --out /proc/x.json`` ran the whole calibration, then ended in a bare
    ``[Errno 2] No such file or directory``."""
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=".cep-gpu-", suffix=".tmp", dir=folder)
    except OSError as err:
        raise UsageError(option, f"cannot write {path}: no file can be made in {folder} "
                         f"({err.strerror or err})") from None
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:  # made but not removable: the output itself can still be written
        pass


def writable_output(option: str, path: str | Path) -> Path:
    """:func:`writable`, for a file of composite events: its suffix names a format
    (``cep_gpu.io.FORMATS``: .csv or .parquet). (:func:`check_outputs` also keeps it off the
    inputs.)"""
    from .io import FORMATS

    p = writable(option, path)
    if p.suffix.lower() not in FORMATS:
        raise UsageError(option, f"unknown file type {p.suffix!r} in {path}; use .csv or .parquet")
    return p


def check_outputs(outputs: dict[str, str | Path | None],
                  inputs: Sequence[tuple[str, str | Path | None]] = (), *, tables: tuple[str, ...] = (),
                  make_folders: bool = False) -> None:
    """The one check of a subcommand's output paths, before any work: ``outputs`` maps each
    output option to its value (None: not given). Each must be writable (:func:`writable`; the
    options in ``tables`` are files of composite events: :func:`writable_output`), none may be one
    of the ``inputs`` or lie in an input folder (:func:`outside_input`: the user's data would be
    overwritten), and no two options may name the same file (the second would overwrite the
    first); a ``--plot`` must name an image format that matplotlib writes (``.txt`` failed after
    the whole benchmark). A :class:`UsageError` naming the option otherwise. ``make_folders``: the
    subcommand makes the missing folders above its outputs (the benchmarks), so only the nearest
    folder that exists must be writable.

    ``inputs``: ``(what, path)`` pairs, e.g. ``[("rule", ...), ("events", ...)]`` (a path None:
    not given), checked in their order. Pairs, not a mapping: one kind of input may come several
    times (``parallel bench --merge A B``: two merged results). A mapping is a ``TypeError``
    (iterating it would give its keys)."""
    if isinstance(inputs, Mapping):
        raise TypeError("check_outputs takes its inputs as (what, path) pairs, not a mapping: "
                        "pass list(inputs.items())")
    given: dict[Path, tuple[str, str | Path]] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        if make_folders:
            p = Path(path)
            if p.is_dir():
                raise UsageError(option, f"{path} is a folder: give a file name")
            writable(option, p.parent, folder=True, of=path)
        else:
            p = writable_output(option, path) if option in tables else writable(option, path)
        if option == "--plot":
            _image_format(option, p)
        for what, source in inputs:
            if source is not None:
                outside_input(option, p, source, what)
        key = p.resolve()
        if key in given:
            first, first_path = given[key]
            raise UsageError(option, f"{path} is also the file of {first} ({first_path}): give each "
                             "output its own file")
        given[key] = (option, path)


def _image_format(option: str, path: Path) -> None:
    """A :class:`UsageError` when matplotlib cannot write ``path``'s suffix (none is PNG)."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ("", "png"):
        return
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:  # no matplotlib: the plot fails on its own, with its own message
        return
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise UsageError(option, f"unknown image type {path.suffix!r} in {path}; use one of "
                         f"{', '.join('.' + f for f in sorted(formats))}")


def outside_input(option: str, path: str | Path, source: str | Path, what: str) -> None:
    """A :class:`UsageError` naming ``option`` when the output ``path`` is the input ``source``
    (``what``: ``"events"``, ``"rule"``, ...; a file it would overwrite, a folder it would write
    into) or lies in the ``source`` folder (the next run would read it as input)."""
    src = Path(source)
    if not src.exists():
        return
    resolved, target = src.resolve(), Path(path).resolve()
    if resolved.is_dir() and (target == resolved or resolved in target.parents):
        raise UsageError(option, f"{path} is in the {what} folder {source}: it is inside the {what}, "
                         f"and the next run would read it as {what}")
    # samefile: a hard link, or another spelling on a case-insensitive file system, is the input too
    if target == resolved or (target.exists() and os.path.samefile(target, resolved)):
        raise UsageError(option, f"{path} is the {what} file {source}: it would be overwritten")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cep-gpu", description="Complex event processing on CPU and GPU.")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="detect composite events in an event file")
    run.add_argument("rules", help="rule file (TESLA or SEQ patterns)")
    run.add_argument("events", help="events as .csv or .parquet")
    run.add_argument("--backend", default="auto", choices=BACKENDS + ["gpu-host"])
    run.add_argument("--out", type=nonempty_path,
                     help="write composite events to this .csv or .parquet file")
    run.add_argument("--time-unit", type=time_unit, default="s",
                     help="unit of numeric ts values (default: s)")
    run.add_argument("--limit", type=at_least(0), default=50, help="rows to print when no --out is given")
    run.add_argument(
        "--max-batch-latency", type=_latency, default=None, metavar="SECONDS",
        help="backend auto: the most seconds one kernel launch may be estimated to take; the planner "
        "splits each rule's terminators into batches within it (default: unbounded, one batch per "
        "rule; 0: one terminator per batch). Other backends ignore it.",
    )
    run.add_argument("--max-matches", type=at_least(1), default=None, metavar="N",
                     help="Kleene closure: the most matches a rule's sets may be estimated to produce "
                     "(default cep_gpu.kleene.DEFAULT_MAX_MATCHES; docs/language.md)")
    add_column_options(run)
    set_command(run, cmd_run)

    explain = sub.add_parser("explain", help="show how rules are compiled and planned")
    explain.add_argument("rules")
    explain.add_argument("events", nargs="?", help="optional events, for window sizes and planner decisions")
    explain.add_argument("--backend", default="auto", choices=BACKENDS)
    explain.add_argument("--time-unit", type=time_unit, default="s",
                         help="unit of numeric ts values (default: s)")
    explain.add_argument(
        "--max-batch-latency", type=_latency, default=None, metavar="SECONDS",
        help="as for run (default: unbounded, one batch per rule, which is what run does)",
    )
    add_column_options(explain, "EVENTS")
    set_command(explain, cmd_explain)

    _add_optional(sub, "cep_gpu.benchmarks.cli", ("add_bench_parser", "add_calibrate_parser"))
    _add_optional(sub, "cep_gpu.spark_udfs.cli", ("add_spark_parser",))
    _add_optional(sub, "cep_gpu.muse.cli", ("add_muse_parser",))
    _add_optional(sub, "cep_gpu.decopa.cli", ("add_decompose_parser", "add_decopa_parser"))
    _add_optional(sub, "cep_gpu.parallel.cli", ("add_parallel_parser",))
    _add_optional(sub, "cep_gpu.shedding.cli", ("add_shedding_parser",))
    return parser


def _add_optional(sub, module: str, adders: tuple[str, ...]) -> None:
    """Subcommands that live with their feature (benchmarks, Spark); absent ones are skipped."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    for name in adders:
        adder = getattr(mod, name, None)
        if adder is not None:
            adder(sub)


def read_rules(path: str):
    """The rules of the rule file ``path``: every subcommand that takes one reads it here, so that
    they agree on what a rule file is. A missing file, an event file given in its place, a file
    that is not UTF-8 text, rule text that does not compile and a file without any rule (blank,
    or only comments) are errors naming the file (exit status 1)."""
    from . import parse_rules

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{path}: no such rule file")
    if p.suffix.lower() in (".csv", ".parquet", ".pq", ".arrow"):
        raise ArgumentError(f"{path} looks like an event file, where the rule file is expected: "
                            "the rules come first (cep-gpu run RULES EVENTS)")
    rules = parse_rules(read_text(p, "rule file"))
    if not rules:
        raise ArgumentError(f"{path} holds no rule")
    return rules


def warn_absent_types(prog: str, rules, types, source: str) -> int:
    """Print ``PROG: warning: rule 'T' reads type 'X', which no event in SOURCE has (types: ...)``
    on stderr for each event type that ``rules`` read and no event of the input has (``types``: the
    input's type names), and return how many: a typo in a type name otherwise gives no composite
    event without a word. The exit status stays as it is. For every subcommand that runs rules
    over an event file (see :func:`cep_gpu.analysis.absent_types`)."""
    from .analysis import absent_type_warnings

    lines = absent_type_warnings(rules, types, source)
    for line in lines:
        print(f"{prog}: warning: {line}", file=sys.stderr)
    return len(lines)


def event_types(events) -> list[str]:
    """The event type names of ``events`` (an Arrow table or a pandas DataFrame; none when it has
    no ``type`` column), for :func:`warn_absent_types`. The column is checked as the ingestion
    checks it (one column, strings, no null, none empty), so that its error comes first and
    alone: numbers in ``type`` gave a warning per type a rule reads, listing the numbers, and
    then the error."""
    import pandas as pd

    from .events.checks import check_unique_columns
    from .events.from_arrow import arrow_types
    from .events.from_pandas import pandas_types

    frame = isinstance(events, pd.DataFrame)
    names = [str(c) for c in events.columns] if frame else list(events.column_names)
    if "type" not in names:
        return []
    check_unique_columns(names)
    return pandas_types(events["type"])[1] if frame else arrow_types(events.column("type"))[1]


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of ``path``; a directory, an unreadable or a binary file is an ArgumentError
    naming the file (the subcommands' rule, query and network files all come through here)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ArgumentError(f"{path}: the {what} is not UTF-8 text (byte {err.start}: "
                            f"{err.object[err.start:err.start + 1]!r})") from None
    except FileNotFoundError:
        raise
    except OSError as err:
        raise ArgumentError(f"{path}: cannot read the {what}: {err.strerror or err}") from None


def _latency(text: str) -> float | None:
    """``--max-batch-latency``: seconds >= 0, or ``none``/``inf`` for unbounded."""
    from .planner import check_max_batch_latency

    if text.strip().lower() in ("none", "inf", "unbounded"):
        return None
    try:
        return check_max_batch_latency(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0 (or 'none'), got {text!r}") from None


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .detect import detect_table
    from .events import EventTable
    from .io import read_table, write_output
    from .kleene import limit_or_default
    from .output import OutputSchema, assemble
    from .planner import backend_for

    # before any work: a typo in the output's name must not cost a whole run
    check_outputs({"--out": args.out}, [("events", args.events), ("rule", args.rules)], tables=("--out",))
    console = Console(stderr=True)
    rules = read_rules(args.rules)
    backend = backend_for(args.backend, args.max_batch_latency, private=True)
    t0 = time.perf_counter()
    events = read_table(args.events, event_columns(args))
    big = events.num_rows > PROGRESS_THRESHOLD
    with progress_bar(console, big) as progress, limit_or_default(args.max_matches):
        task = progress.add_task("ingest", total=len(rules) + 2)
        table = EventTable.from_arrow(events, time_unit=args.time_unit)
        warn_absent_types(args.prog, rules, table.type_names, args.events)
        progress.update(task, advance=1, description="detect")
        results = detect_table(table, rules, backend, on_rule=lambda r: progress.update(
            task, advance=1, description=f"rule {r.name}"))
        progress.update(task, advance=1, description="output")
        out = assemble(results, OutputSchema.of(rules), table, arrow=True)
    elapsed = time.perf_counter() - t0
    if args.out:
        write_output(out, args.out)
        console.print(f"{out.num_rows} composite events from {events.num_rows} events "
                      f"in {elapsed:.2f} s -> {args.out}")
    else:
        print_table(out.to_pandas(), args.limit)
        console.print(f"{out.num_rows} composite events from {events.num_rows} events in {elapsed:.2f} s")
    if args.backend == "auto":  # the planner's statistics (see AutoBackend.stats)
        st = backend.stats()
        console.print("planner: " + ", ".join(
            f"{st[d]['decisions']} batch(es) of {st[d]['terminators']} terminator(s) on {d} "
            f"({st[d]['seconds']:.3g} s)" for d in ("cpu", "gpu")), highlight=False, soft_wrap=True)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from . import Engine
    from .io import COLUMN_OPTIONS, read_table

    given = event_columns(args)
    if given and not args.events:  # ignored without a word, the user would think them read
        raise UsageError(COLUMN_OPTIONS[next(iter(given))], "names a column of the events: "
                         "give EVENTS (cep-gpu explain RULES EVENTS ...)")
    rules = read_rules(args.rules)
    # explain what `run` does: run is a batch call, unbounded unless --max-batch-latency is given
    # (an Engine's own default, 0, is for streaming publish calls)
    engine = Engine(rules, backend=args.backend, time_unit=args.time_unit,
                    max_batch_latency=args.max_batch_latency)
    if args.events:
        from .detect import check_schema
        from .events import EventTable

        events = read_table(args.events, event_columns(args))
        warn_absent_types(args.prog, rules, event_types(events), args.events)
        # what run refuses on these events (an attribute none of them has, a string ordered with
        # '<'), explain refuses too: it explained such a run as if it would go
        check_schema(rules, EventTable.from_arrow(events, time_unit=args.time_unit, sort=True))
        print(engine.explain(events))
    else:
        print(engine.explain())
    return 0


def progress_bar(console, enabled: bool):
    """A rich progress bar on ``console`` for long work, or a quiet stand-in with the same calls."""
    from contextlib import nullcontext

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if enabled:
        return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console)

    class _Quiet:
        def add_task(self, *a, **k):
            return 0

        def update(self, *a, **k):
            pass

    return nullcontext(_Quiet())


def print_table(df, limit: int) -> None:
    """Composite events as the subcommands print them: the first ``limit`` rows, then how many
    more there are."""
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for col in df.columns:
        table.add_column(str(col))
    for row in df.head(limit).itertuples(index=False):
        table.add_row(*[_fmt(v) for v in row])
    Console().print(table)
    if len(df) > limit:
        Console().print(f"... {len(df) - limit} more rows (use --out to write them all)")


def _fmt(v) -> str:
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(map(str, v)) + ")"
    return "" if v is None else str(v)


if __name__ == "__main__":
    sys.exit(main())
