"""Whether a unit (a node, a device, a GPU pair) is significantly slower than its siblings:
the test ``report --compare-nodes`` flags with and the doctor judges its siblings by.

A unit is flagged when BOTH its ratio to the siblings' median is below MARGIN and the
one-sided Welch t-tests of its samples against theirs, combined over tests with Fisher's
method (slower_p), give a p-value below ALPHA. The margin alone would flag noise; the test
alone would flag a 1% gap measured precisely.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

MARGIN = 0.95  # practical margin: below 95% of the siblings' median
ALPHA = 0.01  # significance of the combined one-sided Welch tests


def slower_p(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float | None, int]:
    """Fisher's combination of one-sided Welch tests (mine < others), one per (mine,
    others) pair, and how many pairs it combined; None when no pair has two slices on
    each side and a defined statistic."""
    from scipy import stats  # only when flags are asked for

    pvalues = []
    # Identical slices give a NaN statistic (skipped), a p-value of 0 a log(0): no warnings.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for mine, others in pairs:
            if len(mine) >= 2 and len(others) >= 2:
                p = stats.ttest_ind(mine, others, equal_var=False, alternative="less").pvalue
                if math.isfinite(p):
                    pvalues.append(float(p))
        if not pvalues:
            return None, 0
        return float(stats.combine_pvalues(pvalues, method="fisher").pvalue), len(pvalues)


def significantly_slower(ratio: float, p: float) -> bool:
    """Both say so: the ratio to the siblings' median under MARGIN and p under ALPHA."""
    return ratio < MARGIN and p < ALPHA
