"""What `milarun --help` imports, pinned: the command line answers in a fraction of a second
because it imports its wings lazily. Read from ``python -X importtime`` in a subprocess (every
module the command imported, stdlib included); a new heavy import at the top of a cli module,
or a wing pulled in for its help text, fails here, naming the module."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, cli_env

# Never imported to print the help: each costs from a tenth of a second to several seconds.
HEAVY = {
    "torch",
    "numpy",
    "pandas",
    "scipy",
    "matplotlib",
    "jinja2",
    "rich",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "uvicorn",
    "httpx",
    "transformers",
    "psutil",
    "pynvml",
    "amdsmi",
}
# The packages outside the standard library it does import: coleo and its own dependencies,
# orjson (results' JSON) and typing_extensions.
LIGHT = {
    "breakword",
    "codefind",
    "coleo",
    "executing",
    "giving",
    "orjson",
    "ptera",
    "reactivex",
    "typing_extensions",
    "varname",
}
# milarun's wings it imports: the command line, the errors and what the commands' flags name
# (machine: the GPU datasheet and Slurm's environment for defaults; results: file names).
WINGS = {"cli", "errors", "machine", "results"}
# Interpreter and environment hooks, not imported by milarun; "org": the standard library's
# copy looks for Jython's org.python.core (an empty namespace package answers here).
SITE = {"_distutils_hack", "sitecustomize", "usercustomize", "org"}


def help_imports() -> set[str]:
    """Every module ``milarun --help`` imported, from ``-X importtime``'s lines on stderr."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "milarun", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower(), done.stdout[-2000:]
    modules = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                modules.add(name)
    assert modules, done.stderr[-2000:]
    return modules


def test_help_imports_no_heavy_module_and_only_the_pinned_light_set():
    modules = help_imports()
    tops = {m.split(".")[0] for m in modules}
    assert sorted(tops & HEAVY) == []
    outside = {
        t for t in tops - set(sys.stdlib_module_names) - SITE if not t.startswith("_sysconfigdata")
    }
    assert sorted(outside - {"milarun"}) == sorted(LIGHT)
    wings = {m.split(".")[1] for m in modules if m.startswith("milarun.")}
    assert sorted(wings - WINGS) == []
    assert "milarun.cli.main" in modules
