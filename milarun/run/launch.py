"""Run a suite: one supervised process per instance, every outcome written to disk.

Each instance is ``milarun run`` in a process group of its own, its output in
``<outdir>/logs/<name>.J<id>.log``. On max_duration the instance gets SIGALRM (it writes a
``timeout`` result itself), then SIGKILL after a grace period. An instance that ends without
a result file gets a FAIL result written here, with the failure kind and its log tail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from milarun import errors, results
from milarun.machine import isolation, watchdog
from milarun.measure import startup
from milarun.results import read
from milarun.run import harness_record
from milarun.run.held import Inbox
from milarun.run.plan import Instance, LaunchOptions, exec_prefix
from milarun.run.prepare import run_prepare
from milarun.run.profile import Job
from milarun.run.progress import ProgressBoard
from milarun.run.warm import Refused, StartFailed, WarmPool, env_prefix, run_words

POLL_INTERVAL = 0.1
# Stop every instance and record it 'interrupted' (SIGHUP: the ssh session closed).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
log = logging.getLogger(__name__)


class JobsInterrupted(Exception):
    """SIGINT/SIGTERM/SIGHUP reached ``milarun jobs``; every child was stopped and recorded.
    Its argument is the signal's name."""

    @property
    def exit_code(self) -> int:
        return 128 + signal.Signals[self.args[0]].value


class _NotStarted(Exception):
    """An instance that could not be started, and why."""


