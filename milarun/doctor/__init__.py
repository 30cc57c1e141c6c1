"""Checks of a machine before a run."""
