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
