"""kernels/cpu.py: the binary searches the generated checks use, and the generic kernels against a
plain Python loop."""

from __future__ import annotations

import numpy as np
import pytest
from cep_gpu.kernels import cpu


@pytest.mark.parametrize("x", [-1, 0, 1, 2, 3, 5, 9])
def test_bounds_match_numpy(x):
    a = np.array([0, 1, 1, 3, 3, 3, 8], np.int64)
    assert cpu.lower_bound(a, x) == np.searchsorted(a, x, "left")
    assert cpu.upper_bound(a, x) == np.searchsorted(a, x, "right")


def test_each_and_select_over_always_valid():
    seqs = np.array([[-1, 10], [-1, 11], [-1, 12]], np.int64)  # column 1 bound (terminators)
    cand = np.array([1, 2, 3, 4, 5], np.int64)
    lo = np.array([0, 1, 4], np.int64)
    hi = np.array([2, 1, 5], np.int64)  # the second sequence has no candidate
    excl = np.zeros(16, np.bool_)
    env = (np.zeros(16, np.int64),)
    out = cpu.combine_each(cpu.always_valid, seqs, lo, hi, cand, 0, excl, False, env, True)
    assert out.tolist() == [[1, 10], [2, 10], [5, 12]]
    last = cpu.combine_select(cpu.always_valid, seqs, lo, hi, cand, excl, False, env, True)
    first = cpu.combine_select(cpu.always_valid, seqs, lo, hi, cand, excl, False, env, False)
    assert last.tolist() == [2, -1, 5] and first.tolist() == [1, -1, 5]
    excl[2] = True  # a consumed row is never chosen
    assert cpu.combine_select(cpu.always_valid, seqs, lo, hi, cand, excl, True, env, True).tolist() == [1, -1, 5]
