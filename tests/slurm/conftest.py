"""The real Slurm cluster of the slurm tests: two virtual nodes on this host, started by
scripts/slurm-dev-cluster.sh (Debian's slurmctld, slurmd and munged; needs root), and the marks
of a module that runs on it (``CLUSTER_MARKS``, its ``pytestmark``)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "slurm-dev-cluster.sh"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")

# One cluster at a time on this host: every module that runs on one (test_slurm,
# test_slurm_doctor) on one worker, in a row, in the slurm xdist group.
CLUSTER_MARKS = [
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.root("slurmd"),
    pytest.mark.xdist_group(name="slurm"),
    pytest.mark.skipif(
        any(shutil.which(d) is None for d in DAEMONS),
        reason="Slurm is not installed (apt-get install --no-install-recommends "
        "slurmctld slurmd slurm-client munge)",
    ),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 2-node cluster for the requesting module; its environment for the milarun commands."""
    folder = tmp_path_factory.mktemp("slurm") / "cluster"
    env = {**os.environ, "MILARUN_SLURM_DEV": str(folder)}
    started = subprocess.run(
        [SCRIPT, "up", "2"], capture_output=True, text=True, env=env, timeout=60
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == f"export SLURM_CONF={folder}/slurm.conf"
    # this cluster, whatever Slurm the caller's environment names
    # one host, no shared file system to wait for: missing results are missing at once
    yield {
        "MILARUN_SLURM_DEV": str(folder),
        "SLURM_CONF": str(folder / "slurm.conf"),
        "MILARUN_SLURM_SETTLE": "0",
    }
    stopped = subprocess.run([SCRIPT, "down"], capture_output=True, text=True, env=env, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert not folder.exists()
