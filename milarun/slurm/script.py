"""The batch script of `milarun slurm fleet|scaling` (templates/slurm.sbatch.j2): the sbatch
options and the `milarun jobs` command each node runs, readable and editable by an admin."""

from __future__ import annotations

import datetime as _dt
import shlex
import sys
from pathlib import Path

import jinja2

from milarun.machine import sysinfo
from milarun.slurm.request import SLURM_FOLDER, SlurmRequest


def _jobs_words(request: SlurmRequest, python: str) -> tuple[str, str]:
    """The `milarun jobs` command each node runs, and its ` -- test args` tail."""
    words = ["-m", "milarun", "jobs", request.profile]
    if request.names:
        words += ["--name", *request.names]
    if request.tags:
        words += ["--tags", *request.tags]
    if request.repeat != 1:
        words += ["--repeat", str(request.repeat)]
    if request.devices is not None:
        words += ["--devices", request.devices]
    if not request.use_cgexec:
        words.append("--no-cgexec")
    if request.dataroot is not None:
        words += ["-d", str(request.dataroot)]
    tail = " -- " + shlex.join(request.user_args) if request.user_args else ""
    out = shlex.quote(str(request.outdir.resolve()))
    if request.local_dir is None:
        return f"{python} {shlex.join(words)} -o {out}", tail
    # Each node writes on its own disk, then copies its folder back, verified (gather).
    local = shlex.quote(str(request.local_dir))
    inner = (
        f'node_out={local}/milarun-"$SLURM_JOB_ID"; {python} {shlex.join(words)} '
        f'-o "$node_out"{tail}; s=$?; '
        f'{python} -m milarun slurm gather "$node_out" {out} || s=1; exit $s'
    )
    return f"bash -c {shlex.quote(inner)}", ""


def _sbatch_lines(request: SlurmRequest, out: Path) -> list[str]:
    lines = []
    if request.kind == "scaling":
        lines.append(f"--nodes={max(request.node_counts)}")
    elif not request.each_node:  # --each-node: sbatch --nodelist=<node> per submission
        lines.append(
            f"--nodelist={request.nodelist}" if request.nodelist else f"--nodes={request.nodes}"
        )
    # whole nodes: every CPU and all their memory (a site's default --mem would be a limit)
    lines += ["--ntasks-per-node=1", "--exclusive", "--mem=0", f"--output={out}/%x.%j.out"]
    # a requeued job would run the suite again over its own results (a node failure, a
    # preemption): it ends FAILED/NODE_FAIL instead, and `slurm check` records what is lost
    lines.append("--no-requeue")
    if request.partition:
        lines.append(f"--partition={request.partition}")
    if request.gpus_per_node:
        lines.append(f"--gpus-per-node={request.gpus_per_node}")
    if request.time:
        lines.append(f"--time={request.time}")
    return lines + [shlex.quote(arg) for arg in request.sbatch_args]


def render_script(
    request: SlurmRequest, script_path: Path, python: str = sys.executable, cwd: Path | None = None
) -> str:
    """The batch script's text."""
    out = request.outdir.resolve()
    jobs, tail = _jobs_words(request, shlex.quote(python))
    where = (
        f"nodes {request.nodelist}"
        if request.nodelist
        else f"{request.nodes} node(s)"
        if request.nodes
        else "node counts " + ",".join(map(str, request.node_counts))
    )
    summary = f"profile {request.profile} on {where}" + (
        ", one job per node" if request.each_node else ""
    )
    template = jinja2.Environment(
        loader=jinja2.PackageLoader("milarun", "templates"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    ).get_template("slurm.sbatch.j2")
    return (
        template.render(
            kind=request.kind,
            summary=summary,
            version=sysinfo.milarun_version(),
            written=_dt.datetime.now().isoformat(timespec="seconds"),
            script_path=script_path,
            out=out,
            out_q=shlex.quote(str(out)),
            job_name=f"milarun-{request.kind}",
            sbatch=_sbatch_lines(request, out / SLURM_FOLDER),
            cwd=shlex.quote(str((cwd or Path.cwd()).resolve())),
            python=shlex.quote(python),
            jobs=jobs + tail if request.kind == "fleet" else jobs,
            tail=tail,
            node_counts=sorted(set(request.node_counts)),
        ).rstrip("\n")
        + "\n"
    )
