"""Parse every job's arguments before a suite starts: a typo fails in seconds, naming the
job and the flag, and nothing is run.

`milarun jobs` runs this module once, in a child process (``python -m
milarun.measure.argcheck``, the jobs as JSON on stdin, the verdicts as JSON on stdout): it
imports each test and calls it with an Experiment that stops as soon as the test's parser
has parsed its arguments (every model builds its parser first), so no test runs. The
arguments after ``--`` go to the tests that take them: a flag a test does not have is
dropped for that test and listed; a bad value of a flag it has is an error.
"""

from __future__ import annotations

import argparse
import inspect
import json
import signal
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from milarun.errors import UsageError
from milarun.measure.call import resolve_function
from milarun.measure.experiment import BadTestArguments, Experiment


@dataclass(frozen=True)
class JobArguments:
    """One job's arguments: the error that stops the run, or the user's flag groups the
    test does not have (it runs without them)."""

    job: str
    error: str | None = None
    dropped: list[list[str]] = field(default_factory=list)
    # Why the arguments could not be checked (the test does not import here): its
    # instances run and fail as they would have, the rest of the suite is not held up.
    unchecked: str | None = None


class _Parsed(BaseException):
    """Raised by the test's parse_args: how its parser took the arguments."""

    def __init__(self, parser: argparse.ArgumentParser, error: BadTestArguments | None):
        super().__init__()
        self.parser, self.error = parser, error


class _ParseOnly(Experiment):
    """An Experiment whose parse_args parses, then stops the test."""

    def parse_args(
        self, parser: argparse.ArgumentParser, argv: list[str], *args: Any, **kwargs: Any
    ) -> argparse.Namespace:
        try:
            super().parse_args(parser, argv, *args, **kwargs)
        except BadTestArguments as err:
            raise _Parsed(parser, err) from None
        raise _Parsed(parser, None)


class _TooLong(BaseException):
    """The test did not reach its parser in time (it does work before parsing)."""


PARSE_TIMEOUT = 20  # seconds for a test to reach its parser once imported


def _parse(experiment: str, name: str, argv: list[str]) -> _Parsed:
    function = resolve_function(experiment)
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        source = ""
    # A test that does not parse through Experiment.parse_args would run here in full.
    if "parse_args(" not in source:
        raise UsageError(f"{experiment} does not parse its arguments with exp.parse_args")

    def too_long(signum: int, frame: Any) -> None:
        raise _TooLong

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(PARSE_TIMEOUT)
    try:
        function(_ParseOnly(name), argv)
    except _Parsed as parsed:
        return parsed
    except _TooLong:
        raise UsageError(f"{experiment} did not reach its parser in {PARSE_TIMEOUT} s") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    raise UsageError(f"{experiment} returned without parsing its arguments")


def flag_groups(words: list[str]) -> list[list[str]]:
    """``--a 1 --b --c x y`` -> [[--a, 1], [--b], [--c, x, y]] (a negative number is a value)."""
    groups: list[list[str]] = []
    for word in words:
        is_flag = word.startswith("-") and not _number(word)
        if is_flag or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return groups


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def check(job: str, experiment: str, argv: list[str], user: list[str]) -> JobArguments:
    """Whether the test ``experiment`` takes the profile's ``argv`` and the user's words."""
    parsed = _parse(experiment, job, argv + user)
    if parsed.error is None:
        return JobArguments(job)
    try:  # which of the user's flags does this test not have?
        _, unknown = parsed.parser.parse_known_args(argv + user)
    except BadTestArguments as err:  # a bad value of a flag it has
        return JobArguments(job, str(err))
    groups = flag_groups(user)
    dropped = [g for g in groups if g[0] in unknown]
    if not dropped:
        return JobArguments(job, str(parsed.error))
    kept = [word for g in groups if g not in dropped for word in g]
    again = _parse(experiment, job, argv + kept)
    return JobArguments(job, str(again.error) if again.error else None, dropped)


def main() -> None:
    jobs = json.load(sys.stdin)
    verdicts = []
    for job in jobs:
        try:
            verdict = check(job["job"], job["experiment"], job["argv"], job["user"])
        except Exception as err:  # an import or set-up failure: the instance will say it
            verdict = JobArguments(
                job["job"],
                unchecked=str(err)
                if isinstance(err, UsageError)
                else f"{type(err).__name__}: {err}",
            )
        verdicts.append(asdict(verdict))
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
