"""A result read for a report without building its monitor samples: most of a result's
bytes, and 9 tenths of the time to parse it (100,000 results: a fleet run), when the
report only needs the peak each monitor's record keeps (machine.monitor_peak).

msgspec decodes the file into the result's declared keys and skips what it is told to,
checking that it is valid JSON all the same. Whatever it would read differently from the
whole reader (results.load_result: orjson, then the stdlib for NaN and the like) is left
to that reader: an unknown key, a monitor record of another shape, samples that are no
list, an integer past 64 bits (orjson makes it a float), anything msgspec refuses.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import orjson

from milarun.machine import monitor_peak

UNSET: Any = msgspec.UNSET
# An integer orjson would read as a float: 20 digits or more, or below -2**63 (the one
# place where msgspec and orjson read a valid file differently). Digits of a string or a
# float's fraction match too: such a file is only read the slower way.
_BIG_INT = re.compile(rb"\d{20}|-\d{19}")


class _Monitor(msgspec.Struct, forbid_unknown_fields=True):
    """A monitor's record (machine.monitors) with its samples as undecoded JSON."""

    interval: Any = UNSET
    samples: msgspec.Raw = msgspec.Raw(b"[]")
    note: Any = UNSET
    errors: Any = UNSET
    peak_memory_mib: Any = UNSET
    peak_rss_mib: Any = UNSET


MONITOR_PEAKS = {"gpu_monitor": monitor_peak.GPU_PEAK, "cpu_monitor": monitor_peak.CPU_PEAK}


def decoder(keys: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    """The decoder of a result with these top-level keys (every other key: refused)."""
    fields = [
        (key, _Monitor | None, UNSET) if key in MONITOR_PEAKS else (key, Any, UNSET) for key in keys
    ]
    struct = msgspec.defstruct("Result", fields, forbid_unknown_fields=True)
    return msgspec.json.Decoder(struct)


def decode(raw: bytes, result: msgspec.json.Decoder[Any]) -> dict[str, Any] | None:
    """The result in ``raw`` with each monitor's samples left out where its record keeps
    its peak (kept where it does not: the peak is read from them); None where the whole
    reader must read it (see the module's doc)."""
    if _BIG_INT.search(raw):
        return None
    try:
        found = result.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    data: dict[str, Any] = {}
    for key in found.__struct_fields__:
        value = getattr(found, key)
        if value is UNSET:
            continue
        if key in MONITOR_PEAKS and value is not None:
            value = _monitor(value, MONITOR_PEAKS[key])
            if value is None:
                return None
        data[key] = value
    return data


def _monitor(record: _Monitor, peak: str) -> dict[str, Any] | None:
    samples = bytes(record.samples)
    kept: Any = None
    if samples != b"null":
        if not samples.startswith(b"["):
            return None  # not a list: the whole reader names the problem
        kept = []  # as results.read.seal leaves them
        if monitor_peak.kept_peak({peak: getattr(record, peak)}, peak) is None:
            try:  # no peak kept: the samples are read for it
                kept = orjson.loads(samples)
            except orjson.JSONDecodeError:
                return None
    out = {key: getattr(record, key) for key in record.__struct_fields__}
    out["samples"] = kept
    return {k: v for k, v in out.items() if v is not UNSET}
