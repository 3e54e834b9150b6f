"""Rules of the spec checklist that only a purpose-built input shows: each test breaks one
rule and nothing else (logs are signed for real), so switching the rule off in the code
makes the test fail. Also the hostile inputs that used to raise instead of being reported."""

from __future__ import annotations

import copy
import datetime
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from atwhois.resolver import errors, syntax
from atwhois.resolver.document import parse_json_document
from atwhois.resolver.keys import Curve, InvalidKey, PublicKey, parse_multikey
from atwhois.resolver.outcome import Status
from atwhois.resolver.plc import build_document, compare, replay
from atwhois.resolver.plc.audit import Audit, Replay
from atwhois.resolver.plc.encoding import cid_of, dag_cbor, did_of_genesis
from atwhois.resolver.plc.export import verify_export
from atwhois.resolver.plc.signature import _ORDER
from atwhois.resolver.untrusted import DuplicateKey, parse_json
from atwhois.resolver.verdict import Step, with_plc_log
from devnet.plc_ops import AuditLog, Key, b64url, log_entry, plc_operation
from devnet.synthetic_plc import export_lines

T0 = datetime.datetime(2025, 3, 1, 12, 0, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)


def keys(name: str, count: int = 2) -> list[Key]:
    return [Key(f"{name}/{i}") for i in range(count)]


def rules(audit: Audit) -> list[str]:
    return [f.rule for f in audit.findings]


def test_a_well_built_log_verifies() -> None:
    """The baseline every test below departs from by one change."""
    log = AuditLog.plain(keys("base"), T0)
    log.update(log.head, log.keys[0], T0 + HOUR)
    audit = replay(log.did, log.entries)
    assert audit.valid and len(audit.ops) == 2


# --- signatures that used to raise (P-SIG-4: reported, never raised) -------------------


@pytest.mark.parametrize(
    ("r", "s"),
    [
        (_ORDER[Curve.K256], 1),  # r = n
        (2**256 - 1, 1),  # r > n
        (0, 1),
        (1, 0),
    ],
)
def test_out_of_range_k256_signature_is_a_finding(r: int, s: int) -> None:
    key = keys("range", 1)
    op = plc_operation(None, key, ["at://x.test"])
    op["sig"] = b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
    log = AuditLog(key, T0, op)
    audit = replay(log.did, log.entries)
    assert rules(audit) == ["P-SIG-5"]
    # and as the second op of a valid log
    good = AuditLog.plain(keys("range2"), T0)
    update = plc_operation(good.head, good.keys, ["at://y.test"])
    update["sig"] = op["sig"]
    good.append(update, T0 + HOUR)
    assert rules(replay(good.did, good.entries)) == ["P-SIG-5"]


def test_out_of_range_p256_signature_is_a_finding() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    point = private.public_key().public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
    did_key = PublicKey(Curve.P256, point).did_key
    op = {**plc_operation(None, [Key("p256")], ["at://x.test"]), "rotationKeys": [did_key]}
    n = _ORDER[Curve.P256]
    op["sig"] = b64url(n.to_bytes(32, "big") + (1).to_bytes(32, "big"))
    log = AuditLog([], T0, op)
    assert rules(replay(log.did, log.entries)) == ["P-SIG-5"]


def test_a_lone_surrogate_is_a_finding_in_replay_and_export() -> None:
    """JSON may escape a lone surrogate (`"\\ud800"`); DAG-CBOR cannot encode it (P-ENC-1)."""
    key = keys("surrogate", 1)
    op = key[0].sign(plc_operation(None, key, ["at://x.test"]))
    did = did_of_genesis(dag_cbor(op))
    op["alsoKnownAs"] = ["at://\ud800.test"]
    entry = {"did": did, "operation": op, "cid": "bafyrei", "createdAt": "2025-03-01T12:00:00Z"}
    audit = replay(did, [entry])
    assert rules(audit) == ["P-ENC-1"]
    line = json.dumps({**entry, "nullified": False})
    assert "\\ud800" in line  # what a hostile directory sends
    summary = verify_export([line])
    assert summary.invalid_ops == 1 and summary.by_rule == {"P-ENC-1": 1}
    # a surrogate in the DID itself: an export line that is not an entry, reported
    odd = verify_export([json.dumps({**entry, "did": "did:plc:\ud800"})])
    assert odd.bad_lines == 1 and not odd.valid
    json.dumps(odd.to_json(), ensure_ascii=False).encode()  # printable as UTF-8


