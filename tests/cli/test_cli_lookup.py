"""The `atwhois lookup` contract, through the real executable against the test network."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from devnet.network import DevnetState
from tests.support.cli import run_here as run

CONTRACT_KEYS = {
    "query",
    "did",
    "handle",
    "declared_handle",
    "status",
    "pds",
    "signing_key",
    "also_known_as",
    "evidence",
    "warnings",
}


def report(args: list[str], env: dict[str, str], code: int) -> dict[str, Any]:
    got, out, err = run(args, env)
    assert got == code, (out, err)
    assert err == ""
    data: dict[str, Any] = json.loads(out)
    assert data.keys() >= CONTRACT_KEYS
    for method in ("dns", "https", "did_doc"):
        assert {"outcome", "dids", "error", "ms"} <= data["evidence"][method].keys()
    return data


@pytest.mark.parametrize(
    ("args", "code", "status"),
    [
        (["lookup", "alice.test", "--json"], 0, "verified"),
        (["@Alice.Test", "--json"], 0, "verified"),  # the short form
        (["lookup", "bob-old.test", "--json"], 1, "handle_mismatch"),
        (["lookup", "nobody.test", "--json"], 1, "handle_not_found"),
        (["lookup", "ghost.test", "--json"], 1, "did_not_found"),
        (["lookup", "erin.test", "--json"], 1, "did_deactivated"),
        (["lookup", "two-dids.test", "--json"], 1, "ambiguous"),
        (["lookup", "imposter.test", "--json"], 1, "invalid_document"),
        (["lookup", "john..test", "--json"], 2, "invalid_input"),
        (["lookup", "blackhole.test", "--json"], 3, "unavailable"),
    ],
)
def test_exit_codes_and_status(
    args: list[str], code: int, status: str, devnet_env: dict[str, str]
) -> None:
    assert report(args, devnet_env, code)["status"] == status


def test_json_report_of_a_verified_handle(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    data = report(["alice.test", "--json"], devnet_env, 0)
    assert data["did"] == devnet.did("alice") and data["handle"] == "alice.test"
    assert data["evidence"]["dns"]["outcome"] == "ok"
    assert data["evidence"]["dns"]["dids"] == [devnet.did("alice")]
    assert data["pds"] == "https://pds.test"
    assert "did_document" not in data
    with_doc = report(["alice.test", "--json", "--document"], devnet_env, 0)
    assert with_doc["did_document"]["id"] == devnet.did("alice")


def test_a_did_and_an_at_uri(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    assert report([devnet.did("alice"), "--json"], devnet_env, 0)["handle"] == "alice.test"
    uri = f"at://{devnet.did('bob')}/app.bsky.feed.post/3k2a"
    assert report([uri, "--json"], devnet_env, 0)["handle"] == "bob.test"


def test_flags_override_the_environment(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    env = {
        k: v
        for k, v in devnet_env.items()
        if k not in {"ATWHOIS_DNS_SERVER", "ATWHOIS_PLC_URL", "ATWHOIS_DEV"}
    }
    args = [
        "alice.test",
        "--json",
        "--dev",
        "--dns-server",
        devnet.dns_server,
        "--plc-url",
        devnet.plc_url,
    ]
    assert report(args, env, 0)["status"] == "verified"


def test_human_output(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    code, out, _ = run(["conflict.test"], devnet_env)
    assert code == 0
    assert out.splitlines()[0] == "conflict.test: verified [verified]"
    assert devnet.did("ivan") in out and devnet.did("alice") in out
    assert "dns_https_conflict" in out
    code, out, _ = run(["laptop.local"], devnet_env)
    assert code == 2 and "H-TLD-1" in out


def test_bad_configuration_is_exit_2(devnet_env: dict[str, str]) -> None:
    code, out, err = run(["alice.test", "--dns-server", "not-an-ip"], devnet_env)
    assert code == 2 and out == "" and "bad configuration" in err
    env = {**devnet_env, "ATWHOIS_ALLOW_NET": "300.1.1.1/8"}
    code, _, err = run(["alice.test"], env)
    assert code == 2 and "bad configuration" in err


def test_unset_environment_uses_production_defaults() -> None:
    # Without dev mode a .test handle is refused before any network traffic (H-TLD-2).
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATWHOIS_")}
    code, out, _ = run(["alice.test", "--json"], env)
    assert code == 2 and json.loads(out)["error"].endswith("[H-TLD-2]")


def test_lookups_through_the_cache_and_the_cache_commands(
    devnet_env: dict[str, str], devnet: DevnetState, tmp_path: Path
) -> None:
    env = {**devnet_env, "ATWHOIS_CACHE": f"sqlite://{tmp_path}/cli.db"}
    assert report(["alice.test", "--json"], env, 0)["cache"]["state"] == "miss"
    second = report(["alice.test", "--json"], env, 0)["cache"]
    assert second["cached"] and second["state"] == "fresh"
    code, out, _ = run(["cache", "stats", "--json"], env)
    assert code == 0 and json.loads(out)["entries"] == 2
    code, out, _ = run(["cache", "stats"], env)
    assert code == 0 and re.search(r"^entries +2$", out, re.M) and "{" not in out
    code, out, _ = run(["cache", "purge", "alice.test", "--json"], env)
    assert code == 0
    assert json.loads(out)["purged"] == ["alice.test", devnet.did("alice")]  # not their keys
    assert report(["alice.test", "--json"], env, 0)["cache"]["state"] == "miss"
    code, out, _ = run(["cache", "purge", "alice.test"], env)
    assert code == 0 and out.strip() == f"purged alice.test and {devnet.did('alice')}"
    code, out, _ = run(["cache", "purge", "alice.test"], env)
    assert code == 1 and out.strip() == "alice.test was not cached"
    code, _, err = run(["cache", "purge", "nope"], env)  # not an identifier: a usage error
    assert code == 2 and "H-SYN-2" in err
    assert report(["alice.test", "--json"], env, 0)["cache"]["state"] == "miss"
    # Without a cache configured, lookups say nothing about one.
    assert report(["alice.test", "--json"], devnet_env, 0)["cache"] is None


def test_a_documents_unwritable_characters_are_shown_escaped(
    devnet_env: dict[str, str], devnet: DevnetState
) -> None:
    """A stranger's did.json may hold a lone surrogate (JSON allows `\\ud800`): the text
    view prints the alias escaped, the JSON view as a JSON escape; neither crashes."""
    from devnet import world

    host = "surrogate" + world.BULK_SUFFIX
    document = world.did_web_document(host)
    document["alsoKnownAs"] = [f"at://{host}", "at://\ud800.example.com"]
    devnet.set_file(host, world.DID_JSON, json.dumps(document))
    code, out, err = run([f"did:web:{host}"], devnet_env)
    assert "Traceback" not in err and code in (0, 1), err
    assert "\\ud800" in out
    data = report([f"did:web:{host}", "--json"], devnet_env, code)
    assert data["also_known_as"][1] == "at://\ud800.example.com"


def test_a_batch_goes_on_past_a_lookup_that_fails_inside_atwhois(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One identity that meets a bug (an exception no rule classified): its line says it is
    unavailable and why, the traceback goes to stderr, and every other line is printed."""
    import argparse
    import asyncio

    from atwhois.cli.lookup import _batch
    from atwhois.resolver import Identity, Status

    class Breaking:
        async def lookup(self, identifier: str) -> Identity:
            if identifier == "broken.example":
                raise ValueError("Wrong hash algorithm (only SHA1 is supported)")
            return Identity(
                query=identifier, status=Status.VERIFIED, did="did:plc:x", checked_at=""
            )

        async def aclose(self) -> None:
            pass

    args = argparse.Namespace(
        concurrency=2,
        no_color=True,
        document=False,
        short=False,
        json=True,
        refresh=False,
        server=None,
    )
    names = ["a.example", "broken.example", "c.example"]
    code = asyncio.run(_batch(Breaking(), names, args, False))  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(r["query"], r["status"]) for r in lines] == [
        ("a.example", "verified"),
        ("broken.example", "unavailable"),
        ("c.example", "verified"),
    ]
    assert "Wrong hash algorithm" in lines[1]["error"] and "Traceback" in err
    assert code == Status.UNAVAILABLE.exit_code and "summary: 3 identifiers" in err
