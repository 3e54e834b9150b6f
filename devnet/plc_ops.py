"""PLC operations signed in Python (K-256 through libsecp256k1), for synthetic exports and for
live identities on the test network's reference directory, which checks every one of them.

`PlcAccount` creates a did:plc and changes it (handles, PDS, keys, tombstone) in a few
milliseconds per operation, so tests can change the world as often as they like between two
lookups.
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import uuid
from typing import Any

import coincurve
import httpx

from atwhois.resolver.keys import Curve, PublicKey
from atwhois.resolver.plc.encoding import cid_of, dag_cbor, did_of_genesis, unsigned

PDS = "https://pds.test"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Key:
    """A K-256 key made from a seed string, so the same seed gives the same DID. Its parts are
    derived when first asked for, and `sign` keeps no private key: a synthetic directory holds
    the keys of every DID still to change, and deriving them is most of what an op costs."""

    def __init__(self, seed: str) -> None:
        self.secret = hashlib.sha256(seed.encode()).digest()

    @property
    def private(self) -> coincurve.PrivateKey:
        return coincurve.PrivateKey(self.secret)

    @functools.cached_property
    def did_key(self) -> str:
        public = coincurve.PublicKey.from_secret(self.secret).format()
        return PublicKey(Curve.K256, public).did_key

    def sign(self, op: dict[str, Any]) -> dict[str, Any]:
        compact = self.private.sign_recoverable(dag_cbor(unsigned(op)))[:64]  # low-S r||s
        return {**op, "sig": b64url(compact)}


def plc_operation(
    prev: str | None,
    keys: list[Key],
    aliases: list[str],
    pds: str = PDS,
    *,
    labeler: tuple[Key, str] | None = None,
) -> dict[str, Any]:
    """An unsigned `plc_operation`: every key may rotate, the first one signs for atproto;
    `labeler`: the key that signs labels (`#atproto_label`) and the labeler's endpoint
    (`#atproto_labeler`), as a labeler's identity declares them."""
    methods = {"atproto": keys[0].did_key}
    services = {"atproto_pds": {"type": "AtprotoPersonalDataServer", "endpoint": pds}}
    if labeler is not None:
        methods["atproto_label"] = labeler[0].did_key
        services["atproto_labeler"] = {"type": "AtprotoLabeler", "endpoint": labeler[1]}
    return {
        "type": "plc_operation",
        "rotationKeys": [k.did_key for k in keys],
        "verificationMethods": methods,
        "alsoKnownAs": aliases,
        "services": services,
        "prev": prev,
    }


def new_handle(tag: str) -> str:
    """A handle no other test uses (its TXT record is the test's to write)."""
    return f"{tag}-{uuid.uuid4().hex[:10]}.test"


class PlcAccount:
    """A did:plc created on a live directory; each change is one signed operation."""

    def __init__(self, plc_url: str, handle: str | None, *, seed: str | None = None) -> None:
        self.plc_url = plc_url.rstrip("/")
        self.key = Key(seed or uuid.uuid4().hex)
        self._handle = handle
        self._pds = PDS
        self._labeler: tuple[Key, str] | None = None
        genesis = self.key.sign(plc_operation(None, [self.key], _aliases(handle)))
        self.did = did_of_genesis(dag_cbor(genesis))
        self._head = ""
        self._send(genesis)

    def set_handle(self, handle: str | None) -> None:
        """Declare `handle` (None: declare none) from now on."""
        self._handle = handle
        self._send(self._operation([self.key]))

    def move_pds(self, endpoint: str) -> None:
        """Name another PDS from now on (an account migration, as the directory sees it)."""
        self._pds = endpoint
        self._send(self._operation([self.key]))

    def label_with(self, seed: str, endpoint: str = "https://labeler.test") -> Key:
        """Become a labeler from now on, or sign labels with another key: an `#atproto_label`
        key made from `seed` and an `#atproto_labeler` service at `endpoint`."""
        self._labeler = (Key(seed), endpoint)
        self._send(self._operation([self.key]))
        return self._labeler[0]

    def _operation(self, keys: list[Key]) -> dict[str, Any]:
        """The next operation, signed by the current key: these keys, the handle, the PDS."""
        op = plc_operation(
            self._head, keys, _aliases(self._handle), self._pds, labeler=self._labeler
        )
        return self.key.sign(op)

    def rotate_key(self, seed: str) -> Key:
        """Hand the identity to a new key (rotation and signing), signed by the old one."""
        new = Key(seed)
        self._send(self._operation([new]))
        self.key = new
        return new

    def tombstone(self) -> None:
        self._send(self.key.sign({"type": "plc_tombstone", "prev": self._head}))

    def _send(self, op: dict[str, Any]) -> None:
        response = httpx.post(f"{self.plc_url}/{self.did}", json=op, timeout=10)
        if response.status_code != 200:
            raise RuntimeError(f"PLC refused the operation: {response.status_code} {response.text}")
        self._head = cid_of(dag_cbor(op))


def _aliases(handle: str | None) -> list[str]:
    return [f"at://{handle}"] if handle else []


class AuditLog:
    """A did:plc `/log/audit` answer built op by op, each signed for real, at chosen times:
    for replay tests that need one rule broken and nothing else."""

    def __init__(self, keys: list[Key], start: datetime.datetime, genesis: dict[str, Any]) -> None:
        self.keys = keys
        self.entries: list[dict[str, Any]] = []
        self.did = did_of_genesis(dag_cbor(genesis))
        self.append(genesis, start)

    @classmethod
    def plain(cls, keys: list[Key], start: datetime.datetime) -> AuditLog:
        return cls(keys, start, keys[0].sign(plc_operation(None, keys, ["at://x.test"])))

    def append(self, op: dict[str, Any], at: datetime.datetime, nullified: bool = False) -> str:
        entry = log_entry(self.did, op, at, nullified)
        self.entries.append(entry)
        return str(entry["cid"])

    def update(
        self, prev: str, signer: Key, at: datetime.datetime, *, handle: str = "x.test"
    ) -> str:
        return self.append(signer.sign(plc_operation(prev, self.keys, [f"at://{handle}"])), at)

    @property
    def head(self) -> str:
        return str(self.entries[-1]["cid"])


def log_entry(
    did: str, op: dict[str, Any], at: datetime.datetime, nullified: bool = False
) -> dict[str, Any]:
    created = at.astimezone(datetime.UTC).isoformat(timespec="milliseconds")
    return {
        "did": did,
        "operation": op,
        "cid": cid_of(dag_cbor(op)),
        "nullified": nullified,
        "createdAt": created.replace("+00:00", "Z"),
    }
