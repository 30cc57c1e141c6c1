"""Results are read through one typed reader (``results.read.ResultView`` and the records of
``results.parts``): outside the results wing, no code opens a result record by hand.

As tests/test_layering.py counts imports, this counts every ``X.get("<key>")`` and
``X["<key>"]`` whose key is a field of a result record (results.RECORD_KEYS), outside
milarun/results/. The same names are fields of other records (a summary entry's ``energy``,
a probe's ``device``, a manifest's ``system``): each such read is listed below with what the
record is. Any other is a result opened by hand, and fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT
from milarun import results

KEYS = frozenset(results.RECORD_KEYS) | {results.WRITTEN_BY}

# (file, receiver as written, key): what the record is instead of a result.
TENDER_FILE = "a tender file (tender.rules)"
SUMMARY_ENTRY = "a test's entry of a summary (report.summary), not a result"
SYSTEM_RECORD = "a machine's inventory (machine.sysinfo) or a run manifest"
SERVER_ROW = "a row of the results server's tables or pages (server.queries)"
NOT_RESULTS: dict[tuple[str, str, str], str] = {
    ("milarun/cli/tender.py", "tender['profile']", "name"): TENDER_FILE,
    ("milarun/cli/tender.py", "tender['weights']", "name"): TENDER_FILE,
    ("milarun/cli/tender.py", "tender", "milarun_version"): TENDER_FILE,
    ("milarun/tender/rules.py", "self.data", "milarun_version"): TENDER_FILE,
    ("milarun/tender/rules.py", "self.data['profile']", "name"): TENDER_FILE,
    ("milarun/tender/rules.py", "self.data['weights']", "name"): TENDER_FILE,
    ("milarun/tender/rules.py", "data", "milarun_version"): TENDER_FILE,
    ("milarun/tender/rules.py", "prof", "name"): TENDER_FILE,
    ("milarun/tender/rules.py", "weights", "name"): TENDER_FILE,
    ("milarun/cli/warmstart.py", "request", "log"): "a fork request to the warm process",
    ("milarun/machine/gpuprobe.py", "data", "devices"): "the torch probe's answer",
    ("milarun/measure/argcheck.py", "job", "job"): "an argument check's request",
    ("milarun/run/arguments.py", "v", "error"): "an argument check's verdict",
    ("milarun/run/arguments.py", "first", "error"): "an argument check's verdict",
    ("milarun/run/arguments.py", "first", "job"): "an argument check's verdict",
    ("milarun/run/arguments.py", "verdict", "job"): "an argument check's verdict",
    ("milarun/run/profile.py", "d", "prepare"): "a profile's job",
    ("milarun/report/about.py", "record", "hostname"): SYSTEM_RECORD,
    ("milarun/report/about.py", "gpu", "name"): SYSTEM_RECORD,
    ("milarun/report/comparability.py", "dataset", "name"): SUMMARY_ENTRY,
    ("milarun/report/summary.py", "found", "dataset"): SUMMARY_ENTRY,
    ("milarun/report/energy.py", "out", "energy"): SUMMARY_ENTRY,
    ("milarun/report/energy.py", "entry", "energy"): SUMMARY_ENTRY,
    ("milarun/report/render/energy.py", "data", "energy"): "the JSON report being written",
    ("milarun/report/render/text.py", "r", "efficiency"): "a row of the report's table",
    ("milarun/report/nodeenergy.py", "entry", "node_energy"): SUMMARY_ENTRY,
    ("milarun/report/render/energy.py", "data", "node_energy"): "the JSON report being written",
    ("milarun/tender/consistency.py", "parsed", "name"): "a parsed result file name",
    ("milarun/tender/consistency.py", "parsed", "job_id"): "a parsed result file name",
    ("milarun/tender/verify.py", "data", "node"): "a doctor --active record",
    ("milarun/measure/loadgen.py", "chunk", "error"): "a streamed chunk of the server under test",
    ("milarun/server/intake.py", "like", "suite"): "a run's like-with-like key (history)",
    ("milarun/server/pages.py", "r", "gpu"): SERVER_ROW,
    ("milarun/server/queries.py", "r", "gpu"): SERVER_ROW,
    ("milarun/server/queries.py", "g", "name"): SYSTEM_RECORD,
    ("milarun/server/verdict.py", "g", "name"): SYSTEM_RECORD,
    ("milarun/server/views.py", "report", "error"): "a stored verify report",
    ("milarun/server/views.py", "found", "name"): SERVER_ROW,
    ("milarun/server/views.py", "r", "name"): SERVER_ROW,
    ("milarun/tender/bounds.py", "g", "name"): SYSTEM_RECORD,
    ("milarun/tender/bounds.py", "machine", "system"): SYSTEM_RECORD,
}
# The doctor's probes write records of their own (doctor probe records: a probe's device,
# isolation, ranks, error), and its checks have names.
NOT_RESULTS_BELOW = {
    "milarun/doctor/": frozenset({"device", "isolation", "ranks", "error", "name"})
}


def record_reads(path: Path) -> list[tuple[int, str, str]]:
    """(line, receiver, key) of each read of a result field's name in a source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in KEYS
        ):
            found.append((node.lineno, ast.unparse(node.func.value), node.args[0].value))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value in KEYS
        ):
            found.append((node.lineno, ast.unparse(node.value), node.slice.value))
    return found


def hand_reads(root: Path) -> list[str]:
    out = []
    for path in sorted((root / "milarun").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("milarun/results/"):
            continue
        below = next((keys for p, keys in NOT_RESULTS_BELOW.items() if rel.startswith(p)), ())
        for line, receiver, key in record_reads(path):
            if (rel, receiver, key) not in NOT_RESULTS and key not in below:
                out.append(f"{rel}:{line}: {receiver}[{key!r}]")
    return out


def test_no_result_is_opened_by_hand_outside_the_results_wing():
    found = hand_reads(ROOT)
    assert not found, "read these through results.read.ResultView:\n" + "\n".join(found)


def test_every_listed_exception_is_still_there():
    """A listed read that is gone leaves no hole for a result read to slip through."""
    seen = {
        (path.relative_to(ROOT).as_posix(), receiver, key)
        for path in (ROOT / "milarun").rglob("*.py")
        for _, receiver, key in record_reads(path)
    }
    assert not set(NOT_RESULTS) - seen


def test_the_count_sees_each_form_of_read(tmp_path):
    (tmp_path / "milarun" / "report").mkdir(parents=True)
    (tmp_path / "milarun" / "results").mkdir()
    (tmp_path / "milarun" / "report" / "x.py").write_text(
        "def f(result, view):\n"
        "    a = result.get('energy')\n"
        "    b = result['failure']['kind']\n"
        "    c = (result.get('diagnostics') or {}).get('train')\n"
        "    d = view.energy\n"
    )
    (tmp_path / "milarun" / "results" / "y.py").write_text("x = data.get('energy')\n")
    assert hand_reads(tmp_path) == [
        "milarun/report/x.py:2: result['energy']",
        "milarun/report/x.py:3: result['failure']",
        "milarun/report/x.py:4: result['diagnostics']",
    ]
