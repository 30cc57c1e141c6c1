"""Natural units beside the legacy ones (DESIGN section 5, "Units").

A test scored in its legacy unit (atari: --num-processes examples per PPO iteration;
toy_lstm: all --samples waves per step, 3 of them held out; reso: --batch-size per step, the
epoch's partial batch too) records how many natural units one counted example is, as the
metric ``per_example.<unit>`` (atari: ``agent_steps``, toy_lstm: ``sequences``, reso:
``images``). The summary keeps it per test as ``natural``; the report shows the
rate in that unit (perf x per example) beside the scored one. No torch here: reports are
made on machines without it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from milarun import results
from milarun.report.summary_entry import entries
from milarun.results import read

if TYPE_CHECKING:
    import pandas as pd

PREFIX = "per_example."
COLUMNS = ("unit", "perf", "per_example", "natural")


def natural(runs: list[read.ResultView]) -> dict[str, Any] | None:
    """``{unit, per_example}`` of a test's successful runs (the mean, should they differ);
    None when they record no ``per_example.*`` metric."""
    values: dict[str, list[float]] = defaultdict(list)
    for view in runs:
        for name, value in view.metrics.items():
            number = results.positive(value)
            if isinstance(name, str) and name.startswith(PREFIX) and number is not None:
                values[name[len(PREFIX) :]].append(number)
    if not values:
        return None
    unit = min(values)  # a test records one natural unit; the choice is only made stable
    return {"unit": unit, "per_example": math.fsum(values[unit]) / len(values[unit])}


def natural_table(summary: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Per test with a ``natural`` entry: its unit, the scored perf (legacy unit), how many
    natural units one example is, and the natural rate = perf x per_example."""
    import pandas as pd  # here: the summary side (run by `milarun jobs`) needs no pandas

    rows = {}
    for test, entry in entries(summary).items():
        found = entry.natural
        per = results.positive(found.get("per_example")) if found is not None else None
        perf = results.positive(entry.mean_rate) if per else None
        if found is None or per is None or perf is None:
            continue  # no natural unit, or no successful run to convert
        rows[test] = {
            "unit": str(found["unit"]),
            "perf": perf,
            "per_example": per,
            "natural": perf * per,
        }
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS)).sort_index()
