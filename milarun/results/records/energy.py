"""What a result's work cost and reached: the GPUs' energy and the node's over the steady
window, and the FLOPs against the device's peak (written by milarun.measure.energy,
.nodepower and .efficiency)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from milarun.results.records.base import OMIT_NONE, FileRecord


@dataclass(frozen=True)
class Energy(FileRecord):
    """``energy``: the GPUs' energy over the steady window (null numbers with a ``reason``
    where it could not be measured)."""

    # all the GPUs together, W: the datasheet's board power (machine.gpu.datasheet) and the
    # limit their drivers enforced, so ``watts`` reads against both; None: not known (and
    # not written: older records have neither)
    board_power_w: float | None = field(default=None, metadata={OMIT_NONE: True})
    power_limit_w: float | None = field(default=None, metadata={OMIT_NONE: True})
    joules: float | None = None
    seconds: float | None = None  # wall-clock length of the window
    watts: float | None = None  # mean power: joules / seconds
    examples: float | None = None  # examples trained in the window (all ranks)
    joules_per_example: float | None = None
    examples_per_joule: float | None = None  # = examples/s per W
    method: str | None = None  # "counter", "power" (trapezoids) or "counter+power"
    gpus: tuple[str, ...] = ()
    reason: str | None = None
    backend: str | None = None  # the device backend that read the GPUs (nvml, amdsmi)


@dataclass(frozen=True)
class NodeEnergy(FileRecord):
    """``node_energy`` (measure.nodepower): the node's energy over the steady window, read
    from its BMC; null numbers and a ``reason`` where it was not measured."""

    joules: float | None = None  # the whole node over the window
    seconds: float | None = None
    watts: float | None = None  # the node's mean power
    instances: int = 1  # benchmark instances that shared the node
    share_joules: float | None = None  # joules / instances: this instance's part
    gpu_joules: float | None = None  # this instance's GPUs (the ``energy`` record)
    rest_joules: float | None = None  # share_joules - gpu_joules
    examples: float | None = None
    examples_per_joule: float | None = None  # examples / share_joules: node perf per W
    method: str | None = None  # "counter" or "power"
    readings: int = 0  # BMC readings inside the window
    source: str | None = None  # protocol and resource (never the address or credentials)
    reason: str | None = None


@dataclass(frozen=True)
class MathSettings(FileRecord):
    """The TF32 switches of ``efficiency.settings``, as written (a reader tests ``is True``)."""

    tf32_capable: Any = None
    tf32_matmul: Any = None
    tf32_cudnn: Any = None


@dataclass(frozen=True)
class Efficiency(FileRecord):
    """``efficiency`` (measure.efficiency): FLOPs, the device and its peak; None where
    unknown, and ``note`` says why."""

    flops_per_example: float | None = None
    flops_per_step: float | None = None
    precision: str | None = None  # the precision most of the counted FLOPs ran in
    flops_by_precision: Mapping[str, Any] | None = None  # FLOPs of one step, per precision
    achieved_flops: float | None = None  # FLOPs per example x the steady rate
    device_name: str | None = None
    peak_flops: float | None = None
    percent_of_peak: float | None = None
    note: str | None = None
    # The float32 settings in force after the run (measure.efficiency.precision_settings):
    # whether "fp32" convolutions and matmuls may have run as TF32, and cudnn's autotuning;
    # an inference test's engine and how it ran (results.inference reads those)
    settings: Mapping[str, Any] | None = None
    method: str | None = None  # how the FLOPs were found: COUNTED, or a test's formula

    @property
    def math(self) -> MathSettings | None:
        return MathSettings.from_dict(self.settings)
