"""Measured figures (bring-up times, delivery latencies) that tests report; tests/conftest.py prints them at the end
of every run, captured or not."""

FIGURES: list[str] = []
