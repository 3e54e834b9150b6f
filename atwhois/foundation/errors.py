"""The root of every error atwhois raises on purpose, at the bottom of the house so that
every part, the lowest included, raises under it: one `except AtwhoisError` catches them
all (`resolver.errors` holds the rest of the hierarchy)."""

from __future__ import annotations


class AtwhoisError(Exception):
    """Base class of every error atwhois raises on purpose."""
