"""Pure handle->DID rules (H-DNS-*, H-WK-*), no network."""

from __future__ import annotations

import pytest

from atwhois.resolver import errors, handle

PLC = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
OTHER = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"


@pytest.mark.parametrize(
    ("records", "did"),
    [
        ([[f"did={PLC}".encode()]], PLC),
        ([[b"did=did:plc:ewvi7nx", b"zyoun6zhxrhs64oiz"]], PLC),  # H-DNS-4
        ([[b"v=spf1 -all"], [f"did={PLC}".encode()], [b"hello"]], PLC),  # H-DNS-2
        ([[f"did={PLC}".encode()], [f"did={PLC}".encode()]], PLC),  # H-DNS-3 duplicates
        ([[b"did=did:web:example.com"]], "did:web:example.com"),
    ],
)
def test_txt_records_to_did(records: list[list[bytes]], did: str) -> None:
    assert handle.did_from_txt(records) == did


def test_txt_errors_are_classified() -> None:
    with pytest.raises(errors.NotFound):
        handle.did_from_txt([[b"hello"], [b"DID=" + PLC.encode()]])  # prefix is case-sensitive
    with pytest.raises(errors.NotFound):
        handle.did_from_txt([])
    with pytest.raises(errors.AmbiguousHandle):  # H-DNS-3
        handle.did_from_txt([[f"did={PLC}".encode()], [f"did={OTHER}".encode()]])
    for bad in (
        b"did=not-a-did",
        b"did=did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF",
        b"did=did:plc:UPPERCASEAAAAAAAAAAAAAAA",
        b"did=" + PLC.encode() + b" ",
    ):
        with pytest.raises(errors.InvalidData):
            handle.did_from_txt([[bad]])


@pytest.mark.parametrize(
    "body",
    [PLC.encode(), f"  {PLC}\n".encode(), f"\r\n\t{PLC}\r\n".encode()],  # H-WK-4
)
def test_well_known_body(body: bytes) -> None:
    assert handle.did_from_well_known(body) == PLC


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   \n",
        b"<!doctype html><html>parked</html>",
        b"\xff\xfe",
        f"did={PLC}".encode(),
        f"{PLC}\n{OTHER}".encode(),
        b"did:plc:short",
    ],
)
def test_well_known_garbage_is_invalid_data(body: bytes) -> None:
    with pytest.raises(errors.InvalidData):
        handle.did_from_well_known(body)


def test_txt_name_length_limit() -> None:
    assert handle.txt_name("alice.test") == "_atproto.alice.test"
    long_handle = ".".join(["a" * 61] * 4)  # 247 chars: valid handle, too long for DNS
    assert handle.txt_name(long_handle) is None  # H-DNS-5
