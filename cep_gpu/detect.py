"""Batch detection: events + rules -> composite events, with any backend.

The driver ingests the events once, orders the rules so that a rule runs after every rule whose
composite events it reads, asks the backend for each rule's matches, turns them into composite
events (which re-enter the table as input events of later rules), and assembles the output.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
import pyarrow as pa

from .analysis import rule_order
from .backends import Matches, count_matches
from .errors import ArgumentError, CepWarning, EventError
from .evaluate import Values, evaluate
from .events import AttributeColumn, EventTable, TimeFormat
from .jit import cached_njit
from .model import (
    SELF,
    Aggregate,
    AggValue,
    Arith,
    Attr,
    Compare,
    Const,
    Neg,
    Rule,
    Timestamp,
    children,
    kleene_exprs,
    map_rule_exprs,
    walk,
)
from .output import OutputSchema, assemble


def as_rules(rules) -> list[Rule]:
    """Accept a Rule, rule text, or a list (any iterable) of Rules and rule texts, each text
    holding any number of rules; anything else is an :class:`ArgumentError` naming ``rules``."""
    from .language import parse_rules

    if isinstance(rules, (Rule, str)):
        items = [rules]
    elif isinstance(rules, (bytes, bytearray, memoryview, Mapping)) or not isinstance(rules, Iterable):
        raise ArgumentError(
            f"rules must be a Rule, rule text (a str) or a list of them, got "
            f"{type(rules).__name__} {_short(rules)}"
            + (" (decode the rule text first)" if isinstance(rules, (bytes, bytearray)) else "")
        )
    else:
        items = list(rules)
    out: list[Rule] = []
    for k, r in enumerate(items):
        if isinstance(r, Rule):
            out.append(r)
        elif isinstance(r, str):
            out.extend(parse_rules(r))
        else:
            raise ArgumentError(
                f"rules must be a Rule, rule text (a str) or a list of them, but item {k} of the "
                f"list is {type(r).__name__} {_short(r)}"
            )
    _check_distinct_names(out)
    return out


def _check_distinct_names(rules: list[Rule]) -> None:
    """Two rules of one name (from separate texts, or one Rule given twice) would report each
    composite event twice with one id, and feed both into the rules that read that type: a
    :class:`RuleError`, as for two ``define`` of one name in one text."""
    first: dict[str, int] = {}
    for k, rule in enumerate(rules):
        if rule.name in first:
            raise rule.error(
                f"rule {rule.name!r} is defined twice (rules {first[rule.name] + 1} and {k + 1} "
                f"of the {len(rules)} given); give each rule its own name",
                _name_pos(rule),
            )
        first[rule.name] = k


def _name_pos(rule: Rule) -> tuple[int, int] | None:
    """The (line, column) of the name after ``define`` in the rule's source text, if known."""
    start = rule.source.find(rule.text) if rule.text and rule.source else -1
    if start < 0:
        return None
    m = re.match(r"define\s+", rule.text, re.IGNORECASE)
    at = start + (m.end() if m else 0)
    return rule.source.count("\n", 0, at) + 1, at - (rule.source.rfind("\n", 0, at) + 1) + 1


