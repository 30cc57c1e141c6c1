"""The results server's tables (milarun.server.models): sites, their keys (hashed), the
tenders an admin uploaded and every upload with its verdict.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sites",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "keys",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("prefix", sa.String(32), nullable=False, unique=True),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("site_id", sa.Integer, sa.ForeignKey("sites.id"), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("official", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float),
        sa.Column("revoked_at", sa.Float),
    )
    op.create_index("ix_keys_site_id", "keys", ["site_id"])
    op.create_table(
        "tenders",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("site_id", sa.Integer, sa.ForeignKey("sites.id"), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "uploads",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("content_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("site_id", sa.Integer, sa.ForeignKey("sites.id"), nullable=False),
        sa.Column("key_id", sa.Integer, sa.ForeignKey("keys.id"), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("official", sa.Boolean, nullable=False),
        sa.Column("visibility", sa.String(16), nullable=False),
        sa.Column("embargo_until", sa.Float),
        sa.Column("share_token", sa.String(64), nullable=False, unique=True),
        sa.Column("tender_id", sa.Integer, sa.ForeignKey("tenders.id")),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id")),
        sa.Column("suite", sa.String(255)),
        sa.Column("devices", sa.JSON),
        sa.Column("like_key", sa.JSON),
        sa.Column("report", sa.JSON),
        sa.Column("score", sa.Float),
        sa.Column("price", sa.Float),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    for column in ("site_id", "tender_id", "run_id", "created_at"):
        op.create_index(f"ix_uploads_{column}", "uploads", [column])


def downgrade() -> None:
    for table in ("uploads", "tenders", "keys", "sites"):
        op.drop_table(table)
