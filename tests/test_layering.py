"""Dependencies point one way (DESIGN.md section 1).

- The harness (``milarun``) is built in wings on floors: errors -> machine -> results ->
  {measure, report} -> {run, milabench} -> {slurm, doctor, tender, history} -> server -> cli.
  A module imports only its own wing and lower floors (anywhere in the file: a function-local
  import is a dependency too); measure and report never import each other; there is no
  import cycle between modules nor between wings.
- A benchmark process (``milarun run``) imports only measure, machine and results; ``milarun
  report`` imports no torch and no measurement module.
- The harness imports without ``milabench``: it may import the data side lazily, inside the
  function that runs a test or makes a dataset, never at import time.
- A model (``milabench/models/*.py``) imports no other model and, of the harness, only the
  benchmark API; the shared milabench modules import no model.
"""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import milarun
from conftest import ROOT, cli_env

MODELS = ROOT / "milabench" / "models"
# The harness modules a model may use: the Experiment API, and the calibration workload's
# step, which the harness's selftest measures too (so it cannot live in a model).
MODEL_MAY_IMPORT = {"milarun.experiment", "milarun.spin"}

# Imports each module named on its command line with every ``milabench`` import refused,
# all in one interpreter (a module that failed is not kept: whoever imports it later fails
# again, and is named too); prints one JSON line: each module that did not import, and why
# ("milabench": it tried to import milabench; else the error's last line).
BLOCKED_IMPORTS = """
import importlib, json, sys, traceback

class NoMilabench:
    tried = []

    def find_spec(self, name, path=None, target=None):
        if name == "milabench" or name.startswith("milabench."):
            self.tried.append(name)
            raise ImportError(f"blocked by test_layering: {name}", name=name)
        return None

sys.meta_path.insert(0, NoMilabench())
failed = {}
for module in sys.argv[1:]:
    NoMilabench.tried.clear()
    try:
        importlib.import_module(module)
    except BaseException:
        failed[module] = traceback.format_exc()[-1500:]
    if NoMilabench.tried:
        failed[module] = "milabench: tried to import " + ", ".join(NoMilabench.tried)
print(json.dumps(failed))
"""


def harness_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(milarun.__path__, "milarun."))


def test_every_harness_module_imports_without_milabench():
    modules = harness_modules()
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORTS, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.splitlines()[-1])
    assert len(modules) > 100 and not failed, "\n\n".join(f"{m}:\n{w}" for m, w in failed.items())


