"""The end of `milarun run` and `milarun rerun`: the test run in this process, its line, its
exit code."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any

from milarun.machine import watchdog


def run_and_exit(function: str, argv: list[str], **kw: Any) -> int:
    """Run one test in this process (`milarun run`, `rerun`), print its line and return
    its exit code; an instance of `jobs` leaves at once instead."""
    from milarun.measure import runner
    from milarun.results import read
    from milarun.results.records import Failure

    result, path = runner.run_test(function, argv, **kw)
    view = read.ResultView.from_dict(result)
    rate = view.rate()  # None also where another rank's is none
    fail = view.failure or (Failure("no-rate", "no rate") if rate is None else None)
    if fail is None:
        print(f"{view.name} J{view.job_id}: {rate:,.2f} examples/s")
    else:
        print(f"{view.name} J{view.job_id}: FAIL ({fail.kind}): {fail.message}")
    if path is not None:
        print(f"result: {path}")
    code = runner.exit_code(result)
    if os.environ.get(watchdog.SUPERVISOR_ENV):
        # An instance of `jobs`: its result is on disk (fsynced), so leave now, without the
        # interpreter's own exit (atexit, module teardown), which is slow after torch.
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            # its log on a full disk: the result is written or with the supervisor already
            with contextlib.suppress(OSError):
                stream.flush()
        os._exit(code)
    return code
