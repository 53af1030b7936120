"""Event rates and pairwise selectivities, the inputs of the cost model (paper §4.2, §5.3.1)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..errors import ArgumentError, is_finite_nonnegative
from ..model import Rule
from .query import Pattern, analyse, renumber


@dataclass(frozen=True)
class Stats:
    """Per-position rates (events per window, after the position's own filters) and pairwise
    selectivities.

    ``rates``: ``{alias: events per window}``. ``selectivity``: ``{(alias_a, alias_b): s}`` with
    ``0 < s <= 1``, unordered; a pair left out has selectivity 1 (no condition between the two).
    Checked against a rule by :meth:`resolve`.
    """

    rates: Mapping[str, float]
    selectivity: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.rates, Mapping):
            raise ArgumentError(f"rates must be a mapping alias -> events per window, got {type(self.rates).__name__}")
        if not isinstance(self.selectivity, Mapping):
            raise ArgumentError("selectivity must be a mapping (alias_a, alias_b) -> s")
        for alias, r in self.rates.items():
            if not is_finite_nonnegative(r):
                raise ArgumentError(f"rate of {alias!r} must be a finite number >= 0, got {r!r}")
        seen = {}
        for pair, s in self.selectivity.items():
            if not (isinstance(pair, tuple) and len(pair) == 2 and pair[0] != pair[1]):
                raise ArgumentError(f"selectivity key {pair!r} must be a pair of two different aliases")
            unordered = frozenset(pair)
            if unordered in seen:  # pairs are unordered: (a, b) and (b, a) would silently overwrite
                first = seen[unordered]
                raise ArgumentError(f"selectivity of the pair {first!r} given twice: {first!r} = "
                                    f"{self.selectivity[first]!r}, then {pair!r} = {s!r}")
            seen[unordered] = pair
            if not isinstance(s, (int, float)) or isinstance(s, bool) or math.isnan(s) or not 0 < s <= 1:
                raise ArgumentError(f"selectivity of {pair!r} must be in (0, 1], got {s!r}")
        # frozen: copy so that later edits of the caller's dicts cannot change a plan
        object.__setattr__(self, "rates", {str(a): float(r) for a, r in self.rates.items()})
        object.__setattr__(self, "selectivity", {tuple(p): float(s) for p, s in self.selectivity.items()})

    def resolve(self, pattern: Pattern) -> tuple[list[float], list[list[float]]]:
        """Rates per position and the symmetric selectivity matrix of ``pattern``'s positions.

        Raises :class:`~cep_gpu.errors.ArgumentError` for a missing rate or an unknown alias.
        """
        aliases = pattern.aliases
        for a in self.rates:
            if a not in aliases:
                raise ArgumentError(f"rates: unknown alias {a!r}; the rule's positions are {list(aliases)}")
        missing = [a for a in aliases if a not in self.rates]
        if missing:
            raise ArgumentError(f"rates: missing the rate of {missing} (rule positions {list(aliases)})")
        k = len(aliases)
        sel = [[1.0] * k for _ in range(k)]
        for (a, b), s in self.selectivity.items():
            for x in (a, b):
                if x not in aliases:
                    raise ArgumentError(f"selectivity: unknown alias {x!r}; the rule's positions are {list(aliases)}")
            i, j = aliases.index(a), aliases.index(b)
            sel[i][j] = sel[j][i] = s
        return [self.rates[a] for a in aliases], sel

    def to_json(self) -> dict:
        return {"rates": dict(self.rates),
                "selectivity": [[a, b, s] for (a, b), s in self.selectivity.items()]}

    @classmethod
    def from_json(cls, obj: Mapping) -> Stats:
        sel = obj.get("selectivity", {})
        if isinstance(sel, Mapping):  # {"a,b": s}
            sel = {tuple(k.split(",")): v for k, v in sel.items()}
        else:
            sel = {(a, b): s for a, b, s in sel}
        return cls(rates=obj.get("rates", {}), selectivity=sel)

    @classmethod
    def from_sample(cls, events, rule: Rule, time_unit: str = "s", backend: str = "auto") -> Stats:
        """Measure rates and selectivities of ``rule``'s positions on a sample of events.

        * rate of a position: the events passing its own filters (conditions that read only that
          position) per window, the window count being the sample's time span over ``within``
          (at least 1);
        * selectivity of a pair: the number of matches of the two-position sub-pattern with every
          condition over the two (and their filters), over the number without the pair's
          conditions, both counted by ``detect(..., output="count")``. No pair in the sample at
          all: 1 (no evidence). Pairs but no match: half a match over the pairs, so that the value
          stays in (0, 1] (docs/decopa.md, "Measured statistics").

        Conditions over three or more positions do not enter any selectivity (the model's
        independence assumption, paper §5.3.1).
        """
        from .. import detect
        from ..detect import check_schema
        from .ingest import ingest

        pattern = analyse(rule)
        table = ingest(events, time_unit)
        if not len(table):  # every rate would be 0 and the plan's c* infinite
            raise ArgumentError("Stats.from_sample: the sample has no events")
        # the user's rule, checked whole: the sub-patterns counted below are made-up rules whose
        # errors would name them and point past the end of their own text
        check_schema([rule], table, source="sample")
        span = int(table.ts.max() - table.ts.min())
        windows = max(span / pattern.window, 1.0) if pattern.window > 0 else 1.0

        def count(positions: frozenset[int], cond_ids) -> int:
            # the sub-pattern over ``positions`` with exactly the conditions ``cond_ids``
            pos = sorted(positions)
            conds = tuple(renumber(pattern.rule.conditions[i], {p: j for j, p in enumerate(pos)}) for i in cond_ids)
            sub = replace(pattern.sub_rule(positions), conditions=conds, name=rule.name)
            return int(detect(table, sub, backend=backend, output="count").get(rule.name, 0))

        rates = {}
        for p in range(pattern.k):
            rates[pattern.aliases[p]] = count(frozenset((p,)), pattern.conditions_within(frozenset((p,)))) / windows
        sel = {}
        for p in range(pattern.k):
            for q in range(p + 1, pattern.k):
                pair = frozenset((p, q))
                within = pattern.conditions_within(pair)
                filters = [i for i in within if len(pattern.condition_inputs[i]) <= 1]
                if len(filters) == len(within):
                    continue  # no condition on the pair
                without = count(pair, filters)
                if without == 0:
                    continue
                with_ = count(pair, within)
                sel[(pattern.aliases[p], pattern.aliases[q])] = with_ / without if with_ else 0.5 / without
        return cls(rates=rates, selectivity=sel)
