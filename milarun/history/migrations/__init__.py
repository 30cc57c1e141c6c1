"""Alembic migrations of the results database, run by milarun.history.store at open."""