# --- replay rules pinned one by one ---------------------------------------------------


def test_p_null_1_an_append_must_be_later_than_its_prev() -> None:
    for delta, ok in ((datetime.timedelta(milliseconds=1), True), (datetime.timedelta(0), False)):
        log = AuditLog.plain(keys("null1"), T0)
        log.update(log.head, log.keys[0], T0 + delta)
        audit = replay(log.did, log.entries)
        assert audit.valid is ok
        if not ok:
            assert rules(audit) == ["P-NULL-1"]


def test_p_null_2_a_fork_must_be_later_than_the_head() -> None:
    """Clause 3: a recovery signed by the better key, inside 72 h, but dated before the op
    it displaces, is refused."""
    log = AuditLog.plain(keys("null2"), T0)
    genesis = log.head
    log.update(genesis, log.keys[1], T0 + HOUR, handle="hot.test")  # the weaker key
    log.entries[-1]["nullified"] = True
    log.update(genesis, log.keys[0], T0 + HOUR / 2, handle="back.test")
    audit = replay(log.did, log.entries)
    assert rules(audit)[0] == "P-NULL-2" and "head" in audit.findings[0].message
    # the same recovery dated after the hot op is fine
    log.entries[-1]["nullified"] = False
    log.entries.pop()
    log.update(genesis, log.keys[0], T0 + 2 * HOUR, handle="back.test")
    assert replay(log.did, log.entries).valid


def test_p_did_1_the_genesis_must_hash_to_the_did() -> None:
    log = AuditLog.plain(keys("did1"), T0)
    other = AuditLog.plain(keys("did1-other"), T0)
    for entry in other.entries:
        entry["did"] = log.did
    assert rules(replay(log.did, other.entries)) == ["P-DID-1"]


def test_p_did_2_the_first_op_must_be_a_genesis() -> None:
    log = AuditLog.plain(keys("did2"), T0)
    tombstone = log.keys[0].sign({"type": "plc_tombstone", "prev": log.head})
    update = log.keys[0].sign(plc_operation(log.head, log.keys, ["at://x.test"]))
    for first in (tombstone, update):
        assert rules(replay(log.did, [log_entry(log.did, first, T0)])) == ["P-DID-2"]
    # a tombstone with prev null hashes to a DID of its own, yet cannot start a log: its
    # shape already needs a prev (P-OP-2), before any genesis rule is asked
    orphan = log.keys[0].sign({"type": "plc_tombstone", "prev": None})
    own_did = did_of_genesis(dag_cbor(orphan))
    assert rules(replay(own_did, [log_entry(own_did, orphan, T0)])) == ["P-OP-2"]


def test_p_null_3_a_second_genesis_is_refused() -> None:
    log = AuditLog.plain(keys("null3"), T0)
    log.append(log.keys[0].sign(plc_operation(None, log.keys, ["at://y.test"])), T0 + HOUR)
    assert rules(replay(log.did, log.entries)) == ["P-NULL-3"]


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (lambda op: op.update(extra="field"), "P-OP-1"),
        (lambda op: op.pop("services"), "P-OP-1"),
        (lambda op: op.update(rotationKeys="did:key:z"), "P-OP-1"),
        (lambda op: op.update(type="plc_tombstone"), "P-OP-2"),
    ],
)
def test_p_op_1_2_the_shape_is_strict(change: Any, rule: str) -> None:
    key = keys("shape", 1)
    op = plc_operation(None, key, ["at://x.test"])
    change(op)
    log = AuditLog(key, T0, key[0].sign(op))
    assert rules(replay(log.did, log.entries)) == [rule]


