"""The one upgrade of a loaded result to this version of the file format: every reader gets
the fields it reads in today's shape, whatever version wrote the file.

Version 1 (no ``format_version`` key): ``node`` may be missing (the Slurm block's node, else
the host name, is where it ran), and a throttle record may lack each GPU's median SM clock
(read from the GPU monitor's samples while the result holds them). Version 2 writes both.

An upgrade replaces the fields it changes (never edits them in place) and keeps what the
file held under a key no JSON file can hold, so that ``as_written`` gives the file's own
fields back: the history identifies a result by them, whichever milarun read it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from milarun.results import throttle
from milarun.results.parts import as_map, ran_on
from milarun.results.schema import FORMAT_VERSION
from milarun.results.series import RateSeries
from milarun.results.shape import result_problem

# Under this key: each field the upgrade changed, as the file held it (ABSENT: it had none).
WRITTEN = ("upgrade", "as written")
ABSENT = ("upgrade", "absent")


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a result, its version checked: results.files) in this version's shape."""
    if data.get("format_version") == FORMAT_VERSION:
        return data
    written: dict[str, Any] = {"format_version": data.get("format_version", ABSENT)}
    node = ran_on(data)  # its own node where it has one: then nothing changes
    if node is not None and node != data.get("node"):
        written["node"] = data.get("node", ABSENT)
        data["node"] = node
    if _lacks_sm_clocks(data) and result_problem(data) is None:
        written["diagnostics"] = data["diagnostics"]
        data["diagnostics"] = copy.deepcopy(data["diagnostics"])
        throttle.add_sm_clocks(
            data, lambda: RateSeries.from_dict(as_map(data.get("timings")).get("train"))
        )
    data["format_version"] = FORMAT_VERSION
    data[WRITTEN] = written  # type: ignore[index]  # not a string: see WRITTEN
    return data


def as_written(data: Mapping[Any, Any]) -> dict[str, Any]:
    """The fields of a loaded result as its file held them (before ``upgrade``)."""
    written = data.get(WRITTEN) or {}
    fields = {k: v for k, v in data.items() if type(k) is str and k not in written}
    fields.update({k: v for k, v in written.items() if v is not ABSENT})
    return fields


def json_fields(data: Mapping[Any, Any]) -> dict[str, Any]:
    """The fields of a loaded result that a JSON file can hold (its upgraded fields, without
    what readers keep beside them under other keys)."""
    return {k: v for k, v in data.items() if type(k) is str}


def _lacks_sm_clocks(data: dict[str, Any]) -> bool:
    train = as_map(as_map(data.get("diagnostics")).get("train"))
    gpus = as_map(train.get("throttle")).get("gpus")
    return isinstance(gpus, dict) and any(
        isinstance(v, dict) and "sm_clock_mhz" not in v for v in gpus.values()
    )
