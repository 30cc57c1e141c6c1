"""The formatting helpers every text section shares: numbers, counts, names, intervals,
tables and section titles (formatting only: no report math)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from milarun.machine.isolation import cpu_list

if TYPE_CHECKING:  # pandas when a table is made: the history's text needs none
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
    """A number to ``digits`` significant digits, with thousands separators when large
    (plain: never e-notation, which 999.6 and 0.00001 took)."""
    return plain(value, digits)


def plain(value: Any, digits: int = 6) -> str:
    """A number to ``digits`` significant digits with thousands separators, never in
    e-notation: 1,230,510, 320,121, 12.3457, 0.00123457 ("-" for none)."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if decimals else text


def p_value(value: Any) -> str:
    """A p-value to 2 significant digits, "<0.001" below that (never in e-notation); "-"
    for none."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.2g}"


def p_text(value: Any) -> str:
    """A p-value as "p=0.0095", "p<0.001" (p_value); "-" for none."""
    said = p_value(value)
    return said if said == "-" else f"p{'' if said.startswith('<') else '='}{said}"


def si(value: Any) -> str:
    """A magnitude to 3 significant digits with an SI prefix: 273T, 1.12G, 950 ("-" for none;
    FLOP counts span 1e3 to 1e18, which e-notation would show)."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def file_shown(path: str | None, folder: str | None, shipped: Path) -> str | None:
    """A file the report read, as a page may name it: one shipped with milarun (under
    ``shipped``) by the name that selects it (modern, modern/h200), one inside the results
    folder relative to it, any other by its file name (a full path names the folders of the
    machine that made the page)."""
    if not path:
        return path
    where = Path(path).resolve()
    for root, said in ((shipped, "{} (shipped with milarun)"), (folder, "{}")):
        if root is None:
            continue
        try:
            inside = where.relative_to(Path(root).resolve())
        except ValueError:
            continue
        if inside.parts:  # the results folder itself (a baseline): by its name below
            return said.format(inside.with_suffix("") if root == shipped else inside)
    return where.name


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
    import pandas as pd

    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = index
    return df.to_string(justify="right", line_width=WIDTH)


def section(title: str) -> list[str]:
    """A block title, underlined, after a blank line."""
    return ["", title, "-" * len(title)]


def devices(labels: Iterable[str]) -> str:
    """Device names with their numbers as ranges: cuda:0..cuda:3, cuda:5 -> cuda:0-3,5."""
    numbered: dict[str, list[int]] = {}
    plain: list[str] = []
    for label in labels:
        found = re.fullmatch(r"(.*?)(\d+)", label)
        if found:
            numbered.setdefault(found[1], []).append(int(found[2]))
        else:
            plain.append(label)
    return ", ".join([prefix + cpu_list(ids) for prefix, ids in numbered.items()] + plain) or "-"


def when(started: float | None, finished: float | None) -> str:
    """The span of the runs in UTC: 2026-11-25 23:17 to 23:20 UTC (the second date too when
    it is another day); "-" when the results do not say."""
    if started is None or finished is None:
        return "-"
    try:
        first, last = (datetime.fromtimestamp(t, timezone.utc) for t in (started, finished))
    except (ValueError, OverflowError, OSError):  # no date: a bad file's finished_at
        return "-"
    end = last.strftime("%H:%M" if first.date() == last.date() else "%Y-%m-%d %H:%M")
    return f"{first:%Y-%m-%d %H:%M} to {end} UTC"
