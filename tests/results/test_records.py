"""Each nested record of a result is declared once (results.records): what a real result
file holds reads into its dataclass and writes back the same (to_dict(from_dict(x)) == x),
an older or hand-edited record reads as far as it can, and no reader mirror of a record
remains in the results wing."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA, ROOT
from milarun.machine import slurmenv
from milarun.results import records
from milarun.results.read import ResultView
from milarun.results.records import read_record
from milarun.results.records.base import OMIT_NONE, RECORD, file_key

RUNS = DATA / "gpu-runs"


def _results() -> list[dict[str, Any]]:
    found = []
    for path in sorted(RUNS.rglob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "name" in data and "timings" in data:
            found.append(data)
    return found


RESULTS = _results()


def _diagnostics(result: dict[str, Any]) -> Iterator[Any]:
    yield from (result.get("diagnostics") or {}).values()


def _nested(key: str) -> Callable[[dict[str, Any]], Iterator[Any]]:
    def found(result: dict[str, Any]) -> Iterator[Any]:
        yield from (d.get(key) for d in _diagnostics(result))

    return found


def _timings(kind: str) -> Callable[[dict[str, Any]], Iterator[Any]]:
    def found(result: dict[str, Any]) -> Iterator[Any]:
        yield from (t for t in result["timings"].values() if t.get("type") == kind)

    return found


def _key(key: str) -> Callable[[dict[str, Any]], Iterator[Any]]:
    def found(result: dict[str, Any]) -> Iterator[Any]:
        yield result.get(key)

    return found


# Each record type -> where the real files hold it.
WHERE: list[tuple[type, Callable[[dict[str, Any]], Iterator[Any]]]] = [
    (records.Call, _key("call")),
    (records.Failure, _key("failure")),
    (records.Isolation, _key("isolation")),
    (records.Startup, _key("startup")),
    (records.Efficiency, _key("efficiency")),
    (records.Energy, _key("energy")),
    (records.Diagnostics, _diagnostics),
    (records.RunLengthRecord, _nested("extension")),
    (records.Contention, _nested("contention")),
    (records.RateRecord, _timings("rate")),
    (records.TimerRecord, _timings("timer")),
    (records.GpuIdentity, lambda r: iter(r.get("gpu_identity") or ())),
]


def _written_keys(cls: type) -> set[str]:
    """The keys today's writer writes (every field; those written only when set aside)."""
    extra = {"type", "overhead"} if cls is records.RateRecord else set()
    extra |= {"type"} if cls is records.TimerRecord else set()
    return {file_key(f) for f in fields(cls) if not f.metadata.get(OMIT_NONE)} | extra


def _current(cls: type, value: Any) -> bool:
    """Whether ``value`` has today's shape, its nested records too (older files lack keys)."""
    if not isinstance(value, dict) or not _written_keys(cls) <= set(value):
        return False
    nested = [(f.metadata[RECORD], value[file_key(f)]) for f in fields(cls) if RECORD in f.metadata]
    return all(v is None or _current(kind, v) for kind, v in nested)


def _as_written(cls: type, value: Any) -> dict[str, Any] | None:
    read = read_record(cls, value) if cls is records.GpuIdentity else cls.from_dict(value)
    return None if read is None else read.to_dict()


@pytest.mark.parametrize("cls, where", WHERE, ids=[cls.__name__ for cls, _ in WHERE])
def test_a_real_record_reads_and_writes_back_the_same(cls, where):
    """Every record of today's shape in the real H100/H200 files round-trips exactly."""
    current = [value for result in RESULTS for value in where(result) if _current(cls, value)]
    assert current, f"no {cls.__name__} of today's shape in {RUNS}"
    for value in current:
        assert _as_written(cls, value) == value


def test_records_no_real_file_holds_round_trip_from_their_writers():
    """Records the real files lack (no BMC, no Slurm, no data set) as their writers make them."""
    block = slurmenv.slurm_block(
        {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SLURM_NODEID": "0"}
    )
    written = [
        (records.SlurmBlock, records.write_record(block)),
        (records.Dataset, records.Dataset("imagenet", 1281167, False).to_dict()),
        (records.NodeEnergy, records.NodeEnergy(joules=2.0, seconds=1.0, instances=8).to_dict()),
    ]
    assert written[0][1]["node_id"] == 0 and "state" not in written[0][1]
    for cls, value in written:
        assert records.write_record(read_record(cls, value)) == value


def test_an_older_or_edited_record_reads_as_far_as_it_can():
    """Unknown keys are ignored, missing ones take their default, a value of the wrong type
    reads as absent, and a record without its one required value reads as none."""
    energy = records.Energy.from_dict({"joules": "many", "watts": 300, "future": 1})
    assert energy == records.Energy(watts=300)
    startup = records.Startup.from_dict({"import": 1.5})
    assert startup is not None and startup.imports == 1.5 and startup.start == "cold"
    assert records.Contention.from_dict({"others": "x", "cpus": 4}) is None
    assert records.Diagnostics.from_dict([1, 2]) is None
    rate = records.RateRecord.from_dict({"type": "rate", "rates": [1.0, "x"]})
    assert rate is None  # results.result_problem refuses such a file
    rate = records.RateRecord.from_dict({"type": "rate", "rates": [], "slice": 0})
    assert rate is not None and rate.slice == 0.5 and rate.count is None
    view = ResultView.from_dict({"name": "t", "diagnostics": {"train": {"flags": ["busy"]}}})
    assert view.diagnostics().flags == ("busy",) and view.diagnostics("other").slices is None


def mirrors(root: Path) -> list[str]:
    """Every class named ``*Read`` in the Python files under ``root``."""
    return [
        f"{path.relative_to(root)}:{node.name}"
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef) and node.name.endswith("Read")
    ]


def test_no_reader_mirrors_a_record_in_the_results_wing():
    """A record's reader is its own from_dict: no ``*Read`` class beside it."""
    assert mirrors(ROOT / "milarun" / "results") == []


def test_the_mirror_check_names_a_mirror(tmp_path):
    (tmp_path / "parts.py").write_text("class Other:\n    class EnergyRead:\n        pass\n")
    assert mirrors(tmp_path) == ["parts.py:EnergyRead"]
