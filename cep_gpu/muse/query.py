"""Queries and their projections π(q, E') (paper §2.2, §4.2), with output-rate estimates r̂ (§4.4).

A :class:`Query` is an operator tree of ``SEQ`` / ``AND`` nodes over event types (each type at most
once, as the paper's construction assumes, §6), a window, ``where`` conjuncts and pairwise
selectivities. It compiles to a cep-gpu rule, so every projection runs on the engine's real path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd
from lark import Tree

from ..errors import ArgumentError, CepError
from ..language.common import UNITS
from ..language.parser import parse_tree
from .errors import MuseError

# A tree is an event type (str) or (kind, children) with kind "SEQ" or "AND".
Tree_ = "str | tuple[str, tuple]"


def leaves(tree) -> tuple[str, ...]:
    """The event types of ``tree`` in left-to-right order."""
    if isinstance(tree, str):
        return (tree,)
    return tuple(t for c in tree[1] for t in leaves(c))


def project_tree(tree, keep: frozenset[str]):
    """Paper §4.2: drop leaves not in ``keep``; drop emptied operators; lift single children;
    merge a child into a parent of the same kind (a valid query never nests SEQ in SEQ)."""
    if isinstance(tree, str):
        return tree if tree in keep else None
    kind, children = tree
    out: list = []
    for c in children:
        pc = project_tree(c, keep)
        if pc is None:
            continue
        if not isinstance(pc, str) and pc[0] == kind:
            out.extend(pc[1])
        else:
            out.append(pc)
    if not out:
        return None
    if len(out) == 1:
        return out[0]
    return (kind, tuple(out))


def orderings(tree) -> int:
    """How many orders of the leaves' timestamps the tree accepts (SEQ: concatenation; AND: any
    interleaving of its children's orders)."""
    if isinstance(tree, str):
        return 1
    kind, children = tree
    inner = math.prod(orderings(c) for c in children)
    if kind == "SEQ":
        return inner
    sizes = [len(leaves(c)) for c in children]
    return inner * math.factorial(sum(sizes)) // math.prod(math.factorial(s) for s in sizes)


def tree_text(tree) -> str:
    """``SEQ(AND(A, B), C)``."""
    if isinstance(tree, str):
        return tree
    return f"{tree[0]}({', '.join(tree_text(c) for c in tree[1])})"


_TOKEN = re.compile(r"\s*(SEQ|AND|[A-Za-z_][A-Za-z0-9_]*|\(|\)|,)", re.IGNORECASE)


def parse_pattern(text: str):
    """``"SEQ(AND(A, B), C)"`` -> tree. Only SEQ / AND operators and event types."""
    toks: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise MuseError(f"pattern {text!r}: unexpected {text[pos:pos + 10]!r} at {pos}")
        toks.append(m.group(1))
        pos = m.end()
    i = 0

    def node():
        nonlocal i
        if i >= len(toks):
            raise MuseError(f"pattern {text!r}: unexpected end")
        tok = toks[i]
        i += 1
        if tok.upper() in ("SEQ", "AND") and i < len(toks) and toks[i] == "(":
            i += 1
            children = [node()]
            while i < len(toks) and toks[i] == ",":
                i += 1
                children.append(node())
            if i >= len(toks) or toks[i] != ")":
                raise MuseError(f"pattern {text!r}: expected ',' or ')'")
            i += 1
            kind = tok.upper()
            flat: list = []
            for c in children:  # SEQ(SEQ(a,b),c) is SEQ(a,b,c)
                flat.extend(c[1] if not isinstance(c, str) and c[0] == kind else [c])
            return (kind, tuple(flat)) if len(flat) > 1 else flat[0]
        if tok in "(),":
            raise MuseError(f"pattern {text!r}: unexpected {tok!r}")
        return tok

    tree = node()
    if i != len(toks):
        raise MuseError(f"pattern {text!r}: unexpected {toks[i]!r} after the pattern")
    return tree


@dataclass(frozen=True)
class Conjunct:
    """One top-level ``and`` operand of a ``where`` clause and the event types it mentions."""

    text: str
    types: frozenset[str]


