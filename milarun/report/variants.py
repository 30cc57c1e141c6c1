"""Like with like inside a results folder: runs of one test made with other settings (other
arguments, data, precision settings, nocache or milarun version) are never averaged together.

The runs of a test are grouped by what they measured (an inference test: its engine, the
engine's version, precision, KV dtype, input/output lengths and concurrency too, so fp8 and
bf16 never share a line); the group with the most runs keeps the
test's name (the one the weights score), each other group becomes a test of its own, named
by what differs (``quick.polynome [--batch-size 64]``), unweighted, with a warning. A rerun
with other arguments, or another run of the day in the same folder, cannot move the
original's figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from milarun import results
from milarun.results import read


def _flags(argv: Any) -> dict[str, str]:
    """The flags of an argv as argparse takes them: the last value of a flag wins."""
    if not isinstance(argv, (list, tuple)):
        return {}
    out: dict[str, str] = {}
    flag = None
    for word in map(str, argv):
        if word.startswith("--"):
            flag, _, value = word.partition("=")
            out[flag] = value if value else ""
        elif flag is not None:
            out[flag] = (out[flag] + " " + word).strip()
    return {k: v for k, v in out.items() if k not in results.HARNESS_FLAGS}


def setup(view: read.ResultView) -> dict[str, Any]:
    """What a run measured, as far as its file says: the test function and its arguments,
    and (where recorded) the data it read, its TF32 settings, whether its reads bypassed the
    page cache (nocache) and the milarun version."""
    call = view.call
    found: dict[str, Any] = {
        "function": str(call.function if call is not None else None),
        "arguments": tuple(sorted(_flags(call.argv if call is not None else None).items())),
    }
    data = view.dataset
    if data is not None:
        found["data"] = (data.name, data.size, data.synthetic)
    efficiency = view.efficiency
    settings = efficiency.math if efficiency is not None else None
    if settings is not None:
        found["tf32"] = (settings.tf32_matmul, settings.tf32_cudnn)
    isolation = view.isolation
    nocache = isolation.nocache if isolation is not None else None
    if isinstance(nocache, bool):
        found["nocache"] = nocache
    if view.milarun_version is not None:
        found["milarun"] = view.milarun_version
    served = view.inference
    if served is not None:  # engine, version, precision, lengths, concurrency: like with like
        found["engine"] = (served.key(), served.describe())
    return found


def _agrees(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Same on every field both record (a failed run may not know its data)."""
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _describe(setup_: Mapping[str, Any], reference: Mapping[str, Any]) -> str:
    """What differs from the reference group, in a few words."""
    parts = []
    mine, theirs = dict(setup_["arguments"]), dict(reference["arguments"])
    changed = [f"{k} {v}".strip() for k, v in sorted(mine.items()) if theirs.get(k) != v]
    changed += [f"no {k}" for k in sorted(theirs) if k not in mine]
    if changed:
        parts.append(" ".join(changed))
    if setup_["function"] != reference["function"]:
        parts.append(setup_["function"])
    if setup_.get("data") != reference.get("data") and setup_.get("data"):
        name, size, synthetic = setup_["data"]
        parts.append(f"data {name} {size}{' synthetic' if synthetic else ''}")
    if setup_.get("tf32") != reference.get("tf32") and setup_.get("tf32"):
        parts.append("tf32 " + "/".join("on" if v else "off" for v in setup_["tf32"]))
    if setup_.get("nocache") != reference.get("nocache") and "nocache" in setup_:
        parts.append("nocache" if setup_["nocache"] else "no nocache")
    if setup_.get("engine") != reference.get("engine") and setup_.get("engine"):
        parts.append(setup_["engine"][1])
    if setup_.get("milarun") != reference.get("milarun") and setup_.get("milarun"):
        parts.append(f"milarun {setup_['milarun']}")
    return ", ".join(parts) or "other settings"


def split(name: str, runs: list[read.ResultView]) -> list[tuple[str, list[read.ResultView], str]]:
    """The runs of test ``name`` in groups of one setup: (test key, runs, what differs from
    the first group; "" for the first), the group with the most successful runs first."""
    groups: list[tuple[dict[str, Any], list[read.ResultView]]] = []
    # full setups first, so a run that records less (a failure) joins a group it agrees with
    setups = [(setup(run), run) for run in runs]
    for mine, run in sorted(setups, key=lambda pair: -len(pair[0])):
        for theirs, members in groups:
            if _agrees(mine, theirs):
                members.append(run)
                break
        else:
            groups.append((mine, [run]))
    if len(groups) == 1:
        return [(name, runs, "")]

    def weight(group: tuple[dict[str, Any], list[read.ResultView]]) -> tuple[int, int]:
        members = group[1]
        good = sum(view.rate() is not None for view in members)
        return (-good, -len(members))

    groups.sort(key=weight)
    reference = groups[0][0]
    out = [(name, groups[0][1], "")]
    for mine, members in groups[1:]:
        what = _describe(mine, reference)
        key = f"{name} [{what}]"
        while key in (k for k, _, _ in out):  # two groups that differ alike: number them
            key = f"{name} [{what}] #{sum(k.startswith(key) for k, _, _ in out) + 1}"
        out.append((key, members, what))
    return out
