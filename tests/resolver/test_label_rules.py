"""Moderation labels, the pure rules (`resolver.label`, L-*): labels the reference labeler's
own packages signed (tests/vectors/labels: ozone's `signLabel` run with `@atproto/common`
and `@atproto/crypto`) verify over the bytes they signed, as JSON and as the
`subscribeLabels` frames its server sends, and the test network's signer
(`devnet/labels.py`) makes the same bytes; a live labeler's label (indigo's test) verifies;
each rule broken once is refused naming it; `neg: false` and no `neg` are other bytes; a
`#atproto` key is never used for a label; negations and expired labels are verified and not
in force."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from atwhois.cli.label import NotLabels, read_labels
from atwhois.resolver import drisl
from atwhois.resolver.keys import Curve, PublicKey, parse_did_key, parse_multikey
from atwhois.resolver.label import (
    MAX_LABEL,
    LabelRefused,
    LabelVerification,
    about,
    check_signature,
    labeler_key,
    read,
)
from atwhois.resolver.syntax import datetime_seconds, is_valid_cid_text
from atwhois.stream import (
    ErrorFrame,
    InfoEvent,
    LabelsEvent,
    MalformedFrame,
    Skipped,
    decode_labels,
)
from devnet.labels import as_json, labels_frame, sign_fields, sign_label
from devnet.plc_ops import Key

VECTORS = Path(__file__).parents[1] / "vectors"
OZONE = json.loads((VECTORS / "labels" / "ozone-sign-label.json").read_text())
INDIGO = json.loads((VECTORS / "labels" / "indigo-label-test.json").read_text())
SYNTAX = VECTORS / "atproto-interop-tests" / "syntax"
KEY = Key("reference labeler")  # the key the vectors were signed with
SRC = "did:plc:labelerreferencetest2345"
POST = "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/app.bsky.feed.post/3l6oveex3ii2l"
N_K256 = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
FIELDS = {"ver": 1, "src": SRC, "uri": POST, "val": "spam", "cts": "2026-12-01T10:00:00.000Z"}


def document(did: str = SRC, **keys: str) -> dict[str, Any]:
    """A DID document with these verification methods (id -> did:key)."""
    methods = [
        {
            "id": f"{did}#{name}",
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": did_key.removeprefix("did:key:"),
        }
        for name, did_key in keys.items()
    ]
    return {"id": did, "verificationMethod": methods}


LABELER = document(atproto_label=KEY.did_key)


def verify(label: Any, labeler: dict[str, Any] = LABELER) -> None:
    """Read, find the key, check the signature: raises `LabelRefused`."""
    read_label = read(label)
    check_signature(read_label, labeler_key(read_label, labeler))


def refused(label: Any, labeler: dict[str, Any] = LABELER) -> str:
    with pytest.raises(LabelRefused) as caught:
        verify(label, labeler)
    assert str(caught.value).endswith(f"[{caught.value.rule}]")
    return caught.value.rule


def test_the_reference_labelers_labels_verify_over_the_bytes_it_signed() -> None:
    """L-SIG-1: what the reference's `signLabel` encoded is what atwhois rebuilds from the
    label it answers (`ver` supplied by it, `neg: false` dropped by it: the label says so);
    the test network's signer makes the same labels and frames, byte for byte."""
    assert OZONE["did_key"] == KEY.did_key
    for seq, case in enumerate(OZONE["cases"], 1):
        label = read(case["label"])
        assert label.signed_bytes().hex() == case["signed_bytes"]
        verify(case["label"])
        assert sign_label(KEY, case["input"]) == case["label"], case["input"]
        frame = base64.b64decode(case["frame"])
        assert labels_frame(seq, [case["label"]]) == frame
        event = decode_labels(frame)
        assert isinstance(event, LabelsEvent) and event.seq == seq and len(event.labels) == 1
        assert read(event.labels[0]).signed_bytes().hex() == case["signed_bytes"]
        verify(event.labels[0])  # as the frame decodes it: sig as bytes
    dropped = OZONE["cases"][3]
    assert dropped["input"]["neg"] is False and "neg" not in dropped["label"]
    assert "ver" not in OZONE["cases"][4]["input"] and OZONE["cases"][4]["label"]["ver"] == 1


