"""Handle-health audits: re-verify a watch-list, remember every check, report what changed."""

from .checks import Check, Finding, compare
from .runner import Auditor, RunReport
from .store import AuditStore, Watched, default_audit_path

__all__ = [
    "AuditStore",
    "Auditor",
    "Check",
    "Finding",
    "RunReport",
    "Watched",
    "compare",
    "default_audit_path",
]