@dataclass(frozen=True, eq=False)
class Query:
    """A query q = (O, λ, P) with window τ_q (paper §2.2), or one of its projections.

    Build with :meth:`from_text` (a cep-gpu ``SEQ``/``AND`` rule) or :meth:`from_pattern`.
    ``selectivity`` maps a pair (or set) of event types to σ of the predicates over them (§2.2:
    predicates are independent, σ(q) = Π σ(a)); pairs not given have σ = 1.
    """

    name: str
    tree: object
    window: float  # seconds
    aliases: Mapping[str, str]  # type -> alias
    conjuncts: tuple[Conjunct, ...] = ()
    selectivity: Mapping[frozenset[str], float] = field(default_factory=dict)
    parent: str | None = None  # the query this is a projection of
    # the query's own output: its attribute declarations ``(z: string, ...)`` and ``return ...``
    # clause as written; they do not enter planning, and projections have neither
    decls: str = ""
    returns: str = ""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_text(cls, text: str, selectivity: Mapping | None = None) -> Query:
        """One cep-gpu ``define Q pattern SEQ(A a, B b, ...) [where ...] within W`` rule (for a
        text of several, :func:`parse_queries`).

        The where clause is split into top-level conjuncts; a projection keeps those whose types it
        has (§4.2, Def. 2). ``return`` (and declared attribute types) give the sinks' matches
        their attributes; they do not change the plan. ``NOT``, ``select last/first`` and repeated
        types are outside the paper's model (§6: no type twice) and raise :class:`MuseError`.
        ``selectivity`` maps a type or a pair of the query's types to σ; a key naming another
        type is an :class:`~cep_gpu.errors.ArgumentError`.
        """
        rules = _parse_rules(text)
        if len(rules) != 1:
            raise MuseError(
                f"Query.from_text takes one rule, got {len(rules)} ({', '.join(r.name for r, _ in rules)}): "
                "muse.parse_queries(text) reads several"
            )
        rule, rt = rules[0]
        return cls._from_rule(text, rule, rt, selectivity)

    @classmethod
    def _from_rule(cls, text: str, rule, rt, selectivity: Mapping | None) -> Query:
        """The query of ``rule`` (compiled) and ``rt`` (its syntax tree, positions in ``text``)."""
        if rule.kleene_positions:  # the tree walk below would read KL(B b) as a plain B position
            raise MuseError(f"query {rule.name}: Kleene closure KL(...) is not supported by MuSE planning")
        if rt.data != "seq_rule":
            raise MuseError(f"query {rule.name}: a MuSE query is a 'define NAME pattern SEQ(...)/AND(...)' rule")
        pattern = next(c for c in rt.children if isinstance(c, Tree) and c.data.endswith("_pattern"))
        kind = "AND" if pattern.data == "and_pattern" else "SEQ"
        types: list[str] = []
        aliases: dict[str, str] = {}
        alias_type: dict[str, str] = {}
        for item in pattern.children:
            if item.data == "not_item":
                raise MuseError(f"query {rule.name}: NOT is not supported by MuSE planning")
            t = str(item.children[0])
            a = str(item.children[1]) if item.children[1:] and item.children[1] else t
            if t in aliases:
                raise MuseError(
                    f"query {rule.name}: type {t!r} occurs twice (MuSE needs distinct types, §6)"
                )
            types.append(t)
            aliases[t] = a
            alias_type[a] = t
        window = None
        decls = returns = ""
        conjs: list[Conjunct] = []
        for clause in rt.children:
            if not isinstance(clause, Tree):
                continue
            if clause.data == "within_clause":
                num, unit = clause.children[0].children
                window = float(num) * UNITS[str(unit).lower().rstrip(".")] / 1e9
            elif clause.data in ("select_clause",):
                if str(clause.children[0]).lower() != "each":
                    raise MuseError(f"query {rule.name}: only 'select each' (skip-till-any-match)")
            elif clause.data == "return_clause":
                returns = text[clause.meta.start_pos : clause.meta.end_pos]
            elif clause.data == "attr_decls":
                decls = text[clause.meta.start_pos : clause.meta.end_pos]
            elif clause.data == "where_cond":
                from ..language.seq import conjuncts

                for conj in conjuncts(clause.children[0]):
                    ctext = text[conj.meta.start_pos : conj.meta.end_pos]
                    mentioned = {
                        alias_type[str(q.children[0])]
                        for q in conj.iter_subtrees()
                        if q.data == "qualified"
                    }
                    conjs.append(Conjunct(ctext, frozenset(mentioned)))
        if window is None:
            window = 0.0 if len(types) == 1 else None
        tree_ = (kind, tuple(types)) if len(types) > 1 else types[0]
        return cls(
            rule.name, tree_, float(window or 0.0), aliases, tuple(conjs),
            _sel(selectivity, types, rule.name), decls=decls, returns=returns,
        )

    @classmethod
    def from_pattern(
        cls,
        pattern: str,
        window: float,
        name: str = "Q",
        selectivity: Mapping | None = None,
        conditions: Mapping | None = None,
    ) -> Query:
        """A query from an operator tree such as ``"SEQ(AND(A, B), C)"``.

        ``conditions`` maps a type or a tuple of types to a ``where`` condition over them, written
        with the aliases ``x_<Type>`` (``{("A", "B"): "x_A.k = x_B.k"}``). Nested operators
        compile to an ``AND`` rule with timestamp conditions (a SEQ child's events precede the next
        child's), so any tree runs on cep-gpu.
        """
        tree = parse_pattern(pattern)
        types = leaves(tree)
        if len(set(types)) != len(types):
            raise MuseError(f"pattern {pattern!r}: a type occurs twice (MuSE needs distinct types)")
        if window <= 0 and len(types) > 1:
            raise MuseError(f"query {name}: window must be positive, got {window}")
        conjs = []
        for key, text in (conditions or {}).items():
            ctypes = frozenset([key] if isinstance(key, str) else key)
            if not ctypes <= set(types):
                raise MuseError(f"condition {text!r} names types outside the pattern")
            conjs.append(Conjunct(str(text), ctypes))
        return cls(
            name, tree, float(window), {t: f"x_{t}" for t in types}, tuple(conjs),
            _sel(selectivity, types, name),
        )

    # ------------------------------------------------------------------ structure
    @cached_property
    def types(self) -> frozenset[str]:
        """The event types of the primitive operators O_p."""
        return frozenset(leaves(self.tree))

    @cached_property
    def order(self) -> tuple[str, ...]:
        """The event types in the query's left-to-right order (the order of match ids)."""
        return leaves(self.tree)

    @property
    def root(self) -> str:
        """The query this is a projection of (itself for a query)."""
        return self.parent or self.name

    @property
    def key(self) -> tuple[str, frozenset[str]]:
        """(root query name, types): identifies a projection. A primitive projection without
        filters is the same for every query (its matches are the type's events): ("*", {E})."""
        if len(self.order) == 1 and not self.conjuncts and not self.selectivity:
            return ("*", self.types)
        return (self.root, self.types)

    @property
    def is_plain_primitive(self) -> bool:
        """A single event type with no filter: its matches are the events themselves."""
        return len(self.order) == 1 and not self.conjuncts

    def project(self, types: Iterable[str]) -> Query:
        """π(q, E'): the projection onto ``types`` (paper Def. 2), named ``<q>_p_<types>``."""
        keep = frozenset(types) & self.types
        if not keep:
            raise MuseError(f"projection of {self.name} onto {sorted(types)} is empty")
        tree = project_tree(self.tree, keep)
        name = self.root if keep == self.types else f"{self.root}_p_{'_'.join(leaves(tree))}"
        if keep == self.types and self.parent is None:
            return self
        return Query(
            name,
            tree,
            self.window,
            {t: self.aliases[t] for t in keep},
            tuple(c for c in self.conjuncts if c.types <= keep),
            {k: v for k, v in self.selectivity.items() if k <= keep},
            self.root,
        )

    # ------------------------------------------------------------------ rates (§4.4)
    def sigma(self) -> float:
        """σ(p): the product of the selectivities among this query's types."""
        return math.prod(v for k, v in self.selectivity.items() if k <= self.types)

    def rate(self, network) -> float:
        """r̂(p) per event type binding, in matches per second.

        Paper §4.4 gives SEQ Π r̂(o_i) and AND k·Π r̂(o_i) and leaves out the window (§2.2). We use
        the expected rate of matches of k independent Poisson streams within the window W:
        σ(p) · Π r(E) · W^(k-1) · L / (k-1)!, with L the number of timestamp orders the operator
        tree accepts (flat SEQ: 1; flat AND: k!, which gives the paper's k·Π at W = 1).
        """
        k = len(self.order)
        rates = math.prod(network.rate(t) for t in self.order)
        if k == 1:
            return self.sigma() * rates
        w = self.window
        return self.sigma() * rates * w ** (k - 1) * orderings(self.tree) / math.factorial(k - 1)

    def bindings(self, network) -> int:
        """|𝔈(p)|: the number of event type bindings (one origin node per type, Def. 1)."""
        return math.prod(len(network.nodes_of(t)) for t in self.order)

    # ------------------------------------------------------------------ cep-gpu rule
    def rule_text(self) -> str:
        """This (projection of a) query as cep-gpu rule text; ids come in :attr:`order`."""
        if self.is_plain_primitive:
            raise MuseError(f"{self.name} is a primitive projection without filters; no rule")
        items = ", ".join(f"{t} {self.aliases[t]}" for t in self.order)
        conds = [f"({c.text})" for c in self.conjuncts]
        flat_seq = isinstance(self.tree, str) or (
            self.tree[0] == "SEQ" and all(isinstance(c, str) for c in self.tree[1])
        )
        if not flat_seq:
            conds += _order_conditions(self.tree, self.aliases)
        where = f" where {' and '.join(conds)}" if conds else ""
        kind = "SEQ" if flat_seq else "AND"
        within = f" within {_duration(self.window)}" if len(self.order) > 1 else ""
        return f"define {self.name} pattern {kind}({items}){where}{within}"

    def output_rule_text(self) -> str:
        """The query as cep-gpu rule text with its own attribute declarations and ``return``
        clause (what a sink evaluates on the events of its matches; :meth:`rule_text` without
        them is what the plan's vertices run)."""
        text = self.rule_text()
        if self.decls:
            text = text.replace(f"define {self.name} ", f"define {self.name}{self.decls} ", 1)
        return f"{text} {self.returns}" if self.returns else text

    def __repr__(self) -> str:
        return f"Query({self.name}: {tree_text(self.tree)} within {self.window:g}s)"