def test_p_op_3_a_legacy_create_rotates_recovery_key_first() -> None:
    """The normalized rotation keys are (recoveryKey, signingKey): the recovery key has
    priority, so it can nullify an op the signing key signed."""
    recovery, signing = Key("legacy/recovery"), Key("legacy/signing")
    create = signing.sign(
        {
            "type": "create",
            "signingKey": signing.did_key,
            "recoveryKey": recovery.did_key,
            "handle": "legacy.test",
            "service": "https://pds.test",
            "prev": None,
        }
    )
    log = AuditLog([recovery, signing], T0, create)
    genesis = log.head
    log.update(genesis, signing, T0 + HOUR, handle="hijack.test")
    log.entries[-1]["nullified"] = True
    log.update(genesis, recovery, T0 + 2 * HOUR, handle="legacy.test")
    audit = replay(log.did, log.entries)
    assert audit.valid, audit.findings
    assert [op.signer_index for op in audit.ops] == [1, 1, 0]
    assert audit.ops[1].nullified and audit.state is not None
    assert audit.state.also_known_as == ("at://legacy.test",)


def test_section_11_a_served_key_that_differs_from_the_log_is_caught() -> None:
    """The most dangerous lie: the directory serves a document whose signing key is not the
    one the log's last op set (anyone holding the served key could sign as the account)."""
    log = AuditLog.plain(keys("doclie"), T0)
    audit = replay(log.did, log.entries)
    assert audit.state is not None
    document = build_document(log.did, audit.state)
    assert compare(audit, document) == []
    lie = copy.deepcopy(document)
    lie["verificationMethod"][0]["publicKeyMultibase"] = Key("attacker").did_key.removeprefix(
        "did:key:"
    )
    found = compare(audit, lie)
    assert [f.rule for f in found] == ["§11"] and "atproto" in found[0].message


def test_section_11_served_aliases_that_differ_from_the_log_are_caught() -> None:
    """With --verify-plc, a served document whose `alsoKnownAs` is not the log's is a lie
    (§11): a changed alias, one added, one dropped, or none served where the log has one.
    The same aliases served are no finding."""
    log = AuditLog.plain(keys("aliaslie"), T0)
    audit = replay(log.did, log.entries)
    assert audit.state is not None
    document = build_document(log.did, audit.state)
    assert document["alsoKnownAs"] == ["at://x.test"] and compare(audit, document) == []
    for served in (["at://mallory.test"], ["at://x.test", "at://mallory.test"], [], None):
        lie = copy.deepcopy(document)
        if served is None:
            del lie["alsoKnownAs"]
        else:
            lie["alsoKnownAs"] = served
        found = compare(audit, lie)
        assert [f.rule for f in found] == ["§11"], served
        assert "alsoKnownAs" in found[0].message


def test_p_op_3_a_second_legacy_create_is_refused_as_a_legacy_genesis() -> None:
    """A legacy `create` is a genesis only (P-OP-3): one after the genesis is refused under
    P-OP-3, told apart from a second `plc_operation` genesis (P-NULL-3); each signed by a
    key the first op allowed, so that nothing but `prev: null` is wrong."""
    signing = keys("second-genesis", 1)
    create = {
        "type": "create",
        "signingKey": signing[0].did_key,
        "recoveryKey": signing[0].did_key,
        "handle": "x.test",
        "service": "https://pds.test",
        "prev": None,
    }
    legacy = AuditLog.plain(signing, T0)
    legacy.append(signing[0].sign(create), T0 + HOUR)
    audit = replay(legacy.did, legacy.entries)
    assert rules(audit) == ["P-OP-3"] and "second genesis" in audit.findings[0].message
    modern = AuditLog.plain(signing, T0)
    modern.append(signing[0].sign(plc_operation(None, signing, ["at://x.test"])), T0 + HOUR)
    assert rules(replay(modern.did, modern.entries)) == ["P-NULL-3"]


