"""A replayed did:plc log in a few facts (`LogSummary`, part of the `Identity` report with
--verify-plc, so that the text and JSON views show the same history)."""

from __future__ import annotations

from ..identity import LogSummary
from .audit import Audit

# Every change `audit._describe_change` names, and the kind it counts as.
_KINDS = (
    ("handle changes", lambda c: c.startswith("handle ")),
    ("alias changes", lambda c: c == "aliases changed"),
    ("PDS moves", lambda c: c.startswith("pds ")),
    ("signing-key rotations", lambda c: c == "signing key rotated"),
    ("rotation-key changes", lambda c: c == "rotation keys changed"),
    ("service changes", lambda c: c == "services changed"),
    ("recoveries", lambda c: c.startswith("recovery")),
)


def summarize(audit: Audit) -> LogSummary:
    """How many operations, since when, what the last one in force changed and how many
    changes of each kind the log made."""
    in_force = [op for op in audit.ops if op.accepted and not op.nullified]
    changes = [change for op in in_force[1:] for change in op.changes]
    counts = [(kind, sum(map(matches, changes))) for kind, matches in _KINDS]
    nullified = sum(op.nullified for op in audit.ops)
    return LogSummary(
        operations=len(audit.ops),
        created=audit.ops[0].created_at if audit.ops else None,
        last_change=in_force[-1].created_at if in_force else None,
        last_changes=tuple(in_force[-1].changes) if in_force else (),
        changes=tuple((k, n) for k, n in [*counts, ("nullified ops", nullified)] if n),
        tombstoned=audit.deactivated,
    )
