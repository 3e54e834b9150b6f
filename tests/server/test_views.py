"""The text view and the JSON view are one report: for every identity of the test network,
with and without --verify-plc, every fact the JSON states is in the text, and the text says
nothing the JSON contradicts (a log that "verifies" when the replay was skipped)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from atwhois.cli.render import render_text
from atwhois.resolver import Config, Resolver
from devnet.atwhois import run
from devnet.network import DevnetState
from tests.support.lookup_cases import CASES

Report = dict[str, Any]


def disagreements(report: Report, text: str) -> list[str]:
    """What the text leaves out of the report, or says against it."""
    missing: list[str] = []

    def says(fact: str, why: str) -> None:
        if fact not in text:
            missing.append(f"{why}: {fact!r}")

    def must_not_say(fact: str, why: str) -> None:
        if fact in text:
            missing.append(f"{why}: says {fact!r}")

    says(f"{report['query']}: ", "the query")
    says(f"[{report['status']}]", "the status")
    if report["error"]:
        says(report["error"], "the reason")
    if report["status"] == "invalid_input":
        return missing
    if report["did"]:
        says(f"{report['handle']}  <->  {report['did']}", "the pair")
    evidence = report["evidence"]
    for name, label in (("dns", "dns"), ("https", "https"), ("did_doc", "did doc")):
        step = evidence[name]
        says(f"{label:<9} {step['outcome']}", f"{name} outcome")
        for did in step["dids"]:
            says(did, f"{name} saw")
        if step["source"]:
            says(step["source"], f"{name} asked")
        if step["error"] and step["outcome"] != "ok":
            says(step["error"], f"{name} error")
    dnssec = evidence["dns"].get("dnssec")
    if dnssec is not None:
        says(f"dnssec  {dnssec['state']}", "dnssec state")
        for name in ("zone", "reason"):
            if dnssec[name]:
                says(dnssec[name], f"dnssec {name}")
    plc_log = evidence["plc_log"]
    if (report["did"] or "").startswith("did:plc:"):
        says(f"plc log   {plc_log['outcome']}", "plc log outcome")
    for finding in plc_log["findings"]:
        says(finding, "plc finding")
    for alias in report["also_known_as"]:
        says(alias, "alias")
    check = evidence.get("pds")
    if check is not None:
        says(f"repo      {check['outcome']}", "pds check outcome")
        for name in ("status", "rev", "commit", "key", "signed_with", "error"):
            if check[name]:
                says(check[name], f"pds check {name}")
    for key in ("pds", "signing_key"):
        if report[key]:
            says(report[key], key)
    for service in report["services"]:
        says(service["endpoint"], "service")
    for key in report["rotation_keys"] or ():  # null: not checked
        says(key, "rotation key")
    for warning in report["warnings"]:
        says(warning, "warning")
    history = report["history"]
    if history is None:
        must_not_say("history ", "no log was replayed")
        must_not_say("verifies", "no log was replayed")
    else:
        count = history["operations"]
        says(f"history      {count} operation{'s' if count != 1 else ''}; ", "op count")
        verifies = "the log verifies" if plc_log["outcome"] == "ok" else "does NOT verify"
        says(verifies, "the replay's verdict")
        for kind, n in history["changes"].items():
            says(f"{kind}: {n}", "change count")
        if not history["changes"]:
            says("none since creation", "no changes")
        for when in (history["created"], history["last_change"]):
            if when:
                says(when, "a date")
        for change in history["last_changes"]:
            says(change, "last change")
        if history["tombstoned"]:
            says("deactivated (tombstoned)", "tombstone")
    return missing


def every_identity(devnet: DevnetState) -> list[str]:
    """Every handle the resolver tests name, and every did:plc of the world."""
    return sorted({case.query for case in CASES} | set(devnet.dids.values()))


@pytest.mark.parametrize("verify_plc", [False, True], ids=["trusting", "verify-plc"])
async def test_text_says_what_the_json_says_for_every_identity(
    devnet: DevnetState, devnet_config: Config, verify_plc: bool
) -> None:
    config = dataclasses.replace(devnet_config, verify_plc=verify_plc)
    identifiers = every_identity(devnet)
    async with Resolver(config) as resolver:
        identities = await asyncio.gather(*(resolver.lookup(i) for i in identifiers))
    problems = {}
    for identity in identities:
        report = identity.to_json()
        found = disagreements(report, render_text(report))
        if found:
            problems[identity.query] = found
    assert problems == {}
    replayed = [i for i in identities if i.to_json()["history"] is not None]
    assert bool(replayed) is verify_plc  # the second half of the check did run
    assert len(identities) >= 40


def test_the_checker_notices_a_missing_or_contradicting_fact(
    devnet: DevnetState, devnet_config: Config
) -> None:
    """The comparison can fail: a report whose text lost a fact, or claims a verified log."""
    identity = asyncio.run(
        _lookup(dataclasses.replace(devnet_config, verify_plc=True), "frank.test")
    )
    report = identity.to_json()
    text = render_text(report)
    assert disagreements(report, text) == []
    assert disagreements(report, text.replace("recoveries: 1", "")) != []
    trusting = {**report, "history": None}
    assert disagreements(trusting, text) != []  # text tells a history the report has not


async def _lookup(config: Config, identifier: str) -> Any:
    async with Resolver(config) as resolver:
        return await resolver.lookup(identifier)


@pytest.mark.parametrize("identifier", ["frank.test", "erin.test", "web.test", "bob-old.test"])
def test_the_command_prints_both_views_of_one_report(
    devnet_env: dict[str, str], devnet: DevnetState, identifier: str
) -> None:
    """Through the real executable: `--json` and the text of the same lookup agree."""
    code, out, _ = run([identifier, "--verify-plc", "--json"], devnet_env)
    text_code, text, _ = run([identifier, "--verify-plc"], devnet_env)
    assert code == text_code
    report = json.loads(out)
    assert disagreements(report, text) == []


def test_counts_are_worded_for_one_and_for_many() -> None:
    """Issue 31, item 9: `1 operation`, `1 rotation key`, never `1 operations`."""
    from atwhois.foundation import counted

    assert counted(1, "operation") == "1 operation"
    assert counted(0, "operation") == "0 operations"
    assert counted(2, "rotation key") == "2 rotation keys"
    assert counted(1, "identity", "identities") == "1 identity"
    assert counted(3, "identity", "identities") == "3 identities"
