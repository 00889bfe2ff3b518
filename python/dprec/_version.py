"""The package version (one place: pyproject.toml must say the same; tests/test_architecture.py checks)."""

__version__ = "0.1.0"
