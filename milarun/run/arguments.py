"""Every selected job's arguments checked before the first instance starts (one child
process: milarun.measure.argcheck), and the arguments after ``--`` each job takes."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys

from milarun import errors, results
from milarun.measure.argcheck import flag_groups
from milarun.measure.experiment import BadTestArguments, parse_with_harness_flags
from milarun.run.profile import Job

log = logging.getLogger("milarun.run.arguments")
CHECK_TIMEOUT = 300.0  # imports every test module once: seconds on a laptop


def check_arguments(
    jobs: list[Job], user_args: list[str], shipped: bool = False
) -> dict[str, list[str]]:
    """Each job's share of ``user_args`` (job fullname -> words), after checking that every
    job parses its profile arguments and those words. A bad argument is a UsageError that
    names the job and the flag, before anything runs; a flag a test does not have is left
    out for that test, with one warning that lists them.

    A shipped profile (``shipped``: its arguments are tested with milarun) given only the
    harness's own flags, which every test takes, is checked here without importing a test.
    """
    if shipped and all(g[0] in results.HARNESS_FLAGS for g in flag_groups(user_args)):
        try:
            parse_with_harness_flags(argparse.ArgumentParser(add_help=False), user_args)
        except BadTestArguments as err:
            raise errors.UsageError(f"{err}; nothing was run") from None
        return {}
    asked = [
        {"job": job.fullname, "experiment": job.experiment, "argv": job.argv(), "user": user_args}
        for job in jobs
    ]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "milarun.measure.argcheck"],
            input=json.dumps(asked),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT,
        )
        verdicts = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as err:
        log.warning("the jobs' arguments were not checked before the run (%s)", err)
        return {job.fullname: list(user_args) for job in jobs}
    bad = [v for v in verdicts if v["error"]]
    if bad:
        first = bad[0]
        more = f" (and {len(bad) - 1} more job(s))" if len(bad) > 1 else ""
        raise errors.UsageError(f"job {first['job']}: {first['error']}{more}; nothing was run")
    out = {}
    skipped = []
    unchecked: list[str] = []  # tests that parse some other way: they run unchecked
    for verdict in verdicts:
        dropped = verdict["dropped"]
        out[verdict["job"]] = [
            word for group in flag_groups(user_args) if group not in dropped for word in group
        ]
        if dropped:
            flags = " ".join(" ".join(group) for group in dropped)
            skipped.append(f"{verdict['job']} ({flags})")
        if verdict["unchecked"]:
            unchecked.append(f"{verdict['job']} ({verdict['unchecked']})")
    if unchecked:
        log.info("arguments not checked before the run: %s", ", ".join(unchecked))
    if skipped:
        log.warning(
            "arguments after -- that a test does not take are left out for it: %s",
            ", ".join(skipped),
        )
    return out
