"""`doctor --active`'s node verdicts: GPU pairs (peer access, P2P bandwidth against the other
pairs) and the NCCL (RCCL on AMD) all-reduce over every GPU, from the node probe
(milarun.doctor.active.node). The checks and fixes name the vendor's library and tools
(the backend's Tools)."""

from __future__ import annotations

from milarun.doctor.active.judge import Probed, metric, probe_check
from milarun.doctor.active.verdicts import Figure
from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check
from milarun.machine.gpu import Backend, Tools, datasheet

COLLECTIVE_WARN, COLLECTIVE_FAIL = 0.9, 0.7  # of the datasheet's bus bandwidth for the path


def skipped(gpus: int, tools: Tools = Backend.tools) -> list[Check]:
    """Why there is no node check on this machine."""
    library = tools.collective
    reason = (
        f"one GPU on this node: {library} all-reduce and peer-to-peer copies need two"
        if gpus == 1
        else "no GPU on this node"
    )
    return [Check(f"node p2p+{library.lower()}", INFO, f"skipped: {reason}")]


def node_checks(p: Probed) -> list[Check]:
    checks = [c for c in (probe_check(p),) if c]
    fix = p.tools.p2p
    p2p = p.phase("p2p")
    if p2p is not None and "error" in p2p:
        checks.append(Check("node p2p", FAIL, f"failed: {p2p['error']}", fix))
    pairs = (p2p or {}).get("pairs") or {}
    samples = {
        f"gpu{pair}": [float(x) for x in found.get("samples") or []]
        for pair, found in pairs.items()
    }
    for pair, found in pairs.items():
        unit = Probed(f"gpu{pair}", "node", p.data, p.returncode, tools=p.tools)
        line = metric(unit, "p2p copy", found, samples, "GPU pair")
        if line is None:
            continue
        if found.get("peer_access") is False:
            line = Check(
                line.name,
                FAIL,
                "no peer access (P2P off: copies go through host memory); " + line.detail,
                fix,
            )
        elif line.status != PASS:
            line = Check(line.name, line.status, line.detail, fix)
        checks.append(line)
    nccl = p.phase("nccl")
    if nccl is not None:
        checks.append(_nccl(p, nccl))
    return checks


def _nccl(p: Probed, nccl: dict) -> Check:
    library, fix = p.tools.collective, p.tools.p2p
    name = f"node {library.lower()}"  # node nccl, node rccl
    if "error" in nccl:
        return Check(name, FAIL, f"all-reduce failed: {nccl['error']}", fix)
    samples = [float(x) for x in nccl.get("samples") or []]
    if not samples:
        return Check(name, FAIL, "all-reduce gave no sample", fix)
    figure = Figure.of(samples)
    transports = [str(t) for t in nccl.get("transports") or []]
    detail = (
        f"all-reduce bus bandwidth over {nccl.get('ranks')} GPUs, "
        f"{int(nccl.get('bytes', 0)) / 2**20:.0f} MiB: {figure.text('GB/s')}; "
        f"transports: {', '.join(transports) or 'not logged'}"
    )
    if any(t.startswith("NET") for t in transports):
        return Check(
            name,
            FAIL,
            detail + f": {library} goes through the network stack between GPUs of one node",
            fix,
        )
    if any(t.startswith("SHM") for t in transports):
        return Check(
            name, WARN, detail + ": some GPU pairs go through host shared memory (no P2P)", fix
        )
    return _against_datasheet(p, nccl, name, detail, figure)


def _chosen(nccl: dict, p: Probed) -> tuple[str, str]:
    """The path NCCL took ("nvls" or "nvlink") and how the verdict names its choice."""
    algorithms = [str(a).upper() for a in nccl.get("algorithms") or []]
    protocols = [str(x).upper() for x in nccl.get("protocols") or []]
    nvls = any(a in datasheet.NVLS_ALGORITHMS for a in algorithms)
    if algorithms:
        said = f"algorithm {'/'.join(algorithms)}, protocol {'/'.join(protocols) or '?'}"
        said += f" ({nccl.get('chosen_from') or 'log'})"
    else:
        said = (
            f"algorithm not in {p.tools.collective}'s log: judged as ring/tree over {p.tools.link}"
        ) + (" (NVLS was available)" if nccl.get("nvls_available") else "")
    return ("nvls" if nvls else "nvlink"), said


def _against_datasheet(p: Probed, nccl: dict, name: str, detail: str, figure: Figure) -> Check:
    """The all-reduce against the bus bandwidth a healthy node of this GPU reaches on the
    path NCCL chose (machine.gpu.datasheet: with NVLink SHARP or without)."""
    path, said = _chosen(nccl, p)
    plateau = nccl.get("plateau_bytes")
    detail += f"; {said}"
    if isinstance(plateau, int) and plateau > 0:
        detail += f"; plateaus from {plateau / 2**20:,.0f} MiB"
    backend = nccl.get("backend") or "nccl"
    if backend != "nccl":  # the tests' gloo between CPU processes: no GPU path to judge
        return Check(name, PASS, detail + f"; measured with {backend}, not against a datasheet")
    bound = datasheet.allreduce_busbw(p.name, path)
    if bound is None:
        what = p.name or "these GPUs"
        return Check(name, PASS, detail + f"; no datasheet figure for {what} on {path}")
    share = figure.mean * 1e9 / bound
    row = datasheet.row_for(p.name)
    detail += (
        f"; {share:.0%} of the {bound / 1e9:,.0f} GB/s a healthy 8-GPU {row} node reaches "
        f"{'with NVLink SHARP' if path == 'nvls' else 'over NVLink without SHARP'}"
    )
    if share < COLLECTIVE_FAIL:
        return Check(name, FAIL, detail, p.tools.p2p)
    if share < COLLECTIVE_WARN:
        return Check(name, WARN, detail, p.tools.p2p)
    return Check(name, PASS, detail)
