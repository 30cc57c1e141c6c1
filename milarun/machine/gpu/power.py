"""The power a GPU may draw: its datasheet board power and the limit its driver enforces
now, read for the energy record (a run's watts are read against both)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from milarun.machine import gpu
from milarun.machine.gpu import datasheet


@dataclass(frozen=True)
class BoardPower:
    """Per GPU: the datasheet's board power and the enforced limit (W); None: unknown."""

    name: str | None
    board_power_w: float | None
    power_limit_w: float | None


def board_power(ids: Sequence[str]) -> list[BoardPower]:
    """Each GPU's (by UUID or index) board power and enforced limit; a GPU its backend
    cannot read is all None (the energy record must never fail on it)."""
    backend = gpu.load()
    found = []
    for gid in ids:
        try:
            handle = backend.handle(gid)
            name = backend.device_name(handle)
            limit = backend.health(handle).power_limit_w
        except Exception:  # a backend's errors (NVMLError, AmdSmiException, LookupError)
            found.append(BoardPower(None, None, None))
            continue
        found.append(BoardPower(name, datasheet.board_power_w(name), limit))
    return found
