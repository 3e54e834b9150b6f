"""What atwhois says about what it is shown: for a catalogue of inputs (every syntax vector,
every DID-document and PLC-log vector, hand-made bad records, documents, operations, logs
and export lines), the answer each pure parser gives — the value, or the error's class,
rule tag and message — and every replayed log's full report.

The product is an explanation ("why a binding fails"), so its words are pinned too:
`tests/resolver/test_explanations.py` compares this catalogue with `tests/golden/explanations.json`.
After a deliberate change, `python -m tests.support.explanations --update` rewrites the file; the
diff is then read and committed with the change.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import coincurve

from atwhois.resolver import handle, syntax
from atwhois.resolver.document import is_origin_url, parse_json_document
from atwhois.resolver.keys import b58decode, b58encode
from atwhois.resolver.plc import build_document, compare, replay
from atwhois.resolver.plc.encoding import cid_of, dag_cbor
from atwhois.resolver.plc.export import verify_export
from atwhois.resolver.plc.operation import parse_operation
from atwhois.resolver.plc.signature import decode_signature
from devnet.plc_ops import AuditLog, Key, b64url, log_entry, plc_operation
from devnet.synthetic_plc import export_lines
from tests.vectors import did_documents, plc_logs, syntax_cases

GOLDEN = Path(__file__).parents[1] / "golden" / "explanations.json"
PLC = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
OTHER = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
T0 = datetime.datetime(2025, 3, 1, 12, 0, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)


def answer(work: Callable[[], Any]) -> Any:
    """The value (made JSON), or the error: class, rule tag, message."""
    try:
        value = work()
    except Exception as err:
        return {"error": type(err).__name__, "rule": getattr(err, "rule", None), "says": str(err)}
    return {"value": _plain(value)}


def _plain(value: Any) -> Any:
    if hasattr(value, "_asdict"):  # a named tuple reads as its fields, as a dataclass does
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "to_json"):
        return _plain(value.to_json())
    if hasattr(value, "__slots__"):
        return {k: _plain(getattr(value, k)) for k in value.__slots__}
    return repr(value)


SYNTAX_FILES = (
    "handle_syntax_valid.txt",
    "handle_syntax_invalid.txt",
    "did_syntax_valid.txt",
    "did_syntax_invalid.txt",
    "atidentifier_syntax_valid.txt",
    "atidentifier_syntax_invalid.txt",
    "aturi_syntax_valid.txt",
    "aturi_syntax_invalid.txt",
)
MORE_IDENTIFIERS = [
    "@alice.test",
    "@@alice.test",
    "DID:plc:" + PLC[8:],
    "https://bsky.app/profile/alice.test/post/3k2a",
    "https://bsky.app/profile/did%3Aplc%3A" + PLC[8:],
    "https://example.com/alice",
    "alice.test.",
    "x" * 254 + ".test",
    "a." + "b" * 64 + ".test",
    "did:" + "x" * 2050,
    "at://" + "a" * 9000,
    "at://alice.test/app.bsky.feed.post/3k2a/extra",
    "at://alice.test/not_an_nsid",
    "at://alice.test/app.bsky.feed.post/..",
    "1.2.3.4",
    "localhost",
    "handle.invalid",
    # lengths at their caps and one over (H-SYN-1 253, D-SYN-6 2048, U-3 8 KiB, NSID 317)
    ".".join(["a" * 63] * 3) + "." + "b" * 61,
    ".".join(["a" * 63] * 3) + "." + "b" * 62,
    "did:plc:" + "a" * 2040,
    "did:plc:" + "a" * 2041,
    "at://alice.test/" + ".".join(["a" * 63] * 4) + "." + "b" * 61,
    "at://alice.test/" + ".".join(["a" * 63] * 4) + "." + "b" * 62,
    "at://alice.test/app.bsky.feed.post/" + "r" * (8192 - 35),
    "at://alice.test/app.bsky.feed.post/" + "r" * (8192 - 34),
    "https://bsky.app/profile/@alice.test",
    "https://BSKY.app/profile/alice.test",
    "at://Alice.Test/app.bsky.feed.post/3k2a",
    "3com.test",
    "a:b.test",
]
DID_WEB = [
    "did:web:example.com",
    "did:web:Example.COM",
    "did:web:localhost",
    "did:web:localhost%3A8080",
    "did:web:localhost%3a65535",
    "did:web:localhost%3A0",
    "did:web:localhost%3A1",
    "did:web:localhost%3A65536",
    "did:web:localhost%3A70000",
    "did:web:localhost%3Aabc",
    "did:web:localhost.run",
    "did:web:example.com%3A443",
    "did:web:example.com:user:alice",
    "did:web:printer.local",
    "did:web:alice.test",
    "did:web:127.0.0.1",
    "did:web:under_score.com",
]
TXT_RECORDS: list[list[list[bytes]]] = [
    [[f"did={PLC}".encode()]],
    [[b"did=did:plc:ewvi7nx", b"zyoun6zhxrhs64oiz"]],
    [[f"did={PLC}".encode()], [f"did={OTHER}".encode()]],
    [[f"did={PLC}".encode()], [f"did={PLC}".encode()], [b"v=spf1 -all"]],
    [[b"hello"], [b"DID=" + PLC.encode()]],
    [],
    [[b"did=not-a-did"]],
    [[b"did=did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"]],
    [[b"did=did:plc:UPPERCASEAAAAAAAAAAAAAAA"]],
    [[b"did=" + PLC.encode() + b" "]],
    [[b"did=did:web:example.com"]],
    [[b"did=did:web:example.com:path"]],
    [[b"did=\xff\xfe"]],
]
WELL_KNOWN = [
    PLC.encode(),
    b"  \n" + PLC.encode() + b"\r\n",
    b"",
    b"   ",
    b"<!doctype html><p>parked</p>",
    b"\xff" + PLC.encode(),
    PLC.encode() + b"\n" + OTHER.encode(),
    b"did:web:example.com",
    b"did:example:123",
    b"did:plc:short",
]
DOCUMENT_CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "as served": lambda d: None,
    "another id": lambda d: d.update(id=OTHER),
    "no id": lambda d: d.pop("id"),
    "aliases not a list": lambda d: d.update(alsoKnownAs="at://alice.test"),
    "alias list with junk": lambda d: d.update(
        alsoKnownAs=[
            7,
            "https://alice.test",
            "at://under_score.test",
            "at://Bob.Test",
            "at://c.test",
        ]
    ),
    "no aliases": lambda d: d.update(alsoKnownAs=[]),
    "no key": lambda d: d.update(verificationMethod=[]),
    "key of another controller": lambda d: d["verificationMethod"][0].update(controller=OTHER),
    "key with a bad multibase": lambda d: d["verificationMethod"][0].update(
        publicKeyMultibase="zzzz"
    ),
    "legacy key type": lambda d: d["verificationMethod"][0].update(
        type="EcdsaSecp256k1VerificationKey2019",
        publicKeyMultibase="zQYEBzXeuTM9UR3rfvNag6L3RNAs5pQZyYPsomTsgQhsxLdEgCrPTLgFna8yqCnxPpNT7DBk6Ym3dgPKNu86vt9GR",
    ),
    "unknown key type": lambda d: d["verificationMethod"][0].update(type="JsonWebKey2020"),
    "no services": lambda d: d.update(service=[]),
    "http pds": lambda d: d["service"][0].update(serviceEndpoint="http://pds.example.com"),
    "pds with a path": lambda d: d["service"][0].update(
        serviceEndpoint="https://pds.example.com/x"
    ),
    "pds not a string": lambda d: d["service"][0].update(serviceEndpoint={"uri": "x"}),
    "services not a list": lambda d: d.update(service={"id": "#atproto_pds"}),
    "methods not a list": lambda d: d.update(verificationMethod="x"),
    "many aliases": lambda d: d.update(alsoKnownAs=[f"at://a{i}.test" for i in range(40)]),
    "16 aliases": lambda d: d.update(alsoKnownAs=[f"at://a{i}.test" for i in range(16)]),
    "17 aliases": lambda d: d.update(alsoKnownAs=[f"at://a{i}.test" for i in range(17)]),
    "16 services": lambda d: d.update(service=d["service"] * 16),
    "17 services": lambda d: d.update(service=d["service"] * 17),
    "a bad key before a good one": lambda d: d.update(
        verificationMethod=[
            {**d["verificationMethod"][0], "controller": OTHER},
            {**d["verificationMethod"][0], "publicKeyMultibase": 7},
            d["verificationMethod"][0],
        ]
    ),
    "pds id with two fragments": lambda d: d["service"][0].update(id="#x#atproto_pds"),
}
DOCUMENT_BODIES = [
    b"",
    b"<html>",
    b"[]",
    b'"did"',
    b"\xef\xbb\xbf{}",
    b'{"id": "' + PLC.encode() + b'", "id": "' + PLC.encode() + b'"}',
    b"[" * 5000 + b"]" * 5000,
    b'{"id": "' + PLC.encode() + b'", "alsoKnownAs": ["at://\\ud800.test"]}',
]
SIGNATURES = ["", "A", "AAAA=", "A" * 86, "A" * 85 + "B", "A" * 88, "+" * 86, "A" * 86 + "\n"]


def _operations() -> dict[str, Any]:
    key = Key("explain/op")
    good = plc_operation(None, [key], ["at://x.test"])
    good["sig"] = "A" * 86
    changes: dict[str, Callable[[dict[str, Any]], Any]] = {
        "valid shape": lambda op: None,
        "not an object": lambda op: None,
        "extra field": lambda op: op.update(extra=1),
        "no services": lambda op: op.pop("services"),
        "rotationKeys a string": lambda op: op.update(rotationKeys="did:key:x"),
        "rotationKeys with a number": lambda op: op.update(rotationKeys=["did:key:x", 1]),
        "verificationMethods a list": lambda op: op.update(verificationMethods=[]),
        "verificationMethods with a number": lambda op: op.update(verificationMethods={"a": 1}),
        "services a list": lambda op: op.update(services=[]),
        "service without endpoint": lambda op: op["services"]["atproto_pds"].pop("endpoint"),
        "service with a number": lambda op: op["services"]["atproto_pds"].update(endpoint=1),
        "prev a number": lambda op: op.update(prev=1),
        "sig a number": lambda op: op.update(sig=1),
        "alsoKnownAs a dict": lambda op: op.update(alsoKnownAs={}),
        "unknown type": lambda op: op.update(type="plc_mystery"),
        "no type": lambda op: op.pop("type"),
    }
    out: dict[str, Any] = {}
    for name, change in changes.items():
        op: Any = copy.deepcopy(good)
        change(op)
        if name == "not an object":
            op = [op]
        out[f"parse_operation {name}"] = answer(lambda op=op: parse_operation(op).state)
    tombstones = {
        "tombstone": {"type": "plc_tombstone", "prev": "bafy", "sig": "A"},
        "tombstone prev null": {"type": "plc_tombstone", "prev": None, "sig": "A"},
        "tombstone extra": {"type": "plc_tombstone", "prev": "bafy", "sig": "A", "x": 1},
        "tombstone sig number": {"type": "plc_tombstone", "prev": "bafy", "sig": 5},
    }
    legacy = {
        "type": "create",
        "signingKey": key.did_key,
        "recoveryKey": Key("explain/recovery").did_key,
        "handle": "https://Legacy.test",
        "service": "pds.example.com",
        "prev": None,
        "sig": "A",
    }
    creates = {
        "create": legacy,
        "create with an http service": {**legacy, "service": "http://pds.example.com"},
        "create with prev": {**legacy, "prev": "bafy"},
        "create handle a number": {**legacy, "handle": 5},
        "create without recovery key": {k: v for k, v in legacy.items() if k != "recoveryKey"},
        "create http handle": {**legacy, "handle": "http://legacy.test"},
        "create at handle": {**legacy, "handle": "at://legacy.test"},
        **{
            f"create {field} a number": {**legacy, field: 5}
            for field in ("signingKey", "recoveryKey", "service", "sig")
        },
    }
    for name, op in {**tombstones, **creates}.items():
        out[f"parse_operation {name}"] = answer(lambda op=op: parse_operation(op).state)
    return out


def _logs() -> dict[str, Any]:
    keys = [Key("explain/0"), Key("explain/1")]
    out: dict[str, Any] = {}
    for name, log in plc_logs().items():
        did = log[0]["did"] if log and isinstance(log[0], dict) else PLC
        audit = replay(did, log)
        out[f"replay {name}"] = answer(lambda audit=audit: audit)
        if audit.state is not None:
            out[f"build_document {name}"] = answer(
                lambda audit=audit: build_document(audit.did, audit.state)  # type: ignore[arg-type]
            )

    def made(name: str, build: Callable[[AuditLog], None]) -> None:
        log = AuditLog.plain(keys, T0)
        build(log)
        out[f"replay made: {name}"] = answer(lambda: replay(log.did, log.entries))

    made("two ops", lambda log: log.update(log.head, keys[0], T0 + HOUR, handle="y.test"))
    made("same time", lambda log: log.update(log.head, keys[0], T0))
    made("signed by the weaker key", lambda log: log.update(log.head, keys[1], T0 + HOUR))

    def recovery(log: AuditLog, at: datetime.datetime, signer: Key) -> None:
        genesis = log.head
        log.update(genesis, keys[1], T0 + HOUR, handle="hot.test")
        log.entries[-1]["nullified"] = True
        log.update(genesis, signer, at, handle="back.test")

    made("recovery", lambda log: recovery(log, T0 + 2 * HOUR, keys[0]))
    made("recovery too late", lambda log: recovery(log, T0 + 80 * HOUR, keys[0]))
    made("recovery before the head", lambda log: recovery(log, T0 + HOUR / 2, keys[0]))
    made("recovery by the same key", lambda log: recovery(log, T0 + 2 * HOUR, keys[1]))
    made(
        "tombstone then an update",
        lambda log: (
            log.append(keys[0].sign({"type": "plc_tombstone", "prev": log.head}), T0 + HOUR),
            log.update(log.head, keys[0], T0 + 2 * HOUR),
        ),
    )
    made(
        "second genesis",
        lambda log: log.append(keys[0].sign(plc_operation(None, keys, [])), T0 + HOUR),
    )
    made("unknown prev", lambda log: log.update("bafyunknown", keys[0], T0 + HOUR))
    made("flag says nullified", lambda log: log.entries[0].update(nullified=True))
    made("cid tampered", lambda log: log.entries[0].update(cid="bafyx"))
    made("another did", lambda log: log.entries[0].update(did=OTHER))
    made("time without zone", lambda log: log.entries[0].update(createdAt="2025-03-01T12:00:00"))
    made("entry not an object", lambda log: log.entries.append(["x"]))
    made("bad signature", lambda log: log.entries[0]["operation"].update(sig="A" * 86))
    made(
        "bad genesis, then an update",
        lambda log: (
            log.entries[0]["operation"].update(sig="A" * 86),
            log.entries[0].update(cid=cid_of(dag_cbor(log.entries[0]["operation"]))),
            log.update(log.entries[0]["cid"], keys[0], T0 + HOUR),
        ),
    )
    made(
        "a create op second",
        lambda log: log.append(
            keys[0].sign(
                {
                    "type": "create",
                    "signingKey": keys[0].did_key,
                    "recoveryKey": keys[1].did_key,
                    "handle": "x.test",
                    "service": "https://pds.test",
                    "prev": None,
                }
            ),
            T0 + HOUR,
        ),
    )

    def moved(log: AuditLog) -> None:
        op = plc_operation(log.head, keys, ["at://x.test"])
        op["services"]["atproto_pds"]["endpoint"] = "https://pds2.test"
        log.append(keys[0].sign(op), T0 + HOUR)
        op = plc_operation(log.head, keys, ["at://x.test"])
        op["services"]["atproto_pds"]["endpoint"] = "https://pds2.test"
        op["services"]["atproto_labeler"] = {"type": "AtprotoLabeler", "endpoint": "https://l.test"}
        op["verificationMethods"]["atproto"] = keys[1].did_key
        op["rotationKeys"] = [keys[1].did_key, keys[0].did_key]
        log.append(keys[0].sign(op), T0 + 2 * HOUR)
        log.append(keys[1].sign(dict(op, prev=log.head)), T0 + 3 * HOUR)

    made("pds moved, services and keys changed", moved)

    def limits(log: AuditLog, count: int) -> None:
        extra = [Key(f"explain/extra{i}") for i in range(count)]
        op = plc_operation(log.head, [keys[0], *extra], ["at://x.test"])
        log.append(keys[0].sign(op), T0 + HOUR)

    made("five rotation keys", lambda log: limits(log, 4))
    made("six rotation keys", lambda log: limits(log, 5))
    made(
        "duplicate rotation keys",
        lambda log: log.append(
            keys[0].sign(plc_operation(log.head, [keys[0], keys[0]], [])), T0 + HOUR
        ),
    )
    made(
        "no rotation keys",
        lambda log: log.append(
            keys[0].sign({**plc_operation(log.head, keys, []), "rotationKeys": []}), T0 + HOUR
        ),
    )
    for size in (7500, 7501):
        made(f"an op of {size} bytes", lambda log, size=size: _sized(log, keys[0], size))
    made(
        "a lone surrogate",
        lambda log: log.entries[0]["operation"].update(alsoKnownAs=["at://\ud800.test"]),
    )
    made(
        "no cid, no time", lambda log: (log.entries[0].pop("cid"), log.entries[0].pop("createdAt"))
    )
    made("nullified not a boolean", lambda log: log.entries[0].update(nullified="no"))
    made(
        "an update first",
        lambda log: log.entries.__setitem__(
            0, log_entry(log.did, keys[0].sign(plc_operation("bafyx", keys, [])), T0)
        ),
    )

    def resigned(log: AuditLog, sig: str) -> None:
        """A second op whose `sig` is replaced (and its CID recomputed to match)."""
        log.update(log.head, keys[0], T0 + HOUR)
        log.entries[-1]["operation"]["sig"] = sig
        log.entries[-1]["cid"] = cid_of(dag_cbor(log.entries[-1]["operation"]))

    made("signature with padding", lambda log: resigned(log, "AA=="))
    made("signature DER-shaped", lambda log: resigned(log, b64url(b"\x30" + b"\x01" * 69)))
    made(
        "two unexpected fields",
        lambda log: log.entries[0]["operation"].update(zeta=1, alpha=2),
    )
    made(
        "two missing fields",
        lambda log: (
            log.entries[0]["operation"].pop("services"),
            log.entries[0]["operation"].pop("alsoKnownAs"),
        ),
    )
    out["replay not a list"] = answer(lambda: replay(PLC, {"did": PLC}))
    out["replay empty"] = answer(lambda: replay(PLC, []))
    tombstoned = AuditLog.plain(keys, T0)
    tombstoned.append(keys[0].sign({"type": "plc_tombstone", "prev": tombstoned.head}), T0 + HOUR)
    dead = replay(tombstoned.did, tombstoned.entries)
    live = replay(tombstoned.did, tombstoned.entries[:1])
    document = build_document(live.did, live.state)  # type: ignore[arg-type]
    lies: dict[str, Callable[[dict[str, Any]], Any]] = {
        "agrees": lambda d: None,
        "another id": lambda d: d.update(id=OTHER),
        "another alias": lambda d: d.update(alsoKnownAs=["at://evil.test"]),
        "another key": lambda d: d["verificationMethod"][0].update(
            publicKeyMultibase=Key("attacker").did_key[8:]
        ),
        "relative key id": lambda d: d["verificationMethod"][0].update(id="#atproto"),
        "legacy key form": lambda d: d["verificationMethod"][0].update(
            type="EcdsaSecp256k1VerificationKey2019"
        ),
        "another pds": lambda d: d["service"][0].update(serviceEndpoint="https://evil.example"),
        "no services": lambda d: d.pop("service"),
        "no aliases": lambda d: d.pop("alsoKnownAs"),
        "service of another did": lambda d: d["service"][0].update(id=OTHER + "#atproto_pds"),
        "legacy key, legacy encoding": lambda d: d["verificationMethod"][0].update(
            type="EcdsaSecp256k1VerificationKey2019",
            publicKeyMultibase="z"
            + b58encode(
                coincurve.PublicKey(
                    b58decode(d["verificationMethod"][0]["publicKeyMultibase"][1:])[2:]
                ).format(compressed=False)
            ),
        ),
        "unknown key type": lambda d: d["verificationMethod"][0].update(type="JsonWebKey2020"),
        "key multibase a number": lambda d: d["verificationMethod"][0].update(publicKeyMultibase=1),
        "key multibase broken": lambda d: d["verificationMethod"][0].update(
            publicKeyMultibase="z1"
        ),
        "key of another did": lambda d: d["verificationMethod"][0].update(id=OTHER + "#atproto"),
    }
    for name, lie in lies.items():
        served = copy.deepcopy(document)
        lie(served)
        out[f"compare {name}"] = answer(lambda served=served: compare(live, served))
    out["compare nothing served for a live log"] = answer(lambda: compare(live, None))
    out["compare tombstoned, document served"] = answer(lambda: compare(dead, document))
    out["compare tombstoned, nothing served"] = answer(lambda: compare(dead, None))
    return out


def _sized(log: AuditLog, key: Key, size: int) -> None:
    """An op whose signed DAG-CBOR is exactly `size` bytes (P-LIM-1 warns over 7500)."""
    pad = size - 200
    while True:
        op = key.sign(plc_operation(log.head, log.keys, ["at://x.test", "x" * pad]))
        encoded = len(dag_cbor(op))
        if encoded == size:
            log.append(op, T0 + HOUR)
            return
        pad += size - encoded


def _export() -> dict[str, Any]:
    lines = list(export_lines(8, 4))
    bad = json.loads(lines[9])
    bad["operation"]["alsoKnownAs"] = ["at://tampered.test"]
    seq = {**json.loads(lines[0]), "type": "sequenced_op", "seq": 1}
    seq.pop("nullified")
    return {
        "verify_export synthetic": answer(lambda: verify_export(lines)),
        "verify_export tampered and junk": answer(
            lambda: verify_export(
                [*lines[:9], json.dumps(bad), "", *lines[10:], "not json", "[]", '{"did": 5}'],
                known_bad=frozenset({json.loads(lines[3])["did"]}),
            )
        ),
        "verify_export seq format": answer(lambda: verify_export([json.dumps(seq)])),
    }


def _short(text: str) -> str:
    """A key for a long input: its start and its length (two inputs may share a start)."""
    return repr(text) if len(text) <= 120 else f"{text[:100]!r}... ({len(text)} characters)"


def catalogue() -> dict[str, Any]:
    out: dict[str, Any] = {}
    identifiers = [c for f in SYNTAX_FILES for c in syntax_cases(f)] + MORE_IDENTIFIERS
    for text in identifiers:
        out[f"parse_query {_short(text)}"] = answer(lambda t=text: syntax.parse_query(t))
    for text in [c for f in SYNTAX_FILES if "aturi" in f for c in syntax_cases(f)]:
        out[f"parse_at_uri {_short(text)}"] = answer(lambda t=text: syntax.parse_at_uri(t))
    for text in DID_WEB:
        for dev in (False, True):
            out[f"parse_did_web {text} dev={dev}"] = answer(
                lambda t=text, d=dev: syntax.parse_did_web(t, dev=d, allow_test_tld=d)
            )
    for text in ("alice.test", "handle.invalid", "a.onion", "a.example", "a.com"):
        for dev in (False, True):
            out[f"check_resolvable_handle {text} dev={dev}"] = answer(
                lambda t=text, d=dev: syntax.check_resolvable_handle(t, allow_test_tld=d)
            )
    for text in (PLC, PLC.upper(), PLC[:-1], "did:plc:" + "1" * 24):
        out[f"check_plc_did {text}"] = answer(lambda t=text: syntax.check_plc_did(t))
    for records in TXT_RECORDS:
        out[f"did_from_txt {records!r}"] = answer(lambda r=records: handle.did_from_txt(r))
    for body in WELL_KNOWN:
        out[f"did_from_well_known {body!r}"] = answer(lambda b=body: handle.did_from_well_known(b))
    for name in ("alice.test", "a" * 240 + ".com", "a" * 241 + ".com"):
        out[f"txt_name {name}"] = answer(lambda n=name: handle.txt_name(n))
    for url in (
        "https://pds.example.com",
        "https://pds.example.com/",
        "http://pds.example.com",
        "https://pds.example.com:8443",
        "https://pds.example.com/x",
        "https://u@pds.example.com",
        "https://pds.example.com?q",
        "ftp://pds.example.com",
        "https://",
        "pds.example.com",
    ):
        for allow_http in (False, True):
            out[f"is_origin_url {url} http={allow_http}"] = answer(
                lambda u=url, a=allow_http: is_origin_url(u, allow_http=a)
            )
    for file, document in did_documents().items():
        did = document.get("id") if isinstance(document, dict) else None
        for name, change in DOCUMENT_CHANGES.items():
            if not isinstance(document, dict) or not isinstance(did, str):
                continue
            changed = copy.deepcopy(document)
            try:
                change(changed)
            except (KeyError, IndexError, TypeError, AttributeError):
                continue  # this document has no such part
            body = json.dumps(changed).encode()
            for dev in (False, True):
                out[f"document {file}: {name} dev={dev}"] = answer(
                    lambda b=body, d=did, v=dev: parse_json_document(d, b, dev=v)[1]
                )
    for body in DOCUMENT_BODIES:
        out[f"document body {body[:60]!r}"] = answer(lambda b=body: parse_json_document(PLC, b)[1])
    for text in SIGNATURES:
        out[f"decode_signature {text!r}"] = answer(lambda t=text: b64url(decode_signature(t)))
    out.update(_operations())
    out.update(_logs())
    out.update(_export())
    out["log_entry shape"] = answer(lambda: sorted(log_entry(PLC, {}, T0)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.explanations", description=__doc__
    )
    parser.add_argument("--update", action="store_true", help="rewrite the golden file")
    args = parser.parse_args()
    text = json.dumps(catalogue(), indent=1, sort_keys=True) + "\n"
    if args.update:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
        print(f"wrote {GOLDEN} ({len(text):,} bytes)")
    else:
        print(text)


if __name__ == "__main__":
    main()
