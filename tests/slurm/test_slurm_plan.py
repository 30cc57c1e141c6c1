"""`milarun slurm` without a cluster: the batch scripts as text, bad input, where a Slurm task
writes and what a result records, the check of missing nodes and the verified gather."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import milarun, one_line_error
from fullfs import full_tmpfs
from milarun import errors
from milarun.machine import devices, slurmenv
from milarun.results import manifest, write_result
from milarun.results.records import Call, ResultRecord
from milarun.run import launch, plan, profile
from milarun.slurm import follow as slurm_follow
from milarun.slurm import gather
from milarun.slurm import states as slurm_states
from milarun.slurm import submit as slurm

NO_SLURM = {"PATH": "/nonexistent", "SLURM_CONF": "/nonexistent/slurm.conf"}
TASK = {
    "SLURM_JOB_ID": "42",
    "SLURMD_NODENAME": "node2",
    "SLURM_NODEID": "1",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_LOCALID": "0",
}


def _dry_run(*args: str) -> subprocess.CompletedProcess:
    done = milarun("slurm", args[0], "--dry-run", *args[1:])
    assert done.returncode == 0, done.stderr
    return done


def test_fleet_dry_run_prints_a_script_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    done = _dry_run(
        "fleet",
        "quick",
        "--nodes",
        "3",
        "--name",
        "polynome",
        "--partition",
        "gpu",
        "--gpus-per-node",
        "4",
        "--time",
        "1:00:00",
        "--sbatch-arg=--account=lab",
        "-o",
        str(out),
        "--",
        "--batch-size",
        "64; rm -rf /",
    )
    text = done.stdout
    assert text.startswith("#!/bin/bash\n")
    for line in (
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        "#SBATCH --no-requeue",
        "#SBATCH --partition=gpu",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --time=1:00:00",
        "#SBATCH --account=lab",
        f"#SBATCH --output={out}/slurm/%x.%j.out",
    ):
        assert line + "\n" in text
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert srun.startswith("srun --ntasks-per-node=1 --kill-on-bad-exit=0 ")
    assert (
        f"-m milarun jobs quick --name polynome -o {out} -- --batch-size '64; rm -rf /'" in srun
    )  # the test's arguments are quoted, never run
    assert f'-m milarun slurm check {out} --job "$SLURM_JOB_ID"' in text
    assert "# then: sbatch --parsable" in done.stderr
    assert not out.exists()
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_scaling_dry_run_steps_through_node_counts_in_one_allocation(tmp_path):
    text = _dry_run(
        "scaling", "quick", "--nodes", "4,1,2", "--devices", "cpu:1", "-o", str(tmp_path)
    ).stdout
    assert "#SBATCH --nodes=4\n" in text
    assert "for k in 1 2 4; do" in text
    assert 'srun --nodes="$k" --ntasks="$k" --ntasks-per-node=1 --relative=0' in text
    assert "--tags scaling --devices cpu:1" in text
    assert '--nnodes "$k" --master "$addr:$port"' in text
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_local_dir_gathers_on_each_node(tmp_path):
    text = _dry_run(
        "fleet", "quick", "--nodes", "2", "--local-dir", "/scratch", "-o", str(tmp_path)
    ).stdout
    assert 'node_out=/scratch/milarun-"$SLURM_JOB_ID"' in text
    assert f'-m milarun slurm gather "$node_out" {tmp_path}' in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


@pytest.mark.parametrize(
    "args, expected",
    [
        (("fleet", "quick"), "give --nodes N or --nodelist LIST"),
        (("fleet", "quick", "--nodes", "2", "--nodelist", "n1"), "not both"),
        (("fleet", "quick", "--nodes", "0"), "--nodes 0: must be at least 1"),
        (("fleet", "quick", "--nodelist", "n1;reboot"), "give Slurm node names"),
        (("fleet", "quick", "--nodes", "2", "--time", "soon"), "--time 'soon'"),
        (("fleet", "quick", "--nodes", "2", "--local-dir", "rel"), "give an absolute path"),
        (("fleet", "quick", "--nodes", "2", "--sbatch-arg=--x\nrm -rf /"), "one sbatch option"),
        (("fleet", "nosuchprofile", "--nodes", "2"), "nosuchprofile"),
        (("scaling", "quick", "--nodes", "1,two"), "give node counts such as 1,2,4,8"),
        (("scaling", "quick"), "give --nodes as node counts"),
        (
            ("scaling", "quick", "--nodes", "1,2", "--devices", "cpu:1", "--name", "polynome"),
            "gpu-progression",
        ),
    ],
)
def test_bad_requests_get_one_line(args, expected, tmp_path):
    line = one_line_error(milarun("slurm", *args, "-o", str(tmp_path / "o"), "--dry-run"))
    assert expected in line


def test_without_slurm_submitting_is_one_line_and_keeps_nothing_half_done(tmp_path):
    done = milarun(
        "slurm", "fleet", "quick", "--nodes", "2", "-o", str(tmp_path / "o"), env=NO_SLURM
    )
    assert "sbatch not found" in one_line_error(done)
    # the script stays for the admin; no submission is recorded, none is followed
    assert [p.suffix for p in (tmp_path / "o" / "slurm").iterdir()] == [".sbatch"]
    line = one_line_error(milarun("slurm", "wait", str(tmp_path / "o")))
    assert "no Slurm submission recorded" in line


def test_a_slurm_task_writes_its_node_folder_and_records_its_place(tmp_path):
    assert slurmenv.node_outdir(tmp_path, {}) == tmp_path
    assert slurmenv.node_outdir(tmp_path, TASK) == tmp_path / "nodes" / "node2"
    # given the node folder itself, it is not nested again
    assert slurmenv.node_outdir(tmp_path / "nodes" / "node2", TASK) == tmp_path / "nodes" / "node2"
    block = slurmenv.slurm_block(TASK)
    assert block is not None and block.job_id == "42" and block.node == "node2"
    assert block.node_id == 1 and block.nnodes == 2 and block.step_id == "0"
    assert slurmenv.slurm_block({}) is None
    assert slurmenv.node_name(TASK) == "node2"
    assert slurmenv.extra_task_on_node(TASK) is None
    assert "--ntasks-per-node=1" in slurmenv.extra_task_on_node({**TASK, "SLURM_LOCALID": "1"})


def test_second_task_on_a_node_is_refused(tmp_path):
    env = {**TASK, "SLURM_LOCALID": "1"}
    line = one_line_error(
        milarun("jobs", "quick", "--devices", "cpu:1", "-o", str(tmp_path), env=env)
    )
    assert "run one milarun jobs per node" in line
    assert not tmp_path.joinpath("nodes").exists()


def test_rendezvous_takes_the_node_rank_from_slurm():
    rdzv = plan.Rendezvous.parse(2, "node1:29500", None, TASK)
    assert (rdzv.nnodes, rdzv.node_rank, rdzv.master_addr, rdzv.master_port) == (
        2,
        1,
        "node1",
        29500,
    )
    with pytest.raises(plan.LaunchError, match="--node-rank R"):
        plan.Rendezvous.parse(2, "node1:29500", None, {})
    with pytest.raises(plan.LaunchError, match="must be 0 to 1"):
        plan.Rendezvous.parse(2, "node1:29500", 2, {})
    assert "--nnodes and --master go together" in one_line_error(
        milarun("jobs", "quick", "--nnodes", "2")
    )


def _submission(out: Path, job: str) -> None:
    record = slurm.Submission(
        "fleet",
        "quick",
        "x.sbatch",
        ["quick.polynome", "quick.vae"],
        {
            "quick.polynome": "milabench.models.polynome:main",
            "quick.vae": "milabench.models.vae:main",
        },
        job_ids=[job],
    )
    record.save(out / "slurm", "20260101-000000-000000")


def _node_result(out: Path, node: str, name: str, job: str, job_id: str = "0.0") -> None:
    record = ResultRecord(
        name=name,
        job_id=job_id,
        dataroot="",
        outdir=str(out),
        call=Call("m:f", []),
        failure=None,
        error=None,
        device="cpu:0",
        devices=["cpu:0"],
        gpu=None,
        device_count=0,
        environ={},
        isolation=None,
        returncode=0,
        node=node,
        slurm=slurmenv.slurm_block({**TASK, "SLURMD_NODENAME": node, "SLURM_JOB_ID": job}),
    )
    write_result(out / "nodes" / node, record.to_dict(), "20260101-000000-000001")


def test_check_names_each_missing_result_of_each_node_once(tmp_path):
    _submission(tmp_path, "42")
    _node_result(tmp_path, "node1", "quick.polynome", "42")
    _node_result(tmp_path, "node1", "quick.vae", "42")
    _node_result(tmp_path, "node2", "quick.vae", "41")  # an older job's: does not count
    state = slurm_states.JobState("42", "CANCELLED", "0:15", "node[1-2]")
    written = slurm_follow.check(tmp_path, "42", ["node1", "node2"], state, settle=0)
    assert sorted(p.parent.name for p in written) == ["node2", "node2"]
    fails = [json.loads(p.read_text()) for p in written]
    assert {f["name"] for f in fails} == {"quick.polynome", "quick.vae"}
    for fail in fails:
        assert fail["failure"]["kind"] == "interrupted" and fail["node"] == "node2"
        assert "node node2 recorded no result" in fail["failure"]["message"]
        assert "CANCELLED" in fail["failure"]["message"]
        assert fail["slurm"]["job_id"] == "42"
    # checked again (the batch script, then `slurm wait`): nothing more is written
    assert slurm_follow.check(tmp_path, "42", ["node1", "node2"], state, settle=0) == []


def test_gather_copies_verified_and_never_overwrites(tmp_path):
    source, target = tmp_path / "local", tmp_path / "shared"
    (source / "logs").mkdir(parents=True)
    (source / "a.json").write_bytes(os.urandom(3000))
    (source / "logs" / "a.log").write_text("log\n")
    expected = {p.relative_to(source): p.read_bytes() for p in source.rglob("*") if p.is_file()}
    done = gather.gather(source, target)
    assert done.files == 2 and done.bytes == 3004
    assert {
        p.relative_to(target): p.read_bytes() for p in target.rglob("*") if p.is_file()
    } == expected
    assert not source.exists()
    source.mkdir()
    (source / "a.json").write_text("other")
    with pytest.raises(errors.GatherError, match="would overwrite"):
        gather.gather(source, target)
    assert (target / "a.json").read_bytes() == expected[Path("a.json")] and source.exists()


def test_without_a_slurm_configuration_the_dev_cluster_is_used(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setenv("MILARUN_SLURM_DEV", str(tmp_path))
    if Path("/etc/slurm/slurm.conf").exists():
        pytest.skip("this machine has a Slurm configuration of its own: milarun uses it")
    assert "SLURM_CONF" not in slurm.slurm_environ()  # no dev cluster up
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")
    assert slurm.slurm_environ()["SLURM_CONF"] == str(tmp_path / "slurm.conf")
    (tmp_path / "slurm.conf").chmod(0o666)  # anyone could have written it: not used
    assert "SLURM_CONF" not in slurm.slurm_environ()
    monkeypatch.setenv("SLURM_CONF", "/site/slurm.conf")  # the site's own always wins
    assert slurm.slurm_environ()["SLURM_CONF"] == "/site/slurm.conf"


def test_check_expects_what_the_node_planned(tmp_path):
    """A node whose supervisor started names its own tests (its run manifest), e.g. the
    scaling.k its device count gives, not the submitter's guess."""
    _submission(tmp_path, "42")
    node2 = tmp_path / "nodes" / "node2"
    node2.mkdir(parents=True)
    manifest.ManifestWriter.start(
        node2,
        "quick",
        ["quick.polynome", "quick.scaling.4"],
        1,
        ["cuda:0", "cuda:1", "cuda:2", "cuda:3"],
    )
    _node_result(tmp_path, "node2", "quick.polynome", "42")
    state = slurm_states.JobState("42", "FAILED", "1:0", "node2")
    written = slurm_follow.check(tmp_path, "42", ["node2"], state, settle=0)
    assert [json.loads(p.read_text())["name"] for p in written] == ["quick.scaling.4"]
    assert json.loads(written[0].read_text())["failure"]["kind"] == "crash"


