"""How long do packing and verifying a bid of 10,000 results take?

Writes a synthetic run folder (tests/bidkit.py: 10 quick tests x 8 CPU slices x R repeats,
each result made by the harness's own builder with a 24-slice rate series, the run manifest
completed, the machine record and the profile as run kept), a tender of those tests, then
times `milarun package` and `milarun verify` (every rule, the figures re-derived from the
slices, acceptance of declared rates), in process and as commands.

    uv run python benchmarks/tender_scale.py [--repeats 125]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import bidkit  # noqa: E402
from milarun.tender import package, verify  # noqa: E402

TESTS = [
    "polynome",
    "sine_wave",
    "vae",
    "reso",
    "loader",
    "convnet",
    "dcgan",
    "cart",
    "wlm",
    "recom",
]
DEVICES = 8


def timed(what: str, call):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = call()
    print(f"{what}: {time.perf_counter() - start:.2f} s", flush=True)
    return value


def command(*args: object) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "milarun", *map(str, args)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"milarun {args[0]} failed ({done.returncode}): {done.stdout[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=125)
    args = parser.parse_args()
    rates = {f"quick.{t}": 1000.0 * (i + 1) for i, t in enumerate(TESTS)}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = timed(
            "write the run folder",
            lambda: bidkit.synthetic_run(root / "run", rates, devices=DEVICES, repeat=args.repeats),
        )
        files = list(folder.glob("*.json"))
        size = sum(p.stat().st_size for p in files)
        print(f"{len(files):,} results, {size / 2**20:,.1f} MiB")
        tender = bidkit.tender(root / "tender.json", TESTS, repeat=args.repeats)
        declared = root / "declared.json"
        declared.write_text(json.dumps({"tests": {t: 0.9 * r for t, r in rates.items()}}))
        packed = timed(
            "package (in process)",
            lambda: package.make_package(folder, root / "bid.tar.gz", tender, declared),
        )
        out = packed.out
        print(f"package: {out.stat().st_size / 2**20:,.1f} MiB for {packed.files:,} files")
        found = timed("verify (in process)", lambda: verify.verify(out, tender))
        failed = [c.rule for c in found.checks if not c.ok]
        print(f"rules failed: {failed or 'none'}; acceptance {found.acceptance}")
        again = root / "bid2.tar.gz"
        print(
            f"milarun package: {command('package', folder, '-o', again, '--tender', tender):.2f} s"
        )
        print(f"milarun verify: {command('verify', again, '--tender', tender):.2f} s")


if __name__ == "__main__":
    main()
