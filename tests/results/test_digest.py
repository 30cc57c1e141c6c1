"""A results folder's digest (milarun.results.digest): a report reads a digested folder as
it reads its files, takes an entry only while its file is as recorded, checks each entry as
a file, and ignores a digest it cannot use; `slurm gather` writes one."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

import bidkit
from conftest import milarun
from milarun import results
from milarun.report import summary
from milarun.results import bulk, digest
from milarun.results.folder import Loaded, load_dir
from milarun.slurm import gather
from milarun.tender import package
from resultfactory import result, write

OLD = 1_700_000_000  # seconds: an mtime well before any digest (not racy)


def monitored(job: str, rate: float, node: str = "n1") -> dict:
    samples = [{"t": float(i), "gpus": {"0": {"memory": [1000.0 + i, 81920.0]}}} for i in range(5)]
    return result(
        "t.a", job, rate, device="cuda:0", node=node,
        gpu_monitor={"interval": 1.0, "samples": samples},
        cpu_monitor={"interval": 1.0, "samples": [{"t": 0.0, "rss_mb": 10.0}]},
    )  # fmt: skip


def settled(folder: Path) -> None:
    for path in folder.iterdir():
        os.utime(path, (OLD, OLD))


def a_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "nodes" / "n1"
    for n in range(6):
        write(folder, monitored(f"{n}.0", 100.0 + n))
    write(folder, result("t.b", "9.0", None, failure={"kind": "oom", "message": "x" * 9000}))
    (folder / "torn.json").write_text('{"name": "t.a", "succ')
    write(folder, {**monitored("7.0", 1.0), "node": "bad\nname"})
    settled(folder)
    return folder


def sealed(loaded: Loaded) -> list[tuple]:
    strip = lambda r: {k: v for k, v in r.items() if isinstance(k, str)}  # noqa: E731
    return [(str(p), strip(r.data), r.peak_memory) for p, r in zip(loaded.paths, loaded.results)]


def files_read(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    real = bulk.load_result

    def counting(path: Path) -> dict:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(bulk, "load_result", counting)
    return seen


def test_a_digested_folder_reads_as_its_files(tmp_path, monkeypatch):
    folder = a_folder(tmp_path)
    files = load_dir(tmp_path)
    assert bulk.write_digest(folder) == folder / digest.NAME
    seen = files_read(monkeypatch)
    digested = load_dir(tmp_path)
    assert seen == []  # every file, results and skipped ones, came from the digest
    assert sealed(digested) == sealed(files)
    assert [(s.path, s.reason) for s in digested.skipped] == [
        (s.path, s.reason) for s in files.skipped
    ]
    assert len(files.results) == 7 and len(files.skipped) == 2
    assert summary.summarize(digested.results) == summary.summarize(files.results)
    (long,) = [r.failure for r in digested.results if r.name == "t.b"]
    (original,) = [r.failure for r in files.results if r.name == "t.b"]
    assert long is not None and original is not None and long.message == original.message
    assert len(long.message or "") <= results.MAX_MESSAGE  # trimmed once, not twice
    # the samples are not in the digest; their peak is
    assert b'"samples":[{' not in (folder / digest.NAME).read_bytes()
    assert digested.results[0].peak_memory == 1004.0


def test_a_file_changed_after_the_digest_is_read_again(tmp_path, monkeypatch):
    folder = a_folder(tmp_path)
    bulk.write_digest(folder)
    (changed,) = folder.glob("t.a.J3.0.*.json")
    write(folder, monitored("3.0", 555.0), changed.name)  # a newer mtime: not as recorded
    added = write(folder, monitored("8.0", 777.0))
    changed.with_name("t.a.J4.0.20260101-000000-000000.json").unlink()
    seen = files_read(monkeypatch)
    loaded = load_dir(tmp_path)
    assert sorted(seen) == sorted([changed, added])
    rates = sorted(view.rate() or 0 for view in loaded.results)
    assert 555.0 in rates and 777.0 in rates and 104.0 not in rates and 103.0 not in rates


def test_a_digest_keeps_entries_still_true_and_leaves_out_recent_and_nan_files(
    tmp_path, monkeypatch
):
    folder = a_folder(tmp_path)
    bulk.write_digest(folder)
    fresh = write(folder, monitored("8.0", 7.0))  # written now: racy, left out
    nan = write(folder, {**monitored("9.0", 5.0), "metrics": {"loss": float("nan")}})
    os.utime(nan, (OLD, OLD))  # a hand-edited NaN: JSON's encoder would write null
    seen: list[Path] = []
    real = bulk.read_one
    monkeypatch.setattr(
        bulk, "read_one", lambda p, seal, index=None: seen.append(p) or real(p, seal, index)
    )
    bulk.write_digest(folder)
    assert seen == [nan]  # the other entries were kept as they were
    entries = digest.load(folder).entries
    assert fresh.name not in entries and nan.name not in entries and len(entries) == 9
    monkeypatch.undo()
    loaded = load_dir(tmp_path)
    (run,) = [v for v in loaded.results if (v.name, v.job_id) == ("t.a", "9.0")]
    assert run.metrics["loss"] != run.metrics["loss"]  # NaN, as the file says


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: b"{not json",
        lambda raw: raw.replace(b'"version":1', b'"version":99'),
        lambda raw: b"[" * 100 + b"]" * 100,
        lambda raw: json.dumps({"format": "milarun-digest", "version": 1, "entries": []}).encode(),
    ],
    ids=["not-json", "newer-version", "deep", "entries-not-an-object"],
)
def test_a_digest_it_cannot_use_leaves_the_files_to_be_read(tmp_path, monkeypatch, damage):
    folder = a_folder(tmp_path)
    files = load_dir(tmp_path)
    bulk.write_digest(folder)
    path = folder / digest.NAME
    path.write_bytes(damage(path.read_bytes()))
    seen = files_read(monkeypatch)
    loaded = load_dir(tmp_path)
    assert len(seen) == 9
    assert sealed(loaded) == sealed(files)


def test_each_entry_is_checked_as_its_file_would_be(tmp_path):
    folder = a_folder(tmp_path)
    bulk.write_digest(folder)
    path = folder / digest.NAME
    body = json.loads(path.read_text())
    names = sorted(n for n, e in body["entries"].items() if "result" in e)
    body["entries"][names[0]]["result"]["node"] = "x\u0007y"  # a control character
    body["entries"][names[1]]["result"]["timings"] = 3
    body["entries"][names[2]]["result"] = "not a result"  # not an entry: the file is read
    body["entries"][names[3]]["peak_memory"] = "huge"
    path.write_text(json.dumps(body))
    loaded = load_dir(tmp_path)
    reasons = {Path(s.path).name: s.reason for s in loaded.skipped}
    assert "control character" in reasons[names[0]]
    assert "'timings' is not" in reasons[names[1]]
    assert names[2] not in reasons and names[3] not in reasons  # read from their files
    assert len(loaded.results) == 5


def test_no_digest_past_its_size_bound(tmp_path, monkeypatch):
    folder = a_folder(tmp_path)
    bulk.write_digest(folder)
    monkeypatch.setattr(digest, "MAX_BYTES", 1000)
    assert bulk.write_digest(folder) is None
    assert not (folder / digest.NAME).exists()  # the older one would be stale in part
    assert not [p for p in folder.iterdir() if p.name.startswith(digest.NAME)]


def test_gather_writes_the_digest_of_the_target_and_never_copies_one(tmp_path):
    source, target = tmp_path / "local", tmp_path / "shared" / "nodes" / "n1"
    for n in range(3):
        write(source, monitored(f"{n}.0", 100.0 + n))
    settled(source)
    (source / digest.NAME).write_text("a local one, not copied")
    done = gather.gather(source, target)
    assert done.files == 3
    entries = digest.load(target).entries
    assert sorted(entries) == sorted(p.name for p in target.glob("*.json"))
    assert load_dir(tmp_path / "shared").results


@pytest.mark.slow
def test_jobs_on_a_slurm_node_writes_its_folders_digest(tmp_path):
    """A fleet's node without --local-dir writes into <out>/nodes/<node> itself: its
    `milarun jobs` writes the digest at the end (an earlier run's result is in it; the
    one just written is too recent to key)."""
    out, node_folder = tmp_path / "out", tmp_path / "out" / "nodes" / "node2"
    earlier = write(node_folder, monitored("0.0", 100.0, node="node2"))
    settled(node_folder)
    task = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node2", "SLURM_LOCALID": "0"}
    done = milarun(
        "jobs", "quick", "--name", "calibration", "--devices", "cpu:1", "--no-cgexec",
        "-o", out, "--", "--min-slices", "5", env=task,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    entries = digest.load(node_folder).entries
    assert earlier.name in entries
    assert len(list(node_folder.glob("quick.calibration.*.json"))) == 1


def test_workers_read_digested_folders_as_this_process_does(tmp_path, monkeypatch):
    for n in range(40):
        write(tmp_path / f"n{n % 3}", monitored(f"{n}.0", 10.0 + n, node=f"n{n % 3}"))
    (tmp_path / "n1" / "torn.json").write_text('{"name": "t.a", "succ')
    for folder in tmp_path.iterdir():
        settled(folder)
    bulk.write_digest(tmp_path / "n0")
    bulk.write_digest(tmp_path / "n2")
    here = load_dir(tmp_path)
    monkeypatch.setattr(bulk, "PARALLEL_FROM", 4)
    monkeypatch.setattr(bulk, "CHUNK", 5)
    folders = [(f, sorted(p.name for p in f.glob("*.json"))) for f in sorted(tmp_path.iterdir())]
    tasks = bulk._tasks(folders, seal=True)
    assert [len(names) for _, names in tasks] == [14, 5, 5, 4, 13]  # digested: one task
    assert [f / n for f, names in tasks for n in names] == [f / n for f, ns in folders for n in ns]
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the files are read in this process")
    shared = load_dir(tmp_path)
    assert sealed(shared) == sealed(here)
    assert [(s.path, s.reason) for s in shared.skipped] == [
        (s.path, s.reason) for s in here.skipped
    ]
    assert len(here.results) == 40 and len(here.skipped) == 1


def test_a_tender_neither_packs_nor_reads_a_digest(tmp_path):
    """A buyer's verification re-derives every figure from the result files: a digest (a
    vendor could write any figure in one) is left out of a package and never read there."""
    folder = bidkit.synthetic_run(tmp_path / "run", {"quick.polynome": 40_000.0})
    settled(folder)
    bulk.write_digest(folder)
    body = json.loads((folder / digest.NAME).read_text())
    for entry in body["entries"].values():
        if "result" in entry:
            entry["result"]["timings"]["train"]["rates"] = [9e9] * 40
    (folder / digest.NAME).write_text(json.dumps(body))
    assert load_dir(folder).results[0].timings["train"]["rates"][0] == 9e9
    files = load_dir(folder, digests=False).results
    assert all(view.timings["train"]["rates"][0] < 1e6 for view in files)
    tender = bidkit.tender(tmp_path / "tender.json", ["polynome"], require_cgroups=False)
    out = package.make_package(folder, tmp_path / "bid.tar.gz", tender, None).out
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert not [n for n in names if digest.NAME in n] and any(n.endswith(".json") for n in names)
