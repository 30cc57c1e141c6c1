"""Dependencies point one way (DESIGN.md section 1).

- The harness (every ``milarun`` module) imports without ``milabench``: it may import the
  data side lazily, inside the function that runs a test or makes a dataset, never at
  import time.
- A model (``milabench/models/*.py``) imports no other model and, of the harness, only the
  benchmark API; the shared milabench modules import no model.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import milarun

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "milabench" / "models"
# The harness modules a model may use: the Experiment API, and the calibration workload's
# step, which the harness's selftest measures too (so it cannot live in a model).
MODEL_MAY_IMPORT = {"milarun.experiment", "milarun.spin"}

# Imports ``sys.argv[1]`` with every ``milabench`` import refused; exit 3 when that refusal
# is why the import failed (or was even tried), 4 on another error, 0 when it imports.
BLOCKED_IMPORT = """
import importlib, sys, traceback

class NoMilabench:
    tried = []

    def find_spec(self, name, path=None, target=None):
        if name == "milabench" or name.startswith("milabench."):
            self.tried.append(name)
            raise ImportError(f"blocked by test_layering: {name}", name=name)
        return None

sys.meta_path.insert(0, NoMilabench())
try:
    importlib.import_module(sys.argv[1])
except BaseException:
    traceback.print_exc()
    sys.exit(3 if NoMilabench.tried else 4)
if NoMilabench.tried:
    print("tried to import", NoMilabench.tried)
    sys.exit(3)
"""


def harness_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(milarun.__path__, "milarun."))


@pytest.mark.parametrize("module", harness_modules())
def test_harness_module_imports_without_milabench(module):
    done = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT, module], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    output = (done.stdout + done.stderr)[-3000:]
    assert done.returncode != 3, f"{module} imports milabench at import time:\n{output}"
    assert done.returncode == 0, f"{module} does not import:\n{output}"


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
        elif is_model and target.startswith("milarun.") and \
                ".".join(parts[:2]) not in MODEL_MAY_IMPORT:
            bad.add(".".join(parts[:2]))
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
    assert not found, (f"imports against the layering (a model uses {sorted(MODEL_MAY_IMPORT)}"
                       f" and shared milabench code; no module imports a model): {found}")


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
        "from milabench import helpers\n"
        "def main():\n"
        "    import milarun.launch  # lazily: still a dependency\n")
    imports = imported_modules(source, "milabench.models")
    models = ["milabench.models.a", "milabench.models.b", "milabench.models.c",
              "milabench.models.d"]
    assert offences("milabench.models.model", imports) == [
        *models, "milarun.launch", "milarun.results"]
    assert offences("milabench.helpers", imports) == models  # shared code: no model either
