"""Moderation labels (`com.atproto.label.defs#label`), the rules (docs/spec.md: L-*): a label
read as it comes, in the lexicon's JSON form (`sig` as `{"$bytes": …}`: `queryLabels`, a
service's API) or in DRISL (a `#labels` frame of `subscribeLabels`, read by
`stream.frames.decode_labels`); its fields' syntax; the bytes its signature covers, the
DRISL of the schema fields exactly as received without `sig` (L-SIG-1: a `neg: false`
received is signed, an absent `neg` is not, and `ver` is never supplied); the signature
checked under the labeler's `#atproto_label` key and no other (L-KEY-1); whether a verified
label is in force (L-NEG-1, L-EXP-1); and the verdict's shape.

Plain functions over data: every refusal is a `LabelRefused` naming its rule. Resolving the
labeler, and the refresh-once rule, is `atwhois.auth.labels`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import libipld

from . import drisl
from .document import verification_key
from .errors import AtwhoisError, InvalidInput
from .keys import PublicKey
from .plc.signature import high_s, verify
from .syntax import datetime_seconds, is_valid_cid_text, is_valid_did, parse_at_uri
from .untrusted import parse_json

SCHEMA = ("ver", "src", "uri", "cid", "val", "neg", "cts", "exp")  # what `sig` covers (L-SIG-1)
LEXICON_TYPE = "com.atproto.label.defs#label"  # a `$type` allowed, never signed (L-SYN-1)
KEY_ID = "atproto_label"  # L-KEY-1
VERSION = 1  # L-SYN-2
MAX_VAL = 128  # L-SYN-6: bytes of UTF-8
MAX_LABEL = 16 * 1024  # L-SYN-1: bytes of one label as sent (its fields' bounds make ~11 KiB)
MAX_BATCH = 1000  # L-IN-1: labels in one request to the daemon
MAX_BATCH_BYTES = 1024 * 1024  # L-IN-1: its body (a label's JSON is some 400 bytes)
_RULES = {
    "ver": "L-SYN-2",
    "src": "L-SYN-3",
    "uri": "L-SYN-4",
    "cid": "L-SYN-5",
    "val": "L-SYN-6",
    "neg": "L-SYN-7",
    "cts": "L-SYN-8",
    "exp": "L-SYN-8",
    "sig": "L-SIG-2",
}


class LabelRefused(AtwhoisError, ValueError):
    """A label that cannot be verified as it is; `rule` names the rule it breaks."""

    def __init__(self, reason: str, rule: str) -> None:
        super().__init__(f"{reason} [{rule}]")
        self.reason = reason
        self.rule = rule


@dataclass(frozen=True, slots=True, eq=False)
class Label:
    """A label as received: its schema fields without `sig`, exactly those it came with
    (what the signature covers), and its signature."""

    fields: dict[str, Any]
    sig: bytes

    @property
    def src(self) -> str:
        return str(self.fields["src"])

    @property
    def neg(self) -> bool | None:
        """As received: True, False, or None (absent)."""
        return self.fields.get("neg")

    @property
    def expires(self) -> float | None:
        """`exp` in seconds since the Unix epoch (None: it never expires)."""
        return datetime_seconds(self.fields["exp"]) if "exp" in self.fields else None

    def signed_bytes(self) -> bytes:
        """L-SIG-1: the DRISL of the fields as received, `sig` left out. libipld writes it
        (a tenth of `drisl.encode`'s time): the fields are text, an integer and a boolean,
        which it writes as DRISL does; never bytes, which it could write as a link."""
        return bytes(libipld.encode_dag_cbor(self.fields))

    def to_json(self) -> dict[str, Any]:
        """The label in the lexicon's JSON form, as received (a `$type` aside)."""
        return dict(drisl.to_json({**self.fields, "sig": self.sig}))


def read(label: Any) -> Label:
    """A label as a caller holds it: its DRISL bytes, its JSON text, or an object, in DRISL's
    form (`sig` as bytes, as a `#labels` frame decodes) or in the lexicon's JSON form (`sig`
    as `{"$bytes": …}`). Raises `LabelRefused`."""
    if isinstance(label, bytes | str):
        size = len(label if isinstance(label, bytes) else label.encode("utf-8", "surrogatepass"))
        if size > MAX_LABEL:
            raise LabelRefused(f"a label of {size} bytes (at most {MAX_LABEL})", "L-SYN-1")
        try:
            if isinstance(label, bytes):
                return read_label(drisl.decode(label))
            return read_label_json(parse_json(label))
        except ValueError as err:  # NotDrisl, or JSON that is not JSON
            if isinstance(err, LabelRefused):
                raise
            form = "DRISL" if isinstance(label, bytes) else "JSON"
            raise LabelRefused(f"not a label in {form}: {err}", "L-SYN-1") from None
    if isinstance(label, dict) and any(isinstance(value, bytes) for value in label.values()):
        return read_label(label)
    return read_label_json(label)


def read_label_json(value: Any) -> Label:
    """A label in the lexicon's JSON form, as `json.loads` gives it (R-DATA-4's reading of
    `$bytes`; a number without a fraction is an integer). Raises `LabelRefused`."""
    if not isinstance(value, dict):
        raise LabelRefused(f"a label is a JSON object, not {_kind(value)}", "L-SYN-1")
    converted = {}
    for name, item in value.items():
        try:
            converted[name] = drisl.from_json(item)
        except drisl.NotDrisl as err:
            raise LabelRefused(f"{name[:40]}: {err}", _RULES.get(name, "L-SYN-1")) from None
    return read_label(converted)


def read_label(value: Any) -> Label:
    """A label in its DRISL form (a map as `drisl.decode` gives it). Raises `LabelRefused`
    (L-SYN-*, L-SIG-2)."""
    if not isinstance(value, dict):
        raise LabelRefused(f"a label is a map, not {_kind(value)}", "L-SYN-1")
    unknown = sorted(name for name in value if name not in (*SCHEMA, "sig", "$type"))
    if unknown:
        named = ", ".join(repr(name[:40]) for name in unknown[:4])
        raise LabelRefused(f"{named}: not a field of a label, to sign or to leave", "L-SYN-1")
    if "$type" in value and value["$type"] != LEXICON_TYPE:
        raise LabelRefused(f"a $type that is not {LEXICON_TYPE}", "L-SYN-1")
    fields = {name: value[name] for name in SCHEMA if name in value}
    _check_fields(fields)
    sig = value.get("sig")
    if not isinstance(sig, bytes):
        said = "no sig" if "sig" not in value else f"sig is {_kind(sig)}, not bytes"
        raise LabelRefused(f"{said}: a label passed between services is signed", "L-SIG-2")
    if len(sig) != 64:
        der = " (DER?)" if sig[:1] == b"\x30" else ""
        raise LabelRefused(f"a signature of {len(sig)} bytes{der}, not 64 (r||s)", "L-SIG-2")
    return Label(fields, sig)


def _check_fields(fields: dict[str, Any]) -> None:
    """L-SYN-2..8: each field's kind and syntax, the required ones present."""
    if "ver" not in fields:
        raise LabelRefused("no ver: it is signed, so it is never supplied", "L-SYN-2")
    ver = fields["ver"]
    if not isinstance(ver, int) or isinstance(ver, bool) or ver != VERSION:
        raise LabelRefused(f"ver {ver!r:.20}: the label schema is version 1", "L-SYN-2")
    if not is_valid_did(_text(fields, "src")):
        raise LabelRefused(f"src {fields['src']!r:.80} is not a DID", "L-SYN-3")
    _check_uri(_text(fields, "uri"))
    if "cid" in fields and not is_valid_cid_text(_text(fields, "cid")):
        raise LabelRefused(f"cid {fields['cid']!r:.80} is not a CID", "L-SYN-5")
    size = len(_text(fields, "val").encode())
    if not 0 < size <= MAX_VAL:
        raise LabelRefused(f"a val of {size} bytes (1 to {MAX_VAL})", "L-SYN-6")
    if "neg" in fields and not isinstance(fields["neg"], bool):
        raise LabelRefused(f"neg is {_kind(fields['neg'])}, not a boolean", "L-SYN-7")
    for name in ("cts", "exp"):
        if (name == "cts" or name in fields) and datetime_seconds(_text(fields, name)) is None:
            raise LabelRefused(f"{name} {fields[name]!r:.80} is not a datetime", "L-SYN-8")


def _text(fields: dict[str, Any], name: str) -> str:
    """A string field, present, that UTF-8 can encode (JSON may escape half a pair)."""
    value = fields.get(name)
    if not isinstance(value, str):
        said = "missing" if name not in fields else f"{_kind(value)}, not a string"
        raise LabelRefused(f"{name} is {said}", _RULES[name])
    try:
        value.encode()
    except UnicodeEncodeError:
        raise LabelRefused(f"{name} holds half a surrogate pair", _RULES[name]) from None
    return value


def _check_uri(uri: str) -> None:
    """L-SYN-4: the subject, an at:// URI (a record, or an account) or a DID."""
    if uri.startswith("at://"):
        try:
            parse_at_uri(uri)
        except InvalidInput as err:
            raise LabelRefused(f"uri: {err}", "L-SYN-4") from None
    elif not is_valid_did(uri):
        raise LabelRefused(f"uri {uri!r:.80} is neither an at:// URI nor a DID", "L-SYN-4")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def labeler_key(label: Label, document: Any) -> PublicKey:
    """L-KEY-1: the `#atproto_label` key of the labeler's document (`src`'s), no other."""
    return label_key(verification_key(document, label.src, KEY_ID))


def label_key(key: PublicKey | None) -> PublicKey:
    """L-KEY-1: the `#atproto_label` key a document holds, or the label refused."""
    if key is None:
        why = "the labeler's document has no valid #atproto_label key (no other is tried)"
        raise LabelRefused(why, "L-KEY-1")
    return key


def check_signature(label: Label, key: PublicKey) -> None:
    """L-SIG-2 (low S, for the key's curve), L-SIG-3: the signature verifies under `key`
    over the fields as received."""
    if high_s(key.curve, label.sig):
        raise LabelRefused("the signature is high-S (s > n/2)", "L-SIG-2")
    if not verify(key.did_key, label.signed_bytes(), label.sig):
        why = f"the signature does not verify under #atproto_label ({key.did_key})"
        raise LabelRefused(why, "L-SIG-3")


Outcome = Literal["verified", "invalid", "unavailable"]


@dataclass(frozen=True, slots=True)
class LabelVerification:
    """What was decided of one label, what it says, and from which document. A verified
    label is in force unless it is a negation (L-NEG-1) or past its `exp` (L-EXP-1)."""

    outcome: Outcome
    rule: str | None = None  # the rule broken (invalid)
    reason: str | None = None  # why, in words (invalid, unavailable)
    src: str | None = None  # the labeler
    uri: str | None = None  # the subject
    val: str | None = None
    cid: str | None = None
    neg: bool | None = None  # as received: True, False, or None (absent)
    cts: str | None = None
    exp: str | None = None
    expired: bool = False  # `exp` is past (L-EXP-1)
    key: str | None = None  # the #atproto_label key (did:key) that verified it
    document_checked_at: str | None = None  # when the labeler's document was resolved
    refreshed: bool = False  # the document was resolved afresh for this label (L-KEY-3)

    @property
    def verified(self) -> bool:
        return self.outcome == "verified"

    @property
    def negated(self) -> bool:
        """A negation: it retracts the label of the same src, uri and val (L-NEG-1)."""
        return self.neg is True

    @property
    def in_force(self) -> bool:
        return self.verified and not self.negated and not self.expired

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["document"] = {
            "checked_at": out.pop("document_checked_at"),
            "refreshed": out.pop("refreshed"),
        }
        standing = {"verified": self.verified, "negated": self.negated, "in_force": self.in_force}
        return {**out, **standing}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabelVerification:
        document = data.get("document") or {}
        fields: dict[str, Any] = {name: data.get(name) for name in cls.__slots__ if name in data}
        fields["document_checked_at"] = document.get("checked_at")
        fields["refreshed"] = bool(document.get("refreshed"))
        fields["expired"] = bool(fields.get("expired"))
        return cls(**fields)


def about(label: Label, outcome: Outcome, now: float, **decided: Any) -> LabelVerification:
    """A verdict on `label` saying what it claims; whether it is past its `exp` at `now`;
    `decided`: the verdict's other fields (rule, reason, key, document_checked_at, …)."""
    fields = label.fields
    expires = label.expires
    return LabelVerification(
        outcome,
        **decided,
        src=fields["src"],
        uri=fields["uri"],
        val=fields["val"],
        cid=fields.get("cid"),
        neg=label.neg,
        cts=fields["cts"],
        exp=fields.get("exp"),
        expired=expires is not None and expires <= now,
    )
