"""The reference PLC directory (`@did-plc/server`, by others) on loopback, seeded from the world."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from . import world
from .process import Child, wait_for_line

HERE = Path(__file__).parent / "plc"
DEFAULT_DB_URL = "postgres://postgres@127.0.0.1:5432/postgres"


def _db_url() -> str:
    return os.environ.get("ATWHOIS_DEVNET_DB_URL", DEFAULT_DB_URL)


def plc_schema(pid: int) -> str:
    """The schema the test network of process `pid` keeps its directory in (the server
    allows only [A-Za-z_] in a schema name: the PID is spelled in letters)."""
    return "atwhois_devnet_" + str(pid).translate(str.maketrans("0123456789", "abcdefghij"))


def remove_operation(schema: str, did: str, cid: str) -> None:
    """Delete one operation of `did` from the directory's database (its `operations`)."""
    import psycopg

    with psycopg.connect(_db_url(), autocommit=True) as connection:
        deleted = connection.execute(
            f'DELETE FROM "{schema}".operations WHERE did = %s AND cid = %s', (did, cid)
        ).rowcount
    if deleted != 1:
        raise LookupError(f"the directory holds no operation {cid} of {did}")


def start_plc(port: int, schema: str, log: Path) -> tuple[Child, int]:
    """Start the server on 127.0.0.1 (0 = any free port); return it and its port."""
    env = {
        **os.environ,
        "PLC_DB_URL": _db_url(),
        "PLC_DB_SCHEMA": schema,
        "PLC_PORT": str(port),
    }
    child = Child.start(["node", str(HERE / "plc.js"), "serve"], log=log, env=env, cwd=HERE)
    line = wait_for_line(child, log, "listening ", timeout=60)
    return child, int(line.split()[1])


def _plc_js(command: str, url: str, request: dict[str, Any]) -> bytes:
    """Run `plc.js COMMAND URL` with a JSON request on stdin; its stdout."""
    result = subprocess.run(
        ["node", str(HERE / "plc.js"), command, url],
        input=json.dumps(request).encode(),
        capture_output=True,
        cwd=HERE,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"plc.js {command} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout


def seed(url: str, plan: dict[str, Any]) -> dict[str, Any]:
    """Submit the plan's signed operations; return {name: {did, cids}}."""
    seeded: dict[str, Any] = json.loads(_plc_js("seed", url, plan))
    return seeded


def update(url: str, did: str, signer: str, op: str, fields: dict[str, str]) -> None:
    """One more signed operation on an existing DID (see `plc.js update`)."""
    _plc_js("update", url, {"did": did, "key": world.private_key_hex(signer), "op": op, **fields})


def seed_world(url: str) -> dict[str, str]:
    """Seed every identity of the world; return {name: DID}."""
    return {name: entry["did"] for name, entry in seed(url, world.plc_plan()).items()}
