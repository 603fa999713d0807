"""How the BMC reads multipart/form-data bodies (pure)."""

from __future__ import annotations

import pytest

from gpufleet_twin.redfish.app import parse_form_data
from gpufleet_twin.redfish.model import RedfishError


def _form(boundary: str, parts: list[tuple[str, str]]) -> bytes:
    body = b""
    for head, content in parts:
        body += f"--{boundary}\r\n{head}\r\n\r\n{content}\r\n".encode()
    return body + f"--{boundary}--\r\n".encode()


def test_form_data_parts_with_a_multipart_label_on_the_file_are_accepted() -> None:
    """urllib3's make_multipart (Dell's module) labels the file part multipart/form-data."""
    body = _form(
        "b0undary",
        [
            ('Content-Disposition: form-data; name="UpdateParameters"\r\nContent-Type: application/json', "{}"),
            (
                'Content-Disposition: form-data; name="file"; filename="BIOS_2.4.1.bin"\r\n'
                "Content-Type: multipart/form-data",
                "GPUFLEET-FW/1 component=BIOS version=2.4.1\n--not-a-boundary\r\nstill content",
            ),
        ],
    )
    parts = parse_form_data(body, 'multipart/form-data; boundary="b0undary"')
    assert [(p.name, p.filename) for p in parts] == [("UpdateParameters", None), ("file", "BIOS_2.4.1.bin")]
    assert parts[1].content.endswith(b"--not-a-boundary\r\nstill content")
    assert parts[1].content_type == "multipart/form-data"


def test_form_data_without_a_boundary_is_an_unsupported_media_type() -> None:
    with pytest.raises(RedfishError) as refused:
        parse_form_data(b"{}", "application/json")
    assert refused.value.status == 415