@pytest.mark.parametrize(("count", "warned"), [(5, False), (6, True)])
def test_p_lim_1_more_than_five_rotation_keys_is_a_warning_not_a_refusal(
    count: int, warned: bool
) -> None:
    """P-LIM-1's bound of 5 rotation keys, at its edge: 5 distinct keys are within it, 6
    warn (P-LIM-3: a historical log that breaks it still verifies)."""
    rotation = keys(f"limit-{count}", count)
    log = AuditLog.plain(rotation, T0)
    audit = replay(log.did, log.entries)
    assert audit.valid, audit.findings
    assert ("more than 5 rotationKeys [P-LIM-1]" in audit.warnings) is warned
    assert not [w for w in audit.warnings if "rotationKeys" in w and "more than" not in w]


def test_the_audit_log_must_be_rfc3339_dated() -> None:
    """§10.6 step 2: createdAt is an RFC 3339 datetime; other ISO 8601 forms are refused."""
    for text, ok in (
        ("2025-03-01T12:00:00Z", True),
        ("2025-03-01T12:00:00.123+02:00", True),
        ("2025-03-01 12:00:00+00:00", False),
        ("2025-03-01T12:00:00", False),
        ("20250301T120000Z", False),
        ("2025-03-01T12:00Z", False),
    ):
        log = AuditLog.plain(keys("time"), T0)
        log.entries[0]["createdAt"] = text
        audit = replay(log.did, log.entries)
        assert audit.valid is ok, text


# --- documents, keys, did:web -----------------------------------------------------


def test_doc_key_1_multikey_is_compressed_only() -> None:
    key = Key("compressed")
    compressed = PublicKey(Curve.K256, key.private.public_key.format())
    assert parse_multikey(compressed.multikey) == compressed
    from atwhois.resolver.keys import _MULTICODEC, b58encode

    uncompressed = key.private.public_key.format(compressed=False)
    with pytest.raises(InvalidKey):
        parse_multikey("z" + b58encode(_MULTICODEC[Curve.K256] + uncompressed))


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1,"a":1}',  # the same value twice: writing it back still differs
        b'{"a":{"b":"x","b":"y"}}',
        b'[{"k":[]},{"k":[],"k":[]}]',
        b'{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","did":"did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"}',
    ],
)
def test_a_key_given_twice_in_compact_json_is_refused_too(body: bytes) -> None:
    """Compact JSON takes the fast parse (`parse_json` keeps it when writing the value back
    gives the bytes read): a key given twice must still be refused, not quietly merged."""
    with pytest.raises(DuplicateKey):
        parse_json(body)
    with pytest.raises(DuplicateKey):
        parse_json(body.decode())


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    ),
    st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_parse_json_reads_what_python_reads(value: Any, compact: bool) -> None:
    """Whichever path a body takes (the fast one for compact bytes, the checking one for
    the rest), the value is the one Python's own parser reads."""
    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(value, separators=separators, ensure_ascii=not compact)
    assert parse_json(text.encode("utf-8", "surrogatepass")) == json.loads(text)
    assert parse_json(text) == json.loads(text)


def test_duplicate_keys_in_a_document_are_invalid_data() -> None:
    did = "did:web:dup.test"
    body = (
        b'{"id": "did:web:dup.test", "alsoKnownAs": ["at://a.test"],'
        b' "alsoKnownAs": ["at://b.test"]}'
    )
    with pytest.raises(errors.InvalidData) as info:
        parse_json_document(did, body)
    assert not isinstance(info.value, errors.MalformedAnswer)  # a deliberate ambiguity
    assert "duplicate" in str(info.value)


@pytest.mark.parametrize(
    "did", ["did:web:localhost.run", "did:web:localhosting.com", "did:web:LocalHost.example.com"]
)
def test_d_web_3_only_localhost_itself_is_reserved(did: str) -> None:
    host = syntax.parse_did_web(did, dev=False, allow_test_tld=False)
    assert host.host == did.removeprefix("did:web:").lower() and host.port is None


def test_h_tld_1_the_eight_reserved_tlds_come_from_the_spec() -> None:
    """Read from the checklist text itself, so the code's set cannot drift from it."""
    checklist = Path(__file__).parents[1] / "vectors" / "spec-checklist-H-TLD-1.txt"
    tlds = set(re.findall(r"`\.([a-z]+)`", checklist.read_text()))
    assert len(tlds) == 8
    for tld in sorted(tlds):
        with pytest.raises(errors.ReservedHandle) as info:
            syntax.check_resolvable_handle(f"laptop.{tld}", allow_test_tld=True)
        assert info.value.rule == "H-TLD-1"
    for near in ("local.host", "onion.example.com", "alt.com", "arpa.net"):
        syntax.check_resolvable_handle(near, allow_test_tld=False)