def _order_conditions(tree, aliases) -> list[str]:
    if isinstance(tree, str):
        return []
    out: list[str] = []
    kind, children = tree
    for c in children:
        out += _order_conditions(c, aliases)
    if kind == "SEQ":
        for left, right in zip(children, children[1:]):
            for x in leaves(left):
                for y in leaves(right):
                    out.append(f"{aliases[x]}.ts < {aliases[y]}.ts")
    return out


def _duration(seconds: float) -> str:
    ns = round(seconds * 1e9)
    if ns % 10**9 == 0:
        return f"{ns // 10**9} s"
    if ns % 10**6 == 0:
        return f"{ns // 10**6} ms"
    raise MuseError(f"window {seconds} s is not a whole number of milliseconds")


def _sel(selectivity: Mapping | None, types, query: str) -> dict[frozenset[str], float]:
    out: dict[frozenset[str], float] = {}
    if selectivity is not None and not isinstance(selectivity, Mapping):
        raise ArgumentError(f"query {query}: selectivity must be a mapping (type or pair of types) -> σ, "
                            f"got {type(selectivity).__name__}")
    for k, v in (selectivity or {}).items():
        key = frozenset([k] if isinstance(k, str) else k)
        unknown = sorted(key - set(types))
        if unknown:  # was kept, and entered no projection: the σ the user meant was 1
            raise ArgumentError(
                f"query {query}: selectivity key {k!r} names type(s) {unknown} that the query does "
                f"not have (its types: {list(types)})"
            )
        if not (isinstance(v, (int, float)) and 0 < v <= 1):
            raise MuseError(f"selectivity of {sorted(key)} must be in (0, 1], got {v!r}")
        if key in out:  # ("A", "B") and ("B", "A") are one key: the last would silently win
            raise ArgumentError(f"query {query}: σ of the types {sorted(key)} is given twice "
                                f"({out[key]!r}, then {k!r}: {v!r})")
        out[key] = float(v)
    return out


