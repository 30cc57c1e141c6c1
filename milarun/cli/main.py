"""The ``milarun`` command line (coleo): parse, call, print."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

# First: coleo's first command registers every function alive then (codefind scans the
# whole heap); imported before coleo and the wings, the heap it scans is small, in every
# milarun process, a benchmark instance included.
import codefind  # noqa: F401, I001
from coleo import Option, default, run_cli

from milarun import errors
from milarun.cli.doctor import doctor as doctor_command
from milarun.cli.doctor import selftest as selftest_command
from milarun.cli.history import DbCommands, database_option, ingest_after_run, machines_report
from milarun.cli.history import history as history_command
from milarun.cli.one_test import run_and_exit
from milarun.cli.options import (
    OneLineParser,
    default_dataroot,
    default_outdir,
    no_test_args,
    parse_extra,
    print_skipped,
    setup_logging,
    split_names,
)
from milarun.cli.server import SERVE
from milarun.cli.server import push as push_command
from milarun.cli.slurm import SlurmCommands
from milarun.cli.tender import TenderCommands, one_price, rank_bids
from milarun.cli.tender import package as package_command
from milarun.cli.tender import verify as verify_command

# Each command imports its wing when it runs: a benchmark process (`milarun run`) loads the
# measurement side only, `milarun report` no torch (tests/test_layering.py).

# Exit code of `report --fail-below` when the score ratio is under the threshold.
GATE_FAILED = 3


class Commands:
    """milarun: benchmark suites of deep-learning training workloads."""

    def jobs(test_args: list[str]) -> int:
        """Run a suite of jobs from a profile (a name such as 'quick', or a JSON file)."""
        # Profile name (quick, standard, ...) or path to a profile JSON file
        # [positional]
        # [metavar: PROFILE]
        profile_spec: Option
        # Only these jobs (space or comma separated)
        # [nargs: +]
        name: Option = default([])
        # Only jobs with one of these tags
        # [nargs: +]
        tags: Option = default([])
        # Run the whole selection this many times
        repeat: Option & int = default(1)
        # Devices: GPU ids (0,1,3) or cpu:N for N CPU slices (default: every GPU, else cpu:1)
        # [options: --devices]
        # [metavar: SPEC]
        devices_spec: Option & str = default(None)
        # Run without the profile's cgroup isolation
        no_cgexec: Option & bool = default(False)
        # Stream every instance's output
        verbose: Option & bool = default(False)
        # Data folder (default: $MILARUN_DATAROOT, then a per-user folder)
        # [alias: -d]
        dataroot: Option = default(None)
        # Output folder (default: $MILARUN_OUTROOT/results-<date>, then ./results/<date>);
        # a Slurm task writes in its <out>/nodes/<node>
        # [alias: -o]
        out: Option = default(None)
        # Multi-node scaling: this node is one of K running the gpu-progression jobs as one
        # torchrun job (needs --master)
        nnodes: Option & int = default(None)
        # Multi-node scaling: the head node (node rank 0) as ADDR:PORT
        master: Option & str = default(None)
        # Multi-node scaling: this node's rank (default: $SLURM_NODEID under srun)
        node_rank: Option & int = default(None)
        # First measure the devices (doctor --active quick|full), the record in the run
        # folder; a FAIL stops the run unless --force
        # [metavar: quick|full]
        doctor: Option & str = default(None)
        # Start the run even when --doctor finds a FAIL
        force: Option & bool = default(False)
        # Start every instance as a new interpreter (default: forked from a warm process
        # that imported torch and milarun once; each result says how it started)
        cold_start: Option & bool = default(False)
        # Run more CPU slices than this machine has CPUs (or memory at 1 GiB a slice): they
        # share them, and each rate is lower
        oversubscribe: Option & bool = default(False)
        # Where finished results go when the output folder's disk is full (default: wait for
        # space, then a folder in the temp folder)
        # [metavar: DIR]
        spare_out: Option & str = default(None)
        # Seconds to wait for space on a full output disk that holds back finished results
        wait_for_space: Option & float = default(600.0)
        # The tender this run answers: its challenge is kept in the run manifest (the run
        # was made for it, after it was issued)
        # [metavar: FILE]
        tender: Option & str = default(None)

        from milarun.run import plan, suite

        if tender is not None:
            from milarun.tender.rules import challenge_of
        challenge = challenge_of(Path(tender)) if tender is not None else None

        if (nnodes is None) != (master is None):
            raise errors.UsageError("--nnodes and --master go together (a multi-node run)")
        if devices_spec is not None:  # refused before the doctor or anything starts
            from milarun.machine.devices import parse_device_spec

            suite.check_cpu_slices(parse_device_spec(devices_spec), oversubscribe)
        if doctor:
            from milarun.cli.doctor import before_jobs

            outdir = Path(out) if out else default_outdir()
            before_jobs(profile_spec, doctor, devices_spec, outdir, force)
        outcome = suite.run_suite(
            suite.SuiteRequest(
                profile=profile_spec,
                outdir=Path(out) if out else default_outdir(),
                dataroot=Path(dataroot) if dataroot else default_dataroot(),
                names=split_names(name),
                tags=split_names(tags),
                repeat=repeat,
                devices=devices_spec,
                use_cgexec=not no_cgexec,
                verbose=verbose,
                warm_start=not cold_start,
                oversubscribe=oversubscribe,
                spare_out=Path(spare_out) if spare_out else None,
                wait_for_space=wait_for_space,
                challenge=challenge,
                user_args=test_args,
                rendezvous=(
                    plan.Rendezvous.parse(nnodes, master, node_rank) if nnodes is not None else None
                ),
            ),
            say=lambda line: print(line, flush=True),
        )
        if outcome.interrupted_by:
            print(
                f"interrupted by {outcome.interrupted_by}: every instance stopped; "
                f"results in {outcome.outdir}",
                file=sys.stderr,
            )
            return outcome.exit_code
        print()
        print(outcome.report_text, end="")
        print(f"\nresults: {outcome.outdir.resolve()}")
        if outcome.page is not None:
            print(f"report:  {outcome.page.resolve()}")
        ingest_after_run(database_option(), outcome.outdir)
        return outcome.exit_code

    def run(test_args: list[str]) -> int:
        """Run one test in this process: MODULE:FUNCTION [options] -- test arguments."""
        # The test's entry point, e.g. milabench.models.polynome:main
        # [positional]
        function: Option
        # Output folder, or a .json file name for the result
        # [alias: -o]
        out: Option = default(None)
        # Name of the result (default: the test module's name)
        experiment_name: Option = default(None)
        # Job id recorded in the result and its file name
        job_id: Option = default("0")
        # A JSON object of extra fields for the result
        extra: Option = default(None)
        # Data folder (default: $MILARUN_DATAROOT, then a per-user folder)
        # [alias: -d]
        dataroot: Option = default(None)

        from milarun.measure.call import plan_run

        call = plan_run(
            function,
            test_args,
            out=out or default_outdir(),
            dataroot=Path(dataroot) if dataroot else default_dataroot(),
            experiment_name=experiment_name,
            job_id=job_id,
            extra=parse_extra(extra),
        )
        return run_and_exit(call.function, call.argv, **call.options())

    def rerun(test_args: list[str]) -> int:
        """Re-run a result with its original call, name, job id and environment."""
        # The result file to re-run
        # [positional]
        result_file: Option
        # Output folder (default: <original folder>.rerun-<stamp>, beside the original)
        # [alias: -o]
        out: Option = default(None)

        from milarun.measure.call import plan_rerun

        call = plan_rerun(result_file, out, test_args, dataroot=default_dataroot())
        return run_and_exit(call.function, call.argv, **call.options())

    def summary(test_args: list[str]) -> int:
        """Summarise a results folder in the baseline format (JSON)."""
        # Folder of result files (searched recursively)
        # [positional]
        results_dir: Option
        # Write the summary to this file instead of printing it
        # [alias: -o]
        out: Option = default(None)

        from milarun import results
        from milarun.report import summary

        no_test_args("summary", test_args)
        if out and Path(out).exists():
            raise errors.UsageError(f"-o {out}: file exists; choose another name")
        source = summary.load_source(Path(results_dir))
        if source.loaded is None:
            raise errors.UsageError(f"{results_dir}: give a results folder, not a file")
        print_skipped(source.loaded.skipped)
        text = json.dumps(source.summary, indent=2)
        if out:
            results.write_atomic(Path(out), source.summary)
            print(
                f"summary of {len(source.loaded.results)} result(s) written to {out}",
                file=sys.stderr,
            )
        else:
            print(text)
        return 0

    def report(test_args: list[str]) -> int:
        """Report a results folder or a summary: table, score, comparison, HTML."""
        # Results folder or summary JSON file (with --rank: bid packages; none with
        # --machines)
        # [positional: *]
        source: Option = default([])
        # Weights: a file, or a shipped name such as standard (default: the suite's own)
        weights: Option = default(None)
        # Baseline: a shipped name (standard/v100), a summary file or a results folder
        compare: Option = default(None)
        # Show each device's rate as a fraction of the best device
        compare_gpus: Option & bool = default(False)
        # Per-node scores, node x device matrix, flags on a significantly slow node or device
        compare_nodes: Option & bool = default(False)
        # Machine price in dollars: adds price and price/score (--rank: P1,P2,... per bid)
        price: Option & str = default(None)
        # Electricity price in $/kWh: adds the energy cost of a million examples per test
        power_cost: Option & float = default(None)
        # Subtract one standard deviation from each perf before scoring
        penalize_variance: Option & bool = default(False)
        # Also write the HTML report to this file
        html: Option = default(None)
        # Title of the report
        title: Option = default(None)
        # Exit with code 3 when score / baseline score is below this ratio (needs --compare)
        fail_below: Option & float = default(None)
        # Output format: text, json or csv
        format: Option = default("text")

        from milarun.report.request import ReportRequest, make_report

        no_test_args("report", test_args)
        if machines_report(source, weights):  # report --db URL --machines A B C
            return 0
        ranked = rank_bids(source, price, power_cost, weights, format, html, title)
        if ranked is not None:
            return ranked
        outcome = make_report(
            ReportRequest(
                Path(source[0]),
                weights=weights,
                compare=compare,
                compare_gpus=compare_gpus,
                compare_nodes=compare_nodes,
                price=one_price(price),
                power_cost=power_cost,
                penalize_variance=penalize_variance,
                html=Path(html) if html else None,
                title=title,
                fail_below=fail_below,
                format=format,
            )
        )
        print_skipped(outcome.skipped)
        print(outcome.text, end="")
        if outcome.html:
            print(f"HTML report: {outcome.html.resolve()}", file=sys.stderr)
        if outcome.gate_failure:
            print(f"milarun: FAIL: {outcome.gate_failure}", file=sys.stderr)
            return GATE_FAILED
        return 1 if outcome.incomplete else 0

    def dataset(test_args: list[str]) -> int:
        """Fetch the real data of datasets, or synthesise it offline in the same layout."""
        # Datasets: milabench.datasets:mnist, or a short name (mnist fake_imagenet ...)
        # [positional: +]
        specs: Option
        # Generate data offline instead of downloading the real data
        synthetic: Option & bool = default(False)
        # Number of (training) examples to synthesise (default: the dataset's own)
        size: Option & int = default(None)
        # Seed of the synthetic data
        seed: Option & int = default(0)
        # Processes that write synthetic files
        workers: Option & int = default(None)
        # Data folder (default: $MILARUN_DATAROOT, then a per-user folder)
        # [alias: -d]
        dataroot: Option = default(None)

        from milabench import dataset_command as command  # the data side: only here

        no_test_args("dataset", test_args)
        root = Path(dataroot) if dataroot else default_dataroot()
        try:
            for line in command.make(specs, root, synthetic, size, seed, workers):
                print(line, flush=True)
        except command.Refused as err:
            raise errors.UsageError(str(err)) from None
        return 0

    def cgroups(test_args: list[str]) -> int:
        """Manage the student cgroups (root): setup, check or teardown."""
        # setup, check or teardown
        # [positional]
        action: Option
        # Devices: GPU ids (0,1,3) or cpu:N (default: every GPU, else cpu:1)
        # [options: --devices]
        # [metavar: SPEC]
        devices_spec: Option & str = default(None)

        from milarun.machine import devices, isolation

        if action not in ("setup", "check", "teardown"):
            raise errors.UsageError(f"cgroups {action!r}: use setup, check or teardown")
        devs = (
            devices.parse_device_spec(devices_spec)
            if devices_spec is not None
            else devices.discover_devices()
        )
        hier = isolation.find_hierarchies()
        ids = [d.id for d in devs]
        local = devices.gpu_local_cpus(ids) if devs[0].kind == devices.GPU_KIND else {}
        students = isolation.machine_plan(ids, hier, local)
        if action == "setup":
            for line in isolation.setup(students, hier):
                print(f"created {line}")
        elif action == "teardown":
            for line in isolation.teardown(students, hier):
                print(f"removed {line}")
        for row in isolation.check(students, hier):
            print("  ".join(f"{k}={v}" for k, v in row.items()))
        return 0

    doctor = doctor_command
    slurm, db, history = SlurmCommands, DbCommands, history_command
    tender, package, verify = TenderCommands, package_command, verify_command
    serve, push = SERVE, push_command

    def sysinfo(test_args: list[str]) -> int:
        """Print the system record that every result embeds."""
        from milarun.machine import sysinfo

        no_test_args("sysinfo", test_args)
        print(json.dumps(sysinfo.system_record(), indent=2))
        return 0

    selftest = selftest_command


def main(argv: list[str] | None = None) -> None:
    setup_logging()  # warnings: "milarun: warning: ..." on stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" belongs to the test.
    split = argv.index("--") if "--" in argv else len(argv)
    head, test_args = argv[:split], argv[split + 1 :]
    parser = OneLineParser(
        prog="milarun", description=Commands.__doc__, argument_default=argparse.SUPPRESS
    )
    try:
        code = run_cli(Commands, args=(test_args,), argv=head, parser=parser)
    except errors.UserError as err:  # the user's to fix: one line, exit 1
        print(f"milarun: error: {err}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        print("milarun: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # output piped into `head`: 128 + SIGPIPE, as a shell expects
        # nothing more to flush at exit (a failed flush would make the exit code 120)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + signal.SIGPIPE
    sys.exit(code or 0)
