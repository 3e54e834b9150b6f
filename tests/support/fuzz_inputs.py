"""The inputs the fuzz targets (`fuzz`) feed the parsers: random text and JSON, and the
vectors' real inputs with parts swapped for random ones."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import strategies as st

from tests.vectors import did_documents, plc_logs, syntax_cases

_SYNTAX_FILES = (
    "handle_syntax_valid.txt",
    "handle_syntax_invalid.txt",
    "did_syntax_valid.txt",
    "did_syntax_invalid.txt",
    "atidentifier_syntax_valid.txt",
    "aturi_syntax_valid.txt",
    "aturi_syntax_invalid.txt",
)
IDENTIFIERS = sorted({case for name in _SYNTAX_FILES for case in syntax_cases(name)})
# Characters that matter to the grammars, and some that must never get through.
_ALPHABET = st.sampled_from([*list("abcz09.-_:%@/#?~ AZ"), "\x00", "�", "é", "\n", "ǅ"])


def mutated_text(seeds: list[str]) -> st.SearchStrategy[str]:
    """A real input with a few characters replaced, inserted or removed."""

    @st.composite
    def build(draw: st.DrawFn) -> str:
        text = draw(st.sampled_from(seeds))
        for _ in range(draw(st.integers(0, 4))):
            at = draw(st.integers(0, len(text)))
            kind = draw(st.sampled_from(("insert", "replace", "delete", "repeat")))
            char = draw(_ALPHABET)
            if kind == "insert":
                text = text[:at] + char + text[at:]
            elif kind == "replace":
                text = text[:at] + char + text[at + 1 :]
            elif kind == "delete":
                text = text[:at] + text[at + 1 :]
            else:
                text = text[:at] * draw(st.integers(1, 40))
        return text[:4000]  # longer is refused by the HTTP client before the daemon sees it

    return build()


_PREFIXES = [
    "did:plc:",
    "did:web:",
    "at://",
    "@",
    "https://bsky.app/profile/",
    "did:web:localhost%3A",
]
identifiers = st.one_of(
    mutated_text(IDENTIFIERS),
    st.text(_ALPHABET, max_size=60),
    st.text(max_size=300),
    st.builds(str.__add__, st.sampled_from(_PREFIXES), st.text(_ALPHABET, max_size=40)),
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["did:plc:ewvi7nxzyoun6zhxrhs64oiz", "at://alice.test", "#atproto", "\ud800"]),
)
# Keys of DID documents, PLC operations and log entries: random objects that use them reach
# further into the parsers than random keys would.
_KEYS = [
    "id",
    "alsoKnownAs",
    "verificationMethod",
    "service",
    "type",
    "controller",
    "publicKeyMultibase",
    "serviceEndpoint",
    "operation",
    "sig",
    "prev",
    "rotationKeys",
    "verificationMethods",
    "services",
    "endpoint",
    "cid",
    "did",
    "createdAt",
    "nullified",
]
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=10), st.sampled_from(_KEYS)), inner, max_size=6),
    ),
    max_leaves=20,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def mutated_json(seeds: list[Any]) -> st.SearchStrategy[Any]:
    """A real document or log with up to three of its parts swapped for random JSON,
    deleted, or duplicated."""

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        value = copy.deepcopy(draw(st.sampled_from(seeds)))
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(_paths(value)))
            if not path:
                continue
            parent = value
            for step in path[:-1]:
                parent = parent[step]
            action = draw(st.sampled_from(("replace", "delete", "copy")))
            if action == "replace":
                parent[path[-1]] = draw(json_values)
            elif action == "delete":
                del parent[path[-1]]
            elif isinstance(parent, list):
                parent.append(copy.deepcopy(parent[path[-1]]))
        return value

    return build()


DOCUMENTS = list(did_documents().values())
LOGS = list(plc_logs().values())


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


documents = st.one_of(
    mutated_json(DOCUMENTS).map(json_bytes),
    json_values.map(json_bytes),
    st.binary(max_size=200),
    mutated_json(DOCUMENTS)
    .map(json_bytes)
    .flatmap(lambda body: st.integers(0, len(body)).map(lambda cut: body[:cut])),
)