def test_check_names_the_lost_instance_of_a_node_with_two_devices(tmp_path):
    """A node on --devices cpu:2 killed after its first instance: the other one, same
    test, is named by its job id (plans are (test, job id) pairs, not test names)."""
    _submission(tmp_path, "42")
    node1 = tmp_path / "nodes" / "node1"
    node1.mkdir(parents=True)
    pairs = [(t, j) for t in ("quick.polynome", "quick.vae") for j in ("0.0", "0.1")]
    manifest.ManifestWriter.start(
        node1, "quick", ["quick.polynome", "quick.vae"], 1, ["cpu:0", "cpu:1"], pairs
    )
    for name, job_id in pairs[:3]:
        _node_result(tmp_path, "node1", name, "42", job_id)
    state = slurm_states.JobState("42", "FAILED", "9:0", "node1")
    written = slurm_follow.check(tmp_path, "42", ["node1"], state, settle=0)
    (fail,) = [json.loads(p.read_text()) for p in written]
    assert (fail["name"], fail["job_id"]) == ("quick.vae", "0.1")
    assert "no result for quick.vae J0.1" in fail["failure"]["message"]
    assert slurm_follow.check(tmp_path, "42", ["node1"], state, settle=0) == []


@pytest.mark.root("a read-only folder binds root only through a read-only mount")
def test_a_node_folder_that_takes_no_file_does_not_stop_the_others(tmp_path):
    _submission(tmp_path, "42")
    for node in ("node1", "node2"):
        (tmp_path / "nodes" / node).mkdir(parents=True)
    locked = tmp_path / "nodes" / "node1"
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    subprocess.run(["mount", "--bind", str(locked), str(locked)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(locked)], check=True)
        state = slurm_states.JobState("42", "FAILED", "1:0", "node[1-2]")
        with pytest.raises(slurm_follow.CheckIncomplete) as err:
            slurm_follow.check(tmp_path, "42", ["node1", "node2"], state, settle=0)
        assert "node node1: 2 missing result(s)" in str(err.value)
        assert sorted(p.parent.name for p in err.value.written) == ["node2", "node2"]
    finally:
        subprocess.run(["umount", str(locked)], check=False)


