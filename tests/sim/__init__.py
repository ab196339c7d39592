"""Seeded, replayable simulation of the sans-I/O coordinator (issue 4)."""
