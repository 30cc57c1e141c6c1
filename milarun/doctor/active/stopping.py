"""SIGTERM and SIGHUP during `doctor --active` (alone, or as `jobs --doctor`'s first phase)
unwind it as Ctrl-C does: the exception runs every ``finally`` on its way out, so the probes
are killed with their process groups (children.run_children) and the temp folder of their
specs, outputs and logs is removed (run.measure's TemporaryDirectory). Their default action
would end the process at once, leaving both behind."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal reached the doctor (a BaseException, as KeyboardInterrupt: no
    ``except Exception`` on the way may take it for a probe's failure)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def line(self, what: str) -> str:
        return (
            f"milarun: {what} stopped by {self.args[0]}: its probes were stopped and its "
            "temp folder removed; nothing was recorded"
        )


def _raise(signum: int, frame: Any) -> None:
    # a second signal must not cut the unwinding (the probes' kill, the folder's removal) short
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within: SIGTERM and SIGHUP raise Stopped; the handlers before are restored after."""
    previous = {sig: signal.signal(sig, _raise) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
