"""Every vendor in its own room: a GPU vendor's knowledge (its tools, clocks, variables,
runtime, collective library) lives in its backend (milarun/machine/gpu/<vendor>.py, as
attributes of its Backend); no code outside milarun/machine/gpu/ branches on the vendor.

A branch is any test of an ``if``, ``elif``, ``while``, conditional expression, ``and``/``or``,
comparison, ``assert``, comprehension filter or ``match``. One names the vendor where it reads
a vendor's word (rocm, hip, amd, nvidia, nvml, amdsmi, rccl) in a name, attribute or string;
reads a backend's identity (``.vendor``, or a string equal to a backend's ``vendor`` or
``name``: taken from the backends themselves, so renaming one renames what is sought); or
asks ``isinstance`` of a backend class. Docstrings and comments may name vendors: they are
no branch. (The vendor libraries' imports and calls are tests/machine/test_device_backends.py's.)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

from conftest import ROOT
from milarun.machine import gpu
from milarun.machine.gpu.amd import AmdSmiBackend
from milarun.machine.gpu.nvml import NvmlBackend

MILARUN = ROOT / "milarun"
ROOM = "milarun/machine/gpu/"
VENDOR_WORDS = {"rocm", "hip", "amd", "nvidia", "nvml", "amdsmi", "rccl"}
BACKENDS = (NvmlBackend, AmdSmiBackend)
# What says which vendor a backend is: its identity strings (the plain backend's "plain"
# names no vendor) and its class.
IDENTITIES = {str(v) for b in BACKENDS for v in (b.vendor, b.name) if v}
CLASSES = {b.__name__ for b in BACKENDS}


def _tests(node: ast.AST) -> list[ast.AST]:
    """The expressions ``node`` branches on."""
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        return [node.test]
    if isinstance(node, ast.comprehension):
        return list(node.ifs)
    if isinstance(node, (ast.BoolOp, ast.Compare)):
        return [node]
    if isinstance(node, ast.Match):
        return [node.subject, *(c.pattern for c in node.cases)]
    return []


def _vendor_word(text: str) -> bool:
    """``text`` holds a vendor's word: AmdSmiBackend, HIP_VISIBLE_DEVICES, nvidia-nccl,
    torch.version.hip (not "shipped")."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", text)
    return any(w.lower() in VENDOR_WORDS for w in words)


def _names_the_vendor(node: ast.AST) -> bool:
    """A name or attribute that says "vendor" (``vendor``, ``gpu_vendor``, ``b.vendor``)."""
    word = getattr(node, "id", None) or getattr(node, "attr", None) or ""
    return "vendor" in re.findall(r"[a-z]+", word.lower())


def _says_vendor(expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Compare) and any(
        isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in expr.ops
    ):
        for side in (expr.left, *expr.comparators):
            if any(_names_the_vendor(n) for n in ast.walk(side)):
                return "a vendor compared"
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and _vendor_word(node.id):
            return node.id
        if isinstance(node, ast.Attribute) and _vendor_word(node.attr):
            return f".{node.attr}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in IDENTITIES or _vendor_word(node.value):
                return repr(node.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and any(
                isinstance(n, (ast.Name, ast.Attribute))
                and (getattr(n, "id", None) or getattr(n, "attr", None)) in CLASSES
                for a in node.args[1:]
                for n in ast.walk(a)
            )
        ):
            return "isinstance of a backend"
    return None


def vendor_branches(root: Path) -> list[str]:
    """``file:line: what`` for every branch on the vendor outside milarun/machine/gpu/."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel.startswith(ROOM):
            continue
        seen: set[int] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            for expr in _tests(node):
                said = _says_vendor(expr)
                line = getattr(expr, "lineno", getattr(node, "lineno", 0))
                if said and line not in seen:
                    seen.add(line)
                    found.append(f"{rel}:{line}: {said}")
    return found


def test_no_branch_on_the_vendor_outside_its_backend():
    assert vendor_branches(MILARUN) == []


def test_the_branch_check_names_each_planted_branch(tmp_path):
    copy = tmp_path / "milarun"
    (copy / "machine" / "gpu").mkdir(parents=True)
    (copy / "machine" / "gpu" / "amd.py").write_text("x = 1 if torch.version.hip else 2\n")
    planted = {
        "a.py": 'if backend.vendor == "x":\n    pass\nok = gpu_vendor in kinds\n',
        "b.py": 'flag = gpu.name != "amdsmi"\n',  # a backend's name
        "c.py": "fix = PLAIN if not backend.rocm else AMD\n",
        "d.py": "ok = [g for g in gpus if isinstance(g.backend, NvmlBackend)]\n",
        "e.py": 'match kind:\n    case "nvidia":\n        pass\n',
        "f.py": "while torch.version.hip:\n    break\n",
        "g.py": '"""The AMD GPUs (ROCm) are named in prose."""\nfix = "`amd-smi list`"\n',
        "h.py": "if b.tools.collective == RCCL_NAME:\n    pass\n",
    }
    for name, source in planted.items():
        (copy / name).write_text(source)
    assert vendor_branches(copy) == [
        "milarun/a.py:1: a vendor compared",
        "milarun/a.py:3: a vendor compared",
        "milarun/b.py:1: 'amdsmi'",
        "milarun/c.py:1: .rocm",
        "milarun/d.py:1: isinstance of a backend",
        "milarun/e.py:2: 'nvidia'",
        "milarun/f.py:1: .hip",
        "milarun/h.py:1: RCCL_NAME",
    ]


def test_the_vendor_is_told_by_torchs_build_and_by_the_device_files():
    """What the code outside the room asks instead of testing a vendor: which backend's
    GPUs torch was built for (torch.version, or the probe's mapping), and whose device
    nodes /dev shows; a mix, or none, takes the plain backend's words (NVIDIA's)."""
    cuda, rocm = SimpleNamespace(cuda="12.8", hip=None), {"cuda": None, "hip": "6.4.43482"}
    assert gpu.built_for(cuda) is NvmlBackend and gpu.built_for(rocm) is AmdSmiBackend
    assert gpu.built_for(SimpleNamespace(cuda=None)) is None
    assert gpu.runtime_version(rocm) == "6.4.43482" and gpu.runtime_version({}) is None
    assert gpu.by_device_files(["/dev/kfd"]) is AmdSmiBackend
    assert gpu.by_device_files(["/dev/nvidia0", "/dev/nvidia1"]) is NvmlBackend
    assert gpu.by_device_files(["/dev/kfd", "/dev/nvidia0"]) is gpu.Backend
    # ROCm's torch on a machine whose AMD SMI is missing: its GPUs run by id, a warning;
    # a CUDA build without NVML: no such vendor (the doctor fails it)
    assert gpu.unloaded(rocm, gpu.plain("no library")) is AmdSmiBackend
    assert gpu.unloaded(cuda, gpu.plain("no library")) is None
    for backend in (*BACKENDS, gpu.Backend):
        assert backend.torch_build in ("cuda", "hip") and backend.visible_variables
