"""What runs inside a benchmark process: the Experiment API, rate logging, diagnostics,
efficiency, energy records and the runner that writes the result."""
