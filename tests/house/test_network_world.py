"""The network-shaped world the benchmarks run at scale (`bench.network_world`): its shape,
its operations (real signatures the PLC rules accept), and, on a small one served by the
real parts (Knot, the TLS server, an atwhois mirror backfilled from its operations), each
kind of identity verified the way the network would verify it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from atwhois.resolver.plc.audit import replay
from bench.network_world import running_network_world
from devnet import world
from devnet.atwhois import run
from devnet.dns import render_zone
from devnet.synthetic_plc import network_world

OWN = "on a domain of their own"


def kind(handle: str) -> str:
    """The world's kind of `handle`, and which PDS domain for those under one."""
    return world.shaped_pds(handle) or world.shaped_kind(handle)


def test_the_shape_is_the_networks_and_the_same_every_time() -> None:
    handles = [world.shaped_handle(i) for i in range(10_000)]
    counts = Counter(kind(h) for h in handles)
    # one PDS domain far larger than the others; own domains a minority; did:web a few
    assert counts["bsky.net.test"] == 7_000
    assert counts[OWN] == 900 and counts["did:web"] == 100
    assert sum(n for k, n in counts.items() if k.endswith(".net.test")) == 9_000
    assert len(set(handles)) == len(handles)
    assert handles == [world.shaped_handle(i) for i in range(10_000)]
    # did:web hosts are ones the TLS server generates documents for
    assert all(world.bulk_document(h) for h in handles if kind(h) == "did:web")


def test_every_operation_verifies_and_names_its_handle_and_pds() -> None:
    seen: Counter[str] = Counter()
    for handle, did, line in network_world(300):
        if line is None:
            assert did == f"did:web:{handle}"
            continue
        entry = json.loads(line)
        audit = replay(did, [entry])  # the signature and the DID checked, as a mirror does
        assert audit.valid and audit.state is not None, audit.findings
        assert audit.state.also_known_as == (f"at://{handle}",)
        pds = audit.state.service("atproto_pds")
        assert pds is not None
        assert pds.endpoint == f"https://{world.shaped_pds(handle) or pds.endpoint[8:]}"
        assert pds.endpoint[8:] in {domain for domain, _ in world.PDS_DOMAINS}
        seen[kind(handle)] += 1
    assert seen[OWN] == 27 and seen["bsky.net.test"] == 210


def test_the_zone_holds_a_txt_record_for_own_domains_only() -> None:
    shaped = {h: d for h, d, _ in network_world(200)}
    zone = render_zone(lambda value: value, shaped=shaped)
    for handle, did in shaped.items():
        record = f'_atproto.{handle}. TXT "did={did}"'
        assert (record in zone) == (kind(handle) == OWN), handle
    for domain, _ in world.PDS_DOMAINS:
        assert f"*.{domain}. A 127.0.0.1" in zone.splitlines()
    assert "net.test" not in render_zone(lambda value: value)  # only when asked for


def test_each_kind_of_identity_verifies_in_a_small_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served by the real parts: a handle under a PDS domain by that host's well-known file
    (no TXT record), one on its own domain by its TXT record (no web host), a did:web by
    its host; the did:plc documents by the mirror."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # made here, not kept
    with running_network_world(tmp_path / "world", 200, delay_ms=0, spread_ms=0) as shaped:
        chosen = {kind(h): h for h in shaped.dids}
        assert set(chosen) == {kind(world.shaped_handle(i)) for i in range(100)}
        for what, handle in chosen.items():
            code, out, err = run(["lookup", "--json", handle], shaped.env())
            report = json.loads(out)
            assert code == 0 and report["status"] == "verified", (what, err, out)
            assert report["did"] == shaped.dids[handle]
            methods = {m: report["evidence"][m]["outcome"] for m in ("dns", "https")}
            # confirmed absent where the network has nothing: no TXT record under a PDS
            # domain (its wildcard address answers NODATA), no web host on an own domain
            if what == OWN:
                assert methods == {"dns": "ok", "https": "not_found"}, methods
            else:
                assert methods == {"dns": "not_found", "https": "ok"}, (what, methods)
        # a handle under a PDS domain that its host does not know is not anyone's
        code, out, _ = run(["lookup", "--json", "h999999.bsky.net.test"], shaped.env())
        assert json.loads(out)["status"] != "verified"
