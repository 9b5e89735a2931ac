"""`normlab study`: claims, presets, the runner, the results store and the report."""
