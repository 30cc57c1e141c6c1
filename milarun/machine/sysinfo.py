"""The system record every result embeds and ``milarun sysinfo`` prints."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from milarun.machine import gpu


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def milarun_version() -> str:
    return _version("milarun") or _source_version() or "unknown"


def _source_version() -> str | None:
    """The version a source checkout's pyproject declares (run through PYTHONPATH, as
    scripts/gpu-check.sh does on a machine with its own torch): not installed, same code."""
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return None
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        version = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return version if isinstance(version, str) else None


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else what platform knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _torch_info() -> dict[str, Any]:
    """torch/CUDA versions: from the loaded module when a benchmark imported it, else
    from package metadata (``milarun sysinfo`` and the jobs process do not import torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return _torch_info_unloaded()
    return {
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }


def _torch_info_unloaded() -> dict[str, Any]:
    """The same strings as a loaded torch gives, without importing it (seconds): its
    version.py's literals, and cuDNN's version from its wheel (91900 for 9.19.0)."""
    import ast
    import importlib.util

    info: dict[str, Any] = {"torch": _version("torch"), "cuda": None, "hip": None}
    spec = importlib.util.find_spec("torch")
    where = list(spec.submodule_search_locations or []) if spec else []
    try:
        tree = ast.parse(Path(where[0], "version.py").read_text(encoding="utf-8"))
    except (IndexError, OSError, SyntaxError, ValueError):
        return info
    names = {"__version__": "torch", "cuda": "cuda", "hip": "hip"}
    for node in tree.body:
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id in names and isinstance(value, ast.Constant):
            info[names[target.id]] = value.value
    wheel = gpu.Backend.library_wheels["cudnn"]  # the wheel a CUDA build loads cuDNN from
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        parts = dist.version.split(".")
        if name.startswith(wheel) and len(parts) >= 3 and all(p.isdigit() for p in parts[:3]):
            major, minor, patch = map(int, parts[:3])
            # cudnnGetVersion(): 9.19.0 -> 91900; before 9, 8.9.2 -> 8902
            info["cudnn"] = major * (10000 if major >= 9 else 1000) + minor * 100 + patch
    return info


def _gpu_info(backend: gpu.Backend | None = None) -> dict[str, Any]:
    """The driver and the GPUs, and the backend that listed them (``gpu_backend``)."""
    if backend is None:
        backend = gpu.load()
    if not backend.usable:
        return {"driver": None, "gpus": [], "note": backend.reason}
    try:
        driver = backend.driver()
        gpus = [
            {
                "index": g.index,
                "name": g.name,
                "memory_mb": g.memory / 2**20,
                **({"pci_device_id": g.pci_device_id} if g.pci_device_id else {}),
            }
            for g in backend.gpus()
        ]
        return {"driver": driver, "gpus": gpus, "gpu_backend": backend.name}
    except Exception as err:
        return {"driver": None, "gpus": [], "note": f"{backend.label} query failed: {err}"}


def system_record(backend: gpu.Backend | None = None) -> dict[str, Any]:
    """Host, CPU, RAM, software versions and GPUs of this machine."""
    try:
        import psutil

        ram = psutil.virtual_memory().total
        physical = psutil.cpu_count(logical=False)
    except ImportError:
        ram, physical = None, None
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu": {"model": cpu_model(), "count": os.cpu_count(), "physical": physical},
        "ram_gb": round(ram / 2**30, 2) if ram else None,
        "python": platform.python_version(),
        "milarun": milarun_version(),
        **_torch_info(),
        **_gpu_info(backend),
    }
