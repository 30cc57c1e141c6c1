"""Alembic's environment: milarun.history.store hands it the open connection."""

from __future__ import annotations

from alembic import context

from milarun.history.models import Base

# Set only while Alembic runs this file (store.migrate); a plain import does nothing.
config = getattr(context, "config", None)
if config is not None:
    context.configure(
        connection=config.attributes["connection"],
        target_metadata=Base.metadata,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()
