"""OAuth discovery on the test network: the reference PDS's own documents (through the TLS
front, GETs only: its pass-through drops request bodies, so no token is exchanged here), a
PDS whose authorization server is another host (the entryway of the test network, serving
the reference's documents), and a PDS the tests write (a TLS host of the test network)
whose hostile answers are each refused naming their rule: an issuer that differs, a server
on an address the guard refuses, a redirect, a wrong content type, metadata missing each
MUST, a host that asks for a pause. The token-response check with responses shaped as the
reference's `buildTokenResponse`; the faces: the command line, the daemon, the library."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

import atwhois
from atwhois.cache import CachedResolver, MemoryStore
from atwhois.resolver import Resolver
from atwhois.resolver.oauth import OAuthServer
from atwhois.resolver.remote import Client
from devnet import world
from devnet.atwhois import Daemon, run
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount, new_handle
from tests.support.oauth import BROKEN, VECTORS, vector

LIVE = f"https://{world.LIVE_PDS_HOST}"
PAULA = "paula" + world.LIVE_HANDLE_SUFFIX
PRM = world.PROTECTED_RESOURCE
ASM = world.AUTHORIZATION_SERVER


async def _find(devnet: DevnetState, identifier: str) -> OAuthServer:
    async with Resolver(devnet.config()) as resolver:
        return await atwhois.aoauth_server(identifier, directory=resolver)


async def _served(devnet: DevnetState, url: str) -> bytes:
    """What a host of the test network serves at `url`, as JSON (its bytes)."""
    async with Resolver(devnet.config()) as resolver:
        answer = await resolver.web.get(url, max_bytes=65536, timeout=10)
    assert answer.status == 200 and (answer.content_type or "").startswith("application/json")
    return answer.body


async def test_the_reference_pds_is_its_own_authorization_server(devnet: DevnetState) -> None:
    """O-FLOW-1, O-PRM-1, O-PRM-2, O-ISS-1, O-ASM-1..13: a handle of the reference PDS,
    verified both ways; its PDS names itself; the server's metadata meets every MUST. Both
    documents are the reference's own, byte for byte (tests/vectors/oauth/)."""
    found = await _find(devnet, PAULA)
    assert found.outcome == "ok", found.reason
    assert (found.did, found.handle, found.pds, found.issuer) == (
        devnet.live[PAULA],
        PAULA,
        LIVE,
        LIVE,
    )
    assert found.protected_resource == vector("protected-resource-live.json")
    assert found.authorization_server == vector("authorization-server-live.json")
    for url, name in ((LIVE + ASM, "authorization-server"), (LIVE + PRM, "protected-resource")):
        assert await _served(devnet, url) == (VECTORS / f"{name}-live.json").read_bytes()
    by_did = await _find(devnet, devnet.live[PAULA])
    assert (by_did.outcome, by_did.issuer) == ("ok", LIVE)


@pytest.fixture
def behind_entryway(devnet: DevnetState) -> Iterator[tuple[str, str]]:
    """An account of the PDS behind the test network's entryway: its handle and DID."""
    handle = new_handle("oauth")
    account = PlcAccount(devnet.plc_url, handle)
    account.move_pds(world.ENTRYWAY_PDS)
    devnet.set_txt(handle, [f"did={account.did}"])
    yield handle, account.did
    devnet.set_txt(handle, [])


async def test_a_pds_behind_an_entryway_on_another_host(
    devnet: DevnetState, behind_entryway: tuple[str, str]
) -> None:
    """O-PRM-2: the PDS names another host as its server, which serves the metadata under
    its own issuer (O-ASM-1) and names no protected resource (O-ASM-13 when left out). The
    test network's entryway serves the reference's documents, byte for byte."""
    handle, did = behind_entryway
    found = await _find(devnet, handle)
    assert found.outcome == "ok", found.reason
    assert (found.did, found.pds, found.issuer) == (did, world.ENTRYWAY_PDS, world.ENTRYWAY)
    assert found.authorization_server == vector("authorization-server-entryway.json")
    for url, name in (
        (world.ENTRYWAY + ASM, "authorization-server-entryway.json"),
        (world.ENTRYWAY_PDS + PRM, "protected-resource-entryway.json"),
    ):
        assert await _served(devnet, url) == (VECTORS / name).read_bytes()


