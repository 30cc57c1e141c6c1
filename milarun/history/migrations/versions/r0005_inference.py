"""An inference test's figures beside its rate (output tokens/s): its comparison key in words
(engine, version, precision, lengths, concurrency: a history series of its own) and its
latency percentiles and goodput. Results ingested before have none (their files are not
kept: ingest them again into a new database to have them).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

FIGURES = (
    "output_tokens_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "goodput_percent",
)


def upgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("inference", sa.String(255)))
        for name in FIGURES:
            batch.add_column(sa.Column(name, sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        for name in (*reversed(FIGURES), "inference"):
            batch.drop_column(name)
