"""A world in memory for tests: handles, DID documents and a PLC directory, with faults
(timeouts, NXDOMAIN, 5xx) and a lagging directory, behind the resolver's own network edges.

    from atwhois.testing import World

    world = World()
    did = world.add("alice.example.org")
    async with world.resolver() as resolver:        # the real rules, no network
        assert (await resolver.lookup("alice.example.org")).did == did

A service that receives inter-service auth tokens tests with `World.service_token` (what
the account's PDS would mint) and `rotate_key`, against `atwhois.verify_service_auth`. One
that verifies records writes them at the accounts' PDS (`put_record`, `delete_record`;
`tamper_record` makes it serve another record than the one it signed) and verifies them
with `atwhois.verify_record(uri, directory=world)`: the PDS answers `getRecord` with real
proofs (`atwhois.testing.mst`), their commits signed with the account's current key. One
that takes moderation labels uses `World.add_labeler`, `World.label` (a label signed as
the reference labeler signs one) and `rotate_label_key`, against `atwhois.verify_label`.

An OAuth client tests its sign-in against the world's servers (each PDS its own, or one on
another host: `entryways`) and the `token_response` they answer, with
`atwhois.aoauth_server(handle, directory=world)` and `atwhois.acheck_token_response`.

`World.resolver()` is a real `Resolver` whose DNS and HTTP edges are the world's: every rule
(syntax, both methods, the check both ways, the three outcomes, a record's proof) runs as it
does against the network; only the answers come from here. `World.cached()` puts a
`CachedResolver` over it, with a clock the test moves; `World.daemon()` is `atwhois serve`'s
app over it, in process. The world changes between steps as the network does:
`change_handle`, `remove_handle`, `rotate_key`, `tombstone`, `fail` and `heal`, `lag` and
`catch_up`.
DNSSEC needs the network (or the project's test network)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import coincurve

from atwhois.resolver.config import Config
from atwhois.resolver.errors import UpstreamTimeout
from atwhois.resolver.keys import Curve, PublicKey
from atwhois.resolver.record_proof import record_uri
from atwhois.resolver.response import TxtAuthority

from .edges import Edge
from .oauth import authorization_server_metadata, protected_resource_metadata
from .pds import Repository, record_block

if TYPE_CHECKING:
    from aiohttp.web import Application

    from atwhois.cache import CachedResolver
    from atwhois.cache.stores import Store
    from atwhois.resolver.identity import Identity
    from atwhois.resolver.record_proof import RecordVerification
    from atwhois.resolver.resolver import Resolver

__all__ = [
    "Fault",
    "StrongRef",
    "World",
    "authorization_server_metadata",
    "protected_resource_metadata",
]

Fault = Literal["timeout", "nxdomain", "5xx"]
Method = Literal["dns", "https", "both"]
PLC_URL = "https://plc.world.invalid"  # never a real host: the world answers it
PDS_URL = "https://pds.world.example"
LABELER_URL = "https://labeler.world.example"


class StrongRef(NamedTuple):
    """A record written: its at:// URI and CID, as `com.atproto.repo.createRecord` answers."""

    uri: str
    cid: str


@dataclass
class _Account:
    did: str
    handle: str | None
    pds: str
    secret: bytes  # the #atproto signing key's private part (K-256)
    served: dict[str, Any] | None = None  # the document the directory serves (lag: older)
    tombstoned: bool = False
    repository: Repository = field(default_factory=Repository)  # at its PDS
    label_secret: bytes | None = None  # a labeler's #atproto_label key (K-256)
    labeler: str | None = None  # a labeler's #atproto_labeler endpoint


