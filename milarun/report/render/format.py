"""The formatting helpers every text section shares: numbers, counts, names, intervals,
tables and section titles (formatting only: no report math)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

WIDTH = 100  # the text report fits 100 columns
NAME_WIDTH = 24


def num(value: Any, spec: str = ",.2f") -> str:
    """A number in ``spec``; "-" for a missing or non-finite one."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def count(value: Any) -> str:
    """A count as an integer ("3", never "3.0": table rows come out of pandas as floats)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return str(int(value))


def sig(value: Any, digits: int = 3) -> str:
    """A number to ``digits`` significant digits, with thousands separators when large."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"


def short(name: str, width: int = NAME_WIDTH) -> str:
    """Long test names are cut in the middle in text (the HTML keeps them whole)."""
    if len(name) <= width:
        return name
    keep = width - 1
    return name[: keep - keep // 2] + "…" + name[-(keep // 2) :]


def clip(line: str, width: int = WIDTH) -> str:
    """One line cut to ``width`` columns (its spacing kept), " ..." marking the cut."""
    return line if len(line) <= width else line[: width - 4] + " ..."


def ci(row: pd.Series) -> str:
    """The 95% interval as percentages around perf, e.g. -1.2/+0.8%."""
    perf, low, high = row["perf"], row["ci_low"], row["ci_high"]
    if not (math.isfinite(low) and math.isfinite(high) and perf > 0):
        return "-"
    return f"{100 * (low / perf - 1):+.1f}/{100 * (high / perf - 1):+.1f}%"


def frame(rows: dict[str, dict[str, str]], index: str = "test") -> str:
    """Rows of already formatted cells as a right-justified table."""
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = index
    return df.to_string(justify="right", line_width=WIDTH)


def section(title: str) -> list[str]:
    """A block title, underlined, after a blank line."""
    return ["", title, "-" * len(title)]
