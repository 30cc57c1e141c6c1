"""The child process of `milarun doctor --active`: measures one device and writes what it found.

``python -m milarun.doctor.active.probe SPEC.json``: SPEC names the kind (``gpu``, ``cpu`` or
``node``), the level (quick, full), the output file and the phase budgets. The child writes
the output file again after every phase (atomically), so a phase that crashes the process
(SIGILL, a CUDA error that kills it, a hang ended by the parent's timeout) leaves the phases
before it and the name of the one it was in. A phase that raises is recorded with its error
and the next one runs. This module and the measuring modules import torch; the parent never
does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from milarun.doctor.active.probe_recorder import LEVELS, Recorder


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    barrier = spec.get("barrier")
    recorder = Recorder(
        Path(spec["out"]),
        spec["kind"],
        (barrier["folder"], int(barrier["count"]), Path(spec["out"]).stem) if barrier else None,
    )
    level = LEVELS[spec["level"]]
    if spec["kind"] == "cpu":
        from milarun.doctor.active import cpu

        cpu.measure(recorder, spec, level)
    elif spec["kind"] == "node":
        from milarun.doctor.active import node

        node.measure(recorder, spec, level)
    else:
        from milarun.doctor.active import gpu

        gpu.measure(recorder, spec, level)
    recorder.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
