"""The first schema: machines, runs, nodes, GPUs and results.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "machines",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("system", sa.JSON),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(64), nullable=False, unique=True),
        sa.Column("machine_id", sa.Integer, sa.ForeignKey("machines.id"), nullable=False),
        sa.Column("suite", sa.String(255)),
        sa.Column("profile", sa.String(1024)),
        sa.Column("profile_hash", sa.String(64), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("stamp", sa.String(32), nullable=False),
        sa.Column("source", sa.String(4096), nullable=False),
        sa.Column("manifest", sa.JSON),
        sa.Column("ingested_at", sa.Float, nullable=False),
    )
    op.create_index("ix_runs_machine_id", "runs", ["machine_id"])
    op.create_index("ix_runs_started_at", "runs", ["started_at"])
    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
    )
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("uuid", sa.String(255), nullable=False, unique=True),
        sa.Column("pci_bus_id", sa.String(64)),
    )
    op.create_table(
        "results",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("content_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
        sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id")),
        sa.Column("test", sa.String(255), nullable=False),
        sa.Column("job_id", sa.String(255), nullable=False),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("device", sa.String(255), nullable=False),
        sa.Column("args_hash", sa.String(64), nullable=False),
        sa.Column("finished_at", sa.Float, nullable=False),
        sa.Column("success", sa.Boolean, nullable=False),
        sa.Column("rate", sa.Float),
        sa.Column("steady", sa.JSON),
        sa.Column("failure_kind", sa.String(64)),
        sa.Column("failure_message", sa.Text),
        sa.Column("driver", sa.String(64)),
        sa.Column("flags", sa.JSON),
        sa.Column("throttle", sa.JSON),
        sa.Column("energy", sa.JSON),
        sa.Column("diagnostics", sa.JSON),
    )
    op.create_index("ix_results_run_id", "results", ["run_id"])
    op.create_index("ix_results_node_id", "results", ["node_id"])
    op.create_index("ix_results_gpu_id", "results", ["gpu_id"])
    op.create_index("ix_results_test_finished", "results", ["test", "finished_at"])


def downgrade() -> None:
    for table in ("results", "gpus", "nodes", "runs", "machines"):
        op.drop_table(table)
