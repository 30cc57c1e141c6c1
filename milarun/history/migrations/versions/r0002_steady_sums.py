"""Each result's steady slices as the trends pool them: count, sum and sum of squares, so
that a history query reads three numbers a result instead of decoding its slices.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import math

import orjson
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

CHUNK = 5000  # results backfilled per UPDATE batch


def upgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("steady_n", sa.Integer))
        batch.add_column(sa.Column("steady_sum", sa.Float))
        batch.add_column(sa.Column("steady_squares", sa.Float))
    results = sa.table(
        "results",
        sa.column("id", sa.Integer),
        sa.column("steady", sa.Text),
        sa.column("steady_n", sa.Integer),
        sa.column("steady_sum", sa.Float),
        sa.column("steady_squares", sa.Float),
    )
    conn = op.get_bind()
    last = 0
    while True:  # the results ingested before: their sums from their slices
        rows = conn.execute(
            sa.select(results.c.id, sa.cast(results.c.steady, sa.Text))
            .where(results.c.id > last, results.c.steady.is_not(None))
            .order_by(results.c.id)
            .limit(CHUNK)
        ).all()
        if not rows:
            break
        updates = []
        for row_id, text in rows:
            slices = orjson.loads(text) if text else None
            if isinstance(slices, list) and slices:
                updates.append(
                    {
                        "row": row_id,
                        "n": len(slices),
                        "total": math.fsum(slices),
                        "squares": math.fsum(v * v for v in slices),
                    }
                )
        if updates:
            conn.execute(
                results.update()
                .where(results.c.id == sa.bindparam("row"))
                .values(
                    steady_n=sa.bindparam("n"),
                    steady_sum=sa.bindparam("total"),
                    steady_squares=sa.bindparam("squares"),
                ),
                updates,
            )
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        for name in ("steady_squares", "steady_sum", "steady_n"):
            batch.drop_column(name)
