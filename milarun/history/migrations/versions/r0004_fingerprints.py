"""The silent-data-corruption fingerprint references of `doctor --active`, one per device
model and software stack (milarun.history.fingerprints).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fingerprint_references",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("stack", sa.String(512), nullable=False, unique=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("made_at", sa.Float, nullable=False),
        sa.Column("made_on", sa.String(255), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("fingerprint_references")
