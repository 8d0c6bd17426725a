"""Example scenarios: YAML files (window1, window2, ...) and a Python scenario."""
