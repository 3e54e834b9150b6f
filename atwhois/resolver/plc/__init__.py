"""did:plc operation-log verification: trust the math, not the directory. Pure functions."""

from .audit import Audit, Finding, OpRecord, Replay, replay
from .document import build_document, compare

__all__ = ["Audit", "Finding", "OpRecord", "Replay", "build_document", "compare", "replay"]
