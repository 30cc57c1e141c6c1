"""Benchmarks that misbehave on purpose, to test how the harness records faults."""

import os
import signal
import time


def _spin_steps(exp, argv, steps=None, step_time=0.01):
    import argparse

    # 6 slices of 0.5 s unless argv says otherwise (its values come last, so they win).
    exp.parse_args(argparse.ArgumentParser(), ["--min-slices", "6", *argv])
    log = exp.rate_log()
    while not log.done:
        with log.block(1):
            time.sleep(step_time)
    log.finish()


def raises(exp, argv):
    raise RuntimeError("deliberate failure inside the test")


def nan_metric(exp, argv):
    _spin_steps(exp, argv)
    exp.metric("loss", float("nan"))


def inf_metric(exp, argv):
    _spin_steps(exp, argv)
    exp.metric("loss", float("inf"))


def hostile_progress(exp, argv):
    """Prints progress lines a supervisor must survive, then trains normally."""
    for line in (
        "{",
        "[1, 2]",
        '{"rate": "fast", "count": -1}',
        '{"rate": Infinity}',
        "[" * 100_000,
        '{"rate": 1e309, "slices": "x"}',
    ):
        print(f"MILARUN_PROGRESS {line}", flush=True)
    _spin_steps(exp, argv)


def too_short(exp, argv):
    _spin_steps(exp, ["--max-count", "20", "--min-slices", "1"])


def sigill(exp, argv):
    os.kill(os.getpid(), signal.SIGILL)


def hang(exp, argv):
    # Ignore SIGALRM so that only the harness's SIGKILL can end it.
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        time.sleep(1)


def sleepy(exp, argv):
    while True:
        time.sleep(1)


def hog_on_first_slice(exp, argv):
    """Slice cpu:0 allocates until its memory cgroup kills it; the others train normally."""
    if os.environ.get("MILARUN_DEVICE") == "cpu:0":
        chunks = []
        while True:
            chunks.append(bytearray(64 * 2**20))
            for i in range(0, len(chunks[-1]), 4096):  # touch every page
                chunks[-1][i] = 1
    _spin_steps(exp, [])


def killed_on_first_slice(exp, argv):
    """Slice cpu:0 is SIGKILLed mid-run; the others train normally."""
    if os.environ.get("MILARUN_DEVICE") == "cpu:0":
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)
    _spin_steps(exp, [])


def steps(exp, argv):
    """Trains normally for as many slices as argv asks (bounded by --min-slices)."""
    _spin_steps(exp, argv)


def chatty(exp, argv):
    """Prints without end (a runaway debug print): only a log cap stops it."""
    line = "x" * 1023
    while True:
        print(line)


def kills_its_supervisor_on(exp, argv):
    """On the Slurm node named by ``--node``, kills the `milarun jobs` that supervises it
    (as the OOM killer or a node fault would: nothing on that node records anything);
    elsewhere, spins like a healthy test."""
    node = argv[argv.index("--node") + 1]
    rest = [a for i, a in enumerate(argv) if a != "--node" and argv[i - 1 : i] != ["--node"]]
    if os.environ.get("SLURMD_NODENAME") == node:
        os.kill(int(os.environ["MILARUN_SUPERVISOR_PID"]), signal.SIGKILL)
        time.sleep(30)  # the kernel ends this process with its supervisor
    _spin_steps(exp, rest)


def escapes(exp, argv):
    """Leaves a child in a session of its own (setsid: out of the instance's process
    group) that would run on after the test; its pid goes to <outdir>/escapee.<pid>."""
    import subprocess

    child = subprocess.Popen(["sleep", "600"], start_new_session=True)
    (exp.outdir / f"escapee.{child.pid}").write_text(str(child.pid))
    _spin_steps(exp, argv)


def records_its_pid(exp, argv):
    """Writes <outdir>/test.<pid> and trains: behind a prefix that forks and exits, this
    is the process nobody supervises."""
    (exp.outdir / f"test.{os.getpid()}").write_text(str(os.getpid()))
    _spin_steps(exp, argv)


def zero_rate(exp, argv):
    """Trains for its slices but counts no example: a rate of 0 examples/s measures nothing."""
    import argparse

    exp.parse_args(argparse.ArgumentParser(), ["--min-slices", "6", *argv])
    log = exp.rate_log()
    while not log.done:
        with log.block(0):
            time.sleep(0.01)
    log.finish()


def fills_disk(exp, argv):
    """Fills the disk its result goes to (a runaway checkpoint), then ends without a result."""
    try:
        with open(exp.outdir / "filler", "ab") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError:
        pass


def ramp(exp, argv):
    """A step time that falls by 15% after 4 s of steps (clocks settling, a cache warming):
    the run must extend past the ramp before it reports. The time of the fall is metric
    ``ramp_at`` (epoch seconds)."""
    import argparse

    exp.parse_args(argparse.ArgumentParser(), ["--min-slices", "22", *argv])
    log = exp.rate_log()
    start = None
    while not log.done:
        now = time.time()
        start = start or now
        with log.block(1):
            time.sleep(0.010 if now - start < 4.0 else 0.0085)
    log.finish()
    exp.metric("ramp_at", start + 4.0)


def crashes_unless_told(exp, argv):
    """Dies of SIGSEGV while argv's last word of the two is --crash (a profile's), trains
    normally after --no-crash (a rerun's, appended last)."""
    flags = [a for a in argv if a in ("--crash", "--no-crash")]
    if flags and flags[-1] == "--crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    _spin_steps(exp, [a for a in argv if a not in flags])


def fills_disk_once_measured(exp, argv):
    """Trains; once measured, waits (at most 60 s) until every instance of the run is
    measured too (a file each in --meet FOLDER, off the results disk: --meet-count of them),
    then fills the disk its result goes to (a runaway checkpoint): every instance has a
    measurement and no room to write it."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--meet")
    parser.add_argument("--meet-count", type=int)
    ours, rest = parser.parse_known_args(argv)
    meet, count = ours.meet, ours.meet_count
    _spin_steps(exp, rest)
    with open(os.path.join(meet, str(os.getpid())), "w"):
        pass
    deadline = time.time() + 60
    while len(os.listdir(meet)) < count and time.time() < deadline:
        time.sleep(0.05)
    try:
        with open(exp.outdir / f"filler.{os.getpid()}", "ab") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
