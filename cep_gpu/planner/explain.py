"""What the planner would do for a rule (``cep-gpu explain``, ``Engine.explain``): columns,
windows, expected work and the device per batch."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from ..backends import gpu_usable
from ..errors import ArgumentError, is_finite_nonnegative
from ..events import EventTable
from ..model import Rule, static_conditions, step_checks
from ..rule_text import duration
from .batches import decide
from .profile import FEATURES, Profile, load_profile
from .work import (
    OTHER_SELECTIVITY,
    RuleWork,
    StepEstimate,
    average_launch,
    estimate_work,
    step_work,
)


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"



def explain_plan(
    rule: Rule,
    table_or_rates: EventTable | Mapping[str, float] | None = None,
    profile: Profile | str | os.PathLike | None = None,
    gpu_available: bool | None = None,
) -> str:
    """Per rule: its columns, windows, expected events per window, the decision and both estimates.

    ``table_or_rates``: an :class:`EventTable` (exact window ranges of every terminator), a mapping
    event type -> events per second (expected ranges), or ``None`` (structure only).
    """
    prof = load_profile(profile)
    usable = gpu_usable() if gpu_available is None else gpu_available
    lines = [f"rule {rule.name} ({rule.syntax}, {len(rule.plans)} plan{'s' if len(rule.plans) > 1 else ''})"]
    work = None
    if isinstance(table_or_rates, EventTable):
        work = estimate_work(rule, table_or_rates)
    elif table_or_rates is not None:
        work = _work_from_rates(rule, check_rates(table_or_rates, "rates"))
    steps = {s.pred: s for s in work.steps} if work is not None else {}
    for k, plan in enumerate(rule.plans):
        if len(rule.plans) > 1:
            lines.append(f"  plan {k + 1}: binding order {list(plan.order)}")
        for s, p in enumerate(plan.order):
            pred = plan.predicates[p]
            nfilt = len(static_conditions(rule, p))
            head = f"  column {s}: {pred.event_type}"
            head += f" as {pred.alias}" if pred.alias and pred.alias != pred.event_type else ""
            if s == 0:
                lines.append(f"{head}  terminator, {nfilt} filter(s)")
                continue
            anchor = plan.predicates[pred.anchor].alias if pred.anchor is not None else "?"
            line = f"{head}  {pred.policy} within {duration(int(pred.window or 0))} from {anchor}, {nfilt} filter(s)"
            st = steps.get(p)
            if st is not None:
                line += (
                    f"; expected {st.events_per_window:.1f} events per window, selectivity "
                    f"{st.selectivity:.3g}, {st.partials_out:.3g} partial sequences out"
                )
                if pred.kleene is not None:
                    line += f", {st.sets_per_span:.3g} Kleene set(s) per span"
            lines.append(line)
    for neg in rule.negations:
        lines.append(f"  not {neg.event_type} ({len(neg.conditions)} condition(s))")
    for agg in rule.aggregates:
        lines.append(f"  {agg.function}({agg.event_type}{'.' + agg.attribute if agg.attribute else ''})")
    if work is None:
        lines.append("  planner: no events or rates given, so no estimate")
        return "\n".join(lines)
    n = len(work.term_rows)
    if n == 0:
        lines.append("  planner: no terminators in the input")
        return "\n".join(lines)
    dev1, c1, g1, why1 = decide(prof, average_launch(work, isinstance(table_or_rates, EventTable)), usable)
    lines.append(
        f"  per terminator (one launch each): cpu {fmt_seconds(c1)}, gpu {fmt_seconds(g1)} -> {dev1} ({why1})"
    )
    if isinstance(table_or_rates, EventTable):
        feats = work.batch_features(0, n)
        dev, c, g, why = decide(prof, feats, usable)
        lines.append(
            f"  all {n} terminators in one batch: cpu {fmt_seconds(c)}, gpu {fmt_seconds(g)} -> {dev} ({why})"
        )
    lines.append(f"  profile: {prof.source}")
    return "\n".join(lines)



def check_rates(rates: Mapping[str, float], what: str) -> dict[str, float]:
    """``rates`` (event type -> events per second) as a dict, or an :class:`ArgumentError` naming
    ``what`` and the values that are not finite numbers >= 0."""
    bad = {k: v for k, v in dict(rates).items() if not is_finite_nonnegative(v)}
    if bad:
        raise ArgumentError(f"{what}: a mapping must give events per second for each event type "
                            f"(finite numbers >= 0), got {bad}; or pass sample events")
    return dict(rates)


def _work_from_rates(rule: Rule, rates: Mapping[str, float]) -> RuleWork:
    """Expected work of one terminator from event rates (events per second of event time)."""
    idx = {f: k for k, f in enumerate(FEATURES)}
    per = np.zeros((1, len(FEATURES)))
    per[0, idx["terminators"]] = 1.0
    steps: list[StepEstimate] = []
    events = 0.0
    for plan in rule.plans:
        partials = 1.0
        checks = step_checks(rule, plan)
        for s in range(1, len(plan.order)):
            p = plan.order[s]
            pred = plan.predicates[p]
            w = int(pred.window or 0)
            r = float(rates.get(pred.event_type, 0.0)) * w / 1e9
            events += r
            nonstatic = [c for c in checks[s].conditions if c not in static_conditions(rule, p)]
            sel = OTHER_SELECTIVITY ** len(nonstatic)
            pairs, matches, out, sets = (float(x) for x in step_work(pred, partials, r, sel))
            per[0, idx["pairs"]] += pairs
            per[0, idx["matches"]] += matches
            steps.append(StepEstimate(p, pred.event_type, pred.policy or "each", w, r, sel, partials, pairs,
                                      matches, out, sets))
            partials = out
        per[0, idx["outputs"]] += partials
    per[0, idx["events"]] = events
    return RuleWork(rule, np.zeros(1, np.int64), np.zeros(1, np.int64), per, steps, [], rule.lookback())

