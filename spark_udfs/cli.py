"""The ``cep-gpu spark`` subcommand: the Spark job on given Parquet inputs and a given master.

    cep-gpu spark RULES EVENTS --master URL --out DIR [--backend auto] [--partition-by COL]
                  [--slices N] [--slicing auto] [--time-unit s] [--rapids] [--conf KEY=VALUE ...]
                  [--no-plot] [--type-column NAME] [--ts-column NAME] [--id-column NAME]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from cep_gpu.cli import (
    BACKENDS,
    UsageError,
    add_column_options,
    at_least,
    nonempty_path,
    outside_input,
    set_command,
    time_unit,
    writable,
)

#: Spark's master URL forms (a bad one kills the JVM gateway with a 40-line trace)
_MASTER = r"local(\[(\*|\d+)(,\s*\d+)?\])?|local-cluster\[.+\]|yarn|(spark|k8s|mesos)://.+"


def master_url(text: str) -> str:
    """An argparse type: a Spark master URL of a form Spark knows."""
    import re

    if not re.fullmatch(_MASTER, text.strip()):
        raise argparse.ArgumentTypeError(
            f"expected local, local[N], local[*], spark://HOST:PORT, yarn or k8s://URL, got {text!r}")
    return text.strip()


def add_spark_parser(sub) -> argparse.ArgumentParser:
    """Register ``spark`` on the ``cep-gpu`` subparsers (called by ``cep_gpu.cli``)."""
    p = sub.add_parser("spark", help="run the detection as a Spark job (Parquet in, Parquet out)")
    p.add_argument("rules", help="rule file (TESLA or SEQ patterns)")
    p.add_argument("events", help="Parquet events: a file or a directory, local or a URI Spark reads (s3a://...); "
                   "a local CSV file, or local Parquet with nanosecond timestamps, is converted first")
    p.add_argument("--master", type=master_url, default="local[2]", help="Spark master URL (default: local[2])")
    p.add_argument("--out", type=nonempty_path, required=True,
                   help="output directory (composite_events.parquet, detections.png)")
    p.add_argument("--backend", default="auto", choices=BACKENDS, help="engine backend inside the tasks")
    p.add_argument("--partition-by", help="column every rule is tied to (keyed plan); else time slices")
    p.add_argument("--slices", type=at_least(1), help="number of time slices (default: the cluster's parallelism)")
    p.add_argument("--slicing", default="auto", choices=["auto", "parquet", "partitions", "shuffle"],
                   help="how time-sliced runs cut time (docs/spark.md; default: auto)")
    p.add_argument("--time-unit", type=time_unit, default="s",
                   help="unit of numeric ts values (default: s)")
    p.add_argument("--rapids", action="store_true", help="configure RAPIDS GPU executors (rapids_conf())")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG of detections over time")
    p.add_argument("--no-check-ids", action="store_true",
                   help="skip the Spark job that refuses an id two rows share (ids unique by construction; "
                        "detect_spark(check_ids=False), docs/spark.md)")
    add_column_options(p, "EVENTS")
    set_command(p, spark_main)
    return p


def parse_conf(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings to a dict; a :class:`UsageError` (a ``ValueError``) for anything else."""
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError("--conf", f"expected KEY=VALUE, got {item!r}")
        conf[key.strip()] = value.strip()
    return conf


NANOS_HINT = (
    "Spark reads Parquet timestamps in microseconds, not nanoseconds: write the file with "
    "pyarrow.parquet.write_table(table, path, coerce_timestamps='us') (or as a local file, which "
    "cep-gpu spark converts)"
)


def spark_readable(events: str, out_dir: Path, columns: dict[str, str] | None = None) -> str:
    """``events`` as a Parquet path Spark can read.

    ``columns``: ``cep_gpu.io.read_table``'s mapping of the file's columns to ``type``, ``ts``
    and ``id`` (``--type-column`` ...). A converted file has them renamed already; a local
    Parquet input that is not converted has the mapping checked against its schema here, before
    Spark starts, and :func:`rename_columns` renames the DataFrame Spark reads.

    Spark reads neither nanosecond Parquet timestamps (pandas' default) nor, through this command,
    CSV. A local CSV file, or local Parquet with ``timestamp[ns]`` columns, is converted once with
    pyarrow to ``out_dir/input_events_us.parquet``, with every timestamp in microseconds; it is removed after the job.
    Sub-microsecond timestamps cannot be kept and are an :class:`~cep_gpu.errors.EventError`
    (give ``ts`` as numbers with ``--time-unit`` instead), and so is a ``ts`` column that is
    neither numbers nor timestamps (``detect``'s message, naming the first bad value and its row). URIs other than ``file://`` go to Spark
    as given.
    """
    import pyarrow as pa

    from cep_gpu.errors import EventError
    from cep_gpu.io import column_renames, read_table

    local = events[len("file://"):] if events.startswith("file://") else events
    if "://" in local:
        return events
    path = Path(local)
    is_csv = path.is_file() and path.suffix.lower() in (".csv", ".txt")
    if not is_csv:
        import pyarrow.parquet as pq

        try:
            schema = pq.ParquetDataset(path).schema
        except (pa.ArrowInvalid, OSError) as err:
            raise EventError(f"{events}: not a Parquet file or directory ({err})") from None
        if not any(pa.types.is_timestamp(f.type) and f.type.unit == "ns" for f in schema):
            column_renames(schema.names, columns, events)  # a bad mapping before Spark starts
            return events
    table = read_table(path, columns)
    if "ts" in table.column_names:
        t = table.schema.field("ts").type
        if not (pa.types.is_timestamp(t) or pa.types.is_integer(t) or pa.types.is_floating(t)):
            from cep_gpu.events.from_arrow import arrow_ts

            # text (one 'abc' in a CSV column), booleans...: `cep-gpu run`'s error, naming the
            # value and its row (Spark would only say the column's type, after starting)
            arrow_ts(table.column("ts"), "s")
    for f in table.schema:
        if pa.types.is_timestamp(f.type) and f.type.unit == "ns":
            try:
                col = table.column(f.name).cast(pa.timestamp("us", f.type.tz))
            except pa.ArrowInvalid:
                raise EventError(
                    f"{events}: column {f.name!r} has timestamps finer than a microsecond, which "
                    "Spark cannot hold; round them to microseconds, or give ts as numbers with "
                    "--time-unit"
                ) from None
            table = table.set_column(table.schema.get_field_index(f.name), f.name, col)
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "input_events_us.parquet"
    pq.write_table(table, target)
    return str(target)


