"""The report's energy part: perf per watt per test and for the suite, the energy cost of a
million examples, and the throttling warnings (from the summary's ``energy`` and
``throttle``, see milarun.energy). A report whose tests have no energy (CPU runs) gets
nothing from here: no column, no section, no score line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from milarun import stats
from milarun.energy import REASON_TEXT

if TYPE_CHECKING:
    import pandas as pd


COLUMN = "perf_per_watt"  # examples/s per W = examples/J, in the per-test table
JOULES_PER_KWH = 3.6e6
PER = 1e6  # the energy cost is given per million examples
COLUMNS = ("runs", "watts", "joules_per_example", "perf_per_watt", "cost_per_million",
           "method")


def energy_table(summary: dict[str, dict[str, Any]], power_cost: float | None
                 ) -> pd.DataFrame:
    """Per test with energy: runs measured, mean W, J/example, examples/J and, with a power
    cost ($/kWh), the cost of a million examples: J/example x 1e6 / 3.6e6 x $/kWh."""
    import pandas as pd  # the summary side needs no pandas

    rows = {}
    for test, entry in summary.items():
        found = entry.get("energy") if isinstance(entry, dict) else None
        if not isinstance(found, dict) or not found.get("examples_per_joule"):
            continue
        per_example = found.get("joules_per_example")
        rows[test] = {
            "runs": found.get("n"), "watts": found.get("watts"),
            "joules_per_example": per_example, "perf_per_watt": found["examples_per_joule"],
            "cost_per_million": (per_example * PER / JOULES_PER_KWH * power_cost
                                 if power_cost is not None and per_example else None),
            "method": str(found.get("method") or "-"),
        }
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS)).sort_index()
    return df.astype({c: float for c in COLUMNS if c != "method"})


@dataclass(frozen=True)
class EnergySection:
    """What a report shows of energy: the per-test table, the perf/W score and its
    coverage, the power cost it was priced at, and the throttling warnings."""

    table: pd.DataFrame
    score: float | None = None
    coverage: float | None = None
    power_cost: float | None = None
    warnings: tuple[str, ...] = ()


def energy_section(summary: dict[str, dict[str, Any]], weights: dict[str, float] | None,
                   power_cost: float | None) -> EnergySection:
    """The energy table, perf/W score and throttling warnings of a summary."""
    warnings = throttle_warnings(summary)
    table = energy_table(summary, power_cost)
    if table.empty:
        if power_cost is not None:
            warnings.append("--power-cost: no test has an energy measurement (GPU runs only), "
                            "so no energy cost is shown")
        return EnergySection(table, warnings=tuple(warnings))
    score = coverage = None
    weighted = [t for t, w in (weights or {}).items() if w > 0]
    values = {t: float(table.loc[t, COLUMN]) for t in weighted
              if t in table.index and table.loc[t, COLUMN] > 0}
    total = sum(weights[t] for t in weighted) if weights else 0
    if weights and values and total:
        score = stats.weighted_geomean(values, weights)
        coverage = sum(weights[t] for t in values) / total
    return EnergySection(table, score, coverage, power_cost, tuple(warnings))


def throttle_warnings(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One line per test, GPU and reason whose steady windows ran throttled."""
    out = []
    for test, entry in sorted(summary.items()):
        for gpu, found in sorted((entry.get("throttle") or {}).items()):
            window = found["window_slices"]
            for name, slices in found["reasons"].items():
                what = REASON_TEXT.get(name, name)
                out.append(f"{test}: {gpu} {what} ({name}) in {slices} of {window} steady "
                           "slices")
    return out
