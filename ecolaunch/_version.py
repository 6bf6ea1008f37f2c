"""The package's version: the one place it is written (pyproject reads it, ``ecolaunch --version`` prints it)."""

__version__ = "0.1.0"