def _parse_rules(text: str) -> list:
    """(compiled rule, its syntax tree) for every rule of ``text``, in order."""
    from .. import parse_rules

    if not isinstance(text, str):
        raise MuseError(f"query text must be a string, got {type(text).__name__}")
    try:
        rules = parse_rules(text)
        tree = parse_tree(text)
    except CepError as err:
        raise MuseError(f"query does not parse: {err}") from None
    trees = [c for c in tree.children if isinstance(c, Tree)]
    if len(trees) != len(rules):  # parse_rules keeps the text's order, one rule per tree
        raise MuseError(f"query text: {len(rules)} rules but {len(trees)} definitions")
    return list(zip(rules, trees))


def parse_queries(text: str, selectivity: Mapping[str, Mapping] | None = None) -> list[Query]:
    """Every rule of ``text`` (``define`` rules, separated as cep-gpu rule files are: new lines,
    blank lines or ``;``) as a :class:`Query`, in order; what ``cep-gpu muse plan|simulate`` read
    from a query file. ``selectivity``: ``{query name: {type or pair of types: σ}}``."""
    rules = _parse_rules(text)
    names = [r.name for r, _ in rules]
    selectivity = dict(selectivity or {})
    unknown = sorted(set(selectivity) - set(names))
    if unknown:
        raise ArgumentError(f"selectivity names no query of the text: {unknown} (queries: {names})")
    return [Query._from_rule(text, r, rt, selectivity.get(r.name)) for r, rt in rules]


