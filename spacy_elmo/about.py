"""The package's version: the one place it is written (setup.py reads it from here without importing the package)."""

__version__ = "0.2.0"
