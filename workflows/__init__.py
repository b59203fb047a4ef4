"""Switchyard's engine app; the distribution is ``django-switchyard`` (pyproject.toml reads this
version, the one place it is written)."""

__version__ = "0.1.0"