def _short(value: object, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_schema(rules: Sequence[Rule], table: EventTable, require_attributes: bool = True,
                 source: str = "input") -> None:
    """Reject rules that read attributes no event in the input (or no rule's output) has,
    and comparisons and arithmetic that the kernels cannot make (ordering on strings, strings vs
    numbers, strings in arithmetic or in a numeric aggregate).

    Where such a string column holds mostly numbers (a CSV column of numbers with one ``oops`` in
    it is read as text), the error is an :class:`EventError` naming the column, the first row
    holding text and that text, rather than a :class:`RuleError` about strings.

    ``require_attributes=False`` (a stream, whose attributes may come in a later publish) only
    checks the kinds of the attributes ``table`` has. A table without events (a header-only CSV
    file, an empty frame) lacks no attribute: there is nothing to match, and no error.
    ``source``: what the message calls the events (``"input"``; DecoPa's statistics say
    ``"sample"``)."""
    produced = {a.name: a.type for r in rules for a in r.attributes}
    require_attributes = require_attributes and len(table) > 0

    attr_kinds: dict[str, str | None] = {}  # (each column's valid.any() once per call: per publish)

    def attr_kind(name: str) -> str | None:
        if name not in attr_kinds:
            col = table.columns.get(name)
            k = col.kind if col is not None and col.valid.any() else produced.get(name)
            attr_kinds[name] = {"int": "num", "float": "num"}.get(k, k)
        return attr_kinds[name]

    def kind_of(expr) -> str | None:
        if isinstance(expr, Const):
            v = expr.value
            return "string" if isinstance(v, str) else "bool" if isinstance(v, bool) else "num"
        if isinstance(expr, Attr):
            return attr_kind(expr.name)
        if isinstance(expr, AggValue):  # Count/Sum/Avg/Min/Max: numeric attributes only (below)
            return "num"
        if isinstance(expr, Timestamp):  # X.ts: a number, whether ts are numbers or datetimes
            return "num"
        if isinstance(expr, (Arith, Neg)):  # a number, unless an operand is not (an error below)
            kinds = {kind_of(c) for c in children(expr)}
            return "num" if kinds <= {"num", None} else None
        return None

    def string_error(rule: Rule, operands, doing: str, message: str, pos):
        """The error for strings where numbers are needed: about the data when a string column
        among ``operands`` holds mostly numbers, else ``message`` about the rule."""
        for operand in operands:
            if isinstance(operand, Attr) and kind_of(operand) == "string":
                err = text_among_numbers(table, operand.name, f"rule {rule.name!r} {doing}")
                if err is not None:
                    return err
        return rule.error(message, pos)

    if require_attributes:
        check_attribute_names(rules, table.columns, source)
    for rule in rules:
        for agg in rule.aggregates:  # first: Max(...).s = 'x' is about Max, not about the '='
            _check_aggregate(rule, agg, table, produced)
        for expr in _read_exprs(rule):
            for node in walk(expr):
                if isinstance(node, (Arith, Neg)):
                    op = node.op if isinstance(node, Arith) else "-"
                    for operand in children(node):
                        if kind_of(operand) == "string":
                            what = (f"attribute {operand.name!r} holds" if isinstance(operand, Attr)
                                    else f"{operand.value!r} is" if isinstance(operand, Const) else "it is")
                            raise string_error(
                                rule, [operand], f"computes with it ({op!r})",
                                f"rule {rule.name!r}: arithmetic needs numbers, but {what} "
                                f"a string (with {op!r})",
                                getattr(operand, "pos", None),
                            )
                if isinstance(node, Compare):
                    kl, kr = kind_of(node.left), kind_of(node.right)
                    if "string" in (kl, kr):
                        if kl and kr and kl != kr:
                            conflict = _kind_conflict(rule, (node.left, node.right), rules, table,
                                                      source, node.pos)
                            if conflict is not None:
                                raise conflict
                            other = kl if kr == "string" else kr
                            raise string_error(
                                rule, (node.left, node.right), f"compares it with {node.op!r}",
                                f"rule {rule.name!r} compares a string with a "
                                f"{_KIND_WORDS.get(other, other)} (with {node.op!r})",
                                node.pos,
                            )
                        if node.op not in ("=", "!="):
                            raise string_error(
                                rule, (node.left, node.right), f"compares it with {node.op!r}",
                                f"rule {rule.name!r}: strings can only be compared with = and != "
                                f"(not {node.op!r})",
                                node.pos,
                            )
        for a in rule.attributes:
            # a declared type that the value's kind cannot fill: known from the input's kinds, so
            # it is refused before any match (a stream's publish then changes nothing)
            have = kind_of(a.expr)
            if a.type is not None and have is not None and _DECLARED_FITS.get(a.type) != have:
                word = table.columns[a.expr.name].kind if isinstance(a.expr, Attr) and a.expr.name in table.columns \
                    else _KIND_WORDS.get(have, have)
                raise rule.error(
                    f"rule {rule.name!r}: attribute {a.name!r} is declared {a.type} but its value is {word}",
                    a.pos,
                )
    # one output column per attribute: every rule must give it values of one kind (numbers,
    # strings or booleans); declared clashes are refused by OutputSchema.of, these by the input
    given: dict[str, tuple[Rule, str, bool]] = {}
    for rule in rules:
        for a in rule.attributes:
            have = _DECLARED_FITS.get(a.type) if a.type is not None else kind_of(a.expr)
            if have is None:
                continue
            first, kind, declared = given.setdefault(a.name, (rule, have, a.type is not None))
            if kind != have and not (declared and a.type is not None):  # (both declared: OutputSchema.of says it)
                words = {"num": "numeric", "bool": "boolean"}
                raise rule.error(
                    f"rule {rule.name!r} gives attribute {a.name!r} {words.get(have, have)} values, "
                    f"but rule {first.name!r} gives it {words.get(kind, kind)} values: the output "
                    "has one column per attribute; rename one of them", a.pos)


def _kind_conflict(rule: Rule, operands, rules: Sequence[Rule], table: EventTable, source: str,
                   pos) -> Exception | None:
    """The error for a comparison of an attribute whose declared kind in a rule's output (``P(x:
    string)``) is not its kind in the input's events (``x`` of numbers): it holds both, which is
    the mistake, not the comparison (that reads the input's kind). None when there is none."""
    for operand in operands:
        if not isinstance(operand, Attr):
            continue
        col = table.columns.get(operand.name)
        if col is None or not col.valid.any():
            continue
        for maker in rules:
            for a in maker.attributes:
                if a.name == operand.name and a.type is not None \
                        and _DECLARED_FITS[a.type] != _DECLARED_FITS[col.kind]:
                    return rule.error(
                        f"rule {rule.name!r} compares attribute {a.name!r}, which holds {col.kind} "
                        f"values in the {source} but is declared {a.type} by rule {maker.name!r}: "
                        f"an attribute has one kind in every event; rename one of them",
                        pos,
                    )
    return None


def check_attribute_names(rules: Sequence[Rule], names, source: str = "input") -> None:
    """Reject a rule that reads an attribute which neither ``names`` (the input's attribute
    columns) nor any rule's output has: what :func:`check_schema` checks of a whole input, for a
    caller that knows the columns before the events (a stream published in parts)."""
    produced = {a.name: a.type for r in rules for a in r.attributes}
    known = set(names) | set(produced)
    for rule in rules:
        for expr in _read_exprs(rule):
            for node in walk(expr):
                if isinstance(node, Attr) and node.name not in known:
                    raise rule.error(
                        f"rule {rule.name!r} reads attribute {node.name!r}, which no event in the "
                        f"{source} has (the {source}'s attributes: {sorted(names)}"
                        + (f"; composite events add {sorted(produced)})" if produced else ")"),
                        node.pos,
                    )


def _read_exprs(rule: Rule) -> list:
    """Every expression of ``rule`` that reads attributes (conditions, outputs, aggregates)."""
    exprs = list(rule.conditions)
    for part in list(rule.negations) + list(rule.aggregates):
        exprs.extend(part.conditions)
    exprs.extend(a.expr for a in rule.attributes)
    exprs.extend(kleene_exprs(rule))
    for agg in rule.aggregates:
        if agg.attribute is not None:
            exprs.append(Attr(SELF, agg.attribute, pos=agg.pos))
    return exprs


_KIND_WORDS = {"num": "number", "bool": "boolean"}
#: the coarse kind (check_schema's kind_of) of the values each declared type (or column kind) takes
_DECLARED_FITS = {"int": "num", "float": "num", "string": "string", "bool": "bool"}


def _check_aggregate(rule: Rule, agg: Aggregate, table: EventTable, produced) -> None:
    if agg.attribute is None:
        return
    col = table.columns.get(agg.attribute)
    kind = col.kind if col is not None and col.valid.any() else produced.get(agg.attribute)
    if kind in ("string", "bool"):
        name = agg.function.capitalize()
        err = text_among_numbers(table, agg.attribute, f"rule {rule.name!r} takes its {name}") \
            if kind == "string" else None
        raise err or rule.error(
            f"rule {rule.name!r}: {name} needs a numeric attribute, "
            f"but {agg.attribute!r} holds {kind} values",
            agg.pos,
        )


def text_among_numbers(table: EventTable, name: str, doing: str) -> EventError | None:
    """An :class:`EventError` for a string attribute column whose values are mostly numbers (at
    least as many rows as hold text), naming the column, the first row (or, without row
    positions, event id) holding text and that text, or that every value is a number stored as
    text; ``doing`` says what the rule does with it. None for a column of text. Only for error messages: vectorised over the distinct strings."""
    col = table.columns.get(name)
    if col is None or col.kind != "string" or not col.valid.any():
        return None
    distinct, counts = np.unique(col.values[col.valid], return_counts=True)
    texts = pd.Series(table.strings.decode(distinct), dtype=object)
    number = pd.to_numeric(texts, errors="coerce").notna().to_numpy()
    if not number.any() or counts[number].sum() < counts[~number].sum():
        return None
    if number.all():  # numbers stored as text (a Parquet string column, a frame read as str)
        return EventError(f"column {name!r} holds numbers stored as text, such as {texts[0]!r} ({doing}); "
                          "store them as numbers")
    rows = np.flatnonzero(col.valid & np.isin(col.values, distinct[~number]))
    first = int(rows[np.argmin(table.ids[rows])])  # the input's first: the smallest id
    text = table.strings.decode(col.values[first:first + 1])[0]
    event_id = int(table.ids[first])
    where = f"at row {event_id}" if table.row_ids else f"in the event with id {event_id}"
    others = ("the other values are numbers" if len(rows) == 1
              else f"{len(rows) - 1} more rows hold text, the other values are numbers")
    return EventError(f"column {name!r} holds the text {text!r} {where} ({doing}); {others}")


@dataclass
class RuleResult:
    """The composite events of one rule, before output assembly."""

    rule: Rule
    ts: np.ndarray  # int64 ns
    ids: np.ndarray  # int64 (n, n_predicates) event ids in declaration order
    attributes: dict[str, AttributeColumn]
    #: set instead of the arrays for ``output="count"``
    count: int | None = None
    #: rules with Kleene positions: ``ids`` is padded with ``PAD_ID`` after ``lengths[m]`` ids;
    #: ``sizes`` (n, n_predicates) how many ids each position took (docs/language.md)
    lengths: np.ndarray | None = None
    sizes: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ts) if self.count is None else self.count


