"""Fuzz targets for moderation labels (issue 68): a label's DRISL bytes and whole
`subscribeLabels` frames, with bytes flipped or cut (`label_bytes`); labels in the lexicon's
JSON form with fields changed, as objects and as text (`label_json`); such labels, a few at
a time, through the verifier over a world in memory (`through_verifier`). Each may end only
in the classified ways the code promises: `MalformedFrame`, `LabelRefused` naming its rule,
and from the verifier a verdict for every label, never an exception. What is read as a label
reads back from its JSON form to the same signed bytes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from atwhois.auth import LabelVerifier
from atwhois.resolver import drisl
from atwhois.resolver.label import LabelRefused, check_signature, labeler_key, read
from atwhois.stream import LabelsEvent, MalformedFrame, decode_labels
from atwhois.testing import World
from devnet.labels import as_drisl
from devnet.plc_ops import Key

from .fuzz_inputs import mutated_json

_FOLDER = Path(__file__).parents[1] / "vectors" / "labels"
_OZONE = json.loads((_FOLDER / "ozone-sign-label.json").read_text())
_INDIGO = json.loads((_FOLDER / "indigo-label-test.json").read_text())
LABELS = [case["label"] for case in _OZONE["cases"]] + [_INDIGO["label"]]
_SRC = LABELS[0]["src"]
_DOCUMENT = {
    "id": _SRC,
    "verificationMethod": [
        {
            "id": f"{_SRC}#atproto_label",
            "type": "Multikey",
            "controller": _SRC,
            "publicKeyMultibase": Key("reference labeler").did_key.removeprefix("did:key:"),
        }
    ],
}
FRAMES = [base64.b64decode(case["frame"]) for case in _OZONE["cases"]]
FRAMES += [base64.b64decode(_OZONE[name]) for name in ("info_frame", "error_frame")]
BYTES = [drisl.encode(as_drisl(label)) for label in LABELS] + FRAMES


def label_bytes(raw: bytes) -> None:
    """Any bytes, as a frame (each of its labels then) and as one label's DRISL."""
    with contextlib.suppress(MalformedFrame):
        event = decode_labels(raw)
        for item in event.labels if isinstance(event, LabelsEvent) else ():
            _checked(item)
    _checked(raw)


def label_json(value: Any) -> None:
    """Any JSON value as a label, and its text too."""
    _checked(value)
    _checked(json.dumps(value))


def _checked(value: Any) -> None:
    try:
        label = read(value)
    except LabelRefused as err:
        assert err.rule.startswith("L-") and str(err).endswith(f"[{err.rule}]")
        return
    assert read(label.to_json()).signed_bytes() == label.signed_bytes()
    with contextlib.suppress(LabelRefused):
        check_signature(label, labeler_key(label, _DOCUMENT))


labels_json = st.one_of(
    mutated_json(LABELS),
    mutated_json(LABELS).map(lambda label: {**label, "neg": False}),
)

_WORLD = World()
_LABELER = _WORLD.add_labeler("mod.example.org")
_WORLD_LABELS = [
    _WORLD.label(_LABELER, LABELS[0]["uri"], "spam"),
    _WORLD.label(_LABELER, "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "rude", neg=True),
    _WORLD.label(_LABELER, LABELS[0]["uri"], "!warn", exp="2020-01-01T00:00:00Z"),
]
batches = st.lists(mutated_json(_WORLD_LABELS + LABELS[:1]), min_size=1, max_size=4)


def through_verifier(labels: list[Any]) -> None:
    """A verdict for each label, in order; never an exception, never unavailable (the
    world's directory answers every DID: a document, or none)."""
    verdicts = asyncio.run(LabelVerifier(_WORLD).verify_many(labels))
    assert len(verdicts) == len(labels)
    for verdict in verdicts:
        assert verdict.outcome in ("verified", "invalid"), verdict
        assert verdict.outcome == "verified" or (verdict.rule or "").startswith("L-"), verdict
