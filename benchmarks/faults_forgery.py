"""The fault campaign, forged bids (issue 42): a hostile vendor takes the honest package of the
real H100 run (tests/data/gpu-runs), scales one result's rates and count, edits as much of
the evidence beside it as he cares to, re-hashes the MANIFEST and sends it. `milarun verify`
must FAIL each with its reason in one line (the evidence rule), and still pass the honest one
and a fresh run of this machine. Run by faults.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from faultkit import ROOT, Outcome, clean, milarun

import bidkit
import forgery

H100 = ROOT / "tests" / "data" / "gpu-runs" / "h100-2026-11-28" / "modern"
# the run's --min-slices 22 is an argument of its own: a tender that allows it
H100_TENDER = ["--profile", "modern", "--repeat", "1", "--allow-overrides"]


def _evidence(done, rule: str = "evidence") -> str:
    """A rule's line of `verify`'s output (empty where there is none)."""
    return next((ln for ln in done.stdout.splitlines() if ln.split()[1:2] == [rule]), "")


def _package(tmp: Path, folder: Path, tender_args: list[str]) -> tuple[Path, Path]:
    tender = tmp / "tender.json"
    milarun("tender", "init", *tender_args, "-o", tender)
    out = tmp / "bid.tar.gz"
    milarun("package", folder, "-o", out, "--tender", tender)  # a failure: verify says it
    return out, tender


def _forged(
    tmp: Path,
    edit: Callable[[Path], object],
    said: str,
    rule: str = "evidence",
    tender_args: tuple[str, ...] = (),
) -> Outcome:
    """The H100 package edited by ``edit`` (its run folder), re-hashed: verify must exit 1
    with ``rule`` FAILed, its line holding ``said``, no traceback, the hashes rule passed
    (``tender_args``: the tender's options besides H100_TENDER)."""
    out, tender = _package(tmp, H100, [*H100_TENDER, *tender_args])
    bad = bidkit.edited(out, tmp, lambda folder: edit(folder / "run"))
    done = milarun("verify", bad, "--tender", tender)
    line = _evidence(done, rule)
    failed = [ln.split()[1] for ln in done.stdout.splitlines() if ln.startswith("FAIL")]
    ok = (
        done.returncode == 1
        and clean(done)
        and "hashes" not in failed  # the vendor's MANIFEST holds the edited files' hashes
        and line.startswith("FAIL")
        and said in line
    )
    return ok, 0, f"exit {done.returncode}, FAIL {failed}: {line[:260]}"


def rates_and_count(tmp: Path) -> Outcome:
    """The issue's forgery: every other rule passes it; the log printed the true rates."""
    return _forged(
        tmp,
        lambda run: forgery.scale(run, "modern.llm", 1.2),
        "timings.train.rates[0] 52,814.49964 but logs/modern.llm.J0.0.log line 2 rate",
    )


def log_edited_too(tmp: Path) -> Outcome:
    """The log and the FLOP/s edited to match; the energy record made from the monitor's
    samples is not."""
    return _forged(
        tmp,
        lambda run: forgery.scale(run, "modern.llm", 1.2, log=True, derived=True),
        "energy.examples 393,214.1175 but the rates over the steady window make 471,856.9409",
    )


def above_the_datasheet(tmp: Path) -> Outcome:
    """gemm x1.6 with everything the forger can reach edited: the datasheet is not his."""
    return _forged(
        tmp,
        lambda run: forgery.scale(run, "modern.gemm", 1.6, log=True, derived=True, energy=True),
        "108% of the H100-SXM datasheet's dense peak (bf16 989.5 TFLOP/s): impossible",
    )


def count_without_rates(tmp: Path) -> Outcome:
    return _forged(
        tmp,
        lambda run: forgery.scale(run, "modern.llm", 1.2, rates=False),
        "timings.train.count 609,484.8 leaves 117,964.8 examples before its slices",
    )


# -- issue 46: the forger who edits the FLOPs, the device and the doctor's record --------------
def flops_divided(test: str, factor: float, said: str) -> Callable[[Path], Outcome]:
    """``test`` x ``factor`` with its FLOPs per example, per step and per precision divided
    by it: its FLOP/s stay the true ones, under every peak; milarun's own FLOPs of the test
    are not the forger's to divide."""
    return lambda tmp: _forged(
        tmp, lambda run: forgery.scale(run, test, factor, log=True, energy=True, flops=True), said
    )


def device_name_removed(tmp: Path) -> Outcome:
    """gemm x1.6, efficiency.device_name and the doctor's record deleted: the device is
    read from the system record, the datasheet peak still applies."""

    def edit(run: Path) -> None:
        forgery.scale(run, "modern.gemm", 1.6, log=True, derived=True, energy=True)
        forgery.edit_result(run, "modern.gemm", lambda d: d["efficiency"].pop("device_name"))
        (run / "doctor-active.json").unlink()

    return _forged(tmp, edit, "108% of the H100-SXM datasheet's dense peak (bf16 989.5 TFLOP/s)")


def _in(test: str, change: Callable[[dict], object]) -> Callable[[Path], object]:
    """The edit of a run folder that applies ``change`` to ``test``'s result."""
    return lambda run: forgery.edit_result(run, test, change)


def device_renamed(tmp: Path) -> Outcome:
    return _forged(
        tmp,
        _in("modern.llm", lambda d: d["efficiency"].update(device_name="NVIDIA B200")),
        "efficiency.device_name 'NVIDIA B200' but system.gpus names 'NVIDIA H100 80GB HBM3'",
    )


def renamed_against_the_run_record(tmp: Path) -> Outcome:
    return _forged(
        tmp,
        _in("modern.gemm", lambda d: forgery.rename_gpu(d, "NVIDIA B200")),
        "system.gpus names NVIDIA B200 but the run's system record (.sysinfo) names NVIDIA H100",
    )


def monitor_against_the_system_record(tmp: Path) -> Outcome:
    return _forged(
        tmp,
        _in("modern.vit", lambda d: forgery.monitor_memory(d, 143_771.0)),
        "gpu_monitor samples a GPU of 143,771 MiB but system.gpus says 81,559 MiB",
    )


def pci_id_against_the_inventory(tmp: Path) -> Outcome:
    """The system record says the H100 SXM's PCI device id (0x2330), the GPU monitor's
    inventory an H100 PCIe's (0x2331): the two readings of one GPU disagree."""

    def edit(data: dict) -> None:
        data["system"]["gpus"][0]["pci_device_id"] = "0x2330"
        forgery.monitor_inventory(data, pci_device_id="0x2331")

    return _forged(
        tmp,
        _in("modern.bert", edit),
        "gpu_monitor.inventory PCI device id 0x2331 but system.gpus says 0x2330",
    )


def doctor_record_deleted(tmp: Path) -> Outcome:
    """A tender that requires a PASS doctor --active record per device: deleting it FAILs."""
    return _forged(
        tmp,
        lambda run: (run / "doctor-active.json").unlink(),
        "without a PASS doctor --active record from 1 h before their run to its end: cuda:0",
        rule="doctor",
        tender_args=("--require-doctor",),
    )


def energy_scaled_with_the_rate(tmp: Path) -> Outcome:
    """llm x2 (its FLOP/s too: 65% of the H100's peak, under it) with its energy record's
    examples scaled and its joules halved (energy per example kept): the joules the monitor's
    samples give are not."""

    def edit(run: Path) -> None:
        path = forgery.scale(run, "modern.llm", 2.0, log=True, derived=True, energy=True)
        forgery.edit_result(run, "modern.llm", lambda d: d["energy"].update(
            joules=d["energy"]["joules"] / 2, watts=d["energy"]["watts"] / 2))  # fmt: skip
        assert path.is_file()

    return _forged(tmp, edit, "but gpu_monitor's samples over the steady window give 6,226.092459")


def honest_packages(tmp: Path) -> Outcome:
    """The H100 package as it is, and a fresh `jobs quick` run of this machine: the evidence
    rule passes both (other rules, such as busy on a loaded machine, are theirs)."""
    (tmp / "h100").mkdir()
    out, tender = _package(tmp / "h100", H100, H100_TENDER)
    h100 = milarun("verify", out, "--tender", tender)
    fresh = tmp / "fresh"
    ran = milarun("jobs", "quick", "--name", "polynome", "--devices", "cpu:2", "-o", fresh / "run",
                  "-d", tmp / "data")  # fmt: skip
    out, tender = _package(fresh, fresh / "run", ["--profile", "quick", "--name", "polynome",
                                                  "--repeat", "1"])  # fmt: skip
    mine = milarun("verify", out, "--tender", tender)
    lines = [_evidence(h100), _evidence(mine)]
    ok = (
        h100.returncode == 0
        and ran.returncode == 0
        and all(ln.startswith("PASS") for ln in lines)
        and clean(h100)
        and clean(mine)
    )
    return ok, 0, f"H100 exit {h100.returncode}, fresh run exit {mine.returncode}: {lines}"


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "forged: rates and count x1.2": rates_and_count,
    "forged: log too, monitor left": log_edited_too,
    "forged: above the datasheet": above_the_datasheet,
    "forged: count without rates": count_without_rates,
    "forged: FLOPs divided, gemm x1.6": flops_divided(
        "modern.gemm",
        1.6,
        "efficiency.flops_per_example 625,000,000,000 but milarun's definition of a gemm "
        "example (10^12 FLOPs) gives 1,000,000,000,000",
    ),
    "forged: FLOPs divided, llm x2": flops_divided(
        "modern.llm",
        2.0,
        "efficiency.flops_per_example 3,657,185,280 but milarun's PaLM formula 6N + 12 L d s "
        "per token gives 7,314,370,560",
    ),
    "forged: device name and doctor removed": device_name_removed,
    "forged: efficiency names another GPU": device_renamed,
    "forged: GPU renamed in the result": renamed_against_the_run_record,
    "forged: monitor against system record": monitor_against_the_system_record,
    "forged: PCI id against the inventory": pci_id_against_the_inventory,
    "forged: doctor record deleted": doctor_record_deleted,
    "forged: energy scaled with the rate": energy_scaled_with_the_rate,
    "honest bids pass evidence": honest_packages,
}
