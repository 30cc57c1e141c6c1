"""Issue 39: a report of runs measured on a busy machine says so in a line or two, however
many tests were busy (a quick run on a loaded machine made a 12-line paragraph), and the
quality table shows each test's busy runs and the share of their CPUs others took."""

from __future__ import annotations

from conftest import milarun
from resultfactory import result, write

QUICK = 26  # the tests of a quick run


def diagnostics(others: float | None) -> dict:
    """A steady window's record (measure.diagnostics), busy when ``others`` >= 0.25."""
    flags = ["busy"] if others is not None and others >= 0.25 else []
    contention = {"others": others, "cpus": 1, "load": 3.2, "span": 9.0} if others else None
    return {
        "train": {"slices": 18, "cv": 0.01, "drift": 0.0, "warmup": 1.0, "flags": flags,
                  "contention": contention}
    }  # fmt: skip


def run_folder(folder, shares: dict[str, float | None], runs: int = 3):
    for test, others in shares.items():
        for r in range(runs):
            data = result(test, f"{r}.0", 100.0 + r, diagnostics=diagnostics(others))
            write(folder, data, f"{test}.J{r}.0.20260101-000000-{r:06d}.json")
    return folder


def warnings_of(text: str) -> list[list[str]]:
    """The Warnings section's items, each its lines as printed."""
    section = text.split("Warnings\n--------\n", 1)[1] if "Warnings" in text else ""
    items: list[list[str]] = []
    for line in section.strip().splitlines():
        if line.startswith("- "):
            items.append([line])
        elif items:
            items[-1].append(line)
    return items


def busy_warning(text: str) -> tuple[list[str], str]:
    """The busy warning's lines, and its text on one line."""
    (lines,) = [item for item in warnings_of(text) if "machine was busy" in item[0]]
    return lines, " ".join(" ".join(lines).split()).removeprefix("- ")


def test_every_test_busy_is_one_short_warning(tmp_path):
    shares = {f"quick.t{i:02d}": 0.40 + i / 100 for i in range(QUICK)}
    done = milarun("report", run_folder(tmp_path / "run", shares))
    assert done.returncode == 0, done.stderr
    lines, text = busy_warning(done.stdout)  # one warning, of two lines at most
    assert len(lines) <= 2, done.stdout
    assert (
        "the machine was busy in 26 of 26 tests (78 of 78 runs): other processes took up to "
        "65% of their CPUs, load up to 3.2 (per test: the quality table's busy flag); their "
        "rates are not verdict-grade"
    ) in text
    assert "quick.t03" not in text  # counted, not named
    # each test's busy runs and worst share: in the quality table
    quality = done.stdout.split("Measurement quality", 1)[1]
    row = next(line for line in quality.splitlines() if line.startswith("quick.t03 "))
    assert row.rstrip().endswith("busy:3 (43%)"), row


def test_a_few_busy_tests_are_named_with_their_load(tmp_path):
    shares = {"quick.a": 0.62, "quick.b": None, "quick.c": 0.10}
    done = milarun("report", run_folder(tmp_path / "run", shares))
    assert done.returncode == 0, done.stderr
    lines, text = busy_warning(done.stdout)
    assert len(lines) <= 2 and text == (
        "the machine was busy in quick.a (3 of 3 run(s)): other processes took up to 62% of "
        "their CPUs, load up to 3.2 (per test: the quality table's busy flag); its rates are "
        "not verdict-grade"
    ), done.stdout  # quick.c: others took 10% of its CPUs, not busy


def test_a_quiet_run_has_no_busy_warning(tmp_path):
    done = milarun("report", run_folder(tmp_path / "run", {"quick.a": 0.05, "quick.b": None}))
    assert done.returncode == 0, done.stderr
    assert "busy" not in done.stdout
