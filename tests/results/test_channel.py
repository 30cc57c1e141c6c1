"""The result channel of a `jobs` run (issue 50), a real socket between real processes: a
result sent by a process that knows the run's secret is held and answered; one without the
secret, or not a result, is refused and the sender told it was not taken."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import ROOT, cli_env
from milarun.results import channel
from resultfactory import result

SEND = (
    "import json, sys\n"
    "from milarun.results import channel\n"
    "print(channel.send(json.loads(sys.stdin.read())), flush=True)\n"
)


@pytest.fixture
def inbox():
    found = channel.ResultChannel()
    yield found
    found.close()


def _send(data: dict, env: dict[str, str]) -> subprocess.Popen:
    """A process of its own sends ``data`` on the channel ``env`` names; it prints what
    channel.send answered."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SEND], cwd=ROOT, env=cli_env(env), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(data))
    proc.stdin.close()
    return proc


def _serve(inbox: channel.ResultChannel, proc: subprocess.Popen) -> list:
    """Read the channel (as the supervisor's poll does) until the sender is done."""
    got = []
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        got += inbox.receive()
        time.sleep(0.05)
    return got


def test_a_result_sent_is_held_and_answered(inbox):
    data = result("suite.t", "0.1", 100.0)
    proc = _send(data, inbox.env)
    ((pid, held),) = _serve(inbox, proc)
    assert proc.stdout is not None and proc.stdout.read().strip() == "None"
    assert pid == proc.pid and held["name"] == "suite.t" and held["job_id"] == "0.1"
    assert held["success"] is True and not inbox.refused


@pytest.mark.parametrize("what", ["wrong secret", "not a result"])
def test_a_sender_without_the_secret_or_a_result_is_refused(inbox, what):
    address, _, secret = inbox.env[channel.RESULT_CHANNEL_ENV].rpartition(":")
    env, data = inbox.env, result("suite.t", "0", 100.0)
    if what == "wrong secret":
        env = {channel.RESULT_CHANNEL_ENV: f"{address}:{'0' * len(secret)}"}
    else:
        data = {"rates": [1, 2]}
    proc = _send(data, env)
    assert _serve(inbox, proc) == []
    assert (
        proc.stdout is not None and proc.stdout.read().strip() == "the supervisor did not take it"
    )
    (reason,) = inbox.refused
    assert ("secret" in reason) if what == "wrong secret" else ("not a milarun result" in reason)


def test_no_channel_outside_jobs():
    assert channel.send(result("suite.t", "0", 1.0), {}) == (
        "no supervisor's channel (not under milarun jobs)"
    )