# --- a PDS that answers as the tests write it ------------------------------------------


@pytest.fixture
def hostile(devnet: DevnetState) -> Iterator[tuple[str, str]]:
    """A did:plc of its own whose PDS is a host of the test network's TLS server, serving
    the documents a test writes; its DID and the PDS's origin (its own server, honestly)."""
    host = f"oauth-{uuid.uuid4().hex[:8]}{world.BULK_SUFFIX}"
    account = PlcAccount(devnet.plc_url, None)
    origin = f"https://{host}"
    account.move_pds(origin)
    _write(devnet, host, PRM, {**vector("protected-resource-live.json"), "resource": origin,
                               "authorization_servers": [origin]})  # fmt: skip
    _write(devnet, host, ASM, atwhois.testing.authorization_server_metadata(origin))
    yield account.did, origin
    devnet.set_https_faults({})


def _write(devnet: DevnetState, host: str, path: str, document: object) -> None:
    devnet.set_file(host, path, json.dumps(document))


async def test_a_hostile_server_is_refused_naming_its_rule(
    devnet: DevnetState, hostile: tuple[str, str]
) -> None:
    """Through the guarded fetcher and a real TLS host: the honest documents pass; an
    issuer that differs (O-ASM-1), a server whose host resolves to an address the guard
    refuses (O-FETCH-1: it is never connected to), two servers named (O-PRM-2), a
    `resource` that is another's (O-PRM-1), no document there (a 404: O-PRM-1)."""
    did, origin = hostile
    host = origin.removeprefix("https://")
    assert (await _find(devnet, did)).outcome == "ok"
    honest = atwhois.testing.authorization_server_metadata(origin)
    resource = {**vector("protected-resource-live.json"), "resource": origin}
    cases = {
        "O-ASM-1": (ASM, {**honest, "issuer": world.ENTRYWAY}),
        "O-FETCH-1": (PRM, {**resource, "authorization_servers": ["https://forbidden.test"]}),
        "O-PRM-2": (PRM, {**resource, "authorization_servers": [origin, world.ENTRYWAY]}),
        "O-PRM-1": (PRM, {**resource, "resource": LIVE}),
    }
    for rule, (path, document) in cases.items():
        _write(devnet, host, path, document)
        found = await _find(devnet, did)
        assert (found.outcome, found.rule) == ("invalid", rule), found.reason
        _write(devnet, host, PRM, {**resource, "authorization_servers": [origin]})
        _write(devnet, host, ASM, honest)
    assert "forbidden addresses (0.0.0.0)" in str(
        (await _with(devnet, did, host, PRM, "https://forbidden.test")).reason
    )
    _write(devnet, host, PRM, {**resource, "authorization_servers": [origin]})
    devnet.set_file(host, ASM, None)
    gone = await _find(devnet, did)
    assert (gone.outcome, gone.rule) == ("invalid", "O-ASM-1") and "HTTP 404" in str(gone.reason)


async def _with(devnet: DevnetState, did: str, host: str, path: str, server: str) -> OAuthServer:
    resource = {**vector("protected-resource-live.json"), "resource": f"https://{host}"}
    _write(devnet, host, path, {**resource, "authorization_servers": [server]})
    return await _find(devnet, did)


async def test_metadata_missing_each_must_is_refused_naming_its_rule(
    devnet: DevnetState, hostile: tuple[str, str]
) -> None:
    """O-ASM-1..13 end to end: the honest metadata with one MUST broken at a time, served
    by a real TLS host, refused naming that MUST's rule."""
    did, origin = hostile
    host = origin.removeprefix("https://")
    for case, (change, rule) in BROKEN.items():
        document = atwhois.testing.authorization_server_metadata(origin)
        change(document)
        _write(devnet, host, ASM, document)
        found = await _find(devnet, did)
        assert (found.outcome, found.rule) == ("invalid", rule), (case, found.reason)


