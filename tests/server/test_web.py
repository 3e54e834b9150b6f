"""The identity page in a real browser: Debian's headless Chromium, driven by Selenium
through the system's chromedriver (nothing downloaded), against `atwhois serve` on the test
network. Each page: its visible text, a screenshot (tests/artifacts/screenshots), and an
axe-core accessibility check with no serious or critical violation, light and dark."""

from __future__ import annotations

import itertools
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.wait import WebDriverWait

from devnet import world
from devnet.atwhois import Daemon, daemon_here
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount, new_handle
from tests.support import metrics

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("ATWHOIS_ARTIFACTS", ROOT / "tests" / "artifacts")) / "screenshots"
AXE = ROOT / "tests" / "browser" / "node_modules" / "axe-core" / "axe.min.js"
TOKEN = "web-token-123"
APP = "http://app.test"  # a browser app's origin allowed to read the API


@pytest.fixture(scope="module")
def daemon(devnet: DevnetState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("web")
    args = ["--cache", "memory:", "--refresh-token", TOKEN, "--audit-db", str(tmp / "a.db")]
    with daemon_here(devnet.env(), tmp / "serve.log", *args, "--cors-origin", APP) as d:
        yield d


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,1000")
    driver = webdriver.Chrome(options=options, service=DriverService("/usr/bin/chromedriver"))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def visit(browser: webdriver.Chrome, daemon: Daemon, path: str, name: str) -> str:
    """Open a page, save its screenshot in light and dark, check it with axe in both; its
    visible text."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.get(daemon.url + path)
    text = browser.find_element(By.TAG_NAME, "body").text
    for scheme in ("light", "dark"):
        browser.execute_cdp_cmd(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
        )
        browser.save_screenshot(str(ARTIFACTS / f"{name}-{scheme}.png"))
        serious = [
            (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
            for v in axe(browser)
            if v["impact"] in ("serious", "critical")
        ]
        assert serious == [], (name, scheme, serious)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    return text


def axe(browser: webdriver.Chrome) -> list[dict[str, Any]]:
    browser.execute_script(AXE.read_text())  # injected by the driver: the page's CSP allows none
    result: dict[str, Any] = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations));"
    )
    return result  # type: ignore[return-value]


def test_a_verified_handle(browser: webdriver.Chrome, daemon: Daemon, devnet: DevnetState) -> None:
    text = visit(browser, daemon, "/id/alice.test", "verified")
    assert "alice.test: verified" in text
    assert devnet.did("alice") in text
    assert "DNS TXT ok" in text and "HTTPS well-known ok" in text and "DID document ok" in text
    assert "History: 1 operation, its signatures verify" in text
    assert "was not compared with this log" in text  # the daemon trusts the directory
    # the table says the same as the history below it (issue 31, item 7), not "skipped"
    row = browser.find_element(By.XPATH, "//tr[th[normalize-space()='PLC log']]").text
    assert "read below" in row and "not compared with the document" in row
    assert "skipped" not in row
    assert browser.find_element(By.CSS_SELECTOR, ".verdict.ok .icon").text == "✓"
    details = browser.find_element(By.TAG_NAME, "details")
    assert details.get_attribute("open") is None  # the raw document is folded away
    # a phone's width: nothing wider than the screen
    browser.set_window_size(390, 844)
    try:
        browser.get(daemon.url + "/id/alice.test")
        browser.save_screenshot(str(ARTIFACTS / "verified-phone.png"))
        assert browser.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth"
        )
    finally:
        browser.set_window_size(1280, 1000)


def test_a_mismatch_a_deactivated_did_and_an_unavailable_handle(
    browser: webdriver.Chrome, daemon: Daemon, devnet: DevnetState
) -> None:
    text = visit(browser, daemon, "/id/bob-old.test", "mismatch")
    assert "bob-old.test: NOT verified: handle and DID do not point at each other" in text
    assert "the document declares bob.test" in text and "handle.invalid" in text
    text = visit(browser, daemon, "/id/" + devnet.did("erin"), "deactivated")
    assert "NOT verified: the DID is deactivated" in text and "tombstoned" in text
    assert "status did_deactivated" in text
    text = visit(browser, daemon, "/id/blackhole.test", "unavailable")
    assert "blackhole.test: could not be checked now (transient failure)" in text
    assert browser.find_element(By.CSS_SELECTOR, ".verdict.unknown .icon").text == "?"


def test_a_did_web(browser: webdriver.Chrome, daemon: Daemon) -> None:
    text = visit(browser, daemon, "/id/web.test", "did-web")
    assert "web.test: verified" in text and "did:web:web.test" in text
    assert "History" not in text and "PLC log" not in text  # no log for did:web


def test_a_did_plc_with_a_long_history(
    browser: webdriver.Chrome, daemon: Daemon, devnet: DevnetState
) -> None:
    names = [new_handle(f"long{i}") for i in range(6)]
    account = PlcAccount(devnet.plc_url, names[0])
    for name in names[1:]:
        account.set_handle(name)
    devnet.set_txt(names[-1], [f"did={account.did}"])
    text = visit(browser, daemon, "/id/" + names[-1], "long-history")
    assert f"{names[-1]}: verified" in text
    assert "History: 6 operations, its signatures verify" in text
    ops = browser.find_elements(By.CSS_SELECTOR, ".timeline > li")
    assert len(ops) == 6 and all("✓ verified" in op.text for op in ops)
    for before, after in itertools.pairwise(names):
        assert f"handle {before} -> {after}" in text  # each op's change from the one before


def test_strangers_strings_render_inert(
    browser: webdriver.Chrome, daemon: Daemon, devnet: DevnetState
) -> None:
    host = f"xss-{uuid.uuid4().hex[:8]}{world.BULK_SUFFIX}"
    did = f"did:web:{host}"
    script = "<script>window.pwned=1;document.title='pwned'</script>"
    document = world.did_web_document(host)
    document["alsoKnownAs"] = [f"at://{host}", f'https://x.test/"><{script}', "at://a'b\"c"]
    document["service"].append(
        {
            "id": "#evil",
            "type": "Evil",
            "serviceEndpoint": f'https://e.test/\'"><img src=x onerror="window.pwned=2">{script}',
        }
    )
    devnet.set_file(host, world.DID_JSON, json.dumps(document))
    devnet.set_txt(host, [f"did={did}"])
    text = visit(browser, daemon, "/id/" + host, "hostile")
    assert f"{host}: verified" in text
    assert script in text  # shown as text, not run
    assert browser.execute_script("return window.pwned") is None
    assert browser.title != "pwned" and not browser.find_elements(
        By.CSS_SELECTOR, "main script, main img"
    )
    page = httpx.get(f"{daemon.url}/id/{host}")
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp  # no script of any origin
    assert page.headers["X-Content-Type-Options"] == "nosniff"


def left(browser: webdriver.Chrome, element: Any) -> None:
    """Waits until the page `element` was on is gone. While the next one loads, Chrome may
    answer a question about the element with an inspector error ("Node with given id does
    not belong to the document") rather than "stale": asked again, it says stale."""
    WebDriverWait(browser, 20, ignored_exceptions=(WebDriverException,)).until(
        staleness_of(element)
    )


def test_the_home_page_and_the_lookup_form(browser: webdriver.Chrome, daemon: Daemon) -> None:
    text = visit(browser, daemon, "/", "home")
    assert "Who is behind a handle or a DID?" in text
    field = browser.find_element(By.ID, "q")
    field.send_keys("@Carol.Test")
    field.submit()
    left(browser, field)
    assert browser.current_url == daemon.url + "/id/%40Carol.Test"  # a permalink
    assert "@Carol.Test: verified" in browser.find_element(By.TAG_NAME, "body").text


def test_the_audits_page_edits_with_the_token(browser: webdriver.Chrome, daemon: Daemon) -> None:
    def add(identifier: str, label: str, token: str) -> str:
        browser.get(daemon.url + "/audits")
        form = browser.find_element(By.CSS_SELECTOR, "form.edit")
        form.find_element(By.NAME, "identifier").send_keys(identifier)
        form.find_element(By.NAME, "label").send_keys(label)
        form.find_element(By.NAME, "token").send_keys(token)
        form.submit()
        left(browser, form)  # the answer's page, not this one
        return browser.find_element(By.TAG_NAME, "body").text

    assert "Not changed: wrong token." in add("grace.test", "team", "guess")
    assert "grace.test" not in browser.find_element(By.TAG_NAME, "table").text
    assert "grace.test is watched." in add("Grace.Test", "team", TOKEN)
    httpx.post(
        daemon.url + "/v1/audit/runs", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    )
    text = visit(browser, daemon, "/audits", "audits")
    assert "grace.test team ok verified" in text
    link = browser.find_element(By.LINK_TEXT, "grace.test")
    link.click()
    left(browser, link)
    assert "1 check" in browser.find_element(By.TAG_NAME, "body").text
    visit(browser, daemon, "/audits/grace.test", "audit-history")


def test_cors_is_for_the_configured_origins_and_the_read_endpoints(daemon: Daemon) -> None:
    url = daemon.url + "/xrpc/com.atproto.identity.resolveHandle?handle=alice.test"
    for _ in range(3):  # resolved, composed from the cache and kept, the kept answer
        allowed = httpx.get(url, headers={"Origin": APP})
        assert allowed.headers["Access-Control-Allow-Origin"] == APP
        assert allowed.headers["Vary"] == "Origin"
    assert (
        "Access-Control-Allow-Origin"
        not in httpx.get(url, headers={"Origin": "http://evil.test"}).headers
    )
    preflight = httpx.options(url, headers={"Origin": APP, "Access-Control-Request-Method": "GET"})
    assert (
        preflight.status_code == 204 and "GET" in preflight.headers["Access-Control-Allow-Methods"]
    )
    assert (
        "Access-Control-Allow-Origin"
        not in httpx.get(daemon.url + "/id/alice.test", headers={"Origin": APP}).headers
    )
    refresh = httpx.options(daemon.url + "/v1/identity/alice.test", headers={"Origin": APP})
    assert refresh.headers["Access-Control-Allow-Origin"] == APP


def test_cors_is_off_by_default_and_a_verifying_daemon_says_the_document_matches(
    devnet: DevnetState, tmp_path: Path
) -> None:
    args = ("--cache", "memory:", "--verify-plc")
    with daemon_here(devnet.env(), tmp_path / "serve.log", *args) as plain:
        answer = httpx.get(
            plain.url + "/xrpc/com.atproto.identity.resolveHandle",
            params={"handle": "alice.test"},
            headers={"Origin": APP},
        )
        assert answer.status_code == 200 and "Access-Control-Allow-Origin" not in answer.headers
        page = httpx.get(plain.url + "/id/alice.test").text
        assert "the log verifies and the document matches it" in page
        assert "was not compared" not in page


def test_the_dnssec_and_pds_checks_have_their_rows(
    browser: webdriver.Chrome, devnet: DevnetState, tmp_path: Path
) -> None:
    """A daemon with DNSSEC validation and the PDS check on: the page's evidence table has a
    DNSSEC row under DNS TXT (secure with its zone; bogus with the reason, the DNS row
    invalid) and a row for the repository at the PDS; accessible in both schemes."""
    env = {**devnet.env(), "ATWHOIS_DNSSEC": "1", "ATWHOIS_CHECK_PDS": "1"}
    with daemon_here(env, tmp_path / "serve.log", "--cache", "memory:") as checking:
        text = visit(browser, checking, "/id/sam.dnssec.test", "dnssec-secure")
        row = browser.find_element(By.XPATH, "//tr[th[normalize-space()='DNSSEC']]").text
        assert "secure" in row and "zone dnssec.test." in row, row
        text = visit(browser, checking, "/id/bruno.broken.dnssec.test", "dnssec-bogus")
        row = browser.find_element(By.XPATH, "//tr[th[normalize-space()='DNSSEC']]").text
        assert "bogus" in row and "no signature by broken.dnssec.test. holds" in row, row
        assert "DNS TXT invalid" in text
        live = next(iter(devnet.live))
        visit(browser, checking, f"/id/{live}", "pds-check")
        row = browser.find_element(By.XPATH, "//tr[th[normalize-space()='repo at the PDS']]")
        assert "hosted" in row.text and "signed by did:key:" in row.text, row.text


def test_static_files_are_served_by_name_and_nothing_else_reaches_the_disk(
    daemon: Daemon,
) -> None:
    """The stylesheet is served; a name over the file system's 255 bytes, a path out of the
    folder and a file that is not there are each a 404 (the first was a 500: ENAMETOOLONG)."""
    css = httpx.get(f"{daemon.url}/static/atwhois.css", timeout=10)
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    for name in ("x" * 300, "..%2Fweb.py", "nothing.css", "%00"):
        answer = httpx.get(f"{daemon.url}/static/{name}", timeout=10)
        assert answer.status_code == 404, (name[:20], answer.status_code)


def test_a_page_view_is_not_a_fetch_of_the_plc_history(daemon: Daemon) -> None:
    """Issue 56: the page's did:plc history comes through the cache (`cache.histories`):
    five views of one identity fetch its `/log/audit` (up to 4 MiB) from the directory
    once; the others are shown what was fetched."""

    def shown(how: str) -> float:
        text = httpx.get(daemon.url + "/metrics").text
        return metrics.value(text, "atwhois_plc_histories_total", how=how)

    fetched, kept = shown("fetched"), shown("kept")
    for _ in range(5):
        page = httpx.get(daemon.url + "/id/dave.test", timeout=30)
        assert page.status_code == 200 and 'id="history"' in page.text
    assert (shown("fetched") - fetched, shown("kept") - kept) == (1, 4)
