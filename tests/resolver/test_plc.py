"""did:plc verification, pure: every go-didplc audit log, the interop crypto and data-model
vectors, tampered logs and malformed input."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import re
from typing import Any

import libipld
import pytest
from hypothesis import given
from hypothesis import strategies as st

from atwhois.resolver.plc import build_document, compare, replay
from atwhois.resolver.plc.audit import Replay
from atwhois.resolver.plc.encoding import cid_of, dag_cbor
from atwhois.resolver.plc.export import ExportSummary, merge
from atwhois.resolver.plc.signature import BadSignature, decode_signature, verify
from atwhois.resolver.plc.summary import summarize
from devnet.plc_ops import AuditLog, Key, plc_operation
from tests.vectors import CRYPTO, VECTORS, load_json, plc_logs

LOGS = plc_logs()
T0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
VALID = [
    "log_bskyapp",
    "log_bnewbold_robocracy",
    "log_legacy_dholms",
    "log_empty_rotation_keys",
    "log_duplicate_rotation_keys",
    "log_nullification",
    "log_nullification_nontrivial",
    "log_nullification_at_exactly_72h",
    "log_nullified_tombstone",
    "log_tombstone",
]
# go-didplc/testdata/README.md: each invalid log and the reason it must fail for.
INVALID = {
    "log_invalid_sig_b64_padding_chars": ("P-SIG-3", "padding"),
    "log_invalid_sig_b64_padding_bits": ("P-SIG-3", "padding bits"),
    "log_invalid_sig_b64_newline": ("P-SIG-4", "CR or LF"),
    "log_invalid_sig_der": ("C-SIG-4", "DER"),
    "log_invalid_sig_p256_high_s": ("C-SIG-2", "high-S"),
    "log_invalid_sig_k256_high_s": ("C-SIG-2", "high-S"),
    "log_invalid_nullification_reused_key": ("P-NULL-2", "does not outrank"),
    "log_invalid_nullification_too_slow": ("P-NULL-2", "after 72h"),
    "log_invalid_update_nullified": ("P-NULL-3", "is nullified"),
    "log_invalid_update_tombstoned": ("P-SIG-5", "tombstone"),
}


def test_all_twenty_logs_are_classified() -> None:
    assert sorted(LOGS) == sorted([*VALID, *INVALID])


@pytest.mark.parametrize("name", VALID)
def test_valid_logs_verify(name: str) -> None:
    """P-AUDIT-1: every valid vector replays from its signed operations alone, and the
    nullified flags the log serves are the ones the replay computes."""
    log = LOGS[name]
    audit = replay(log[0]["did"], log)
    assert audit.valid, [str(f) for f in audit.findings]
    # every recorded nullified flag matches the replay's (checked inside; asserted here too)
    assert [op.nullified for op in audit.ops] == [entry["nullified"] for entry in log]
    assert all(op.accepted for op in audit.ops)
    assert audit.deactivated is (name == "log_tombstone")


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_logs_fail_for_their_reason(name: str) -> None:
    log = LOGS[name]
    audit = replay(log[0]["did"], log)
    rule, words = INVALID[name]
    assert not audit.valid
    assert audit.findings[0].rule == rule, [str(f) for f in audit.findings]
    assert words in audit.findings[0].message


def test_nullification_details() -> None:
    audit = replay(LOGS["log_nullification"][0]["did"], LOGS["log_nullification"])
    _, hostile, recovery = audit.ops
    assert hostile.nullified and hostile.nullified_by == recovery.cid
    assert recovery.signer_index is not None and hostile.signer_index is not None
    assert recovery.signer_index < hostile.signer_index  # P-NULL-2: a higher-priority key
    assert recovery.changes[0] == "recovery: nullifies 1 op(s)"
    nontrivial = replay(
        LOGS["log_nullification_nontrivial"][0]["did"], LOGS["log_nullification_nontrivial"]
    )
    assert [op.index for op in nontrivial.ops if op.nullified] == [2, 3, 4, 5, 6]


def test_legacy_genesis_keys_and_warnings() -> None:
    audit = replay(LOGS["log_legacy_dholms"][0]["did"], LOGS["log_legacy_dholms"])
    assert audit.ops[0].type == "create" and audit.valid
    empty = replay(LOGS["log_empty_rotation_keys"][0]["did"], LOGS["log_empty_rotation_keys"])
    assert "empty rotationKeys [P-LIM-1]" in empty.warnings  # P-LIM-3: warn, do not fail
    # A streaming replay (an export check, the mirror) runs for days and reports findings
    # only: it keeps no warnings, which would pile up per DID.
    streaming = Replay(LOGS["log_empty_rotation_keys"][0]["did"], keep_records=False)
    for entry in LOGS["log_empty_rotation_keys"]:
        streaming.add(entry)
    assert streaming.warnings == [] and streaming.audit().valid == empty.valid


@pytest.mark.parametrize("name", sorted(LOGS))
def test_a_streaming_replay_keeps_only_its_heads_op_and_judges_as_the_whole_one(name: str) -> None:
    """A replay that keeps no records (an export check, the mirror) keeps of an op that is
    no longer the head only its keys: a recovery forking from it (P-NULL-2, P-NULL-4) and
    every other verdict come out as in the replay that keeps everything."""
    log = LOGS[name]
    whole = replay(log[0]["did"], log)
    streaming = Replay(log[0]["did"], keep_records=False)
    for entry in log:
        streaming.add(entry)
    kept = [streaming.nodes[cid].op is not None for cid in streaming.chain]
    assert kept == [False] * (len(kept) - 1) + [True] * bool(kept)
    audit = streaming.audit()
    assert [str(f) for f in audit.findings] == [str(f) for f in whole.findings]
    assert (audit.state, audit.deactivated) == (whole.state, whole.deactivated)


def test_every_cid_recomputes() -> None:
    for log in LOGS.values():
        for entry in log:
            assert cid_of(dag_cbor(entry["operation"])) == entry["cid"]


def test_data_model_fixtures_round_trip() -> None:
    # General DAG-CBOR through libipld: decode the fixture bytes, re-encode, same bytes and CID.
    for case in load_json(VECTORS / "atproto-interop-tests/data-model/data-model-fixtures.json"):
        raw = base64.b64decode(case["cbor_base64"] + "=" * (-len(case["cbor_base64"]) % 4))
        assert dag_cbor(libipld.decode_dag_cbor(raw)) == raw
        assert cid_of(raw) == case["cid"]
    assert dag_cbor({"aa": 1, "b": 2, "c": None})[1:5] == b"ab\x02a"  # length-first keys


@pytest.mark.parametrize(
    "case", load_json(CRYPTO / "signature-fixtures.json"), ids=lambda c: c["comment"]
)
def test_signature_fixtures(case: dict[str, Any]) -> None:
    message = base64.b64decode(case["messageBase64"] + "==")
    raw = base64.b64decode(case["signatureBase64"] + "=" * (-len(case["signatureBase64"]) % 4))
    if len(raw) != 64:  # DER-encoded cases
        assert not case["validSignature"]
        with pytest.raises(BadSignature, match="bytes"):
            decode_signature(base64.urlsafe_b64encode(raw).decode().rstrip("="))
        return
    assert verify(case["publicKeyDid"], message, raw) is case["validSignature"]


@pytest.mark.parametrize(
    ("sig", "rule"),
    [
        ("", "C-SIG-4"),
        ("a", "P-SIG-4"),
        ("abc=", "P-SIG-3"),
        ("ab\ncd", "P-SIG-4"),
        ("ab+/", "P-SIG-4"),
        ("AB", "P-SIG-3"),
        ("A" * 88, "C-SIG-4"),
    ],
)
def test_strict_signature_decoding(sig: str, rule: str) -> None:
    with pytest.raises(BadSignature) as info:
        decode_signature(sig)
    assert info.value.rule == rule


def _decoded_by_the_rules(text: str) -> bytes | None:
    """P-SIG-3/4 and C-SIG-4 as written, slowly: the 64 bytes, or None."""
    if re.fullmatch(r"[A-Za-z0-9_-]*", text) is None or len(text) % 4 == 1:
        return None
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(raw).decode().rstrip("=") != text or len(raw) != 64:
        return None
    return raw


_SIGNATURE_LIKE = st.one_of(
    st.binary(min_size=64, max_size=64).map(
        lambda raw: base64.urlsafe_b64encode(raw).decode().rstrip("=")
    ),
    st.text(alphabet="AQgwBz09_-+/=\n\u00e9\u0660", min_size=84, max_size=88),
)


@given(_SIGNATURE_LIKE, st.integers(0, 87), st.sampled_from("AQgwBz9_-+/= \n\u0660"))
def test_a_signature_decodes_exactly_when_the_rules_allow(sig: str, where: int, char: str) -> None:
    """The fast path for the common spelling agrees with the rules on near misses too: one
    character changed anywhere in a well-formed signature, or any text of about its length."""
    for text in (sig, sig[:where] + char + sig[where + 1 :]):
        expected = _decoded_by_the_rules(text)
        if expected is None:
            with pytest.raises(BadSignature):
                decode_signature(text)
        else:
            assert decode_signature(text) == expected


def _tampered(name: str, change: Any) -> list[dict[str, Any]]:
    log = copy.deepcopy(LOGS[name])
    change(log)
    return log


def test_tampered_logs_fail_with_the_right_finding() -> None:
    did = LOGS["log_bskyapp"][0]["did"]

    def changed_field(log: list[dict[str, Any]]) -> None:
        log[1]["operation"]["alsoKnownAs"] = ["at://attacker.example.com"]

    audit = replay(did, _tampered("log_bskyapp", changed_field))
    assert audit.findings[0].rule == "P-CID-1"  # the entry's cid no longer matches

    def changed_field_and_cid(log: list[dict[str, Any]]) -> None:
        changed_field(log)
        log[1]["cid"] = cid_of(dag_cbor(log[1]["operation"]))

    audit = replay(did, _tampered("log_bskyapp", changed_field_and_cid))
    assert audit.findings[0].rule == "P-SIG-5"  # and now the signature does not cover it

    def swapped_signatures(log: list[dict[str, Any]]) -> None:
        log[0]["operation"]["sig"], log[1]["operation"]["sig"] = (
            log[1]["operation"]["sig"],
            log[0]["operation"]["sig"],
        )
        for entry in log:
            entry["cid"] = cid_of(dag_cbor(entry["operation"]))

    audit = replay(did, _tampered("log_bskyapp", swapped_signatures))
    assert {f.rule for f in audit.findings} & {"P-DID-1", "P-SIG-5"}

    def flipped_flag(log: list[dict[str, Any]]) -> None:
        log[1]["nullified"] = True

    audit = replay(did, _tampered("log_bskyapp", flipped_flag))
    assert [f.rule for f in audit.findings] == ["§10.6"]
    assert "nullified" in audit.findings[0].message


@pytest.mark.parametrize(
    "log",
    [
        None,
        {},
        [],
        "[]",
        [1],
        [{"did": "x"}],
        [{"did": "did:plc:y", "operation": {}}],
        [{"did": "DID", "operation": {"type": "plc_operation"}, "cid": "x", "createdAt": "now"}],
        [
            {
                "did": "DID",
                "operation": {"type": "mystery", "sig": "", "prev": None},
                "cid": "c",
                "createdAt": "2024-01-01T00:00:00Z",
                "nullified": False,
            }
        ],
        [{"did": "DID", "operation": [1, 2], "cid": 5, "createdAt": 7, "nullified": "no"}],
    ],
)
def test_malformed_logs_give_findings_not_exceptions(log: Any) -> None:
    did = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
    if isinstance(log, list):
        log = json.loads(json.dumps(log).replace("DID", did))
    audit = replay(did, log)
    assert not audit.valid and audit.findings
    assert all(f.rule for f in audit.findings)


def test_entries_of_another_did_are_refused() -> None:
    log = LOGS["log_bskyapp"]
    audit = replay("did:plc:ewvi7nxzyoun6zhxrhs64oiz", log)
    assert not audit.valid and "belongs to" in audit.findings[0].message


def test_document_from_state_compares_semantically() -> None:
    """P-DOC-1: the document a state makes is the one the directory serves, by meaning."""
    log = LOGS["log_bskyapp"]
    audit = replay(log[0]["did"], log)
    assert audit.state is not None
    built = build_document(audit.did, audit.state)
    assert compare(audit, built) == []
    reordered = {
        **built,
        "verificationMethod": [
            {**m, "id": "#" + m["id"].split("#")[1]} for m in built["verificationMethod"]
        ],
    }
    assert compare(audit, reordered) == []  # relative ids are the same entries (DOC-KEY-2)
    moved = copy.deepcopy(built)
    moved["service"][0]["serviceEndpoint"] = "https://elsewhere.example.com"
    assert [f.rule for f in compare(audit, moved)] == ["§11"]
    assert compare(audit, None)[0].message.startswith("the log is live")


def test_unsigned_bytes_cut_from_the_signed_encoding() -> None:
    from atwhois.resolver.plc.encoding import unsigned, unsigned_dag_cbor

    for log in LOGS.values():
        for entry in log:
            op = entry["operation"]
            assert unsigned_dag_cbor(dag_cbor(op), op) == dag_cbor(unsigned(op))
    long_sig = {"sig": "x" * 300, "prev": None, "type": "plc_tombstone"}  # 2-byte length
    assert unsigned_dag_cbor(dag_cbor(long_sig), long_sig) == dag_cbor(unsigned(long_sig))
    odd = {"a": 1, "sig": "s"}  # "a" sorts before "sig": falls back to a fresh encoding
    assert unsigned_dag_cbor(dag_cbor(odd), odd) == dag_cbor({"a": 1})


def test_the_unsigned_bytes_are_cut_without_encoding_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path of P-SIG-1: every vector op's unsigned bytes come from its signed
    encoding alone (no second DAG-CBOR encoding), and equal a fresh encoding."""
    from atwhois.resolver.plc import encoding

    ops = [e["operation"] for log in LOGS.values() for e in log if isinstance(e, dict)]
    ops = [op for op in ops if isinstance(op, dict) and isinstance(op.get("sig"), str)]
    expected = [(dag_cbor(op), dag_cbor(encoding.unsigned(op))) for op in ops]

    def refuse(_: Any) -> bytes:
        raise AssertionError("encoded again")

    monkeypatch.setattr(encoding, "dag_cbor", refuse)
    for op, (signed, unsigned) in zip(ops, expected, strict=True):
        assert encoding.unsigned_dag_cbor(signed, op) == unsigned
    assert len(ops) > 40
    # every length form of the `sig` string (1-byte, 2-byte headers; 4-byte: slow path)
    monkeypatch.undo()
    for sig in ("A" * 20, "A" * 30, "A" * 300, "A" * 70000):
        op = {"sig": sig, "type": "plc_tombstone", "prev": "bafy"}
        assert encoding.unsigned_dag_cbor(dag_cbor(op), op) == dag_cbor(encoding.unsigned(op))
    odd = {"a": 1, "sig": "x"}  # a key shorter than "sig" comes first: not the fast shape
    assert encoding.unsigned_dag_cbor(dag_cbor(odd), odd) == dag_cbor({"a": 1})


