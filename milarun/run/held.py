"""Finished results the results disk could not take, held in memory until they are written.

An instance that cannot write its result (a full disk) sends it on the supervisor's result
channel (results/channel.py: no disk needed); ``Inbox`` keeps what arrives until the
instance ends and the supervisor records it. A record the supervisor then cannot write
either is held (its ``unwritten`` says why). At the end of the run ``settle`` writes every
held record: into the results folder once it takes them (waiting for space when a held one
is a measurement), else into the folder the user named (``jobs --spare-out``), else into
a folder of the temp folder; the last resort is the console. It says where each went.
"""

from __future__ import annotations

import json
import logging
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.results import channel, read
from milarun.run.plan import Instance

log = logging.getLogger("milarun")
RETRY_INTERVAL = 1.0
DEFAULT_WAIT = 600.0  # seconds `jobs` waits for space when it holds a measurement
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MAX_NAMED = 5  # results a recovery command names one by one


class Inbox:
    """The supervisor's result channel and what came on it, by (result name, job id)."""

    def __init__(self) -> None:
        self.sent: dict[tuple[str, str], dict[str, Any]] = {}
        try:
            self.channel: channel.ResultChannel | None = channel.ResultChannel()
        except OSError as err:  # no Unix socket here: instances print theirs to their log
            log.warning("no result channel for the instances (%s)", err)
            self.channel = None

    @property
    def env(self) -> dict[str, str]:
        return self.channel.env if self.channel is not None else {}

    def take(self, running: list[Instance]) -> None:
        """Keep what the running instances sent (anything else is refused, in the log)."""
        if self.channel is None:
            return
        names = {(i.name, i.job_id) for i in running}
        for pid, result in self.channel.receive():
            view = read.ResultView.from_dict(result)
            key = (view.name, view.job_id)
            if key in names:
                self.sent[key] = result
            else:
                log.warning("result channel: pid %d sent a result of no running instance", pid)
        for reason in self.channel.refused:
            log.warning("result channel: refused: %s", reason)
        self.channel.refused.clear()

    def pop(self, inst: Instance) -> dict[str, Any] | None:
        return self.sent.pop((inst.name, inst.job_id), None)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()


def _write(inst: Instance, folder: Path) -> bool:
    try:
        inst.result_path = results.write_result(folder, inst.result, inst.stamp)
    except (errors.WriteError, FileExistsError, OSError):
        return False
    return True


def _write_here(held: list[Instance], outdir: Path) -> list[Instance]:
    """Write what the results folder takes now; returns those still held."""
    return [i for i in held if not _write(i, outdir)]


def write_held(held: list[Instance], outdir: Path, say: Callable[[str], None]) -> list[Instance]:
    """During the run: write the held records the results folder takes now (it had room
    again); returns those written."""
    waiting = [i for i in held if i.result and i.result_path is None]
    if not waiting:
        return []
    written = [i for i in waiting if _write(i, outdir)]
    if written:
        say(f"{len(written)} held result(s) written in {outdir}: it has room again")
    return written


def _wait_for_space(
    held: list[Instance], outdir: Path, wait: float, say: Callable[[str], None]
) -> list[Instance]:
    """Retry the results folder until it takes them all, ``wait`` seconds pass or a stop
    signal comes (which cuts the wait short, nothing else)."""
    stopped: list[int] = []
    previous = {s: signal.signal(s, lambda n, f: stopped.append(n)) for s in STOP_SIGNALS}
    try:
        say(
            f"{len(held)} finished result(s) held in memory: {held[0].unwritten}; milarun "
            f"waits up to {wait:.0f} s for space in {outdir} (free some; Ctrl-C stops the "
            "wait and writes them elsewhere; --spare-out DIR names that folder)"
        )
        end = time.monotonic() + wait
        while held and not stopped and time.monotonic() < end:
            time.sleep(RETRY_INTERVAL)
            held = _write_here(held, outdir)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return held


def _spare_folder(outdir: Path) -> Path:
    return Path(tempfile.gettempdir()) / f"milarun-unwritten.{outdir.name}.{results.utc_stamp()}"


def settle(
    held: list[Instance], outdir: Path, spare: Path | None, wait: float, say: Callable[[str], None]
) -> list[Instance]:
    """Write every held record (see the module); returns those written."""
    held = [i for i in held if i.result and i.result_path is None]
    if not held:
        return []
    left = _write_here(held, outdir)
    measured = [i for i in left if read.ResultView.from_dict(i.result).success]
    if measured and spare is None and wait > 0:
        left = _wait_for_space(left, outdir, wait, say)
    if held != left:
        say(f"{len(held) - len(left)} held result(s) written in {outdir}")
    # Without a folder named, only measurements go to the temp folder: a FAIL record the
    # harness made (the run manifest names it, its log says why) is not worth the litter.
    if spare is None:
        left = [i for i in left if read.ResultView.from_dict(i.result).success]
    folder = spare or _spare_folder(outdir)
    moved = [i for i in left if _write(i, folder)]
    if moved:
        say(
            f"{len(moved)} result(s) written to {folder} (not {outdir}: {moved[0].unwritten}); "
            f"move them into the run's folder when it has room: {recovery(moved, outdir)}"
        )
    for inst in left:
        if inst.result_path is None:  # no disk took it: the console is the last place
            print(f"{channel.UNWRITTEN_TAG} {json.dumps(inst.result, default=str)}", flush=True)
            say(f"{inst.tag}: no folder took its result: it is printed whole above")
    return [i for i in held if i.result_path is not None]


def recovery(moved: list[Instance], outdir: Path) -> str:
    """The command that moves results written elsewhere into the run's folder."""
    paths = [str(i.result_path) for i in moved if i.result_path is not None]
    if len(paths) > MAX_NAMED and moved[0].result_path is not None:
        paths = [f"{moved[0].result_path.parent}/*.json"]
    return f"mv {' '.join(paths)} {outdir}/"
