"""DCGM's diagnostic through a fake ``dcgmi`` (a real script printing what DCGM 3 prints)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from milarun.doctor.passive import dcgm


def _result(status: str, gpu: str = "0", warning: str | None = None) -> dict:
    found: dict = {"gpu_id": gpu, "status": status}
    if warning:
        found["warnings"] = [{"warning": warning, "error_id": 28}]
    return found


def report(*tests: tuple[str, list[dict]]) -> dict:
    return {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [{"name": name, "results": results} for name, results in tests],
                }
            ],
            "version": "3.3.9",
        }
    }


def fake_dcgmi(tmp_path: Path, output: str, code: int = 0) -> str:
    path = tmp_path / "dcgmi"
    (tmp_path / "out.txt").write_text(output)
    path.write_text(
        f'#!/bin/sh\n[ "$1 $2 $3" = "diag -r 1" ] || exit 9\ncat {tmp_path}/out.txt\nexit {code}\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_passing_diagnostic_passes(tmp_path):
    text = json.dumps(
        report(("Memory", [_result("Pass"), _result("Pass", "1")]), ("PCIe", [_result("Skip")]))
    )
    line = dcgm.diag(fake_dcgmi(tmp_path, text), "quick")
    assert line.status == "PASS" and line.name == "dcgm diag -r 1"
    assert line.detail == "3 results (2 pass, 1 info)"


def test_a_failed_test_fails_naming_the_gpu_and_the_reason(tmp_path):
    text = json.dumps(
        report(
            ("Memory", [_result("Pass"), _result("Fail", "1", "Pending page retirements on GPU 1")])
        )
    )
    line = dcgm.diag(fake_dcgmi(tmp_path, text), "quick")
    assert line.status == "FAIL"
    assert "FAIL Memory (GPU 1): Pending page retirements on GPU 1" in line.detail and line.fix


def test_a_broken_dcgm_is_a_warning_with_its_message(tmp_path):
    line = dcgm.diag(fake_dcgmi(tmp_path, "", code=255), "quick")
    assert line.status == "WARN" and "exited with 255" in line.detail
    line = dcgm.diag(fake_dcgmi(tmp_path, "Error: unable to connect to host engine\n"), "quick")
    assert line.status == "WARN" and "unable to connect to host engine" in line.detail
