"""The errors that are the user's to fix: every command prints one line and exits 1.

One hierarchy for every command, so that no module imports another wing just to raise or
catch its error. Each class keeps the builtin base it had (ValueError, RuntimeError) so that
callers catching those still do.
"""

from __future__ import annotations


class UserError(Exception):
    """A call, file or machine state the user must change: one line, exit 1, no traceback."""


class UsageError(UserError, RuntimeError):
    """The call itself is wrong (nothing is run, nothing is written)."""


class InputError(UserError, ValueError):
    """A file or value given by the user that cannot be used."""


class WriteError(InputError):
    """A file that could not be written (full disk, permissions)."""


class ResultError(InputError):
    """A file that is not a readable milarun result."""


class SummaryError(ResultError):
    """A file given as a summary/baseline that does not have the baseline format."""


class EmptyResults(ResultError):
    """A results folder with no usable result."""


class WeightsError(InputError):
    """A weights file that cannot be used."""


class HtmlPathError(InputError):
    """--html names a file that is not a milarun report: never overwrite it."""


class GatherError(InputError):
    """A node folder that cannot be gathered safely."""


class SlurmError(InputError):
    """Slurm refused or is missing."""


class ProfileError(UserError, ValueError):
    """A profile that cannot be used (names the file, the job and the key)."""


class DeviceSpecError(UserError, ValueError):
    """A --devices value that does not name this machine's devices."""


class GPUDiscoveryError(DeviceSpecError):
    """The machine shows GPUs that NVML cannot see: never a silent CPU run."""


class LaunchError(UserError, RuntimeError):
    """A suite that cannot be launched as asked."""


class IsolationError(UserError, RuntimeError):
    """Student cgroups missing or unusable."""


class DoctorFailed(UserError, RuntimeError):
    """`jobs --doctor` found a faulty device: the run does not start (unless --force)."""


class TenderError(InputError):
    """A tender file, declared figures or bid package that cannot be used (milarun.tender)."""


class PackageRefused(TenderError):
    """A bid package refused unread: unsafe (escaping paths, links, devices, bombs) or damaged."""


class DatabaseError(InputError):
    """A results database that cannot be opened or used (its URL, its schema, the server)."""


class PushError(UserError, RuntimeError):
    """A push the results server refused or could not take (the package is kept)."""


def unknown_name(what: str, name: str, known: list[str], shown: int = 20) -> str:
    """The line for a name that matches none: ``no test named 'quick.polynom'; did you mean
    quick.polynome? (tests: ...)``: the closest ones named, at most ``shown`` listed."""
    hint = close_names(name, known)
    listed = ", ".join(sorted(known)[:shown]) + (" ..." if len(known) > shown else "")
    return f"no {what} named {name[:80]!r}{hint} ({what}s: {listed or 'none'})"


def close_names(name: str, known: list[str]) -> str:
    """``; did you mean quick.polynome?`` (the closest of ``known``), or "" when none is."""
    import difflib  # the rare path: only when a name matched nothing

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""