def match_ts(table: EventTable, rows: np.ndarray, rule: Rule | None = None) -> np.ndarray:
    """The timestamp of each match: that of its terminator, which is its latest event.

    With one plan, one gather of the terminator's timestamps; otherwise the latest bound
    timestamp, because an ``AND(...)`` rule has one plan (and one terminator) per possible last
    event, and ``Matches`` does not say which plan matched.
    """
    if not len(rows):
        return np.empty(0, np.int64)
    if rule is not None and len(rule.plans) == 1:
        return table.ts[rows[:, rule.plans[0].terminator]]
    return table.ts[rows].max(axis=1)


def composite_events(rule: Rule, table: EventTable, matches: Matches) -> RuleResult:
    """Timestamps, ids and attributes of the composite events of ``matches``, sorted by (ts, ids)."""
    rows = matches.rows
    ts = match_ts(table, rows, rule)
    lengths = sizes = None
    if matches.sets is not None:
        ids, lengths, sizes = kleene_ids(rule, table, matches)
    else:
        ids = table.ids[rows] if len(rows) else np.empty((0, rule.n_predicates), np.int64)
    aggs = matches.aggs
    # CDP emits matches grouped by terminator, candidates in time order: usually sorted already
    if not sorted_by_ts_ids(ts, ids):
        order = np.lexsort(tuple(ids[:, j] for j in reversed(range(ids.shape[1]))) + (ts,))
        rows, aggs, ts, ids = rows[order], aggs[order], ts[order], ids[order]
        if lengths is not None:
            lengths, sizes = lengths[order], sizes[order]
    attrs = {}
    for a in rule.attributes:
        v = evaluate(a.expr, table, rows, aggs)
        if a.type is not None and a.type != v.kind and _untyped(a.expr, table):
            # an attribute that is absent or null in every input event has no kind of its own
            # (pandas reads it as float): its values are all null, of the declared kind
            v = Values(a.type, np.zeros(len(v.valid), _KIND_DTYPES[a.type]), np.zeros(len(v.valid), bool))
        kind = _declared_kind(a.type, v.kind, rule, a)
        values = v.values
        if kind == "float":
            values = values.astype(np.float64)
        valid = v.valid.copy()
        if kind == "int" and values.dtype.kind == "f":
            values, valid = _whole_numbers(values, valid, rule, a)
        elif kind == "int":
            values = values.astype(np.int64)
        attrs[a.name] = AttributeColumn(kind, values, valid)
    return RuleResult(rule, ts, ids, attrs, lengths=lengths, sizes=sizes)


