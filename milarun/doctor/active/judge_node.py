"""`doctor --active`'s node verdicts: GPU pairs (peer access, P2P bandwidth against the other
pairs) and the NCCL all-reduce over every GPU, from the node probe
(milarun.doctor.active.node)."""

from __future__ import annotations

from milarun.doctor.active.judge import Probed, metric, probe_check
from milarun.doctor.active.verdicts import Figure
from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check

FALLBACK_FIX = (
    "`nvidia-smi topo -m` shows how each pair is linked: a pair without NVLink or P2P goes "
    "through host memory; check the NVLink state (`nvidia-smi nvlink -s`), IOMMU/ACS settings "
    "(P2P through PCIe needs ACS off) and the fabric manager on NVSwitch systems"
)


def skipped(gpus: int) -> list[Check]:
    """Why there is no node check on this machine."""
    reason = (
        "one GPU on this node: NCCL all-reduce and peer-to-peer copies need two"
        if gpus == 1
        else "no GPU on this node"
    )
    return [Check("node p2p+nccl", INFO, f"skipped: {reason}")]


def node_checks(p: Probed) -> list[Check]:
    checks = [c for c in (probe_check(p),) if c]
    p2p = p.phase("p2p")
    if p2p is not None and "error" in p2p:
        checks.append(Check("node p2p", FAIL, f"failed: {p2p['error']}", FALLBACK_FIX))
    pairs = (p2p or {}).get("pairs") or {}
    samples = {
        f"gpu{pair}": [float(x) for x in found.get("samples") or []]
        for pair, found in pairs.items()
    }
    for pair, found in pairs.items():
        unit = Probed(f"gpu{pair}", "node", p.data, p.returncode)
        line = metric(unit, "p2p copy", found, samples, "GPU pair")
        if line is None:
            continue
        if found.get("peer_access") is False:
            line = Check(
                line.name,
                FAIL,
                "no peer access (CUDA P2P off: copies go through host memory); " + line.detail,
                FALLBACK_FIX,
            )
        elif line.status != PASS:
            line = Check(line.name, line.status, line.detail, FALLBACK_FIX)
        checks.append(line)
    nccl = p.phase("nccl")
    if nccl is not None:
        checks.append(_nccl(p, nccl))
    return checks


def _nccl(p: Probed, nccl: dict) -> Check:
    if "error" in nccl:
        return Check("node nccl", FAIL, f"all-reduce failed: {nccl['error']}", FALLBACK_FIX)
    samples = [float(x) for x in nccl.get("samples") or []]
    if not samples:
        return Check("node nccl", FAIL, "all-reduce gave no sample", FALLBACK_FIX)
    figure = Figure.of(samples)
    transports = [str(t) for t in nccl.get("transports") or []]
    detail = (
        f"all-reduce bus bandwidth over {nccl.get('ranks')} GPUs, "
        f"{int(nccl.get('bytes', 0)) / 2**20:.0f} MiB: {figure.text('GB/s')}; "
        f"transports: {', '.join(transports) or 'not logged'}"
    )
    if any(t.startswith("NET") for t in transports):
        return Check(
            "node nccl",
            FAIL,
            detail + ": NCCL goes through the network stack between GPUs of one node",
            FALLBACK_FIX,
        )
    if any(t.startswith("SHM") for t in transports):
        return Check(
            "node nccl",
            WARN,
            detail + ": some GPU pairs go through host shared memory (no P2P)",
            FALLBACK_FIX,
        )
    return Check("node nccl", PASS, detail)
