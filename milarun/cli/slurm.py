"""`milarun slurm ...` (coleo): parse, call milarun.slurm.submit / follow, print."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coleo import Option, default, tooled

from milarun import errors, results
from milarun.cli.history import database_option, ingest_after_run
from milarun.cli.options import default_outdir, split_names
from milarun.machine import slurmenv

if TYPE_CHECKING:
    from milarun.slurm.submit import SlurmRequest, Submission

# Each command imports the slurm wing when it runs (a `milarun run` never loads it).

# Exit code when a job or a node failed (the report is still printed).
JOBS_FAILED = 1
INTERRUPTED = 130  # Ctrl-C while following: the jobs go on


def _node_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(word) for word in text.split(",") if word.strip())
    except ValueError:
        raise errors.UsageError(f"--nodes {text}: give node counts such as 1,2,4,8") from None
    if not counts:
        raise errors.UsageError("--nodes: give node counts such as 1,2,4,8")
    return counts


def _follow_and_report(out: Path, submission: Submission) -> int:
    from milarun.report.request import ReportRequest, make_report
    from milarun.slurm import follow

    say = lambda line: print(line, flush=True)  # noqa: E731
    try:
        states = follow.follow(out, submission, say)
    except KeyboardInterrupt:
        print(
            f"stopped following; the job(s) go on: scancel {' '.join(submission.job_ids)} "
            f"stops them, `milarun slurm wait {out}` follows them again",
            file=sys.stderr,
        )
        return INTERRUPTED
    # score what was asked for: the submission's tests and what its nodes planned
    asked = set(submission.expected) | {
        t
        for node in (out / slurmenv.NODES_FOLDER).glob("*")
        for t, _ in follow.planned_on(node, submission) or ()
    }
    outcome = make_report(
        ReportRequest(
            out,
            compare_nodes=submission.kind == "fleet",
            title=f"milarun slurm {submission.kind} {submission.profile}",
            only_tests=frozenset(asked),
            html=out / f"report.{results.utc_stamp()}.html",
        )
    )
    print()
    print(outcome.text, end="")
    print(f"\nresults: {out.resolve()}")
    if outcome.html is not None:  # always asked for above
        print(f"report:  {outcome.html.resolve()}")
    failed = [
        f"job {s.job_id} {s.state}"
        + (f" (exit {s.exit_code})" if s.exit_code else "")
        + (f" ({s.check_problem})" if s.check_problem else "")
        for s in states.values()
        if not s.ok
    ]
    failed_runs = follow.failed_runs(out, submission)
    if failed_runs:
        failed.append(f"{failed_runs} failed run(s) in job(s) {', '.join(submission.job_ids)}")
    if failed:
        print(f"milarun: FAIL: {', '.join(failed)}", file=sys.stderr)
    return JOBS_FAILED if failed else 0


def _submit(request: SlurmRequest, dry_run: bool, wait: bool) -> int:
    from milarun.slurm.submit import describe, load_submissions, submit

    submitted = submit(request, dry_run=dry_run)
    if dry_run:
        print(submitted.text, end="")
        for command in submitted.commands:
            print(f"# then: {' '.join(command)}", file=sys.stderr)
        return 0
    for line in describe(submitted):
        print(line, flush=True)
    if not wait:
        print(f"follow it with: milarun slurm wait {request.outdir}")
        return 0
    found = load_submissions(request.outdir, submitted.job_ids[0])
    return _follow_and_report(request.outdir, found[-1][1])


@tooled
def _allocation(
    kind: str, test_args: list[str], **request: Any
) -> "tuple[SlurmRequest, bool, bool]":  # noqa: UP037 (ptera evaluates it)
    """The options fleet and scaling share, with the request they make and its mode."""
    # Profile name (quick, standard, ...) or path to a profile JSON file
    # [positional]
    # [metavar: PROFILE]
    profile_spec: Option
    # Slurm partition
    partition: Option & str = default(None)
    # GPUs per node (sbatch --gpus-per-node; the ranks per node of scaling)
    gpus_per_node: Option & int = default(None)
    # Time limit of the job (sbatch --time)
    time: Option & str = default(None)
    # A further sbatch argument, e.g. --sbatch-arg=--account=lab (repeatable)
    # [action: append]
    sbatch_arg: Option = default([])
    # Only print the batch script
    dry_run: Option & bool = default(False)
    # Follow the job until it ends, then print the report
    wait: Option & bool = default(False)
    # Run the whole selection this many times
    repeat: Option & int = default(1)
    # Devices of each node, as for jobs: GPU ids or cpu:N (default: its GPUs, else cpu:1)
    # [options: --devices]
    # [metavar: SPEC]
    devices_spec: Option & str = default(None)
    # Data folder on the nodes (default: each node's own default)
    # [alias: -d]
    dataroot: Option = default(None)
    # Output folder, on a file system every node shares
    # [alias: -o]
    out: Option = default(None)

    from milarun.slurm.submit import SlurmRequest

    made = SlurmRequest(
        kind=kind,
        profile=profile_spec,
        outdir=Path(out) if out else default_outdir(),
        dataroot=Path(dataroot).resolve() if dataroot else None,
        partition=partition,
        gpus_per_node=gpus_per_node,
        time=time,
        sbatch_args=tuple(sbatch_arg),
        repeat=repeat,
        devices=devices_spec,
        user_args=tuple(test_args),
        **request,
    )
    return made, dry_run, wait


class SlurmCommands:
    """Run the suite on many nodes through Slurm (fleet), or multi-node scaling."""

    def fleet(test_args: list[str]) -> int:
        """Run a profile on every node of a Slurm allocation; one folder per node."""
        # Number of nodes (one job of N nodes, all loaded at once)
        nodes: Option & int = default(None)
        # These nodes (Slurm's syntax: node[1-4],gpu7)
        nodelist: Option & str = default(None)
        # One exclusive job per node: a broken node fails only its own job
        each_node: Option & bool = default(False)
        # Only these jobs (space or comma separated)
        # [nargs: +]
        name: Option = default([])
        # Only jobs with one of these tags
        # [nargs: +]
        tags: Option = default([])
        # Run without the profile's cgroup isolation
        no_cgexec: Option & bool = default(False)
        # Write results on this node-local folder, then copy them to -o (compared byte for byte)
        local_dir: Option = default(None)

        request, dry_run, wait = _allocation(
            "fleet",
            test_args,
            nodes=nodes,
            nodelist=nodelist,
            each_node=each_node,
            names=tuple(split_names(name)),
            tags=tuple(split_names(tags)),
            use_cgexec=not no_cgexec,
            local_dir=Path(local_dir) if local_dir else None,
        )
        db = database_option()
        if db is not None and (dry_run or not wait):
            raise errors.UsageError("slurm fleet --db ingests the run at its end: add --wait")
        code = _submit(request, dry_run, wait)
        if code != INTERRUPTED:  # the jobs go on: the run is not over
            ingest_after_run(db, request.outdir)
        return code

    def scaling(test_args: list[str]) -> int:
        """Multi-node DDP scaling: one allocation, one srun step + torchrun per node count."""
        # Node counts, e.g. 1,2,4,8 (one allocation of the largest)
        nodes: Option & str = default(None)
        # The scaling job(s) of the profile (default: every gpu-progression job)
        # [nargs: +]
        name: Option = default([])

        if nodes is None:
            raise errors.UsageError("slurm scaling: give --nodes as node counts, e.g. 1,2,4,8")
        request, dry_run, wait = _allocation(
            "scaling",
            test_args,
            node_counts=_node_counts(nodes),
            names=tuple(split_names(name)),
            tags=() if name else ("scaling",),
        )
        return _submit(request, dry_run, wait)

    def doctor(test_args: list[str]) -> int:
        """Run `milarun doctor` on every node, then a per-node table; a slow node flagged."""
        # Number of nodes
        nodes: Option & int = default(None)
        # These nodes (Slurm's syntax: node[1-4],gpu7)
        nodelist: Option & str = default(None)
        # Measure every device of every node: quick or full (default: the passive checks)
        # [metavar: quick|full]
        active: Option & str = default(None)
        # Devices of each node, as for jobs: GPU ids or cpu:N (default: its GPUs, else cpu:1)
        # [options: --devices]
        # [metavar: SPEC]
        devices_spec: Option & str = default(None)
        # Slurm partition
        partition: Option & str = default(None)
        # Time limit of the step (srun --time)
        time: Option & str = default(None)
        # Output folder: each node's record and output
        # [alias: -o]
        out: Option = default(None)

        if test_args:
            raise errors.UsageError("slurm doctor takes no arguments after --")
        from milarun.doctor import fleet
        from milarun.slurm import doctor

        outdir = Path(out) if out else default_outdir()
        done = doctor.run(
            doctor.DoctorRequest(outdir, nodes, nodelist, active, devices_spec, partition, time)
        )
        print("\n".join(fleet.table(done.lines)))
        for line in fleet.flags(done.lines):
            print(f"milarun: WARN: {line}", file=sys.stderr)
        folder = (outdir / slurmenv.NODES_FOLDER).resolve()
        print(f"records: {folder}/*/doctor-active.{done.stamp}.json")
        return done.exit_code

    def wait(test_args: list[str]) -> int:
        """Follow the Slurm jobs submitted into a results folder, then print its report."""
        # The results folder given to slurm fleet/scaling -o
        # [positional]
        out: Option

        if test_args:
            raise errors.UsageError("slurm wait takes no arguments after --")
        from milarun.slurm.submit import SLURM_FOLDER, load_submissions

        found = load_submissions(Path(out))
        if not found:
            raise errors.UsageError(
                f"{out}: no Slurm submission recorded in {Path(out) / SLURM_FOLDER}"
            )
        code = _follow_and_report(Path(out), found[-1][1])
        if code != INTERRUPTED:
            ingest_after_run(database_option(), Path(out))
        return code

    def gather(test_args: list[str]) -> int:
        """Copy this node's results from node-local disk into the shared folder, verified."""
        # The node-local output folder given to jobs -o
        # [positional]
        local: Option
        # The shared output folder
        # [positional]
        out: Option

        if test_args:
            raise errors.UsageError("slurm gather takes no arguments after --")
        from milarun.slurm import gather

        done = gather.gather(slurmenv.node_outdir(Path(local)), slurmenv.node_outdir(Path(out)))
        print(
            f"gathered {done.files} file(s), {done.bytes:,} bytes, compared byte for byte: "
            f"{done.source} -> {done.target}"
        )
        return 0

    def check(test_args: list[str]) -> int:
        """Record a FAIL for each expected result a node of a job did not write."""
        # The results folder of the job
        # [positional]
        out: Option
        # The Slurm job id (default: $SLURM_JOB_ID)
        job: Option & str = default(None)

        job_id = job or os.environ.get("SLURM_JOB_ID")
        if not job_id:
            raise errors.UsageError("slurm check: give --job ID (or run it inside the job)")
        # Inside the job its node list is in the environment; after it, Slurm's record.
        inside = os.environ.get("SLURM_JOB_ID") == job_id
        nodelist = os.environ.get("SLURM_JOB_NODELIST") if inside else None
        from milarun.slurm import follow
        from milarun.slurm.submit import expand_nodelist

        nodes = expand_nodelist(nodelist) if nodelist else None
        try:
            written = follow.check(Path(out), job_id, nodes)
        except follow.CheckIncomplete as err:
            for path in err.written:  # what could be recorded, then the one-line error
                print(f"FAIL recorded for a missing result: {path}")
            raise
        for path in written:
            print(f"FAIL recorded for a missing result: {path}")
        return JOBS_FAILED if written else 0
