"""The results database: runs kept in SQLite (the default) or PostgreSQL, trends per test,
node and GPU with verdicts, regression alerts and machines side by side (DESIGN section 1)."""