#: The padding after the ids of a Kleene match (sorts before every id, as a shorter tuple does).
PAD_ID = np.iinfo(np.int64).min


def kleene_ids(rule: Rule, table: EventTable, matches: Matches):
    """The ids of matches with Kleene sets: (padded ids (n, width), lengths (n,), sizes (n, P)).

    Each row lists the ids in declaration order with a set's ids, in time order, at its
    position; ``sizes[m, j]`` is how many ids position ``j`` took (1 for a plain position).
    """
    rows = matches.rows
    n, n_pred = rows.shape
    sizes = np.ones((n, n_pred), np.int64)
    for k, (off, _) in matches.sets.items():
        sizes[:, k] = np.diff(off)
    lengths = sizes.sum(axis=1)
    width = int(lengths.max()) if n else n_pred
    ids = np.full((n, width), PAD_ID, np.int64)
    start = np.cumsum(sizes, axis=1) - sizes
    every = np.arange(n)
    for j in range(n_pred):
        if j in matches.sets:
            off, flat = matches.sets[j]
            m = np.repeat(every, sizes[:, j])
            within = np.arange(len(flat), dtype=np.int64) - np.repeat(off[:-1], sizes[:, j])
            ids[m, start[m, j] + within] = table.ids[flat]
        elif n:
            ids[every, start[:, j]] = table.ids[rows[:, j]]
    return ids, lengths, sizes