def as_queries(queries) -> list[Query]:
    """A Query, rule text (one or several rules, see :func:`parse_queries`), or a list."""
    if isinstance(queries, Query):
        return [queries]
    if isinstance(queries, str):
        return parse_queries(queries)
    out = []
    for q in queries:
        out.extend(as_queries(q))
    if not out:
        raise MuseError("no queries given")
    names = [q.name for q in out]
    if len(set(names)) != len(names):
        raise MuseError(f"query names must be distinct, got {names}")
    return out


def selectivity_from_sample(queries, events, time_unit: str = "s", backend: str = "auto") -> dict[str, dict]:
    """σ of each query's ``where`` conditions measured on a sample of events, in the form
    :func:`parse_queries` takes: ``{query name: {type or (type, type): σ}}``.

    * a pair of types: DecoPa's estimator (:meth:`cep_gpu.decopa.Stats.from_sample`): the matches
      of the two-type sub-pattern with every condition over the two (and their one-type
      conditions) over the matches with only the one-type conditions;
    * a single type with conditions of its own: the events of the type that pass them over all
      events of the type (:func:`cep_gpu.detect` counts the type's projection, ``q.project([E])``).

    No evidence (no event of the type, no pair in the sample) gives no entry (σ = 1); evidence but
    no match gives half a match over the candidates, so that σ stays in (0, 1] (as DecoPa does).
    Conditions over three or more types get no σ (the model's independence assumption).
    ``events``: a pandas DataFrame or Arrow table with ``type``, ``ts`` (numbers in ``time_unit``
    or datetimes) and the attributes the conditions read.
    """
    import pyarrow as pa

    from .. import detect, parse_rule
    from ..decopa import DecompositionError, Stats
    from ..events import EventTable, frame_from_arrow

    qs = as_queries(queries)
    if isinstance(events, (pa.Table, pa.RecordBatch)):
        events = frame_from_arrow(pa.table(events))
    if not isinstance(events, pd.DataFrame):
        raise MuseError(f"the sample must be a pandas DataFrame or an Arrow table, got {type(events).__name__}")
    if "type" not in events.columns:
        raise MuseError(f"the sample has no 'type' column (its columns: {list(map(str, events.columns))})")
    try:
        table = EventTable.from_pandas(events, time_unit=time_unit)
    except CepError as err:
        raise MuseError(f"sample: {err}") from None
    if not len(table):
        raise MuseError("the sample has no events to measure selectivities on")
    per_type = events["type"].astype(str).value_counts()
    out: dict[str, dict] = {}
    for q in qs:
        sel: dict = {}
        for t in q.order:  # one-type conditions: a filter where the events are produced
            p = q.project([t])
            n = int(per_type.get(t, 0))
            if p.is_plain_primitive or n == 0:
                continue
            passed = int(detect(table, p.rule_text(), backend=backend, output="count").get(p.name, 0))
            sel[t] = passed / n if passed else 0.5 / n
        if len(q.order) > 1 and any(len(c.types) == 2 for c in q.conjuncts):
            try:
                stats = Stats.from_sample(table, parse_rule(_flat_rule(q)), backend=backend)
            except (DecompositionError, ArgumentError) as err:
                raise MuseError(f"query {q.name}: cannot measure its selectivities: {err}") from None
            type_of = {a: t for t, a in q.aliases.items()}
            for (a, b), s in stats.selectivity.items():
                sel[(type_of[a], type_of[b])] = s
        if sel:
            out[q.name] = sel
    return out


def _flat_rule(q: Query) -> str:
    """``q`` as one flat SEQ or AND rule with its own conditions only (a nested tree as AND: its
    order conditions are not conditions whose σ the user gives)."""
    flat = isinstance(q.tree, str) or all(isinstance(c, str) for c in q.tree[1])
    kind = q.tree[0] if flat and not isinstance(q.tree, str) else "AND"
    items = ", ".join(f"{t} {q.aliases[t]}" for t in q.order)
    where = " and ".join(f"({c.text})" for c in q.conjuncts)
    return (f"define {q.name} pattern {kind}({items})" + (f" where {where}" if where else "")
            + f" within {_duration(q.window)}")
