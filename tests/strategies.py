"""Hypothesis strategies for differential tests: random rules (as rule text) and event streams.

Everyone's differential tests reuse these; the main entry point is :func:`rules_and_streams`::

    from hypothesis import given, settings
    from strategies import rules_and_streams

    @settings(max_examples=50, deadline=None)
    @given(rules_and_streams())
    def test_cpu_equals_reference(case):
        rule_text, events = case
        assert same(detect(events, rule_text, backend="cpu"), detect(events, rule_text, backend="reference"))

Streams are small and adversarial: event types ``A``, ``B``, ``C`` (and ``D``, only ever negated
or aggregated), integer timestamps in seconds (``ts`` int64, in order, many ties), windows of whole
seconds (so events fall exactly on window edges), attributes with tiny domains and some nulls:
``x`` (int, nullable ``Int64``), ``y`` (float, NaN = null), ``s`` (string ``"u"``/``"v"``/None).

Rules (TESLA syntax): a terminator and up to four ``each|last|first`` predicates anchored at any
earlier one, with static filters, parameters (``x = $k`` binds at its first occurrence and constrains
later), cross-event conditions with arithmetic, negations (``within ... from`` or ``between``),
aggregates (``Count/Sum/Avg/Min/Max``, in a condition and in ``where``), ``consuming``, and a
``where`` clause. Sequence patterns (``SEQ``/``AND`` with ``NOT``, ``within``, ``select``,
``return``) come from :func:`seq_rules`. :func:`rule_hierarchies` gives two rules where the second
reads the composite events of the first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import strategies as st

TYPES = ("A", "B", "C")
NEG_TYPES = ("A", "B", "C", "D")
#: D (never a positive predicate) is rarer in streams, so that more rules match
STREAM_TYPES = ("A", "B", "C", "A", "B", "C", "D")
POLICIES = ("each", "last", "first")
WINDOWS = (1, 2, 3, 5, 8)

__all__ = [
    "event_streams",
    "rule_hierarchies",
    "rules_and_streams",
    "seq_rules",
    "tesla_rules",
]


# -- event streams ------------------------------------------------------------------------------------


@st.composite
def event_streams(
    draw, max_events: int = 24, max_ts: int | None = None, types=STREAM_TYPES, min_events: int = 0
) -> pd.DataFrame:
    """A DataFrame of events in timestamp order (``type``, ``ts`` int seconds, ``x``, ``y``, ``s``).

    No ``id`` column: ids are row positions, as in batch ``detect`` and ``Engine.publish``.
    Timestamps lie in ``[0, max_ts]`` (default: two thirds of the number of events).
    """
    n = draw(st.integers(min_events, max_events))
    top = max_ts if max_ts is not None else max(2, (2 * n) // 3)  # dense: many ties and edges
    ts = sorted(draw(st.lists(st.integers(0, top), min_size=n, max_size=n)))
    kinds = draw(st.lists(st.sampled_from(types), min_size=n, max_size=n))
    # small domains, roughly one value in six null
    xs = draw(st.lists(st.sampled_from([0, 1, 0, 1, 2, None]), min_size=n, max_size=n))
    ys = draw(st.lists(st.sampled_from([0.0, 1.5, 3.0, 1.5, 0.0, None]), min_size=n, max_size=n))
    ss = draw(st.lists(st.sampled_from(["u", "v", "u", "v", "u", None]), min_size=n, max_size=n))
    return pd.DataFrame({
        "type": pd.Series(kinds, dtype=object),
        "ts": np.array(ts, dtype=np.int64),
        "x": pd.array(xs, dtype="Int64"),
        "y": np.array([np.nan if v is None else v for v in ys], dtype=np.float64),
        "s": pd.Series(ss, dtype=object),
    })


# -- expressions --------------------------------------------------------------------------------------


def _static_filter(draw) -> str:
    return draw(st.sampled_from([
        "x != 2", "x >= 1", "x = 0", "y > 1.0", "y <= 1.5", "s = 'u'", "s != 'v'", "x + 1 > y",
    ]))


def _cross_condition(draw, earlier: list[str]) -> str:
    other = draw(st.sampled_from(earlier))
    return draw(st.sampled_from([
        f"y >= {other}.y - 1.5",
        f"x != {other}.x",
        f"x * 2 > {other}.x",
        f"s = {other}.s",
        f"y / 2 < {other}.y",
    ]))


# -- TESLA rules --------------------------------------------------------------------------------------


@st.composite
def tesla_rules(
    draw,
    name: str = "R",
    max_predicates: int = 5,
    types=TYPES,
    negations: bool = True,
    aggregates: bool = True,
    consuming: bool = True,
    policies=POLICIES,
) -> str:
    """Rule text of one random TESLA rule named ``name`` (predicates aliased ``p0``, ``p1``, ...)."""
    n = draw(st.integers(1, max_predicates))
    param_on = draw(st.lists(st.sampled_from([True, False, False]), min_size=n, max_size=n))
    string_param_on = draw(st.lists(st.sampled_from([True, False, False]), min_size=n, max_size=n))
    items: list[str] = []
    aliases: list[str] = []
    for i in range(n):
        conds = []
        if param_on[i]:
            conds.append("x = $k")  # the first occurrence binds $k, later ones constrain
        if string_param_on[i]:
            conds.append("s = $q")
        if draw(st.integers(0, 4)) == 0:
            conds.append(_static_filter(draw))
        if i > 0 and draw(st.integers(0, 4)) == 0:
            conds.append(_cross_condition(draw, aliases))
        pred = f"{draw(st.sampled_from(types))}({' and '.join(conds)}) as p{i}"
        if i == 0:
            items.append(pred)
        else:
            policy = draw(st.sampled_from(policies))
            anchor = draw(st.sampled_from(aliases))
            items.append(f"{policy} {pred} within {draw(st.sampled_from(WINDOWS))} s from {anchor}")
        aliases.append(f"p{i}")

    bound_params = [p for p, on in (("$k", any(param_on)), ("$q", "s = $q" in " ".join(items))) if on]
    if negations:
        for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
            conds = []
            if bound_params and draw(st.booleans()):
                conds.append("x = $k" if draw(st.sampled_from(bound_params)) == "$k" else "s = $q")
            if draw(st.booleans()):
                conds.append(_static_filter(draw))
            body = f"{draw(st.sampled_from(NEG_TYPES))}({' and '.join(conds)})"
            items.append(f"not {body} {_span(draw, aliases)}")
    where = ["t = p0.x"]
    if aggregates and draw(st.booleans()):
        fn = draw(st.sampled_from(["Count", "Sum", "Avg", "Min", "Max"]))
        inner = "x = $k" if "$k" in bound_params and draw(st.booleans()) else ""
        agg = f"a0={fn}({draw(st.sampled_from(NEG_TYPES))}({inner}) {_span(draw, aliases)})"
        if fn != "Count":
            agg += ".y"
        if draw(st.booleans()):
            agg += draw(st.sampled_from([" > 1.0", " >= 1", " < 2.0", " != 0"]))
        items.append(agg)
        where.append("agg = a0")
    if n > 1 and draw(st.booleans()):
        where.append(f"w = p{n - 1}.y + p0.y")
    text = f"define {name} from " + "\n  and ".join(items) + "\nwhere " + ", ".join(where)
    if consuming and n > 1 and draw(st.integers(0, 3)) == 0:
        used = draw(st.lists(st.sampled_from(aliases), min_size=1, max_size=2, unique=True))
        text += "\nconsuming " + ", ".join(used)
    return text


def _span(draw, aliases: list[str]) -> str:
    if len(aliases) > 1 and draw(st.booleans()):
        a, b = draw(st.lists(st.sampled_from(aliases), min_size=2, max_size=2, unique=True))
        return f"between {a} and {b}"
    return f"within {draw(st.sampled_from(WINDOWS))} s from {draw(st.sampled_from(aliases))}"


# -- SEQ / AND patterns ---------------------------------------------------------------------------------


@st.composite
def seq_rules(draw, name: str = "S", max_positions: int = 5, types=TYPES, policies=POLICIES) -> str:
    """Rule text of one random sequence pattern: ``SEQ`` (or ``AND``) with optional ``NOT``s."""
    n = draw(st.integers(1, max_positions))
    kind = draw(st.sampled_from(["SEQ", "SEQ", "AND"])) if n > 1 else "SEQ"
    positives = [(draw(st.sampled_from(types)), f"e{i}") for i in range(n)]
    items = [f"{t} {a}" for t, a in positives]
    negs: list[str] = []
    if kind == "SEQ" and draw(st.booleans()):
        pos = draw(st.integers(0, n))  # 0: leading, n: trailing, else between neighbours
        items.insert(pos, f"NOT({draw(st.sampled_from(NEG_TYPES))} z)")
        negs.append("z")
    conds = []
    aliases = [a for _, a in positives]
    for _ in range(draw(st.integers(0, 2))):
        a = draw(st.sampled_from(aliases))
        conds.append(draw(st.sampled_from([
            f"{a}.x != 2", f"{a}.y > 1.0", f"{a}.s = 'u'", f"{a}.x >= 1 or {a}.y = 0.0",
        ])))
    if n > 1 and draw(st.booleans()):
        a, b = draw(st.lists(st.sampled_from(aliases), min_size=2, max_size=2, unique=True))
        conds.append(draw(st.sampled_from([f"{a}.x = {b}.x", f"{a}.y < {b}.y + 1", f"{a}.s != {b}.s"])))
    if negs and draw(st.booleans()):
        conds.append(draw(st.sampled_from(["z.x = e0.x", "z.y > 1.0", f"z.s = e{n - 1}.s"])))
    text = f"define {name} pattern {kind}({', '.join(items)})"
    if conds:
        text += "\nwhere " + " and ".join(f"({c})" if " or " in c else c for c in conds)
    text += f"\nwithin {draw(st.sampled_from(WINDOWS))} s"
    if draw(st.booleans()):
        text += f"\nselect {draw(st.sampled_from(policies))}"
    if draw(st.booleans()):
        text += f"\nreturn t := e0.x, w := e{n - 1}.y"
    return text


# -- combinations -----------------------------------------------------------------------------------


@st.composite
def rule_hierarchies(draw, max_predicates: int = 3) -> str:
    """Text of two rules: ``R0`` over primitive events and ``R1`` reading ``R0`` events too.

    ``R0`` gives its composite events attributes ``x``, ``y`` and ``s`` so that ``R1``'s filters
    apply to them as to primitive events.
    """
    r0 = draw(tesla_rules(name="R0", max_predicates=max_predicates, aggregates=False))
    r0 = r0.replace("where t = p0.x", "where x = p0.x, y = p0.y, s = p0.s")
    r1 = draw(tesla_rules(name="R1", max_predicates=max_predicates, types=("A", "B", "R0")))
    return r0 + "\n\n" + r1


@st.composite
def rules_and_streams(
    draw, syntax=("tesla", "seq"), max_events: int = 24, hierarchy: bool = True, min_events: int = 0
):
    """``(rule_text, events)``: random rule text (one rule, or a two-level hierarchy) and a stream.

    ``syntax`` picks from ``"tesla"`` and ``"seq"`` rules.
    """
    choices = list(syntax)
    if hierarchy and "tesla" in syntax:
        choices.append("hierarchy")
    which = draw(st.sampled_from(choices))
    if which == "tesla":
        text = draw(tesla_rules())
    elif which == "seq":
        text = draw(seq_rules())
    else:
        text = draw(rule_hierarchies())
    return text, draw(event_streams(max_events=max_events, min_events=min_events))