@cached_njit
def sorted_by_ts_ids(ts, ids):
    """Whether rows are in (ts, ids...) lexicographic order (one pass, no temporaries)."""
    for i in range(1, ts.shape[0]):
        if ts[i] != ts[i - 1]:
            if ts[i] < ts[i - 1]:
                return False
            continue
        for j in range(ids.shape[1]):
            if ids[i, j] != ids[i - 1, j]:
                if ids[i, j] < ids[i - 1, j]:
                    return False
                break
    return True


_KIND_DTYPES = {"int": np.int64, "float": np.float64, "string": np.int32, "bool": np.bool_}


def _untyped(expr, table: EventTable) -> bool:
    """Whether ``expr`` reads an attribute that no input event has a value of (absent or all null)."""
    while isinstance(expr, Neg):
        expr = expr.arg
    if not isinstance(expr, Attr):
        return False
    col = table.columns.get(expr.name)
    return col is None or not bool(col.valid.any())


def _whole_numbers(values: np.ndarray, valid: np.ndarray, rule: Rule, attr) -> tuple[np.ndarray, np.ndarray]:
    """Float values of an attribute declared ``int``, as int64: whole numbers in the int64 range
    keep their value (an int column with nulls reaches here as floats); any other value (a
    fraction, an infinity, NaN, beyond int64) is null, with a warning naming the first one, as a
    division by zero is null (docs/language.md, "Header")."""
    fits = valid & np.isfinite(values) & (np.trunc(values) == values) & (np.abs(values) < 2.0**63)
    bad = valid & ~fits
    if bad.any():
        warnings.warn(
            f"rule {rule.name!r}: attribute {attr.name!r} is declared int but {int(bad.sum())} of its "
            f"values are not whole numbers in the int64 range (e.g. {float(values[bad][0])!r}): those are null",
            CepWarning, stacklevel=3,
        )
    return np.where(fits, values, 0).astype(np.int64), fits


def _declared_kind(declared, actual, rule: Rule, attr):
    if declared is None or declared == actual:
        return actual
    if declared in ("int", "float") and actual in ("int", "float"):
        return declared
    raise rule.error(
        f"rule {rule.name!r}: attribute {attr.name!r} is declared {declared} but its value is {actual}",
        attr.pos,
    )


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(h: np.ndarray) -> np.ndarray:
    # splitmix64 finaliser: a cheap, well-distributed 64-bit mix
    h = (h ^ (h >> np.uint64(30))) * _M1
    h = (h ^ (h >> np.uint64(27))) * _M2
    return h ^ (h >> np.uint64(31))