async def test_a_redirect_a_wrong_content_type_and_an_outage(
    devnet: DevnetState, hostile: tuple[str, str]
) -> None:
    """O-FETCH-1: a redirect (to the reference PDS's own document) is not followed, but
    refused; O-FETCH-2: the document served as a web page; a 503 is unavailable, never
    invalid; a host that asks for a pause (429, Retry-After) is not asked again meanwhile
    (POL-PARK-1), and the flow stays unavailable."""
    did, origin = hostile
    host = origin.removeprefix("https://")
    moved = {"status": 302, "headers": {"Location": LIVE + PRM}, "body": ""}
    body = (VECTORS / "protected-resource-live.json").read_text()
    page = {"status": 200, "headers": {"Content-Type": "text/html"}, "body": body}
    for fault, outcome, rule in (
        (moved, "invalid", "O-FETCH-1"),
        (page, "invalid", "O-FETCH-2"),
        ("503", "unavailable", None),
        ({"status": 429, "headers": {"Retry-After": "60"}, "body": ""}, "unavailable", None),
    ):
        devnet.set_https_faults({host: fault})
        found = await _find(devnet, did)
        assert (found.outcome, found.rule) == (outcome, rule), (fault, found.reason)
    devnet.set_https_faults({})
    parked = await _find(devnet, did)  # the same process's pace: the host asked for a pause
    assert parked.outcome == "unavailable" and "(Retry-After)" in str(parked.reason)


async def test_a_cache_keeps_the_documents_and_a_token_check_fetches_them_afresh(
    devnet: DevnetState, hostile: tuple[str, str]
) -> None:
    """O-CACHE-1: through a cache the documents are kept (a broken server is not seen while
    they are); O-TOK-5: a token's check fetches them afresh, and sees it."""
    did, origin = hostile
    host = origin.removeprefix("https://")
    async with CachedResolver(Resolver(devnet.config()), MemoryStore()) as cached:
        first = await atwhois.aoauth_server(did, directory=cached)
        assert (first.outcome, first.kept_s) == ("ok", None)
        _write(devnet, host, ASM, {"issuer": "https://evil.test"})
        kept = await atwhois.aoauth_server(did, directory=cached)
        assert kept.outcome == "ok" and kept.kept_s is not None
        token = json.loads((VECTORS / "token-response.json").read_text()) | {"sub": did}
        check = await atwhois.acheck_token_response(token, issuer=origin, did=did, directory=cached)
        assert (check.outcome, check.rule) == ("invalid", "O-TOK-5"), check.reason
        assert check.server is not None and check.server.rule == "O-ASM-1"


# --- after the token exchange ------------------------------------------------------------


async def test_a_token_response_is_bound_to_its_account_and_issuer(
    devnet: DevnetState, behind_entryway: tuple[str, str]
) -> None:
    """O-TOK-1..5 with responses shaped as the reference's `buildTokenResponse`: paula's
    token from the reference PDS (the flow from her DID, and from the server), the
    entryway's for its account; the mix-ups: paula's token said to come from the entryway,
    the entryway's account's from the reference PDS (O-TOK-5), another account's token
    (O-TOK-4), a DID that does not exist (O-TOK-5)."""
    _, entryway_did = behind_entryway
    paula = devnet.live[PAULA]
    shaped = json.loads((VECTORS / "token-response.json").read_text())
    config = devnet.config()
    for sub, issuer, did, rule in (
        (paula, LIVE, paula, None),
        (paula, LIVE, None, None),
        (entryway_did, world.ENTRYWAY, entryway_did, None),
        (paula, world.ENTRYWAY, None, "O-TOK-5"),
        (entryway_did, LIVE, None, "O-TOK-5"),
        (paula, LIVE, entryway_did, "O-TOK-4"),
        (world.NEVER_REGISTERED_DID, LIVE, None, "O-TOK-5"),
    ):
        response = json.dumps({**shaped, "sub": sub})
        check = await atwhois.acheck_token_response(response, issuer=issuer, did=did, config=config)
        assert (check.outcome, check.rule) == ("invalid" if rule else "ok", rule), check.reason
        assert check.sub == sub


