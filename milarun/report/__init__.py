"""Reports: summaries of results, the report math (scores, CIs, nodes, energy, units) and,
in render/, its formatting."""