def test_the_import_check_names_a_module_that_imports_milabench(tmp_path):
    """The check above can fail: a module importing milabench at import time is named."""
    (tmp_path / "uses_models.py").write_text("import milabench.helpers\n")
    (tmp_path / "plain.py").write_text("import json\n")
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORTS, "plain", "uses_models"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    failed = json.loads(done.stdout.splitlines()[-1])
    assert list(failed) == ["uses_models"] and failed["uses_models"].startswith("milabench")


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module a source file imports, anywhere in it, as absolute dotted names
    (``from a import b`` counts as ``a.b`` too: b may be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package, up level - 1 packages
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def offences(name: str, imports: set[str]) -> list[str]:
    """The modules a milabench module ``name`` imports that it must not (a name imported
    from a module counts as that module)."""
    is_model = name.startswith("milabench.models.")
    bad = set()
    for target in imports:
        parts = target.split(".")
        if target.startswith("milabench.models.") and ".".join(parts[:3]) != name:
            bad.add(".".join(parts[:3]))  # a model (or shared code) built on a model
        elif (
            is_model
            and target.startswith("milarun.")
            and not any(
                target == face or target.startswith(face + ".") for face in MODEL_MAY_IMPORT
            )
        ):
            while not _is_module(ROOT / "milarun", target):  # a name imported from a module
                target = target.rpartition(".")[0]
            bad.add(target)
    return sorted(bad)


def test_models_depend_only_on_the_benchmark_api_and_shared_code():
    found = {}
    for path in sorted((ROOT / "milabench").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if parts[-1] == "__init__" else name.rpartition(".")[0]
        bad = offences(name, imported_modules(path, package))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert not found, (
        f"imports against the layering (a model uses {sorted(MODEL_MAY_IMPORT)}"
        f" and shared milabench code; no module imports a model): {found}"
    )


def test_the_import_scan_sees_each_form_of_import(tmp_path):
    """The check above can fail: every way of writing a forbidden import is caught."""
    source = tmp_path / "model.py"
    source.write_text(
        "import milabench.models.a\n"
        "from milabench.models import b\n"
        "from . import c\n"
        "from .d import something\n"
        "from milarun import results\n"
        "from milarun.experiment import Experiment\n"
        "from milarun.measure.ratelog import RateLog\n"
        "from milabench import helpers\n"
        "def main():\n"
        "    import milarun.run.launch  # lazily: still a dependency\n"
    )
    imports = imported_modules(source, "milabench.models")
    models = [
        "milabench.models.a",
        "milabench.models.b",
        "milabench.models.c",
        "milabench.models.d",
    ]
    assert offences("milabench.models.model", imports) == [
        *models,
        "milarun.measure.ratelog",
        "milarun.results",
        "milarun.run.launch",
    ]
    assert offences("milabench.helpers", imports) == models  # shared code: no model either


# The wings of milarun/ by floor (DESIGN section 1). The models' face (milarun.experiment,
# milarun.spin) stands with measure; the package and its ``python -m`` entry with cli.
FLOORS = {
    "errors": 0,
    "machine": 1,
    "results": 2,
    "measure": 3,
    "report": 3,
    "run": 4,
    "slurm": 5,
    "doctor": 5,
    "tender": 5,
    "history": 5,
    "server": 6,
    "cli": 7,
}
FACES = {
    "milarun.experiment": "measure",
    "milarun.spin": "measure",
    "milarun": "cli",
    "milarun.__main__": "cli",
}
NEVER = {("measure", "report"), ("report", "measure")}


def wing(module: str) -> str:
    if module in FACES:
        return FACES[module]
    return module.split(".")[1]


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the milarun modules it imports (anywhere in the file), for the package at
    ``root`` (a folder named milarun). ``from a import b`` is an import of the module a.b
    when b is a module, else of a."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = ("milarun", *path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        package = name if is_package else name.rpartition(".")[0]
        modules = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    modules.add(full if _is_module(root, full) else base)
        graph[name] = {m for m in modules if m.startswith("milarun") and m != name}
    return graph


def _is_module(root: Path, dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (
        dotted == "milarun"
        or (root / rel).with_suffix(".py").is_file()
        or (root / rel / "__init__.py").is_file()
    )


def wing_offences(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points up a floor, or across between measure and report."""
    bad = []
    for source, targets in graph.items():
        for target in sorted(targets):
            if target in ("milarun",):
                continue
            a, b = wing(source), wing(target)
            if a == b:
                continue
            if a not in FLOORS or b not in FLOORS:
                bad.append(f"{source} -> {target}: {a if a not in FLOORS else b} is no wing")
            elif FLOORS[b] > FLOORS[a] or (a, b) in NEVER:
                bad.append(f"{source} ({a}) -> {target} ({b})")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same imports seen at each level of the package tree: an import from a to b is an
    arrow between the two children of their deepest common package that hold a and b
    (modules or subpackages). A package holds its subpackages, so report.render importing
    report.build is inside report, and at the level of report it is render -> build."""
    out: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            a, b = source.split("."), target.split(".")
            common = 0
            while common < min(len(a), len(b)) and a[common] == b[common]:
                common += 1
            if common == len(a) or common == len(b):
                continue  # a package and its own module: containment, not an arrow
            out.setdefault(".".join(a[: common + 1]), set()).add(".".join(b[: common + 1]))
    return out


def test_every_import_stays_in_its_wing_or_points_down():
    graph = import_graph(ROOT / "milarun")
    assert not wing_offences(graph)


def test_no_import_cycle_between_modules_or_packages():
    graph = import_graph(ROOT / "milarun")
    assert not cycles(graph)
    assert not cycles(package_graph(graph))


def test_the_wing_rules_catch_a_planted_import(tmp_path):
    """The checks above can fail: a copy of milarun/ with one import planted each way."""
    import shutil

    copy = tmp_path / "milarun"
    shutil.copytree(ROOT / "milarun", copy, ignore=shutil.ignore_patterns("__pycache__"))
    steady = copy / "results" / "steady.py"
    steady.write_text(
        steady.read_text() + "\n\ndef late():\n    from milarun.report import stats\n"
    )
    (copy / "report" / "stats.py").write_text(
        (copy / "report" / "stats.py").read_text() + "\nfrom milarun.measure import runner\n"
    )
    graph = import_graph(copy)
    offences = wing_offences(graph)
    assert "milarun.results.steady (results) -> milarun.report.stats (report)" in offences
    assert "milarun.report.stats (report) -> milarun.measure.runner (measure)" in offences
    planted = import_graph(ROOT / "milarun")
    planted["milarun.results.steady"].add("milarun.results.records")
    planted["milarun.results.records"].add("milarun.results.steady")
    assert cycles(planted) == [["milarun.results.records", "milarun.results.steady"]]
    planted["milarun.results.steady"].add("milarun.machine.devices")
    planted["milarun.machine.devices"].add("milarun.results.steady")
    assert ["milarun.machine", "milarun.results"] in cycles(package_graph(planted))
    planted = import_graph(ROOT / "milarun")
    planted["milarun.report.render.text"].add("milarun.report.request")
    assert ["milarun.report.render", "milarun.report.request"] in cycles(package_graph(planted))


# Prints, at the end of a ``milarun`` command run in this process, the modules it imported.
MODULES_AT_EXIT = """
import atexit, json, runpy, sys
atexit.register(lambda: print("MODULES", json.dumps(sorted(sys.modules))))
sys.argv = ["milarun", *sys.argv[1:]]
runpy.run_module("milarun", run_name="__main__")
"""


def modules_of(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", MODULES_AT_EXIT, *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(),
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("MODULES ")]
    assert lines, done.stdout + done.stderr
    return set(json.loads(lines[-1][len("MODULES ") :]))


def test_a_benchmark_process_imports_only_measure_machine_and_results(tmp_path):
    modules = modules_of("run", "faulty:steps", "-o", tmp_path, "--", "--min-slices", "4")
    assert list(tmp_path.glob("faulty.J0.*.json")), "the run wrote no result"
    ours = {m for m in modules if m.startswith("milarun.")}
    allowed = {"measure", "machine", "results", "errors"}
    entry = {
        "milarun.__main__",
        "milarun.cli",
        "milarun.cli.main",
        "milarun.cli.options",
        "milarun.cli.slurm",
        "milarun.cli.doctor",
        "milarun.cli.tender",
        "milarun.cli.history",
        "milarun.cli.one_test",
        "milarun.cli.server",
    }  # the command line itself, its wings imported lazily
    assert sorted(m for m in ours - entry if wing(m) not in allowed) == []
    assert not {"rich", "jinja2", "pandas", "matplotlib"} & modules


def test_report_imports_no_torch_and_no_measurement_module():
    summary = ROOT / "milarun" / "baselines" / "standard" / "v100.json"
    modules = modules_of("report", summary, "--compare", "standard/v100")
    assert "torch" not in modules
    assert sorted(m for m in modules if m.startswith("milarun.measure")) == []
