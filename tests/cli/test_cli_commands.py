"""The command line's grammar: real subcommands, lookup as the default verb, settings flags
either side of the command, a suggestion for a typo, help that shows what applies, and one
name per setting across flag, variable and file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from atwhois.cli.main import UsageError, main, route
from devnet.network import DevnetState
from tests.support.cli import run_here as run

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"


@pytest.mark.parametrize(
    ("argv", "routed"),
    [
        (["alice.test"], ["lookup", "alice.test"]),
        (["alice.test", "--json"], ["lookup", "alice.test", "--json"]),
        (["--json", "alice.test"], ["lookup", "--json", "alice.test"]),
        (["--file", "x.txt"], ["lookup", "--file", "x.txt"]),
        (["-"], ["lookup", "-"]),
        (["lookup", "alice.test"], ["lookup", "alice.test"]),
        (["--dev", "history", DID], ["history", "--dev", DID]),
        (["--plc-url", "http://x", "history", DID], ["history", "--plc-url", "http://x", DID]),
        (["--plc-url=http://x", "alice.test"], ["lookup", "--plc-url=http://x", "alice.test"]),
        (["--no-dev", "watch", "add", "a.test"], ["watch", "add", "--no-dev", "a.test"]),
        (["--config", "a.toml", "serve"], ["serve", "--config", "a.toml"]),
        (["audit"], ["audit", "run"]),
        (["audit", "list.txt"], ["audit", "run", "list.txt"]),
        (["--dev", "audit", "history", "a.test"], ["audit", "history", "--dev", "a.test"]),
        (["cache", "stats"], ["cache", "stats"]),
        (["plc"], ["plc"]),
        (["--help"], ["--help"]),
        (["--version"], ["--version"]),
        ([], ["lookup"]),
        (
            ["at://alice.test/app.bsky.feed.post/1"],
            ["lookup", "at://alice.test/app.bsky.feed.post/1"],
        ),
        (["audits.example.com"], ["lookup", "audits.example.com"]),  # a handle, not a typo
    ],
)
def test_route(argv: list[str], routed: list[str]) -> None:
    assert route(argv) == routed


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("lokup", "lookup"), ("histroy", "history"), ("serv", "serve"), ("wacth", "watch")],
)
def test_a_mistyped_command_gets_a_suggestion(typo: str, meant: str) -> None:
    with pytest.raises(UsageError, match=f"did you mean '{meant}'"):
        route([typo, "alice.test"])


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own exits: help, version, usage errors
        code = int(exit.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_typos_are_usage_errors_with_the_command_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(["lokup", "alice.test"], capsys)
    assert (code, out) == (2, "") and "did you mean 'lookup'?" in err
    code, _, err = _main(["plc", "verfy-export", "x.jsonl"], capsys)
    assert code == 2 and "atwhois plc: error" in err and "did you mean 'verify-export'?" in err
    code, _, err = _main(["cache", "purj", "alice.test"], capsys)
    assert code == 2 and "did you mean 'purge'?" in err
    code, _, err = _main(["plc"], capsys)  # a group without its command: its usage, exit 2
    assert code == 2 and "usage: atwhois plc" in err
    code, out, _ = _main(["plc", "--help"], capsys)
    assert code == 0 and "verify-export" in out and "usage: atwhois plc" in out
    code, _, err = _main(["lookup", "--plc", "http://x", "alice.test"], capsys)  # no abbreviation
    assert code == 2 and "unrecognized arguments: --plc" in err


def test_bare_atwhois_shows_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 31, item 6: no argument at all is not a lookup of nothing: the usage, the
    commands and the examples, exit 2."""
    code, out, err = _main([], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("usage: atwhois") and "give an identifier" not in err
    assert "lookup is the default" in err and "atwhois alice.example.com" in err


@pytest.mark.parametrize(
    ("command", "shows", "hides"),
    [
        (["lookup"], ["--plc-url", "--dns-server", "--cache", "--server", "--no-dev"], ["--port"]),
        (["history"], ["--plc-url", "--verify-plc"], ["--cache", "--port"]),
        (["cache", "stats"], ["--cache"], ["--plc-url", "--dns-server", "--dev"]),
        (["cache", "purge"], ["--cache", "--dev"], ["--plc-url", "--timeout"]),
        (["watch", "add"], ["--audit-db", "--label", "--dev"], ["--plc-url", "--cache"]),
        (["watch", "list"], ["--audit-db"], ["--dev", "--plc-url"]),
        (["audit"], ["--format", "--webhook", "--plc-url", "--audit-db"], ["--port"]),
        (["audit", "history"], ["--audit-db", "--dev"], ["--plc-url", "--webhook"]),
        (["plc", "verify-export"], ["--known-bad"], ["--plc-url", "--dev", "--config"]),
        (["serve"], ["--port", "--plc-url", "--audit-interval", "--no-request-log"], ["--json"]),
        (["config", "show"], ["--port", "--plc-url", "--json"], ["--label"]),
    ],
)
def test_each_command_shows_only_the_flags_that_apply(
    command: list[str], shows: list[str], hides: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _main([*command, "--help"], capsys)
    assert code == 0 and out.startswith("usage: atwhois " + command[0])
    for flag in shows:
        assert f"{flag} " in out or f"{flag}\n" in out or f"{flag}," in out, flag
    for flag in hides:
        assert f"{flag} " not in out and f"{flag}\n" not in out, flag


def test_a_settings_flag_a_command_does_not_take_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = _main(["--plc-url", "http://x", "cache", "stats"], capsys)
    assert code == 2 and "atwhois cache stats: error: unrecognized arguments: --plc-url" in err
    code, _, err = _main(["--timeout", "abc", "alice.test"], capsys)
    assert code == 2 and "--timeout: invalid float value: 'abc'" in err


def test_settings_flags_before_or_after_the_command(
    devnet_env: dict[str, str], devnet: DevnetState
) -> None:
    """`atwhois --dev history …` and `atwhois history … --dev` are the same command; history
    takes a handle as well as a DID."""
    env = {k: v for k, v in devnet_env.items() if k != "ATWHOIS_DEV"}
    did = devnet.did("dave")
    before = run(["--dev", "history", "dave.test", "--json"], env)
    after = run(["history", "dave.test", "--dev", "--json"], env)
    assert before[0] == after[0] == 0
    for _, out, _ in (before, after):
        log = json.loads(out)
        assert log["did"] == did and log["lookup"] == {
            "query": "dave.test",
            "did": did,
            "status": "verified",
        }
    code, out, _ = run(["--dev", "history", did], env)
    assert code == 0 and out.startswith(f"{did}: log verifies")
    code, _, err = run(["history", "dave.test"], env)  # .test needs --dev (H-TLD-2)
    assert code == 2 and "H-TLD-2" in err
    code, _, err = run(["--dev", "history", "web.test"], env)
    assert code == 1 and "did:web:web.test: only a did:plc has an operation log" in err
    code, _, err = run(["--dev", "history", "did:web:web.test"], env)
    assert code == 2 and "only a did:plc" in err
    code, _, err = run(["--dev", "history", "nobody.test"], env)
    assert code == 1 and "nobody.test" in err


def test_one_name_per_setting_in_flag_variable_and_file(
    devnet_env: dict[str, str], devnet: DevnetState, tmp_path: Path
) -> None:
    """The lookup's settings come from a TOML file as well as from flags and variables, by
    the same names; a flag (`--no-dev`) overrides the file and the variable."""
    bare = {k: v for k, v in os.environ.items() if not k.startswith("ATWHOIS_")}
    config = tmp_path / "atwhois.toml"
    config.write_text(
        f'dev = true\nplc_url = "{devnet.plc_url}"\ndns_server = ["{devnet.dns_server}"]\n'
        f'ca_bundle = "{devnet.ca_file}"\nallow_net = ["127.0.0.0/8"]\n'
        f"https_port = {devnet.https_port}\nport = 1\n"  # `port`: the daemon's, ignored here
    )
    code, out, err = run(["alice.test", "--json", "--config", str(config)], bare)
    assert code == 0, err
    assert json.loads(out)["did"] == devnet.did("alice")
    code, out, _ = run(["alice.test", "--json"], {**bare, "ATWHOIS_CONFIG": str(config)})
    assert code == 0 and json.loads(out)["status"] == "verified"
    code, out, _ = run(["alice.test", "--json", "--config", str(config), "--no-dev"], bare)
    assert code == 2 and json.loads(out)["error"].endswith("[H-TLD-2]")
    code, _, _ = run(["alice.test", "--json"], {**devnet_env, "ATWHOIS_DEV": "0"})
    assert code == 2
    config.write_text('dev = true\nplc_ulr = "http://x"\n')
    code, out, err = run(["alice.test", "--config", str(config)], bare)
    assert code == 2 and out == "" and "unknown setting 'plc_ulr' (did you mean 'plc_url'?)" in err
    config.write_text('timeout = "fast"\n')
    code, _, err = run(["alice.test", "--config", str(config)], bare)
    assert code == 2 and "timeout must be a number, not 'fast'" in err


def _complete(words: list[str]) -> list[str]:
    """What the bash completion script `atwhois completion bash` offers for `words` (the
    last one being typed), run by a real bash."""
    import shlex
    import subprocess

    from atwhois.cli.completion import script

    program = "\n".join(
        [
            script(),
            f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})",
            f"COMP_CWORD={len(words) - 1}",
            "_atwhois",
            'printf "%s\\n" "${COMPREPLY[@]}"',
        ]
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completion_knows_every_command_and_its_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 31, item 11: shell completion made from the command table."""
    code, out, _ = _main(["completion", "bash"], capsys)
    assert code == 0 and out.startswith("# bash completion for atwhois")
    assert _complete(["atwhois", "pl"]) == ["plc"]
    assert sorted(_complete(["atwhois", "plc", ""])) == ["compare", "mirror", "verify-export"]
    assert _complete(["atwhois", "lookup", "--sho"]) == ["--short"]
    assert _complete(["atwhois", "alice.test", "--no-co"]) == ["--no-color"]  # lookup's
    assert "--max-connections" in _complete(["atwhois", "plc", "mirror", "--max-"])
    assert _complete(["atwhois", "audit", "--form"]) == ["--format"]  # audit run's
    assert _complete(["atwhois", "serve", "--short"]) == []  # not a flag of serve