class Supervisor:
    """Starts instances, enforces deadlines, stops everything on SIGINT/SIGTERM."""

    def __init__(
        self,
        opts: LaunchOptions,
        on_end: Callable[[Instance], None] | None = None,
        on_recorded: Callable[[Instance], None] | None = None,
    ):
        self.opts = opts
        self.board = ProgressBoard(opts.out, opts.progress_interval, opts.verbose)
        # by default the board prints each ended instance's done/FAIL line
        self.on_end = on_end or self.board.finished
        self.on_recorded = on_recorded  # the run manifest's entry, before the line
        self.stop_requested: str | None = None
        self.warned: set[str] = set()
        # a test's child that leaves its process group (setsid) becomes ours, not init's;
        # so does a forked instance whose warm process died
        watchdog.become_subreaper()
        self.pool = WarmPool(opts.outdir / "logs", os.getpid()) if opts.warm_start else None
        self.inbox = Inbox()  # the results instances could not write (a full disk)

    def close(self) -> None:
        """Let the warm processes go (at the end of the run)."""
        if self.pool is not None:
            self.pool.close()
        self.inbox.close()

    def request_stop(self, signum: int, frame: Any) -> None:
        self.stop_requested = signal.Signals(signum).name

    def run_group(self, instances: list[Instance]) -> None:
        """Run instances side by side until each has ended and has a result on disk.

        A stop signal stops and records them all (JobsInterrupted). So does any error of
        the supervisor itself (stdout closed by ``| head``, a bug), which is then raised
        again: no instance outlives this call unsupervised or unrecorded.
        """
        previous = {s: signal.signal(s, self.request_stop) for s in STOP_SIGNALS}
        try:
            self._supervise(instances)
        except BaseException as err:
            self._abandon(instances, f"an error in milarun jobs ({type(err).__name__})")
            raise
        finally:
            self._kill_escaped()
            self.board.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.stop_requested:
            raise JobsInterrupted(self.stop_requested)

    def _supervise(self, instances: list[Instance]) -> None:
        for inst in instances:
            if self.stop_requested:
                break
            self._start(inst)
        watchdog.test_fault("started")
        running = [i for i in instances if i.process is not None]
        while running:
            self.inbox.take(running)
            if self.stop_requested:
                self._stop_all(running, f"{self.stop_requested} to milarun jobs")
            now = time.monotonic()
            for inst in running:
                self._enforce_deadline(inst, now)
                if inst.started_process.poll() is not None:
                    self._finish(inst)
            running = [i for i in running if not i.result]
            self.board.update(running)
            if running:
                time.sleep(POLL_INTERVAL)

    def prepare(self, job: Job) -> list[dict[str, Any]]:
        """The job's prepare commands under the stop signals: one stops them as it stops
        instances (JobsInterrupted), never the supervisor by its default action."""
        previous = {s: signal.signal(s, self.request_stop) for s in STOP_SIGNALS}
        try:
            outcomes = run_prepare(job, self.opts, stop=lambda: self.stop_requested)
        finally:
            self._kill_escaped()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.stop_requested:
            raise JobsInterrupted(self.stop_requested)
        return outcomes

    def _kill_escaped(self) -> None:
        """No instance runs now: any process of ours left escaped one (a setsid() child, the
        test of a prefix that forked and exited) and would run on unsupervised."""
        warm = self.pool.pids() if self.pool is not None else set()
        killed = watchdog.kill_escaped(keep=warm.__contains__)
        if killed:
            self.board.say(
                f"killed {len(killed)} process(es) left running by the job's instances after "
                f"they ended (pid {', '.join(map(str, killed[:5]))}"
                f"{', ...' if len(killed) > 5 else ''})"
            )

    def _abandon(self, instances: list[Instance], reason: str) -> None:
        """After an error of the supervisor: stop and record every instance still running.
        Raises nothing: the error that got here is the one the caller must see."""
        running = [i for i in instances if i.process is not None and not i.result]
        self._stop_all(running, reason)
        for inst in running:
            try:
                self._finish(inst)
            except Exception as err:  # e.g. the closed stdout again: the record is written
                log.debug("while recording %s: %s", inst.tag, err)

    def _start(self, inst: Instance) -> None:
        """Start the instance; one that cannot start (its log cannot be written on a full
        disk, its command cannot be run) is recorded as failed with the reason, and the
        run goes on with the others."""
        inst.wall_started = time.time()
        inst.stamp = results.utc_stamp(inst.wall_started)
        existed = inst.log_path.exists()
        reason = self._open_and_launch(inst)
        if reason is None:
            self.board.say(f"start  {inst.tag}  log: {inst.log_path}")
            return
        if not existed:  # an empty log of ours left on a full disk: not kept
            with contextlib.suppress(OSError):
                if inst.log_path.stat().st_size == 0:
                    inst.log_path.unlink()
        self._not_started(inst, reason)

    def _open_and_launch(self, inst: Instance) -> str | None:
        """None once the instance runs, else why it could not start."""
        try:
            inst.log_path.parent.mkdir(parents=True, exist_ok=True)
            log_file = open(inst.log_path, "ab", buffering=0)
        except OSError as err:
            return f"cannot write its log {inst.log_path} ({err.strerror})"
        with log_file:
            try:
                self._launch(inst, log_file)
            except _NotStarted as err:
                return str(err)
            except OSError as err:  # its command is missing, not executable, ...
                return f"could not run {err.filename or 'its command'} ({err.strerror})"
            except subprocess.SubprocessError as err:  # e.g. its preexec_fn failed
                return f"could not start ({err})"
        return None

    def _launch(self, inst: Instance, log_file: Any) -> None:
        prefix = exec_prefix(inst.job, self.warned)
        command = prefix + inst.command
        preexec = None
        if inst.placement is not None:
            foreign = isolation.group_pids(inst.placement.groups, self.opts.hierarchies)
            if foreign:  # never measure beside them, never kill what we did not start
                raise errors.IsolationError(
                    f"student group {inst.placement.spec} already holds {len(foreign)} "
                    f"process(es) (pid {', '.join(map(str, foreign[:5]))}) that this run did "
                    "not start: another benchmark? stop them, or pass --no-cgexec"
                )
            inst.oom_before = isolation.oom_kills(inst.placement.groups, self.opts.hierarchies)
        # What earlier runs into the folder appended to the log counts for them: this run
        # (the command line below, then the instance's output) may add the log cap to it.
        before = os.fstat(log_file.fileno()).st_size
        inst.started = time.monotonic()
        # An adaptive run (--min-slices/--ci-target) stops extending before max_duration.
        # The stamp: the instance writes exactly the file _finish reads. The pid: its
        # ranks (torchrun) end themselves when this process is gone.
        deadline = inst.wall_started + 0.9 * inst.job.max_duration
        env = {
            **inst.env,
            "MILARUN_DEADLINE": f"{deadline:.3f}",
            watchdog.RESULT_STAMP_ENV: inst.stamp,
            watchdog.SUPERVISOR_ENV: str(os.getpid()),
            **self.inbox.env,
            startup.LAUNCHED_AT_ENV: f"{time.time():.6f}",
        }
        cold = self._fork(inst, prefix, env, log_file, before)
        if cold is None:
            return
        env[startup.START_ENV] = f"cold: {cold}" if self.pool is not None else "cold"
        if inst.placement is not None:
            command = inst.placement.prefix + command
            if inst.placement.v2_procs:
                procs = inst.placement.v2_procs
                preexec = lambda: isolation.join_groups(procs)  # noqa: E731
        self._log_line(inst, log_file, f"$ {' '.join(command)}")
        # The kernel kills the instance if this process dies, however it dies.
        preexec = watchdog.die_with_parent(os.getpid(), then=preexec, written=before)
        inst.process = subprocess.Popen(
            command,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec,
        )

    @staticmethod
    def _log_line(inst: Instance, log_file: Any, line: str) -> None:
        try:
            log_file.write(f"{line}\n".encode())
        except OSError as err:
            raise _NotStarted(f"cannot write its log {inst.log_path} ({err.strerror})") from None

    def _fork(
        self, inst: Instance, prefix: list[str], env: dict[str, str], log_file: Any, before: int
    ) -> str | None:
        """Start the instance forked from a warm process; None once it runs, else why it
        starts cold."""
        if self.pool is None:
            return "warm start off"
        words, variables = run_words(inst.command), env_prefix(prefix)
        if words is None:
            return "its command is not one process of milarun run (torchrun forks its ranks)"
        if variables is None:
            return f"its exec_prefix {prefix[0]} must exec the test"
        self._log_line(inst, log_file, f"$ (warm start) {' '.join(prefix + inst.command)}")
        try:
            inst.process, _ = self.pool.fork(
                words,
                inst.job.experiment.partition(":")[0],
                {**env, **variables},
                inst.log_path,
                watchdog.log_limit() + before,
                inst.placement.procs if inst.placement is not None else [],
                isolation.group_cpus(inst.placement, self.opts.hierarchies)
                if inst.placement is not None
                else [],
                inst.job.max_duration,
                lambda: self.stop_requested is not None,
            )
        except Refused as err:
            self._log_line(inst, log_file, f"milarun: a cold start: {err.reason}")
            return err.reason
        except StartFailed as err:
            raise _NotStarted(f"its forked process could not be set up: {err}") from None
        return None

    def _not_started(self, inst: Instance, reason: str) -> None:
        """Record an instance that could not start as failed, with the reason."""
        inst.result = harness_record.harness_failure(
            inst, self.opts, failure=("crash", f"not started: {reason}")
        )
        self._write(inst)

    def _oom_killed(self, inst: Instance) -> bool:
        if inst.placement is None or inst.oom_before is None:
            return False
        after = isolation.oom_kills(inst.placement.groups, self.opts.hierarchies)
        return after is not None and after > inst.oom_before

    def _signal_group(self, inst: Instance, sig: int) -> None:
        try:
            os.killpg(inst.started_process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _enforce_deadline(self, inst: Instance, now: float) -> None:
        elapsed = now - inst.started
        if inst.alarm_sent is None and elapsed > inst.job.max_duration:
            inst.alarm_sent = now
            try:  # the test process turns SIGALRM into a 'timeout' result of its own
                inst.started_process.send_signal(signal.SIGALRM)
            except ProcessLookupError:
                pass
        elif (
            inst.alarm_sent is not None
            and not inst.killed
            and now - inst.alarm_sent > self.opts.grace
        ):
            inst.killed = True
            self._signal_group(inst, signal.SIGKILL)

    def _stop_all(self, running: list[Instance], reason: str) -> None:
        for inst in running:
            if not inst.interrupted:
                inst.interrupted = True
                inst.stopped_by = reason
                self._signal_group(inst, signal.SIGTERM)
        deadline = time.monotonic() + self.opts.grace
        while time.monotonic() < deadline and any(
            i.started_process.poll() is None for i in running
        ):
            self.inbox.take(running)  # an instance stopped may send the result it ends with
            time.sleep(POLL_INTERVAL)
        for inst in running:
            if inst.started_process.poll() is None:
                inst.killed = True
                self._signal_group(inst, signal.SIGKILL)
            inst.started_process.wait()

    def _finish(self, inst: Instance) -> None:
        self.board.read([inst])  # the last lines of its output (no redraw of the table)
        # Reap whatever the test left behind in its group (loader workers, ...), and in its
        # student cgroups what left the group (setsid) but cannot leave the cgroup.
        self._signal_group(inst, signal.SIGKILL)
        if inst.placement is not None:
            left = isolation.kill_group(inst.placement.groups, self.opts.hierarchies)
            if left:
                self.board.say(
                    f"killed {len(left)} process(es) {inst.tag} left in its student group"
                )
        found = [
            path
            for path in results.result_paths(self.opts.outdir, inst.name, inst.job_id, inst.stamp)
            if path.exists()
        ]
        sent = self.inbox.pop(inst)  # it could not write its result: it sent it
        if sent is not None and not found:
            inst.result = sent
        elif found:
            inst.result_path = found[-1]
            try:
                inst.result = results.load_result(found[-1])
            except ValueError as err:
                inst.result = {"success": False, "failure": {"kind": "crash", "message": str(err)}}
        elif inst.recorded_on_head:
            # One record per run: rank 0's, on the head node; the head's ranks fail with
            # ours, so a FAIL of ours here would count one failed run twice.
            code = inst.started_process.returncode
            inst.result = {"success": code == 0, "recorded_on_head": True}
            self.board.say(
                f"{'done ' if code == 0 else 'FAIL '}  {inst.tag}: this node's ranks "
                f"{'ended well' if code == 0 else f'failed (exit {code}), see {inst.log_path}'}"
                "; rank 0, on the head node, records the run"
            )
            return
        else:
            inst.result = harness_record.harness_failure(inst, self.opts, self._oom_killed(inst))
        self._write(inst)

    def _write(self, inst: Instance) -> None:
        """Write the record the harness made (none when the instance wrote its own), then
        the manifest's entry and the instance's line."""
        if inst.result_path is None:
            try:
                inst.result_path = results.write_result(self.opts.outdir, inst.result, inst.stamp)
            except errors.WriteError as err:  # the report still counts it, from memory
                inst.unwritten = str(err)[:300]  # and the run manifest names it
                if inst.process is None:
                    failure = read.ResultView.from_dict(inst.result).failure
                    log.error("%s; %s", err, failure.message if failure else None)
                else:
                    log.error("%s; what happened is in %s", err, inst.log_path)
        if self.on_recorded is not None:
            self.on_recorded(inst)
        self.on_end(inst)