# --- the faces -----------------------------------------------------------------------------


def test_the_command_line_says_the_verdict_in_its_exit_code(
    devnet: DevnetState,
    devnet_env: dict[str, str],
    daemon: Daemon,
    hostile: tuple[str, str],
) -> None:
    """`atwhois oauth`: 0 ok (its server's endpoints in words, or JSON), 1 invalid naming
    the rule or not verified, 2 input that names no account, 3 unavailable; the same
    through `--server`."""
    code, out, err = run(["oauth", PAULA], devnet_env)
    assert code == 0, err
    assert out.startswith("ok\n") and f"issuer    {LIVE}" in out
    assert f"par       {LIVE}/oauth/par" in out
    code, out, _ = run(["oauth", PAULA, "--json"], devnet_env)
    assert code == 0 and json.loads(out)["authorization_server"]["issuer"] == LIVE
    did, origin = hostile
    host = origin.removeprefix("https://")
    _write(devnet, host, ASM, {"issuer": origin})
    code, out, _ = run(["oauth", did], devnet_env)
    assert code == 1 and out.startswith("INVALID") and "[O-ASM-2]" in out
    code, out, _ = run(["oauth", "bob-old.test"], devnet_env)  # declares bob.test
    assert code == 1 and out.startswith("NOT VERIFIED (handle_mismatch)")
    code, _, err = run(["oauth", "not a handle"], devnet_env)
    assert code == 2 and "H-SYN" in err
    devnet.set_https_faults({host: "503"})
    code, out, _ = run(["oauth", did], devnet_env)
    assert code == 3 and out.startswith("UNAVAILABLE")
    devnet.set_https_faults({})
    code, out, _ = run(["oauth", PAULA, "--server", daemon.url, "--json"], devnet_env)
    assert code == 0 and json.loads(out)["issuer"] == LIVE
    code, _, err = run(["oauth", "not a handle", "--server", daemon.url], devnet_env)
    assert code == 2, err


async def test_the_daemon_and_the_library_find_the_same_server(
    devnet: DevnetState, daemon: Daemon, behind_entryway: tuple[str, str]
) -> None:
    """`GET /v1/oauth/{identifier}` (200 ok, the documents kept the second time: O-CACHE-1;
    400 for input that names no account); a `Client` asks it; `atwhois.oauth_server` on the
    library's loop; and a token checked through the daemon."""
    handle, did = behind_entryway
    url = f"{daemon.url}/v1/oauth/{handle}"
    answer = httpx.get(url, timeout=30)
    assert answer.status_code == 200 and answer.json()["issuer"] == world.ENTRYWAY
    again = httpx.get(url, timeout=30).json()
    assert again["outcome"] == "ok" and again["kept_s"] is not None
    bad = httpx.get(f"{daemon.url}/v1/oauth/not%20a%20handle", timeout=30)
    assert bad.status_code == 400 and "[H-SYN" in bad.json()["message"]
    client = Client(daemon.url)
    asked = await atwhois.aoauth_server(did, directory=client)
    assert (asked.outcome, asked.issuer, asked.handle) == ("ok", world.ENTRYWAY, handle)
    with pytest.raises(atwhois.InvalidInput):
        await client.oauth_server("not a handle")
    here = atwhois.oauth_server(PAULA, config=devnet.config())
    assert (here.outcome, here.issuer) == ("ok", LIVE)
    token = json.loads((VECTORS / "token-response.json").read_text()) | {"sub": did}
    check = await atwhois.acheck_token_response(
        token, issuer=world.ENTRYWAY, did=did, directory=client
    )
    assert check.outcome == "ok" and check.server is not None, check.reason
