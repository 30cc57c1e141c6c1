"""A test for a GPU slot on a machine whose GPUs exist only as a fake of their library
(tests/machine/test_amd_jobs.py): it trains on the CPU whatever its slot (as cart does), so
torch is never asked for the GPU, while the harness gives, records and monitors the slot's
GPU as on the real machine."""

from faulty import _spin_steps


def spin(exp, argv):
    exp.use_device("cpu")
    _spin_steps(exp, argv)