def composite_ids(
    rule_name: str,
    ids: np.ndarray,
    lengths: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
) -> np.ndarray:
    """Ids of composite events: a hash of the rule name and the bound ids, as a negative int64.

    Content-derived, so batch, streaming and Spark (any partitioning) give a composite event the
    same id; negative, so it never collides with the (non-negative) ids of primitive events.
    ``lengths``: rows of ``ids`` padded after that many ids (Kleene matches; padding not hashed).
    ``sizes``: the ids each position took (Kleene matches, ``id_counts``), hashed too: two
    matches may list the same flat ids split differently between positions
    (``SEQ(KL(A x), A y, KL(A z), C c)``), and they are distinct composite events.
    """
    h = np.full(ids.shape[0], hash_text(rule_name), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(ids.shape[1]):
            mixed = _mix(h ^ ids[:, j].astype(np.uint64))
            h = mixed if lengths is None else np.where(j < lengths, mixed, h)
        if sizes is not None:
            for j in range(sizes.shape[1]):
                h = _mix(h ^ sizes[:, j].astype(np.uint64))
    return -((h & np.uint64((1 << 62) - 1)).astype(np.int64)) - 1


def hash_text(text: str) -> int:
    """A stable 64-bit hash of a string (Python's ``hash`` is salted per process)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def append_composites(table: EventTable, results: Iterable[RuleResult]) -> EventTable:
    """Add composite events to the table as events of type ``rule.name`` (ids from :func:`composite_ids`)."""
    for res in results:
        if len(res.ts):
            ids = composite_ids(res.rule.name, res.ids, res.lengths, res.sizes)
            table = table.concat(composite_table(res, ids, table))
    return table


def composite_table(res: RuleResult, ids: np.ndarray, like: EventTable) -> EventTable:
    n = len(res.ts)
    return EventTable(
        ts=res.ts.copy(),
        ids=ids,
        types=np.zeros(n, np.int32),
        type_names=[res.rule.name],
        columns=dict(res.attributes),
        strings=like.strings,
        time=like.time,
        schema={res.rule.name: {k for k, c in res.attributes.items() if c.valid.any()}},
    )


def in_time_units(rule: Rule, time: TimeFormat) -> Rule:
    """``rule`` with every ``X.ts`` expressed in the input's time unit.

    The engine keeps timestamps as int64 ns; for numeric input ``ts`` a rule's arithmetic on
    ``X.ts`` is meant in the input's unit (``time_unit``), so ``X.ts`` becomes ``ts_ns / scale``.
    For datetime input, ``X.ts`` stays in nanoseconds since the epoch.
    """
    # Equal rules may come from different texts (source positions take no part in equality):
    # key the cache by the text too, so that an error points into the text this rule came from.
    return _in_time_units(rule, rule.source, time)


@lru_cache(maxsize=256)
def _in_time_units(rule: Rule, source: str, time: TimeFormat) -> Rule:
    scale = time.scale_ns()
    if scale == 1 or not any(isinstance(n, Timestamp) for e in _all_exprs(rule) for n in walk(e)):
        return rule
    return map_rule_exprs(
        rule, lambda e: Arith("/", e, Const(float(scale))) if isinstance(e, Timestamp) else e
    )


def _all_exprs(rule: Rule):
    yield from kleene_exprs(rule)
    yield from rule.conditions
    for part in (*rule.negations, *rule.aggregates):
        yield from part.conditions
    for a in rule.attributes:
        yield a.expr


def detect_table(
    table: EventTable,
    rules: Sequence[Rule],
    backend="auto",
    on_rule: Callable[[Rule], None] | None = None,
    count_only: bool = False,
    max_batch_latency: float | None = None,
) -> list[RuleResult]:
    """Run ``rules`` over an already-ingested table; the composite events of each rule, in rule order.

    ``backend``: a backend name, or a backend object (then ``max_batch_latency`` is not applied).
    ``on_rule`` is called after each rule (for progress reporting). ``count_only``: the results of
    rules that no other rule reads carry only their number (``RuleResult.count``; the backend
    may count without building them, see :func:`cep_gpu.backends.count_matches`).
    ``max_batch_latency``: see :func:`detect`.
    """
    if isinstance(backend, str):
        from .planner import backend_for

        impl = backend_for(backend, max_batch_latency)
    else:
        impl = backend
    rules = [in_time_units(r, table.time) for r in rules]
    check_schema(rules, table)
    order = rule_order(rules)
    consumed_types = {t for r in rules for t in r.input_types}
    results: dict[int, RuleResult] = {}
    for i in order:
        rule = rules[i]
        if count_only and rule.name not in consumed_types:
            res = RuleResult(rule, np.empty(0, np.int64), np.empty((0, rule.n_predicates), np.int64),
                             {}, count=count_matches(impl, rule, table))
        else:
            res = composite_events(rule, table, impl.match(rule, table, 0, len(table), None))
        results[i] = res
        if rule.name in consumed_types:
            table = append_composites(table, [res])
        if on_rule is not None:
            on_rule(rule)
    return [results[i] for i in range(len(rules))]


def detect(
    events: pd.DataFrame | pa.Table,
    rules,
    backend: str = "auto",
    time_unit: str = "s",
    output: str = "pandas",
    max_batch_latency: float | None = None,
    max_matches: int | None = None,
):
    """Detect the composite events that ``rules`` define in ``events``.

    Parameters
    ----------
    events:
        A pandas DataFrame (or Arrow table) with ``type``, ``ts`` (datetime64 or numbers in
        ``time_unit``), optional ``id`` (int64; else the row position) and attribute columns; or
        an :class:`~cep_gpu.events.EventTable` already ingested (its own time unit applies).
    rules:
        A :class:`~cep_gpu.model.Rule`, rule text (see ``parse_rules``), or a list of Rules and
        rule texts (each text may hold several rules). Anything else (``None``, ``bytes``, a
        number) is an :class:`~cep_gpu.errors.ArgumentError`, as are a ``backend`` that is not
        a str and an unknown ``output``.
    backend:
        ``"auto"``, ``"cpu"``, ``"gpu"``, ``"reference"`` or ``"aip"``. All return the same rows.
    time_unit:
        Unit of numeric ``ts`` values: ``ns``, ``us``, ``ms``, ``s``, ``min`` or ``h``.
    output:
        ``"pandas"`` (a DataFrame), ``"arrow"`` (a ``pyarrow.Table``) or ``"count"`` (a dict of
        composite events per rule name).
    max_batch_latency:
        For ``backend="auto"``: the most seconds one launch of the kernels may be estimated to
        take; the planner splits each rule's terminators into batches within it and picks the
        device per batch. ``None`` (default): unbounded, one batch per rule; ``0``: one
        terminator per batch. A number of seconds or a ``timedelta``. Other backends accept it
        and ignore it (they process all terminators of a rule in one call).
    max_matches:
        The most matches a rule with a Kleene position may be estimated to produce (default
        ``cep_gpu.kleene.DEFAULT_MAX_MATCHES``); over it, :class:`~cep_gpu.errors.MatchLimitError`
        is raised before the matches are built (docs/language.md, Kleene closure).

    Returns
    -------
    One row per composite event, sorted by ``ts``, ``rule``, ``ids``: columns ``rule``, ``ts``
    (the input's dtype), ``ids`` (Arrow ``list<int64>`` of the bound event ids in declaration
    order) and one column per attribute defined by any rule.

    Example
    -------
    >>> import pandas as pd, cep_gpu
    >>> ev = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "x": [1, 1]})
    >>> cep_gpu.detect(ev, "define AB(x: int) from B(x=$x) and each A(x=$x) within 5 s from B where x=B.x",
    ...                backend="reference")[["rule", "ts", "x"]]
      rule   ts  x
    0   AB  2.0  1
    """
    if not isinstance(output, str) or output not in ("pandas", "arrow", "count"):
        raise ArgumentError(f"output must be 'pandas', 'arrow' or 'count', not {_short(output)}")
    if not isinstance(backend, str) and not hasattr(backend, "match"):
        raise ArgumentError(f"backend must be a backend name (a str), got {_short(backend)}")
    rule_list = as_rules(rules)
    if isinstance(events, pa.Table):
        table = EventTable.from_arrow(events, time_unit=time_unit)
    elif isinstance(events, pd.DataFrame):
        table = EventTable.from_pandas(events, time_unit=time_unit)
    elif isinstance(events, EventTable):
        table = events
    else:
        raise EventError(f"events must be a pandas DataFrame or a pyarrow Table, got {type(events).__name__}")
    from .kleene import limit_or_default

    with limit_or_default(max_matches):
        results = detect_table(table, rule_list, backend, count_only=output == "count",
                               max_batch_latency=max_batch_latency)
    if output == "count":
        counts: dict[str, int] = {}
        for r in results:
            counts[r.rule.name] = counts.get(r.rule.name, 0) + len(r)
        return counts
    schema = OutputSchema.of(rule_list)
    return assemble(results, schema, table, arrow=output == "arrow")