def rename_columns(df, columns: dict[str, str] | None, source: str):
    """The Spark DataFrame ``df`` read from ``source`` with its columns renamed by ``columns``
    (``cep_gpu.io.read_table``'s mapping, checked by the same :func:`cep_gpu.io.column_renames`:
    the same errors as every other subcommand). A rename in the plan: no data is read."""
    from cep_gpu.io import column_renames

    renames = column_renames(df.columns, columns, source)
    return df.toDF(*[renames.get(c, c) for c in df.columns]) if renames else df


def spark_main(args: argparse.Namespace) -> int:
    """Run the job described by the parsed ``args``; returns the exit status."""
    extra_conf = parse_conf(args.conf)  # a bad argument before any file is read
    if "://" not in args.out:  # a local folder, made with its parents (job.run_job)
        writable("--out", args.out, folder=True)
        for what, source in (("events", args.events), ("rule", args.rules)):
            if "://" not in source:
                outside_input("--out", args.out, source, what)
    from rich.console import Console

    from cep_gpu.cli import event_columns, read_rules
    from cep_gpu.errors import EventError

    from .failures import spark_cep_error
    from .job import run_job, session, summary_table
    from .rapids import rapids_conf

    events_path = args.events
    rules = read_rules(args.rules)  # as every subcommand reads a rule file
    if "://" not in events_path and not Path(events_path).exists():  # URIs: Spark checks them
        raise EventError(f"{events_path}: no such Parquet/CSV file or directory")
    conf = rapids_conf() if args.rapids else {}
    conf.update(extra_conf)
    columns = event_columns(args)
    readable = spark_readable(events_path, Path(args.out), columns)
    spark = session(args.master, "cep-gpu spark", conf)
    # a failed task is logged by the JVM at ERROR with its whole Java and Python trace (hundreds of
    # lines on stderr) before the failure reaches this process, which reports it on one line below
    spark.sparkContext.setLogLevel("FATAL")
    try:
        source = readable
        if columns and readable == events_path:  # (a converted file has the engine's names already)
            source = rename_columns(spark.read.parquet(readable), columns, events_path)
        result = run_job(
            spark,
            source,
            rules,
            args.out,
            backend=args.backend,
            partition_by=args.partition_by,
            num_slices=args.slices,
            slicing=args.slicing,
            time_unit=args.time_unit,
            plot=not args.no_plot,
            check_ids=not args.no_check_ids,
        )
    except Exception as err:  # Spark's own reader errors come as long Py4J traces: one line instead
        if "TIMESTAMP(NANOS" in str(err) or "PARQUET_TYPE_ILLEGAL" in str(err):
            raise EventError(f"{events_path}: {NANOS_HINT}") from None
        dup = re.search(r"COLUMN_ALREADY_EXISTS\].*?column `([^`]*)` already exists", str(err))
        if dup:  # Spark's reader refuses the file before detect_spark sees it: detect's words
            raise EventError(
                f"{events_path}: events have more than one column named {dup.group(1)!r} (Spark's "
                "reader, with spark.sql.caseSensitive off, its default, also takes names that "
                "differ only in case, like 'k' and 'K', for one): rename one"
            ) from None
        ours = spark_cep_error(err)  # engine_errors()'s reading of the failure
        if ours is not None:  # a cep_gpu error raised in a task, behind Spark's trace: its one line
            raise ours from None
        raise
    finally:
        if readable != events_path:
            Path(readable).unlink(missing_ok=True)
    console = Console()
    console.print(summary_table(result))
    console.print(f"plan: {result.plan}", soft_wrap=True)
    if result.plot_path:
        console.print(f"plot: {result.plot_path}")
    return 0
