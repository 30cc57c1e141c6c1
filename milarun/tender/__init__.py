"""The call for tenders: the buyer's rules, the bid package, verify, acceptance."""
