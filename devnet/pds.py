"""The reference PDS (`@atproto/pds`, by others) on loopback: accounts made through its own
XRPC API, their did:plc registered by it with the test network's PLC directory, their
handles (`NAME.live.test`) served by it at `/.well-known/atproto-did`, reached through the
test network's TLS server."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import httpx

from . import world
from .process import Child, wait_for_line

HERE = Path(__file__).parent / "pds"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launch_pds(plc_url: str, workdir: Path, port: int) -> Child:
    """Start it (it is ready once `wait_for_pds` returns)."""
    data = workdir / "pds"
    data.mkdir(parents=True, exist_ok=True)
    rotation = hashlib.sha256(b"atwhois devnet pds rotation key").hexdigest()
    env = {
        **os.environ,
        "PDS_PORT": str(port),
        "PDS_HOSTNAME": world.LIVE_PDS_HOST,
        "PDS_SERVICE_HANDLE_DOMAINS": world.LIVE_HANDLE_SUFFIX,
        "PDS_DATA_DIRECTORY": str(data),
        "PDS_BLOBSTORE_DISK_LOCATION": str(data / "blobs"),
        "PDS_JWT_SECRET": "atwhois-devnet-jwt-secret",
        "PDS_ADMIN_PASSWORD": world.LIVE_PDS_ADMIN_PASSWORD,
        "PDS_PLC_ROTATION_KEY_K256_PRIVATE_KEY_HEX": rotation,
        "PDS_DID_PLC_URL": plc_url,
        "PDS_DEV_MODE": "true",
        "PDS_INVITE_REQUIRED": "false",
        "PDS_CRAWLERS": "",
        "LOG_ENABLED": "false",
    }
    return Child.start(["node", str(HERE / "pds.js")], log=workdir / "pds.log", env=env, cwd=HERE)


def wait_for_pds(child: Child, workdir: Path) -> None:
    wait_for_line(child, workdir / "pds.log", "listening ", timeout=60)


def create_account(pds_url: str, name: str) -> str:
    """`NAME.live.test` through `com.atproto.server.createAccount`; its DID."""
    response = httpx.post(
        f"{pds_url}/xrpc/com.atproto.server.createAccount",
        json={
            "handle": name + world.LIVE_HANDLE_SUFFIX,
            "email": f"{name}@example.com",
            "password": world.live_password(name),
        },
        timeout=30,
    )
    response.raise_for_status()
    return str(response.json()["did"])
