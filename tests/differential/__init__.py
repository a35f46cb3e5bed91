"""Differential tests: generated programs against their mended versions."""
