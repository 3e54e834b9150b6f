"""The whois CLI as people and scripts use it: the real `atwhois` executable."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
from pathlib import Path

from devnet.atwhois import ATWHOIS, daemon_here
from devnet.network import DevnetState
from tests.support.cli import run_here as run

ESC = "\x1b["


def test_a_verified_handle(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    code, out, _ = run(["alice.test"], devnet_env)
    lines = out.splitlines()
    assert code == 0 and lines[0] == "alice.test: verified [verified]"
    assert f"handle       alice.test  <->  {devnet.did('alice')}" in out
    assert "dns       ok" in out and "https     ok" in out and "_atproto.alice.test" in out
    assert "signing key  did:key:" in out and "(k256)" in out
    # the log is not fetched without --verify-plc, and the text says so, as the JSON does
    assert "plc log   skipped  (--verify-plc replays the operation log)" in out
    assert "history" not in out
    assert ESC not in out  # not a terminal: no colour
    code, out, _ = run(["alice.test", "--verify-plc"], devnet_env)
    assert code == 0 and "history      1 operation; the log verifies" in out
    assert "plc log   ok" in out and "rotation     did:key:" in out
    # the JSON: rotation keys not checked are null, not "none" (issue 31, item 7)
    code, out, _ = run(["alice.test", "--json"], devnet_env)
    trusting = json.loads(out)
    assert trusting["rotation_keys"] is None and trusting["history"] is None
    assert trusting["evidence"]["plc_log"]["outcome"] == "skipped"
    code, out, _ = run(["alice.test", "--json", "--verify-plc"], devnet_env)
    replayed = json.loads(out)["rotation_keys"]
    assert isinstance(replayed, list) and replayed and replayed[0].startswith("did:key:")


def test_every_way_of_naming_someone(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    did = devnet.did("bob")
    for typed in (
        did,
        f"at://{did}/app.bsky.feed.post/3k2a",
        "@Bob.Test",
        "https://bsky.app/profile/bob.test",
        f"https://bsky.app/profile/{did}/post/x",
    ):
        code, out, _ = run([typed], devnet_env)
        assert code == 0, out
        assert out.splitlines()[0] == f"{typed}: verified [verified]"
        assert f"bob.test  <->  {did}" in out
    code, out, _ = run([did, "--verify-plc"], devnet_env)
    assert "changes      handle changes: 1" in out  # bob-old.test -> bob.test


def test_why_not_verified(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    code, out, _ = run(["bob-old.test"], devnet_env)
    assert code == 1 and "[handle_mismatch]" in out.splitlines()[0]
    assert "why          the DID document declares bob.test, not bob-old.test" in out
    code, out, _ = run(["conflict.test"], devnet_env)
    assert code == 0
    assert f"! DNS says {devnet.did('ivan')}, HTTPS says {devnet.did('alice')}: DNS wins" in out
    code, out, _ = run([devnet.did("erin")], devnet_env)
    assert code == 1 and "[did_deactivated]" in out and "tombstoned" in out
    code, out, _ = run(["bad..handle"], devnet_env)
    assert code == 2 and "[H-SYN-2]" in out
    code, out, _ = run(["blackhole.test"], devnet_env)
    assert code == 3 and "[unavailable]" in out and "no DNS answer" in out


def test_other_services_and_curves(devnet_env: dict[str, str]) -> None:
    code, out, _ = run(["did:web:feedgen.test"], devnet_env)
    assert code == 1 and "service      #bsky_fg BskyFeedGenerator https://feedgen.test" in out
    code, out, _ = run(["quinn.test"], devnet_env)
    assert "(p256)" in out


def test_batch_with_mixed_results(devnet_env: dict[str, str], tmp_path: Path) -> None:
    names = [
        "alice.test",
        "# a comment",
        "",
        "bob-old.test",
        "erin.test",
        "bad..handle",
        "blackhole.test",
        "carol.test",
    ]
    code, out, err = run(["-"], devnet_env, stdin="\n".join(names))
    assert code == 3  # the worst: a transient failure
    lines = out.splitlines()
    assert len(lines) == 7 and lines[-1].startswith("summary: 6 identifiers: ")
    # in the order given (issue 31, item 9), though blackhole.test answers last of all
    given = ["alice.test", "bob-old.test", "erin.test", "bad..handle", "blackhole.test"]
    assert [line.split(":")[0] for line in lines[:5]] == given
    assert lines[5].startswith("carol.test")
    assert "verified 2" in lines[-1] and "unavailable 1" in lines[-1]
    assert err == ""  # no progress when stderr is not a terminal
    listing = tmp_path / "handles.txt"
    listing.write_text("\n".join(["alice.test", "bob-old.test", "carol.test"]))
    code, out, err = run(["--file", str(listing), "--json"], devnet_env)
    reports = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and [r["query"] for r in reports] == [
        "alice.test",
        "bob-old.test",
        "carol.test",
    ]
    assert err.strip() == "summary: 3 identifiers: verified 2, handle_mismatch 1"
    code, _, err = run(["--file", str(tmp_path / "missing.txt")], devnet_env)
    assert code == 2 and "No such file" in err


def test_server_mode_shares_the_daemon_cache(
    devnet: DevnetState, devnet_env: dict[str, str], tmp_path: Path
) -> None:
    with daemon_here(devnet.env(), tmp_path / "serve.log", "--cache", "memory:") as daemon:
        bare = {k: v for k, v in os.environ.items() if not k.startswith("ATWHOIS_")}
        code, out, _ = run(["grace.test", "--server", daemon.url], bare)
        assert code == 0 and out.splitlines()[0] == "grace.test: verified [verified]"
        assert f"from {daemon.url}" in out
        code, out, _ = run(["grace.test", "--server", daemon.url, "--json"], bare)
        report = json.loads(out)
        assert report["cache"]["cached"] and report["status"] == "verified"
        code, out, _ = run(["-", "--server", daemon.url], bare, stdin="alice.test\nnobody.test")
        assert code == 1 and "summary: 2 identifiers" in out
    code, out, _ = run(["alice.test", "--server", daemon.url], bare)  # the daemon is gone
    assert code == 3 and "did not answer" in out


def _in_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run `atwhois` with a pseudo-terminal as stdout and stderr; return what it printed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [ATWHOIS, *args], env=env, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(60)
    os.close(leader)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_only(devnet_env: dict[str, str]) -> None:
    env = {**devnet_env, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    shown = _in_terminal(["conflict.test"], env)
    assert f"{ESC}1;32mverified{ESC}0m" in shown and f"{ESC}1;33m! DNS says" in shown
    assert ESC not in run(["conflict.test"], env)[1]  # a pipe: plain
    assert ESC not in _in_terminal(["conflict.test"], {**env, "NO_COLOR": "1"})
    assert ESC not in _in_terminal(["conflict.test", "--json"], env)


def test_help_and_version() -> None:
    code, out, _ = run(["--help"], dict(os.environ))
    assert code == 0 and "examples:" in out and "https://bsky.app/profile" in out
    for command in (
        ["history", "--help"],
        ["serve", "--help"],
        ["cache", "--help"],
        ["plc", "verify-export", "--help"],
    ):
        code, out, _ = run(command, dict(os.environ))
        assert code == 0 and "usage: atwhois" in out
    code, out, _ = run(["--version"], dict(os.environ))
    assert code == 0 and out.startswith("atwhois ")


def test_the_history_summary_counts_every_change(
    devnet_env: dict[str, str], devnet: DevnetState
) -> None:
    """frank: a hot key hijacked the handle, the recovery key nullified it. The summary's
    counts agree with its last change, and say what the replay checked and what it did not."""
    code, out, _ = run(["frank.test", "--verify-plc"], devnet_env)
    assert code == 0
    rows = {line[2:15].strip(): line[15:] for line in out.splitlines() if line.startswith("  ")}
    assert "none since creation" not in rows["changes"]
    assert "recoveries: 1" in rows["changes"] and "nullified ops: 1" in rows["changes"]
    assert rows["history"] == "3 operations; the log verifies"
    assert rows["last change"].endswith(": recovery: nullifies 1 op(s)")


def test_short_answers_for_scripts(devnet_env: dict[str, str], devnet: DevnetState) -> None:
    """Issue 31, item 11: `--short` prints the DID of a verified handle, the verified handle
    of a DID, nothing when the binding fails; the exit code is the lookup's, as ever."""
    alice = devnet.did("alice")
    assert run(["alice.test", "--short"], devnet_env)[:2] == (0, f"{alice}\n")
    assert run([alice, "--short"], devnet_env)[:2] == (0, "alice.test\n")
    assert run([f"at://{alice}/app.bsky.feed.post/3k2a", "--short"], devnet_env)[:2] == (
        0,
        "alice.test\n",
    )
    code, out, _ = run(["bob-old.test", "--short"], devnet_env)
    assert (code, out) == (1, "")
    code, out, err = run(["-", "--short"], devnet_env, stdin="alice.test\nbob-old.test\n")
    assert (code, out) == (1, f"{alice}\n-\n") and err.startswith("summary: 2 identifiers")


def test_no_color_on_a_terminal_too(devnet_env: dict[str, str]) -> None:
    """Issue 31, item 11: `--no-color` beside NO_COLOR, on a real terminal."""
    env = {k: v for k, v in devnet_env.items() if k != "NO_COLOR"}
    assert ESC in _in_terminal(["alice.test"], env)
    assert ESC not in _in_terminal(["alice.test", "--no-color"], env)
