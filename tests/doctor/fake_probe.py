"""A probe child for a machine with no GPU: what milarun.doctor.active.probe would write for
the GPU ``CUDA_VISIBLE_DEVICES`` names, from healthy H100 SXM figures and the faults given in
``$FAKE_PROBE`` (JSON, by GPU UUID):
- ``gemm`` / ``memory`` / ``link`` (both host-link directions): a factor on those figures;
- ``crash`` + ``crash_signal``: the phase in which the child kills itself with that signal;
- ``hang``: the phase in which it sleeps; ``errors``: words the memory test reads back wrong;
- ``seconds``: how long the child takes (sleeping), as a real probe takes tens of seconds;
- ``cuda_error``: the phase in which it raises CUDA's error (uncaught: it exits 1);
- ``no_peer`` (the node child): the GPU pairs ("0-1") without peer access;
- ``nccl`` (the node child): {"algorithms": [...], "busbw": GB/s} in place of a ring at 360;
- ``fingerprint``: "flip", a silent-data-corruption fingerprint one bit off the healthy one
  (the real probe's is doctor.active.fingerprint's; a CPU child computes the real one).
A CPU child (a GPU's CPU slice) writes healthy CPU figures.
It runs as a real process (the parent's timeouts, signals and files are the real ones); no
torch here.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

HEALTHY = {  # an H100 SXM measured by the real probe: ~75% of each datasheet figure
    "gemm_bf16": 740.0,
    "gemm_fp16": 745.0,
    "gemm_tf32": 370.0,
    "gemm_fp8": 1380.0,
    "memory_bandwidth": 2950.0,
    "h2d": 53.0,
    "d2h": 51.0,
}
SAMPLES = 8
FINGERPRINT = "5eed5eed5eed5eed"  # a healthy H100's, on the fake stack
KNOB = {"gemm": "gemm", "memory": "memory", "h2d": "link", "d2h": "link"}


def samples(value: float, rng: random.Random) -> list[float]:
    return [value * rng.gauss(1.0, 0.01) for _ in range(SAMPLES)]


def write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def gpu(data: dict, fault: dict, rng: random.Random, out: Path) -> None:
    phases = data["phases"]
    for name, value in HEALTHY.items():
        data["phase"] = "host_link" if name in ("h2d", "d2h") else name
        write(out, data)
        if fault.get("crash") == name:
            os.kill(os.getpid(), signal.Signals[fault["crash_signal"]])
        if fault.get("hang") == name:
            time.sleep(3600)
        if fault.get("cuda_error") == name:  # a sticky CUDA error: the process dies of it
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        factor = fault.get(KNOB[name.split("_")[0]], 1.0)
        unit = "TFLOP/s" if name.startswith("gemm") else "GB/s"
        found = {"unit": unit, "samples": samples(value * factor, rng)}
        if name in ("h2d", "d2h"):
            phases.setdefault("host_link", {})[name] = found
        else:
            phases[name] = found
    time.sleep(fault.get("seconds", 0))
    phases["pattern"] = {
        "bytes": 40 * 2**30,
        "passes": 5,
        "errors": fault.get("errors", 0),
        "seconds": 2.0,
    }
    healthy = int(FINGERPRINT, 16)
    found = healthy ^ (1 << 12) if fault.get("fingerprint") == "flip" else healthy
    phases["fingerprint"] = {
        "fingerprint": f"{found:016x}",
        "finite": True,
        "stack": "NVIDIA H100 80GB HBM3 | torch fake | cuda fake | fingerprint v1",
        "version": 1,
    }


def node(data: dict, faults: dict, rng: random.Random) -> None:
    n = len(os.environ["CUDA_VISIBLE_DEVICES"].split(","))
    no_peer = {p for f in faults.values() for p in f.get("no_peer", [])}
    pairs = {}
    for i in range(n):
        for j in range(n):
            if i != j:
                slow = f"{min(i, j)}-{max(i, j)}" in no_peer
                pairs[f"{i}-{j}"] = {
                    "peer_access": not slow,
                    "unit": "GB/s",
                    "samples": samples(18.0 if slow else 370.0, rng),
                }
    data["phases"]["p2p"] = {"pairs": pairs}
    nccl = next((f["nccl"] for f in faults.values() if "nccl" in f), {})
    busbw = nccl.get("busbw", 360.0)
    data["phases"]["nccl"] = {
        "unit": "GB/s",
        "bytes": 256 * 2**20,
        "ranks": n,
        "samples": samples(busbw, rng),
        "transports": ["SHM/direct/direct"] if no_peer else ["P2P/CUMEM/read"],
        "sweep": {str(2**22): busbw * 0.4, str(2**25): busbw * 0.97, str(2**28): busbw},
        "plateau_bytes": 2**25,
        "algorithms": nccl.get("algorithms", ["RING"]),
        "protocols": ["SIMPLE"] if nccl.get("algorithms") else ["LL128"],
        "chosen_from": "log" if nccl.get("algorithms", ["RING"]) else None,
        "nvls_available": True,
    }


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = Path(spec["out"])
    faults = json.loads(os.environ.get("FAKE_PROBE", "{}"))
    visible = os.environ["CUDA_VISIBLE_DEVICES"]
    rng = random.Random(visible + os.environ.get("MILARUN_DEVICE", ""))
    data = {"kind": spec["kind"], "phase": None, "done": False, "phases": {}, "device": {}}
    if spec["kind"] == "node":
        node(data, faults, rng)
    elif spec["kind"] == "cpu":  # a GPU's CPU slice: healthy cores
        data["phases"]["cpu_gemm"] = {"unit": "GFLOP/s", "samples": samples(150.0, rng)}
        data["phases"]["cpu_memory_bandwidth"] = {"unit": "GB/s", "samples": samples(20.0, rng)}
    else:
        gpu(data, faults.get(visible, {}), rng, out)
    data["phase"], data["done"] = None, True
    write(out, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
