"""A report as text, JSON/CSV and HTML: formatting only, no math."""
