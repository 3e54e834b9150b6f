"""The audit database's tables, the same on SQLite and PostgreSQL, and the upgrades of
older files, each applied once whichever process opens the store first."""

from __future__ import annotations

from atwhois.resolver.errors import SchemaMismatch

from .database import Database
from .findings import KINDS

SCHEMA_VERSION = 3
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS watch (
    identifier TEXT PRIMARY KEY, label TEXT, added_at {real} NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id {serial_key}, started_at {real} NOT NULL, finished_at {real}, source TEXT NOT NULL,
    summary TEXT);
CREATE TABLE IF NOT EXISTS checks (
    id {serial_key}, run_id {integer} NOT NULL, identifier TEXT NOT NULL,
    checked_at {real} NOT NULL, status TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS checks_by_identifier ON checks (identifier, id);
CREATE INDEX IF NOT EXISTS checks_by_run ON checks (run_id);
CREATE TABLE IF NOT EXISTS findings (
    id {serial_key}, run_id {integer} NOT NULL, identifier TEXT NOT NULL,
    at {real} NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS findings_by_time ON findings (at);
CREATE TABLE IF NOT EXISTS streaks (
    identifier TEXT PRIMARY KEY, failures {integer} NOT NULL,
    last_reached {integer});  -- the id of the last check that reached the upstream
"""
# Version 2: findings have a severity and their old and new values; runs a status and the
# process that owns them; each identity's state since when; undelivered webhook payloads.
_SCHEMA_2 = """
ALTER TABLE findings ADD COLUMN severity TEXT NOT NULL DEFAULT 'info';
ALTER TABLE findings ADD COLUMN old TEXT;
ALTER TABLE findings ADD COLUMN new TEXT;
ALTER TABLE runs ADD COLUMN status TEXT NOT NULL DEFAULT 'finished';
ALTER TABLE runs ADD COLUMN owner TEXT;
CREATE TABLE states (
    identifier TEXT PRIMARY KEY, status TEXT NOT NULL, since {real} NOT NULL, previous TEXT);
INSERT INTO states (identifier, status, since)
    SELECT c.identifier, c.status, c.checked_at FROM checks c
    WHERE c.id = (SELECT max(id) FROM checks l WHERE l.identifier = c.identifier);
CREATE TABLE outbox (
    id {serial_key}, run_id {integer} NOT NULL, created_at {real} NOT NULL,
    payload TEXT NOT NULL, attempts {integer} NOT NULL DEFAULT 0, last_error TEXT)
"""
# Version 3: retention (which checks were a change); runs shared by processes on several
# hosts: the identities left to check and who holds them until when (`runs`), who takes
# part, and which webhook deliveries a process is sending.
_SCHEMA_3 = """
ALTER TABLE checks ADD COLUMN changed SMALLINT NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN total {integer};
ALTER TABLE runs ADD COLUMN lease {real};
ALTER TABLE outbox ADD COLUMN claimed_until {real};
CREATE TABLE run_items (
    run_id {integer} NOT NULL, identifier TEXT NOT NULL, owner TEXT, lease_until {real},
    held TEXT, PRIMARY KEY (run_id, identifier));
CREATE TABLE run_workers (
    run_id {integer} NOT NULL, owner TEXT NOT NULL, seen_at {real} NOT NULL,
    PRIMARY KEY (run_id, owner));
INSERT INTO run_workers SELECT id, owner, started_at FROM runs
    WHERE status = 'running' AND owner IS NOT NULL
"""
_UPGRADES = {2: _SCHEMA_2, 3: _SCHEMA_3}


def set_up(db: Database) -> None:
    """The tables, then each upgrade this file or database has not had, each in one
    transaction that another process opening it at the same time waits for."""
    with db.transaction(serialized=True):
        for statement in _statements(_SCHEMA):
            db.execute(db.dialect.ddl(statement))
    version = _version(db)
    if version > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"{db.location}: audit schema {version}, this atwhois reads "
            f"{SCHEMA_VERSION}; refusing to touch it"
        )
    for step in range(version + 1, SCHEMA_VERSION + 1):
        with db.transaction(serialized=True):
            if _version(db) >= step:  # another process upgraded it meanwhile
                continue
            for statement in _statements(_UPGRADES[step]):
                db.execute(db.dialect.ddl(statement))
            if step == 2:
                _findings_have_severities(db)
            db.execute(
                "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT(name) DO UPDATE "
                "SET value=excluded.value",
                (str(step),),
            )


def _findings_have_severities(db: Database) -> None:
    severities = [(str(severity), kind) for kind, (severity, _) in KINDS.items()]
    db.many("UPDATE findings SET severity=? WHERE kind=?", severities)
    db.execute("UPDATE findings SET kind='became_unverified' WHERE kind='became_invalid'")
    db.execute("UPDATE runs SET status='interrupted' WHERE finished_at IS NULL")


def _version(db: Database) -> int:
    row = db.one("SELECT value FROM meta WHERE name='schema_version'")
    return 1 if row is None else int(row[0])


def _statements(script: str) -> list[str]:
    return [s for s in script.split(";") if s.strip()]
