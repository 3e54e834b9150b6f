"""Labels signed as the reference labeler signs them, for the tests, the benchmarks and the
test network's labelers (none runs there: the reference PDS serves no labels). `sign_label`
follows `@atproto/ozone`'s `signLabel` (0.2.29, packages/ozone/src/mod-service/util.ts):
`ver` 1 unless given, `neg` kept only when true, absent fields left out, the DAG-CBOR of
what is left signed (SHA-256, K-256, low S); `labels_frame` is a `#labels` frame of
`subscribeLabels` as its server frames one. Both are held, byte for byte, to what the
reference's own packages make (`devnet/pds/sign_labels.js`, kept in
tests/vectors/labels/ozone-sign-label.json).

`sign_fields` signs whatever fields it is given, as they are (indigo's `Label.Sign` signs a
`neg: false` it holds): the labels a verifier must refuse, or take, as received."""

from __future__ import annotations

import base64
from typing import Any

import libipld

from atwhois.resolver import drisl
from devnet.plc_ops import Key

SCHEMA = ("ver", "src", "uri", "cid", "val", "neg", "cts", "exp")


def sign_label(key: Key, label: dict[str, Any]) -> dict[str, Any]:
    """`label`'s fields signed as the reference labeler signs them; the label in the JSON
    form its `queryLabels` answers with (`sig` as `{"$bytes": base64}`)."""
    reformatted = {**{name: label.get(name) for name in SCHEMA}, "ver": label.get("ver", 1)}
    reformatted["neg"] = True if label.get("neg") is True else None
    return as_json(sign_fields(key, {k: v for k, v in reformatted.items() if v is not None}))


def sign_fields(key: Key, fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` signed exactly as given; the label in DRISL's form (`sig` as bytes)."""
    # libipld writes these fields (text, an integer, booleans) as the reference does; never
    # a byte string through it (it would write one that starts like a CID as a link)
    signature = key.private.sign_recoverable(libipld.encode_dag_cbor(fields))[:64]  # low S
    return {**fields, "sig": signature}


def as_json(label: dict[str, Any]) -> dict[str, Any]:
    """A label of DRISL's form in the lexicon's JSON form: standard base64, unpadded, as the
    reference's `lexToJson` writes bytes."""
    encoded = base64.b64encode(label["sig"]).decode().rstrip("=")
    return {**label, "sig": {"$bytes": encoded}}


def as_drisl(label: dict[str, Any]) -> dict[str, Any]:
    """A label of the lexicon's JSON form in DRISL's form (`sig` as bytes)."""
    encoded = label["sig"]["$bytes"]
    return {**label, "sig": base64.b64decode(encoded + "=" * (-len(encoded) % 4))}


def labels_frame(seq: int, labels: list[dict[str, Any]]) -> bytes:
    """A `#labels` frame: the header `{op: 1, t: "#labels"}`, then `{seq, labels}`, each
    DAG-CBOR (the labels in DRISL's form, or the JSON form, turned into it)."""
    drisl_form = [as_drisl(label) if isinstance(label["sig"], dict) else label for label in labels]
    return drisl.encode({"op": 1, "t": "#labels"}) + drisl.encode(
        {"seq": seq, "labels": drisl_form}
    )