def test_a_replayed_log_in_brief() -> None:
    """The summary the report carries with --verify-plc: the operations, since when, the
    last one in force and what it changed, the changes of each kind; a nullified operation
    counts as nullified and its change as none."""
    k0, k1 = Key("summary/0"), Key("summary/1")
    hour = datetime.timedelta(hours=1)
    log = AuditLog.plain([k0, k1], T0)
    second = log.update(log.head, k1, T0 + hour, handle="a.test")
    log.append(k1.sign(plc_operation(second, [k0, k1], ["at://b.test"])), T0 + 2 * hour, True)
    log.append(k0.sign(plc_operation(second, [k0, k1], ["at://c.test"])), T0 + 3 * hour)
    audit = replay(log.did, log.entries)
    assert audit.valid, [str(f) for f in audit.findings]
    brief = summarize(audit)
    assert brief.operations == 4 and brief.tombstoned is False
    assert brief.created == log.entries[0]["createdAt"]
    assert brief.last_change == log.entries[3]["createdAt"]
    assert brief.last_changes == audit.ops[3].changes and brief.last_changes != ()
    counts = dict(brief.changes)
    assert counts["handle changes"] == 2  # x -> a, a -> c; b never was in force
    assert counts["recoveries"] == 1 and counts["nullified ops"] == 1
    assert set(counts) == {"handle changes", "recoveries", "nullified ops"}  # none are 0
    alone = replay(log.did, log.entries[:1])
    created = summarize(alone)  # the genesis alone: created, and changed nothing since
    assert (created.operations, created.changes) == (1, ())
    tombstone = {"type": "plc_tombstone", "prev": log.entries[3]["cid"]}
    log.append(k0.sign(tombstone), T0 + 4 * hour)
    assert summarize(replay(log.did, log.entries)).tombstoned is True
    assert created.last_change == created.created and created.last_changes[0].startswith("created")


def test_summaries_of_parts_add_up_and_keep_a_bounded_set_of_examples() -> None:
    first = ExportSummary(dids=2, ops=5, invalid_ops=1, allowed_ops=1, bad_lines=2)
    first.by_rule.update({"P-CID-1": 1})
    first.examples.extend(f"a{i}" for i in range(15))
    second = ExportSummary(dids=3, ops=7, invalid_ops=2, allowed_ops=0, bad_lines=1)
    second.by_rule.update({"P-CID-1": 1, "P-SIG-4": 1})
    second.examples.extend(f"b{i}" for i in range(15))
    merged = merge([first, second])
    assert (merged.dids, merged.ops, merged.invalid_ops) == (5, 12, 3)
    assert (merged.allowed_ops, merged.bad_lines) == (1, 3)
    assert merged.by_rule == {"P-CID-1": 2, "P-SIG-4": 1}
    assert merged.examples == [*first.examples, *second.examples[:5]]  # 20 at most
    assert merge([]) == ExportSummary()
