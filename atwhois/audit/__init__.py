"""Handle-health audits: re-verify a watch-list, remember every check, report what changed."""

from .checks import Check
from .findings import KINDS, Finding, Severity, compare
from .report import RunReport
from .runner import Auditor
from .store import AuditStore, Watched, default_audit_path

__all__ = [
    "KINDS",
    "AuditStore",
    "Auditor",
    "Check",
    "Finding",
    "RunReport",
    "Severity",
    "Watched",
    "compare",
    "default_audit_path",
]
