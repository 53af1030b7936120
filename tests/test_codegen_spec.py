"""cep_gpu/codegen/spec.py: what each binding step checks, the parameter index key, the layout."""

from __future__ import annotations

import cep_gpu
from cep_gpu.codegen.spec import lower

TOUCH = ("define T(p: string) from Vibration(painting = $p and value > 3.0) as v "
         "and last PeopleNear(painting = $p and n > 0) as q within 5 s from v "
         "and not Staff(room = 'R1') within 2 s from v where p = v.painting")


def test_filters_key_and_layout():
    rule = cep_gpu.parse_rule(TOUCH)
    spec = lower(rule)
    # static filters per predicate: painting present (the binding of $p) and value > 3.0 on
    # Vibration, n > 0 on PeopleNear
    assert [len(f) for f in spec.filters] == [2, 1]
    step0, step1 = spec.plans[0].steps
    assert step0.step == 0 and step0.pred == 0 and step1.policy == "last" and step1.window == 5_000_000_000
    # the equality on the parameter becomes the step's index key, not a residual check
    assert step1.key is not None and step1.key.attr == "painting" and step1.conditions == ()
    assert step0.negations + step1.negations == (0,)
    assert set(spec.layout.attrs) >= {"painting", "value", "n", "room"}
    assert spec.layout.strings == ("R1",)


def test_without_the_index_the_equality_is_checked_per_candidate():
    spec = lower(cep_gpu.parse_rule(TOUCH), use_index=False)
    step1 = spec.plans[0].steps[1]
    assert step1.key is None and len(step1.conditions) == 1
