"""`atwhois history` and `atwhois plc verify-export`, as the real executable."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from devnet.network import DevnetState
from devnet.synthetic_plc import export_lines
from tests.support.cli import run_here as run
from tests.vectors import PLC_LOGS


def test_history_of_a_recovered_did(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    code, out, _ = run(["history", devnet.did("frank")], devnet_env)
    assert code == 0
    assert out.splitlines()[0].endswith("log verifies; 3 operations, 1 nullified; active")
    assert "handle frank.test -> evil.test" in out and "recovery: nullifies 1 op(s)" in out
    code, out, _ = run(["history", devnet.did("frank"), "--json"], devnet_env)
    ops = json.loads(out)["operations"]
    assert [op["signer_index"] for op in ops] == [0, 1, 0]
    assert ops[1]["nullified_by"] == ops[2]["cid"]


def test_history_exit_codes(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    code, out, _ = run(["history", devnet.did("erin"), "--json"], devnet_env)
    assert code == 0 and json.loads(out)["deactivated"] is True
    code, _, err = run(["history", "did:plc:neverregisteredaaaaaaaaa"], devnet_env)
    assert code == 1 and "not registered" in err
    code, _, err = run(["history", "did:web:web.test"], devnet_env)
    assert code == 2 and "did:web:web.test: only a did:plc has an operation log" in err
    down = {**devnet_env, "ATWHOIS_PLC_URL": "http://127.0.0.1:9"}
    code, _, err = run(["history", devnet.did("alice"), "--timeout", "1"], down)
    assert code == 3 and err


def test_verify_export_of_the_test_network(devnet: DevnetState, tmp_path: Path) -> None:
    export = httpx.get(f"{devnet.plc_url}/export", params={"count": 1000}).text
    (tmp_path / "export.jsonl").write_text(export)
    code, out, _ = run(["plc", "verify-export", str(tmp_path / "export.jsonl"), "--json"])
    summary = json.loads(out)
    assert code == 0 and summary["valid"]
    # Every seeded identity, and those other tests created on the same directory.
    dids = {json.loads(line)["did"] for line in export.splitlines()}
    assert set(devnet.dids.values()) <= dids
    assert summary["dids"] == len(dids) and summary["ops"] == len(export.splitlines())
    # The same from standard input, human-readable.
    code, out, _ = run(["plc", "verify-export", "-"], stdin=export)
    assert code == 0 and out.startswith(f"export verifies: {len(dids)} DIDs")


def test_verify_export_finds_and_allow_lists_bad_ops(tmp_path: Path) -> None:
    lines = list(export_lines(30, 3))
    tampered = json.loads(lines[40])
    tampered["operation"]["alsoKnownAs"] = ["at://someone-else.test"]
    lines[40] = json.dumps(tampered)
    lines.insert(10, "this is not json")
    export = tmp_path / "bad.jsonl"
    export.write_text("\n".join(lines) + "\n")
    code, out, _ = run(["plc", "verify-export", str(export), "--json"])
    summary = json.loads(out)
    assert code == 1 and summary["bad_lines"] == 1
    # The tampered op fails, and so does its successor, whose prev is now unknown.
    assert summary["invalid_ops"] == 2 and summary["by_rule"]["P-CID-1"] == 1
    assert summary["by_rule"]["P-NULL-3"] == 1
    assert tampered["did"] in summary["examples"][0]
    allow = tmp_path / "known_bad.json"
    allow.write_text(json.dumps([tampered["cid"], tampered["did"]]))
    without_junk = tmp_path / "tampered.jsonl"
    without_junk.write_text("\n".join(line for line in lines if line.startswith("{")))
    code, out, _ = run(
        ["plc", "verify-export", str(without_junk), "--known-bad", str(allow), "--json"]
    )
    assert code == 0 and json.loads(out)["allowed_ops"] == 2


def test_verify_export_accepts_the_known_bad_lists_and_the_seq_format(tmp_path: Path) -> None:
    seq = []
    for number, line in enumerate(export_lines(10, 3)):
        entry = json.loads(line)
        del entry["nullified"]
        seq.append(json.dumps({"type": "sequenced_op", "seq": number, **entry}))
    (tmp_path / "seq.jsonl").write_text("\n".join(seq))
    code, out, _ = run(
        [
            "plc",
            "verify-export",
            str(tmp_path / "seq.jsonl"),
            "--known-bad",
            str(PLC_LOGS / "known_bad_cids.json"),
            "--known-bad",
            str(PLC_LOGS / "known_bad_dids.json"),
            "--json",
        ]
    )
    assert code == 0 and json.loads(out)["ops"] == 30
    code, _, err = run(["plc", "verify-export", str(tmp_path / "missing.jsonl")])
    assert code == 2 and "No such file" in err


def test_verify_export_survives_json_nested_past_the_recursion_limit(tmp_path: Path) -> None:
    lines = [*export_lines(2, 1), "[" * 30000 + "]" * 30000]
    (tmp_path / "deep.jsonl").write_text("\n".join(lines))
    code, out, _ = run(["plc", "verify-export", str(tmp_path / "deep.jsonl"), "--json"])
    assert code == 1 and json.loads(out)["bad_lines"] == 1 and json.loads(out)["ops"] == 2


def test_a_strangers_unwritable_characters_are_shown_escaped(tmp_path: Path) -> None:
    """JSON can carry a lone surrogate (`"\\ud800"`), which no encoding can write: a report
    that quotes it (an export line's `cid`) prints it escaped instead of crashing."""
    entry = {
        "did": "did:plc:ewvi7nxzyoun6zhxrhs64oiz",
        "operation": {},
        "cid": "bafy\ud800",
        "createdAt": "2025-01-01T00:00:00Z",
        "nullified": False,
    }
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps(entry) + "\n")
    code, out, err = run(["plc", "verify-export", str(export)])
    assert code == 1 and "Traceback" not in err, err
    assert "bafy\\ud800" in out and "does NOT verify" in out


def test_verify_export_in_worker_processes_finds_what_one_process_finds(tmp_path: Path) -> None:
    """Routed by DID to two workers, interleaved DIDs, tampered ops (and the ops built on
    them), junk and seq-format lines: the same counts, rules and examples as one process."""
    lines = list(export_lines(300, 4))
    for index in (41, 170, 650):
        tampered = json.loads(lines[index])
        tampered["operation"]["alsoKnownAs"] = [f"at://someone-else-{index}.test"]
        lines[index] = json.dumps(tampered)
    entry = json.loads(lines[7])
    del entry["nullified"]
    lines[7] = json.dumps({"type": "sequenced_op", "seq": 7, **entry})
    lines[300:300] = ["not json", '{"did": "did:web:nope.test"}', ""]
    export = tmp_path / "mixed.jsonl"
    export.write_text("\n".join(lines) + "\n")
    answers = {}
    for workers in ("0", "2"):
        code, out, _ = run(["plc", "verify-export", str(export), "--json", "--workers", workers])
        answers[workers] = (code, json.loads(out))
    (one_code, one), (two_code, two) = answers["0"], answers["2"]
    assert one_code == two_code == 1
    assert (
        one["by_rule"]["P-CID-1"] == 3
        and one["invalid_ops"] > 3
        and one["bad_lines"] == 2
        and one["dids"] == 300
    )
    assert sorted(one.pop("examples")) == sorted(two.pop("examples"))
    assert one == two