def test_the_plc_log_verdict_has_a_row_for_every_case() -> None:
    """A tombstone answer on `/log/audit` (410, or "DID not available") used to reach a
    missing row and raise; every step the log fetch can end in must have one."""
    for step in Step:
        for status in Status:
            with_plc_log(status, step)
    assert with_plc_log(Status.VERIFIED, Step.DEACTIVATED) is Status.PLC_LOG_INVALID
    assert with_plc_log(Status.DID_DEACTIVATED, Step.DEACTIVATED) is Status.DID_DEACTIVATED
    assert with_plc_log(Status.UNAVAILABLE, Step.DEACTIVATED) is Status.UNAVAILABLE


# --- streaming an export ----------------------------------------------------------------


def _tampered_export(dids: int, ops: int) -> tuple[list[str], list[str]]:
    """An export whose every DID's second op has a changed field (and the CID to match):
    that op's signature no longer covers it. Returns the lines and the tampered CIDs."""
    lines, cids = [], []
    for number, line in enumerate(export_lines(dids, ops)):
        entry = json.loads(line)
        if dids <= number < 2 * dids:
            entry["operation"]["alsoKnownAs"] = ["at://tampered.test"]
            entry["cid"] = cid_of(dag_cbor(entry["operation"]))
            cids.append(entry["cid"])
        lines.append(json.dumps(entry))
    return lines, cids


def test_export_findings_are_counted_once_and_allow_listed_by_cid_or_did() -> None:
    lines, cids = _tampered_export(30, 3)
    summary = verify_export(lines)
    # op 1 of each DID breaks P-SIG-5; op 2, whose prev is op 1, then has no valid prev,
    # except DID 0's, a recovery that forks from the genesis (synthetic_plc)
    assert summary.invalid_ops == 59 and summary.allowed_ops == 0 and not summary.valid
    assert summary.by_rule == {"P-SIG-5": 30, "P-NULL-3": 29}
    assert len(summary.examples) == 20  # a sample, not the whole list
    first_did = json.loads(lines[0])["did"]
    allowed = verify_export(lines, known_bad=frozenset({cids[1], cids[2], first_did}))
    assert allowed.allowed_ops == 3 and allowed.invalid_ops == 56  # two CIDs, DID 0's one


def test_export_progress_is_reported_every_n_ops() -> None:
    seen: list[int] = []
    verify_export(
        list(export_lines(10, 3)), progress=lambda s: seen.append(s.ops), progress_every=7
    )
    assert seen == [7, 14, 21, 28]


def test_a_streaming_replay_forgets_what_can_no_longer_be_forked() -> None:
    """P-NULL-2: once an op's child is more than 72 h old, nothing can fork from the op, so
    an export replay keeps only the head and what is inside the window."""
    keys = [Key("prune/0"), Key("prune/1")]
    log = AuditLog.plain(keys, T0)
    for day in range(1, 6):
        log.update(log.head, keys[0], T0 + day * 24 * HOUR, handle=f"d{day}.test")
    run = Replay(log.did, keep_records=False)
    for entry in log.entries:
        run.add(entry)
    run.prune(T0 + 5 * 24 * HOUR)
    # day 2 is exactly 72 h old: day 1 may still be forked from; the genesis may not
    assert run.chain == [e["cid"] for e in log.entries[1:]] and set(run.nodes) == set(run.chain)
    assert run.chain[-1] == log.head
    run.prune(T0 + 5 * 24 * HOUR + 72 * HOUR)  # day 5's op is exactly 72 h old: kept
    assert run.chain == [e["cid"] for e in log.entries[-2:]]
    run.prune(T0 + 30 * 24 * HOUR)
    assert run.chain == [log.head] and list(run.nodes) == [log.head]
    assert run.audit().valid