def test_the_vectors_are_what_the_reference_packages_make_now() -> None:
    """tests/vectors/labels/ozone-sign-label.json is `devnet/pds/sign_labels.js`'s output:
    run again with the reference's packages as the test network installs them, for the
    same labels and key, it prints the same labels, bytes and frames."""
    request = {
        "secret": KEY.secret.hex(),
        "seq": 1,
        "labels": [case["input"] for case in OZONE["cases"]],
    }
    script = Path(__file__).parents[2] / "devnet" / "pds" / "sign_labels.js"
    ran = subprocess.run(
        ["node", script.name],
        cwd=script.parent,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(ran.stdout) == OZONE


def test_a_live_labelers_label_verifies_and_fails_once_changed() -> None:
    key = parse_multikey(INDIGO["public_key_multibase"])
    labeler = document(INDIGO["label"]["src"], atproto_label=key.did_key)
    verify(INDIGO["label"], labeler)
    assert refused({**INDIGO["label"], "val": "wrong"}, labeler) == "L-SIG-3"


def _signed(**changes: Any) -> dict[str, Any]:
    """A label of FIELDS with `changes` (None: left out), signed as it then is."""
    fields = {name: value for name, value in {**FIELDS, **changes}.items() if value is not None}
    return as_json(sign_fields(KEY, fields))


GOOD = _signed()
_SIG = base64.b64decode(GOOD["sig"]["$bytes"] + "==")
_HIGH_S = _SIG[:32] + (N_K256 - int.from_bytes(_SIG[32:], "big")).to_bytes(32, "big")
_DER = b"\x30\x44\x02\x20" + _SIG[:32] + b"\x02\x20" + _SIG[32:]


def _sig(raw: bytes) -> dict[str, Any]:
    return {**GOOD, "sig": {"$bytes": base64.b64encode(raw).decode()}}


BROKEN: list[tuple[str, Any, str]] = [
    ("a list, not an object", [GOOD], "L-SYN-1"),
    ("a field of no label", {**GOOD, "labeler": "me"}, "L-SYN-1"),
    ("another lexicon's $type", {**GOOD, "$type": "app.bsky.feed.post"}, "L-SYN-1"),
    ("bytes that are not DRISL", b"\xa1\x61", "L-SYN-1"),
    ("text that is not JSON", '{"ver": 1,', "L-SYN-1"),
    ("a label over the bound", " " * (MAX_LABEL + 1), "L-SYN-1"),
    ("no ver", _signed(ver=None), "L-SYN-2"),
    ("ver 2", _signed(ver=2), "L-SYN-2"),
    ("ver true", _signed(ver=True), "L-SYN-2"),
    ("ver as text", {**GOOD, "ver": "1"}, "L-SYN-2"),
    ("src not a DID", _signed(src="alice.test"), "L-SYN-3"),
    ("no src", {k: v for k, v in GOOD.items() if k != "src"}, "L-SYN-3"),
    ("uri a web page", _signed(uri="https://example.com/post"), "L-SYN-4"),
    ("uri an at:// URI without authority", _signed(uri="at://"), "L-SYN-4"),
    ("no uri", {k: v for k, v in GOOD.items() if k != "uri"}, "L-SYN-4"),
    ("cid empty", _signed(cid=""), "L-SYN-5"),
    ("cid a CIDv0", _signed(cid="QmbWqxBEKC3P8tqsKc98xmWNzrzDtRLMiMPL8wBuTGsMnR"), "L-SYN-5"),
    ("val empty", _signed(val=""), "L-SYN-6"),
    ("val of 129 bytes", _signed(val="x" * 129), "L-SYN-6"),
    ("val of 65 two-byte letters", _signed(val="é" * 65), "L-SYN-6"),
    ("neg as text", {**GOOD, "neg": "true"}, "L-SYN-7"),
    ("neg null", {**GOOD, "neg": None}, "L-SYN-7"),
    ("cts a date", _signed(cts="2026-12-01"), "L-SYN-8"),
    ("exp of negative zero", _signed(exp="2026-12-01T10:00:00.000-00:00"), "L-SYN-8"),
    ("no cts", {k: v for k, v in GOOD.items() if k != "cts"}, "L-SYN-8"),
    ("no sig", {k: v for k, v in GOOD.items() if k != "sig"}, "L-SIG-2"),
    ("sig as text", {**GOOD, "sig": GOOD["sig"]["$bytes"]}, "L-SIG-2"),
    ("sig not base64", {**GOOD, "sig": {"$bytes": "!!!!"}}, "L-SIG-2"),
    ("sig of 63 bytes", _sig(_SIG[:63]), "L-SIG-2"),
    ("sig DER", _sig(_DER), "L-SIG-2"),
    ("sig high-S", _sig(_HIGH_S), "L-SIG-2"),
    ("val changed after signing", {**GOOD, "val": "ham"}, "L-SIG-3"),
    ("signed by another key", as_json(sign_fields(Key("someone else"), FIELDS)), "L-SIG-3"),
]


@pytest.mark.parametrize(("case", "label", "rule"), BROKEN, ids=[c for c, _, _ in BROKEN])
def test_each_rule_broken_is_refused_naming_it(case: str, label: Any, rule: str) -> None:
    verify(GOOD)  # the label each case breaks verifies as it is
    assert refused(label) == rule, case


def test_a_labeler_without_an_atproto_label_key_is_refused_whatever_else_it_holds() -> None:
    """L-KEY-1: the label's signing key, as the document's `#atproto` key, is not tried."""
    assert refused(GOOD, document(atproto=KEY.did_key)) == "L-KEY-1"
    assert refused(GOOD, document("did:plc:someoneelse234567abcdefg", atproto_label=KEY.did_key))
    verify(GOOD, document(atproto=Key("repo").did_key, atproto_label=KEY.did_key))


def test_neg_false_and_no_neg_are_other_bytes_each_verified_as_received() -> None:
    """L-SIG-1, L-SYN-7: a label signed without `neg` (the reference's way) fails once a
    `neg: false` is added; one signed with it (indigo's, holding a false) verifies as it
    came and fails once it is dropped. Neither is ever normalized into the other."""
    with_false = as_json(sign_fields(KEY, {**FIELDS, "neg": False}))
    assert read(with_false).signed_bytes() != read(GOOD).signed_bytes()
    assert read(with_false).signed_bytes()[:1] == b"\xa6" and read(GOOD).signed_bytes()[:1] == (
        b"\xa5"
    )
    verify(GOOD)
    verify(with_false)
    assert refused({**GOOD, "neg": False}) == "L-SIG-3"
    assert refused({k: v for k, v in with_false.items() if k != "neg"}) == "L-SIG-3"
    assert read(with_false).neg is False and read(GOOD).neg is None


def test_the_lexicons_own_type_is_taken_and_never_signed() -> None:
    """L-SYN-1: `$type: com.atproto.label.defs#label` (a Lexicon representation may carry
    it) is left out of the signed object, as the spec says; the label verifies."""
    typed = {"$type": "com.atproto.label.defs#label", **GOOD}
    verify(typed)
    assert read(typed).signed_bytes() == read(GOOD).signed_bytes()


def test_a_negation_and_an_expired_label_are_verified_and_not_in_force() -> None:
    """L-NEG-1, L-EXP-1: what a verified label says of itself, at a given time."""
    now = datetime_seconds("2026-12-05T00:00:00Z") or 0.0
    cases = {
        "a label": (GOOD, True),
        "a negation": (_signed(neg=True), False),
        "past its exp": (_signed(exp="2026-12-04T23:59:59.999Z"), False),
        "at its exp": (_signed(exp="2026-12-05T00:00:00.000Z"), False),
        "before its exp": (_signed(exp="2026-12-05T00:00:00.001Z"), True),
        "before its exp, in another zone": (_signed(exp="2026-12-05T00:30:00+00:15"), True),
    }
    for case, (label, in_force) in cases.items():
        verify(label)
        verdict = about(read(label), "verified", now)
        assert verdict.in_force is in_force, case
    assert about(read(_signed(neg=True)), "verified", now).negated


def test_a_labeler_key_on_p256_verifies() -> None:
    """C-CURVE-1 for labels: a P-256 `#atproto_label` key, a low-S `r||s`."""
    private = ec.derive_private_key(20261206, ec.SECP256R1())
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    point = private.public_key().public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
    did_key = PublicKey(Curve.P256, point).did_key
    r, s = decode_dss_signature(private.sign(drisl.encode(FIELDS), ec.ECDSA(hashes.SHA256())))
    n = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
    low = r.to_bytes(32, "big") + min(s, n - s).to_bytes(32, "big")
    high = r.to_bytes(32, "big") + max(s, n - s).to_bytes(32, "big")
    labeler = document(atproto_label=did_key)
    verify({**FIELDS, "sig": low}, labeler)
    assert refused({**FIELDS, "sig": high}, labeler) == "L-SIG-2"
    assert parse_did_key(did_key).curve is Curve.P256


def _lines(name: str) -> list[str]:
    text = (SYNTAX / name).read_text()
    return [line for line in text.split("\n") if line and not line.startswith("#")]


def test_datetimes_and_cids_read_as_the_interop_vectors_say() -> None:
    """L-SYN-8 and L-SYN-5 against atproto's syntax vectors."""
    for text in _lines("datetime_syntax_valid.txt"):
        assert datetime_seconds(text) is not None, text
    for text in _lines("datetime_syntax_invalid.txt") + _lines("datetime_parse_invalid.txt"):
        assert datetime_seconds(text) is None, text
    assert datetime_seconds("1970-01-01T01:00:00+01:00") == 0.0
    assert datetime_seconds("0000-01-01T00:00:00Z") == -62167219200.0
    for text in _lines("cid_syntax_valid.txt"):
        assert is_valid_cid_text(text), text
    for text in _lines("cid_syntax_invalid.txt"):
        assert not is_valid_cid_text(text), text


def test_a_labelers_frames_are_read_and_a_bad_one_refused_naming_the_rule() -> None:
    """L-FRAME-1: `#info` and error frames as the reference's server frames them; a type not
    known yet skipped; one bad label in a `#labels` frame is that label's, not the frame's;
    what is no frame is refused."""
    info = decode_labels(base64.b64decode(OZONE["info_frame"]))
    assert info == InfoEvent("OutdatedCursor", None)
    error = decode_labels(base64.b64decode(OZONE["error_frame"]))
    assert error == ErrorFrame("FutureCursor", "Cursor in the future.")
    newer = drisl.encode({"op": 1, "t": "#later"}) + drisl.encode({"seq": 9})
    assert decode_labels(newer) == Skipped("#later", 9)
    bad = {**GOOD, "val": "ham"}
    event = decode_labels(labels_frame(7, [GOOD, bad]))
    assert isinstance(event, LabelsEvent) and event.seq == 7
    verify(event.labels[0])
    assert refused(event.labels[1]) == "L-SIG-3"
    header = drisl.encode({"op": 1, "t": "#labels"})
    for frame in (
        b"",
        header,  # no body
        header + drisl.encode({"seq": 1, "labels": []}) + b"\x00",  # a third value
        drisl.encode({"op": 2, "t": "#labels"}) + drisl.encode({"seq": 1, "labels": []}),
        header + drisl.encode({"seq": 1, "labels": {}}),
        header + drisl.encode({"seq": -1, "labels": []}),
        b"\xa2\x62op\x01\x61t\x67#labels" + drisl.encode({"seq": 1, "labels": []}),  # unsorted
    ):
        with pytest.raises(MalformedFrame):
            decode_labels(frame)


def test_the_verdict_says_the_label_and_comes_back_from_json() -> None:
    label = read(_signed(neg=False, exp="2026-12-04T00:00:00Z"))
    verdict = about(label, "verified", datetime_seconds("2026-12-05T00:00:00Z") or 0.0)
    shown = verdict.to_json()
    assert (shown["neg"], shown["negated"], shown["expired"], shown["in_force"]) == (
        False,
        False,
        True,
        False,
    )
    assert shown["document"] == {"checked_at": None, "refreshed": False}
    assert LabelVerification.from_json(json.loads(json.dumps(shown))) == verdict


def test_the_command_line_reads_one_label_a_list_or_lines_and_nothing_else() -> None:
    """L-IN-1: what `atwhois verify-label FILE` takes; anything else is no labels (exit 2)."""
    one = json.dumps(GOOD).encode()
    assert read_labels(one) == [GOOD]
    assert read_labels(json.dumps([GOOD, GOOD]).encode()) == [GOOD, GOOD]
    assert read_labels(one + b"\n\n" + one + b"\n") == [GOOD, GOOD]
    for raw, said in (
        (b"", "no label"),
        (b"[]", "no label"),
        (one + b"\nnot json\n", "line 2 is not JSON"),
        (b"[1]", "label 1 is not a JSON object"),
        (one + b"\n[]", "label 2 is not a JSON object"),
    ):
        with pytest.raises(NotLabels, match=said):
            read_labels(raw)