@dataclass
class World:
    """Identities and their records, answered by the edges `resolver()` plugs in.
    `asked` counts the questions by kind (`dns`, `https`, `plc`, `pds`: its sync methods)."""

    plc_url: str = PLC_URL
    accounts: dict[str, _Account] = field(default_factory=dict)
    txt: dict[str, list[str]] = field(default_factory=dict)  # _atproto.<handle> -> values
    well_known: dict[str, str] = field(default_factory=dict)  # host -> body
    faults: dict[str, Fault] = field(default_factory=dict)  # handle or DID -> its fault
    lagging: bool = False  # the directory serves what it served before the latest changes
    # what the recursive resolver keeps answering (None: it answers as the zones do)
    resolver_holds: dict[str, list[str]] | None = None
    # a PDS -> its authorization server on another host (an entryway; else it is its own)
    entryways: dict[str, str] = field(default_factory=dict)
    # URL -> the JSON served there instead of what the world makes (None: a 404)
    oauth_documents: dict[str, Any] = field(default_factory=dict)
    asked: Counter[str] = field(default_factory=Counter)

    # --- the world's identities --------------------------------------------------------

    def add(self, handle: str, *, method: Method = "dns", pds: str = PDS_URL) -> str:
        """A did:plc account whose handle is `handle`, published by `method`; its DID."""
        did = "did:plc:" + _base32(hashlib.sha256(handle.encode()).digest())[:24]
        self.accounts[did] = _Account(
            did, handle, pds, hashlib.sha256(b"key " + did.encode()).digest()
        )
        self._publish(handle, did, method)
        self._serve(did)
        return did

    def rotate_key(self, did: str) -> None:
        """The account signs with a new key from now on: its document says so (a lagging
        directory keeps serving the old key until `catch_up`), and its PDS signs a new
        commit with it."""
        account = self.accounts[did]
        account.secret = hashlib.sha256(b"rotated " + account.secret).digest()
        account.repository.commit()
        self._serve(did)

    # --- the accounts' records, at their PDS --------------------------------------------

    def put_record(
        self, did: str, collection: str, rkey: str, value: Mapping[str, Any]
    ) -> StrongRef:
        """The account's PDS writes `value`, a record in atproto's JSON form (as `json.loads`
        gives it: links `{"$link": CID}`, bytes `{"$bytes": base64}`), at `collection/rkey`,
        in a new commit signed with the account's key. Raises `InvalidInput` (a collection
        or record key that is not one) or `NotDrisl` (a value that is no record)."""
        uri = record_uri(f"at://{did}/{collection}/{rkey}")
        path = f"{uri.collection}/{uri.rkey}"
        return StrongRef(f"at://{did}/{path}", self.accounts[did].repository.put(path, value))

    def delete_record(self, did: str, collection: str, rkey: str) -> None:
        """The record is gone, in a new commit: its proof is now one of absence."""
        self.accounts[did].repository.delete(f"{collection}/{rkey}")

    def tamper_record(self, did: str, collection: str, rkey: str, value: Mapping[str, Any]) -> None:
        """From now on the PDS serves `value` in place of the record its commit signed, under
        the signed record's CID (a PDS changing a record behind its owner's signature), until
        the record is put or deleted again."""
        repository = self.accounts[did].repository
        path = f"{collection}/{rkey}"
        if path not in repository.records:
            raise KeyError(f"{did} has no record {path} to tamper with")
        repository.tampered[path] = record_block(value)

    def service_token(
        self,
        did: str,
        audience: str,
        *,
        method: str | None = None,
        lifetime: int = 60,
        now: float | None = None,
    ) -> str:
        """An inter-service auth token for `audience` signed with the account's current
        key, as its PDS mints one (`com.atproto.server.getServiceAuth`)."""
        from atwhois.resolver.service_auth import mint

        issued = int(time.time() if now is None else now)
        claims: dict[str, Any] = {"iss": did, "aud": audience, "iat": issued}
        claims |= {"exp": issued + lifetime, "jti": os.urandom(16).hex()}
        if method is not None:
            claims["lxm"] = method
        return mint(coincurve.PrivateKey(self.accounts[did].secret), claims)

    def add_labeler(
        self, handle: str, *, method: Method = "dns", endpoint: str = LABELER_URL
    ) -> str:
        """A labeler: an account (`add`) whose document also has an `#atproto_label` key,
        its own, and an `#atproto_labeler` service at `endpoint`; its DID."""
        did = self.add(handle, method=method)
        account = self.accounts[did]
        account.label_secret = hashlib.sha256(b"label key " + did.encode()).digest()
        account.labeler = endpoint
        self._serve(did)
        return did

    def rotate_label_key(self, did: str) -> None:
        """The labeler signs labels with a new key from now on; its document says so."""
        account = self.accounts[did]
        assert account.label_secret is not None, f"{did} is no labeler (add_labeler)"
        account.label_secret = hashlib.sha256(b"rotated " + account.label_secret).digest()
        self._serve(did)

    def label(
        self,
        labeler: str,
        uri: str,
        val: str,
        *,
        neg: bool = False,
        exp: str | None = None,
        cid: str | None = None,
        cts: str | None = None,
    ) -> dict[str, Any]:
        """A label of `labeler`'s on `uri` (an at:// URI or a DID), signed with its current
        key as the reference labeler signs one (`ver` 1, `neg` only when true, no absent
        field), in the lexicon's JSON form (`sig` as `{"$bytes": …}`). `cts`: now."""
        import libipld

        secret = self.accounts[labeler].label_secret
        assert secret is not None, f"{labeler} is no labeler (add_labeler)"
        created = cts or time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        fields = {"ver": 1, "src": labeler, "uri": uri, "cid": cid, "val": val}
        fields |= {"neg": True if neg else None, "cts": created, "exp": exp}
        signed = {name: value for name, value in fields.items() if value is not None}
        sig = coincurve.PrivateKey(secret).sign_recoverable(libipld.encode_dag_cbor(signed))
        return {**signed, "sig": {"$bytes": base64.b64encode(sig[:64]).decode().rstrip("=")}}

    def token_response(self, did: str, *, scope: str = "atproto transition:generic") -> Any:
        """What the account's authorization server answers a token request with (the
        reference's `buildTokenResponse`): a DPoP token, its scope, `sub` the DID."""
        access, refresh = os.urandom(24).hex(), os.urandom(24).hex()
        return {"access_token": access, "token_type": "DPoP", "refresh_token": refresh,
                "scope": scope, "expires_in": 3600, "sub": did}  # fmt: skip

    def change_handle(self, did: str, handle: str, *, method: Method = "dns") -> None:
        """The account's new handle: its document and its records change together (a
        lagging directory keeps serving the old document until `catch_up`)."""
        account = self.accounts[did]
        if account.handle is not None:
            self.remove_handle(account.handle)
        account.handle = handle
        self._publish(handle, did, method)
        self._serve(did)

    def remove_handle(self, handle: str) -> None:
        """The handle's records are gone (its name answers NXDOMAIN, its host 404)."""
        self.txt.pop(f"_atproto.{handle}", None)
        self.well_known.pop(handle, None)

    def tombstone(self, did: str) -> None:
        """The directory says the DID is deactivated (410)."""
        self.accounts[did].tombstoned = True

    def fail(self, name: str, fault: Fault) -> None:
        """Questions about `name` (a handle: its DNS and its host; a DID: the directory's
        answer for it) fail so until `heal`."""
        self.faults[name] = fault

    def heal(self, name: str) -> None:
        self.faults.pop(name, None)

    def lag(self) -> None:
        """From now on the directory serves the documents as they are now, whatever
        changes, until `catch_up` (a replica behind its primary)."""
        self.lagging = True

    def catch_up(self) -> None:
        self.lagging = False
        for did in self.accounts:
            self._serve(did)

    def hold_dns(self) -> None:
        """From now on the recursive resolver answers the TXT records as they are now,
        whatever changes, until `flush_dns` (a resolver keeping answers for their TTL); the
        zones' own nameservers, which a refresh also asks (H-DNS-9), answer as they are."""
        self.resolver_holds = {name: list(values) for name, values in self.txt.items()}

    def flush_dns(self) -> None:
        self.resolver_holds = None

    # --- what the world plugs into ------------------------------------------------------

    @property
    def web(self) -> Edge:
        """The world's hosts, as the resolver's fetcher of strangers' hosts asks them."""
        return Edge(self)

    def config(self, **options: Any) -> Config:
        """A resolver configuration for this world (`options`: other `Config` fields)."""
        return Config(plc_url=self.plc_url, **options)

    def resolver(
        self, config: Config | None = None, *, authority: TxtAuthority | None = None
    ) -> Resolver:
        """A real `Resolver` whose network is this world; `authority` stands in for the
        zones' own nameservers, which a refresh asks (by default the world's records)."""
        from atwhois.resolver.resolver import Resolver

        edge = Edge(self)
        zones = authority or edge
        return Resolver(config or self.config(), txt=edge, web=edge, plc=edge, authority=zones)

    def cached(
        self,
        store: Store | None = None,
        *,
        clock: Any = time.time,
        config: Config | None = None,
    ) -> CachedResolver:
        """A `CachedResolver` over `resolver()`, in memory unless given a `store`."""
        from atwhois.cache import CachedResolver
        from atwhois.cache.stores import MemoryStore

        return CachedResolver(self.resolver(config), store or MemoryStore(clock=clock), clock=clock)

    def daemon(self, **settings: Any) -> Application:
        """`atwhois serve`'s app over this world, in process, for aiohttp's test client
        (`TestClient(TestServer(app))`: no subprocess). `settings`: the daemon's settings
        by name (`refresh_token="…"`, …); its cache is in memory and its audit history in
        a folder of its own, removed when the app is cleaned up, unless they are given."""
        from atwhois.cli.serve import build_daemon
        from atwhois.settings import Values

        folder = Path(tempfile.mkdtemp(prefix="atwhois-world-"))
        values = Values(**{"cache": "memory:", "audit_db": str(folder / "audit.db"), **settings})
        app = build_daemon(values, self.config(), resolvers=self.resolver).app

        async def remove_folder(_: Application) -> None:
            shutil.rmtree(folder, ignore_errors=True)

        app.on_cleanup.append(remove_folder)
        return app

    # --- the world as a `Directory` (atwhois.alookup(x, directory=world)) -------------

    async def lookup(self, identifier: str) -> Identity:
        """`identifier` resolved by a `resolver()` of this world (the world keeps nothing)."""
        async with self.resolver() as resolver:
            return await resolver.lookup(identifier)

    async def refresh(self, identifier: str) -> Identity:
        async with self.resolver() as resolver:
            return await resolver.refresh(identifier)

    async def document(self, did: str, *, fresh: bool = False) -> Identity:
        """The DID's document alone (nothing is kept: every one is fresh)."""
        async with self.resolver() as resolver:
            return await resolver.document(did, fresh=fresh)

    async def check_pds(self, identity: Identity) -> Identity:
        async with self.resolver() as resolver:
            return await resolver.check_pds(identity)

    async def verify_record(
        self, uri: str, *, cid: str | None = None, record: bytes | None = None
    ) -> RecordVerification:
        """The record verified by a `resolver()` of this world, at the world's PDS."""
        async with self.resolver() as resolver:
            return await resolver.verify_record(uri, cid=cid, record=record, directory=self)

    async def purge(self, identifier: str) -> list[str]:
        """Nothing is kept: nothing to forget."""
        return []

    async def aclose(self) -> None:
        """Nothing is held open."""

    # --- inside -------------------------------------------------------------------------

    def _publish(self, handle: str, did: str, method: Method) -> None:
        if method in ("dns", "both"):
            self.txt[f"_atproto.{handle}"] = [f"did={did}"]
        if method in ("https", "both"):
            self.well_known[handle] = did

    def _serve(self, did: str) -> None:
        account = self.accounts[did]
        if self.lagging and account.served is not None:
            return
        keys = {"atproto": account.secret, "atproto_label": account.label_secret}
        services = {"atproto_pds": ("AtprotoPersonalDataServer", account.pds)}
        if account.labeler is not None:
            services["atproto_labeler"] = ("AtprotoLabeler", account.labeler)
        account.served = {
            "@context": ["https://www.w3.org/ns/did/v1"],
            "id": did,
            "alsoKnownAs": [f"at://{account.handle}"] if account.handle else [],
            "verificationMethod": [
                {
                    "id": f"{did}#{name}",
                    "type": "Multikey",
                    "controller": did,
                    "publicKeyMultibase": _multikey(secret),
                }
                for name, secret in keys.items()
                if secret is not None
            ],
            "service": [
                {"id": f"#{name}", "type": kind, "serviceEndpoint": endpoint}
                for name, (kind, endpoint) in services.items()
            ],
        }

    def _fault(self, name: str) -> Fault | None:
        """`name`'s fault; a timeout is raised here, the others are each edge's to say."""
        fault = self.faults.get(name)
        if fault == "timeout":
            raise UpstreamTimeout(f"{name}: no answer in time (the world's fault)")
        return fault


def _multikey(secret: bytes) -> str:
    return PublicKey(Curve.K256, coincurve.PrivateKey(secret).public_key.format()).multikey


def _base32(data: bytes) -> str:
    return base64.b32encode(data).decode().lower().rstrip("=")


if TYPE_CHECKING:  # mypy holds the world to the protocol it stands in for
    from atwhois.resolver.directory import Directory

    _A_WORLD_IS_A_DIRECTORY: Directory = World()
