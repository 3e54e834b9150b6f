"""The third-party test vectors, copied verbatim beside this file (sources, commits and
licences in `README.md` here), and their loaders. A clone runs the suite with nothing beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).resolve().parent
SYNTAX = VECTORS / "atproto-interop-tests" / "syntax"
CRYPTO = VECTORS / "atproto-interop-tests" / "crypto"
PLC_LOGS = VECTORS / "go-didplc" / "testdata"
INDIGO = VECTORS / "indigo"


def syntax_cases(name: str) -> list[str]:
    """One case per line; `#` comments and blank lines skipped; lines never trimmed."""
    text = (SYNTAX / name).read_text(encoding="utf-8")
    lines = text.split("\n")
    return [line.removesuffix("\r") for line in lines if line and not line.startswith("#")]


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def did_documents() -> dict[str, Any]:
    """Every DID-document fixture from indigo, by file name (its identity and testing
    fixtures: the repository's proofs beside them are not documents)."""
    folders = (INDIGO / "atproto" / "identity" / "testdata", INDIGO / "testing" / "testdata")
    return {p.name: load_json(p) for folder in folders for p in sorted(folder.glob("*.json"))}


def plc_logs() -> dict[str, Any]:
    """Every go-didplc audit log, by file name (without `.json`)."""
    return {p.stem: load_json(p) for p in sorted(PLC_LOGS.glob("log_*.json"))}
