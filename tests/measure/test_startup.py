"""The start-up split counts from the launch (issue 36): the process start read to the
kernel's clock tick (psutil's create_time added it to a boot time in whole seconds: every
start 0-1 s early), the supervisor's launch time where it gives one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from milarun.measure import startup

SHOW = (
    "import json, time; from milarun.measure import startup; "
    "print(json.dumps([startup.process_start(), startup.launched_at(), time.time()]))"
)


def test_the_process_start_is_read_to_the_clock_tick():
    before = time.time()
    env = {k: v for k, v in os.environ.items() if k != startup.LAUNCHED_AT_ENV}
    done = subprocess.run(
        [sys.executable, "-c", SHOW], capture_output=True, text=True, check=True, env=env
    )
    start, launched, now = json.loads(done.stdout)
    tick = 0.011  # the kernel counts a process's start in ticks of 10 ms (USER_HZ 100)
    assert before - tick <= start <= now
    assert abs(launched - start) < 0.01  # no supervisor: the process start


def test_the_supervisors_launch_time_counts_when_it_gives_one(monkeypatch):
    monkeypatch.setenv(startup.LAUNCHED_AT_ENV, "1700000000.25")
    assert startup.launched_at() == 1700000000.25
    for bad in ("soon", "-3", str(time.time() + 3600)):  # never a time to come
        monkeypatch.setenv(startup.LAUNCHED_AT_ENV, bad)
        assert abs(startup.launched_at() - startup.process_start()) < 0.02


def test_how_an_instance_started_is_recorded(monkeypatch):
    monkeypatch.setenv(startup.START_ENV, "forked: a fresh warm process (the last one: pid 7 died)")
    found = startup.startup(time.time(), time.time(), []).to_dict()
    assert found["start"] == "forked"
    assert found["start_note"] == "a fresh warm process (the last one: pid 7 died)"
    monkeypatch.delenv(startup.START_ENV)
    assert startup.startup(time.time(), time.time(), []).to_dict()["start"] == "cold"