def test_a_job_slurm_forgot_is_checked_on_the_folders_its_runs_left(tmp_path):
    _submission(tmp_path, "42")
    gone = slurm_states.JobState("42", "GONE")
    with pytest.raises(errors.SlurmError, match="no longer knows it.*nothing was checked"):
        slurm_follow.check(tmp_path, "42", None, gone, settle=0)
    _node_result(tmp_path, "node3", "quick.polynome", "42")
    written = slurm_follow.check(tmp_path, "42", None, gone, settle=0)
    assert [json.loads(p.read_text())["name"] for p in written] == ["quick.vae"]


@pytest.mark.root("mounts a small tmpfs")
def test_gather_cut_short_by_a_full_disk_is_resumed_exactly(tmp_path):
    """ENOSPC half-way: nothing lost, and gathering again (space freed) finishes the job:
    its own verified copies are not clashes, each log is appended once, whole."""
    source = tmp_path / "local"
    (source / "logs").mkdir(parents=True)
    (source / "logs" / "a.log").write_bytes(b"a" * 6000)
    (source / "logs" / "b.log").write_bytes(b"b" * 40_000)
    for i in range(3):
        (source / f"r{i}.json").write_bytes(os.urandom(20_000))
    expected = {p.relative_to(source): p.read_bytes() for p in source.rglob("*") if p.is_file()}
    with full_tmpfs(tmp_path / "shared", size="160k", fill=False) as target:
        (target / "logs").mkdir()
        (target / "logs" / "a.log").write_bytes(b"earlier run\n")
        (target / "filler").write_bytes(b"\0" * 80_000)
        with pytest.raises(errors.GatherError, match="gather again once fixed"):
            gather.gather(source, target)
        assert {p.relative_to(source): p.read_bytes() for p in source.rglob("*")
                if p.is_file() and p.name != gather.JOURNAL} == expected  # fmt: skip
        (target / "filler").unlink()
        done = gather.gather(source, target)
        assert done.files == 5 and not source.exists()
        assert (target / "logs" / "a.log").read_bytes() == b"earlier run\n" + b"a" * 6000
        assert (target / "logs" / "b.log").read_bytes() == b"b" * 40_000
        for i in range(3):
            assert (target / f"r{i}.json").read_bytes() == expected[Path(f"r{i}.json")]
        assert not list(target.rglob(".*.gather"))


