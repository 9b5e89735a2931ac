"""The lab: studies, numerics, benchmarks and their reports."""
