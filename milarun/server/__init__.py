"""`milarun serve`: a results server over the history store (DESIGN section 1)."""