def test_gather_skips_the_lock_appends_logs_and_refuses_to_nest(tmp_path):
    source, target = tmp_path / "local", tmp_path / "shared"
    for folder, text in ((source, "second run\n"), (target, "first run\n")):
        (folder / "logs").mkdir(parents=True)
        (folder / "logs" / "t.J0.log").write_text(text)
        (folder / ".milarun.lock").write_text("")
    (source / "t.J0.20260101-000000-000002.json").write_text("{}")
    done = gather.gather(source, target)
    assert done.files == 2
    assert (target / "logs" / "t.J0.log").read_text() == "first run\nsecond run\n"
    assert (target / "t.J0.20260101-000000-000002.json").read_text() == "{}"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "a").write_text("x")
    with pytest.raises(errors.GatherError, match="inside"):
        gather.gather(source, source / "sub" / "into")
    assert (source / "sub" / "a").read_text() == "x"


def test_a_node_plans_its_part_of_the_multi_node_run(tmp_path):
    (job,) = profile.load_profile("quick").select(["scaling"], [])
    opts = plan.LaunchOptions(
        outdir=tmp_path, dataroot=tmp_path, rendezvous=plan.Rendezvous(3, 1, "node1", 29500)
    )
    (round_,) = plan.plan_progression(job, 1, devices.parse_device_spec("cpu:2"), opts)
    (inst,) = round_  # one torchrun job of this node's ranks, not k = 1..N
    assert inst.name == "quick.scaling.6"  # 3 nodes x 2 ranks: named by world size
    assert inst.recorded_on_head  # node rank 1: rank 0 on the head writes the result
    words = " ".join(inst.command)
    # the second repeat (1) on its own port: 29500 + 1
    assert (
        "--nnodes 3 --node-rank 1 --master-addr node1 --master-port 29501 --nproc-per-node 2"
    ) in words
    head = plan.LaunchOptions(
        outdir=tmp_path, dataroot=tmp_path, rendezvous=plan.Rendezvous(3, 0, "node1", 29500)
    )
    assert not plan.plan_progression(job, 0, devices.parse_device_spec("cpu:2"), head)[0][
        0
    ].recorded_on_head


def test_a_node_other_than_the_head_never_writes_a_record(tmp_path):
    """Its ranks fail with the head's: the head's record is the run's only one (a FAIL of
    this node too would count one failed run twice)."""
    (job,) = profile.load_profile("quick").select(["scaling"], [])
    opts = plan.LaunchOptions(
        outdir=tmp_path,
        dataroot=tmp_path,
        grace=1.0,
        rendezvous=plan.Rendezvous(2, 1, "node1", 29500),
    )
    ((inst,),) = plan.plan_progression(job, 0, devices.parse_device_spec("cpu:1"), opts)
    for code, success in ((3, False), (0, True)):
        inst.command = [sys.executable, "-c", f"raise SystemExit({code})"]
        inst.process, inst.result = None, {}
        launch.Supervisor(opts).run_group([inst])
        assert inst.result == {"success": success, "recorded_on_head": True}
    assert not list(tmp_path.glob("*.json"))
