"""The error each XRPC method answers: only the names its lexicon declares (and XRPC's
generic ones), inputs outside the lexicon formats refused as InvalidRequest."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from atwhois.resolver import Status
from atwhois.server import xrpc_errors
from devnet.atwhois import Daemon
from devnet.network import DevnetState
from tests.support.http import TOKEN, XRPC, get, xrpc_error

LEXICONS = Path(__file__).parents[1] / "vectors" / "lexicons"


def declared_errors(nsid: str) -> set[str]:
    lexicon = json.loads((LEXICONS / (nsid.replace(".", "/") + ".json")).read_text())
    return {error["name"] for error in lexicon["defs"]["main"].get("errors", [])}


def test_each_method_uses_only_its_lexicons_error_names() -> None:
    failing = set(Status) - {Status.VERIFIED, Status.INVALID_INPUT}
    for nsid, table in xrpc_errors.TABLES.items():
        declared = declared_errors(nsid)
        names = {name for _, name in table.values()}
        assert names <= declared | xrpc_errors.GENERIC_ERRORS, nsid
        assert declared <= names, f"{nsid}: a declared error is never used"
    for table in (xrpc_errors.RESOLVE_HANDLE, xrpc_errors.RESOLVE_IDENTITY):
        assert set(table) == failing  # a lookup by handle can end in any of them
    assert set(xrpc_errors.RESOLVE_DID) == {  # a DID's own failures
        Status.DID_NOT_FOUND,
        Status.DID_DEACTIVATED,
        Status.INVALID_DOCUMENT,
        Status.PLC_LOG_INVALID,
        Status.UNAVAILABLE,
    }


@pytest.mark.parametrize(
    ("method", "param", "value"),
    [
        ("resolveHandle", "handle", "@alice.test"),  # H-SYN-7: `@` is UI only
        ("resolveHandle", "handle", "at://alice.test"),
        ("resolveHandle", "handle", "https://bsky.app/profile/alice.test"),
        ("resolveHandle", "handle", " alice.test"),
        ("resolveDid", "did", "alice.test"),
        ("resolveDid", "did", "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz"),
        ("resolveIdentity", "identifier", "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz"),
        ("resolveIdentity", "identifier", "@alice.test"),
        ("resolveIdentity", "identifier", "https://bsky.app/profile/alice.test"),
        ("resolveIdentity", "identifier", "DID:plc:ewvi7nxzyoun6zhxrhs64oiz"),
    ],
)
def test_inputs_outside_the_lexicon_format_are_invalid_requests(
    daemon: Daemon, method: str, param: str, value: str
) -> None:
    message = xrpc_error(get(daemon, XRPC + method, **{param: value}), 400, "InvalidRequest")
    assert param in message


def test_refresh_takes_an_at_identifier_only(daemon: Daemon) -> None:
    url = daemon.url + XRPC + "refreshIdentity"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for identifier in ("at://alice.test", "@alice.test", 42):
        response = httpx.post(url, json={"identifier": identifier}, headers=auth)
        xrpc_error(response, 400, "InvalidRequest")


@pytest.mark.parametrize(
    ("method", "identifier", "status", "name", "reason"),
    [
        ("resolveHandle", "nobody.test", 404, "HandleNotFound", "handle_not_found"),
        ("resolveHandle", "ghost.test", 404, "HandleNotFound", "did_not_found"),
        ("resolveHandle", "erin.test", 404, "HandleNotFound", "did_deactivated"),
        ("resolveHandle", "bob-old.test", 400, "InvalidRequest", "handle_mismatch"),
        ("resolveHandle", "two-dids.test", 400, "InvalidRequest", "ambiguous"),
        ("resolveHandle", "imposter.test", 502, "UpstreamFailure", "invalid_document"),
        ("resolveDid", "did:plc:neverregisteredaaaaaaaaa", 404, "DidNotFound", "did_not_found"),
        ("resolveDid", "erin", 404, "DidDeactivated", "did_deactivated"),
        ("resolveDid", "did:web:imposter.test", 502, "UpstreamFailure", "invalid_document"),
        ("resolveIdentity", "nobody.test", 404, "HandleNotFound", "handle_not_found"),
        ("resolveIdentity", "ghost.test", 404, "DidNotFound", "did_not_found"),
        ("resolveIdentity", "erin.test", 404, "DidDeactivated", "did_deactivated"),
        ("resolveIdentity", "erin", 404, "DidDeactivated", "did_deactivated"),
        ("resolveIdentity", "bob-old.test", 400, "InvalidRequest", "handle_mismatch"),
        ("resolveIdentity", "two-dids.test", 400, "InvalidRequest", "ambiguous"),
        ("resolveIdentity", "did:web:imposter.test", 502, "UpstreamFailure", "invalid_document"),
    ],
)
def test_failures_map_to_the_lexicons_names(
    daemon: Daemon,
    devnet: DevnetState,
    method: str,
    identifier: str,
    status: int,
    name: str,
    reason: str,
) -> None:
    if "." not in identifier and ":" not in identifier:
        identifier = devnet.did(identifier)
    param = {"resolveHandle": "handle", "resolveDid": "did"}.get(method, "identifier")
    response = get(daemon, XRPC + method, **{param: identifier})
    message = xrpc_error(response, status, name)
    assert name in declared_errors(f"com.atproto.identity.{method}") | xrpc_errors.GENERIC_ERRORS
    assert message.startswith(reason + ": ")
    assert "Retry-After" not in response.headers  # none of these is transient


def test_an_unknown_method_is_not_implemented_not_not_found(daemon: Daemon) -> None:
    """Issue 31, item 10: XRPC's answer for a method the server lacks is 501
    `MethodNotImplemented`; a 404 would say the server speaks no XRPC at all. Other paths
    keep their 404."""
    for method in ("com.atproto.identity.nonexistent", "app.bsky.actor.getProfile"):
        message = xrpc_error(get(daemon, f"/xrpc/{method}"), 501, "MethodNotImplemented")
        assert method in message
    xrpc_error(get(daemon, "/nowhere"), 404, "NotFound")
