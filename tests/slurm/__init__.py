"""The Slurm wing's tests, a package so that its conftest.py is the module slurm.conftest: a
second top-level ``conftest`` would replace tests/conftest.py, whose helpers the test modules
import by name (``from conftest import milarun``)."""
