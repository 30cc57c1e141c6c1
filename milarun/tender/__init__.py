"""The call for tenders: the buyer's rules, the bid package, verify, acceptance, and the
ranking of bids (ranking; render: the ranking as text, JSON, CSV or HTML)."""
