"""The twin's firmware image format and the version spellings BMCs use.

A real Dell Update Package is a signed executable the iDRAC unpacks and
checks; the twin only needs to know which component an image is for and
which version it carries, so its images are a one-line ASCII header followed
by any padding (so that images have a realistic size)::

    GPUFLEET-FW/1 component=ConnectX-7 version=28.41.1000\\n<padding bytes>

* ``component`` is one of :data:`COMPONENTS`: ``ConnectX-7``, ``ConnectX-6``
  (ConnectX-6 and ConnectX-6 Dx adapters; the firmware's major number, 20 or
  22, decides which devices an image fits, as the PSID does on real cards),
  ``BIOS`` or ``iDRAC``.
* ``version`` is the vendor's own spelling: ``28.41.1000`` as ``mlxfwmanager``
  and ``ibstat`` print NIC firmware (the iDRAC shows it as ``28.41.10.00``,
  both spellings are accepted), ``2.3.5`` for the BIOS, ``7.10.50.00`` for the
  iDRAC.
* Further ``key=value`` words are allowed and ignored; the header line must
  end with a newline within the first 512 bytes.

Anything else (a truncated header, an unknown component) is refused the way
an iDRAC refuses a package whose signature it cannot verify.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAGIC = b"GPUFLEET-FW/1"
HEADER_LIMIT = 512
COMPONENTS = ("ConnectX-7", "ConnectX-6", "BIOS", "iDRAC")
NIC_COMPONENTS = ("ConnectX-7", "ConnectX-6")

_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,31}$")
_NATIVE_NIC = re.compile(r"^(\d+)\.(\d+)\.(\d{4})$")
_DELL_NIC = re.compile(r"^(\d+)\.(\d+)\.(\d{2})\.(\d{2})$")


class ImageRejected(ValueError):
    """The image is not a firmware package the BMC can apply."""


@dataclass(frozen=True)
class FirmwareImage:
    component: str
    version: str  # the vendor's spelling (NIC firmware as 28.41.1000)
    size: int


def build_firmware_image(component: str, version: str, *, size: int = 4096, extra: str = "") -> bytes:
    """An image for ``component`` at ``version``, padded to ``size`` bytes.

    Tests and the collection's test fixtures use this to make update files.
    """
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}; expected one of {', '.join(COMPONENTS)}")
    header = f"{MAGIC.decode()} component={component} version={version}"
    if extra:
        header += f" {extra}"
    data = (header + "\n").encode("ascii")
    if len(data) > HEADER_LIMIT:
        raise ValueError("header too long")
    # Padding that is not all zeros, so that transfers are not trivially compressible.
    pattern = b"\x00\xffGPUFLEET"
    missing = max(0, size - len(data))
    return data + (pattern * (missing // len(pattern) + 1))[:missing]


def parse_firmware_image(data: bytes) -> FirmwareImage:
    """Read an image's header; raise :class:`ImageRejected` when it is not a valid package."""
    if not data.startswith(MAGIC + b" "):
        raise ImageRejected("the file is not a firmware update package")
    end = data.find(b"\n", 0, HEADER_LIMIT)
    if end < 0:
        raise ImageRejected("the update package header is truncated")
    try:
        words = data[len(MAGIC) + 1 : end].decode("ascii").split()
    except UnicodeDecodeError as exc:
        raise ImageRejected("the update package header is not ASCII") from exc
    fields: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ImageRejected(f"malformed header word {word!r}")
        fields[key] = value
    component = fields.get("component", "")
    if component not in COMPONENTS:
        raise ImageRejected(f"unknown component {component!r}")
    version = fields.get("version", "")
    if not _VERSION.match(version):
        raise ImageRejected(f"invalid version {version!r}")
    if component in NIC_COMPONENTS:
        version = native_nic_version(version)
    return FirmwareImage(component=component, version=version, size=len(data))


def dell_nic_version(native: str) -> str:
    """``28.39.1002`` -> ``28.39.10.02``: how iDRAC inventories print Mellanox firmware."""
    match = _NATIVE_NIC.match(native)
    if match is None:
        return native
    major, minor, sub = match.groups()
    return f"{major}.{minor}.{sub[:2]}.{sub[2:]}"


def native_nic_version(version: str) -> str:
    """``28.39.10.02`` -> ``28.39.1002``; native spellings pass through unchanged.

    For Mellanox firmware only: an iDRAC version (``7.10.30.00``) has the same shape.
    """
    match = _DELL_NIC.match(version)
    if match is None:
        return version
    major, minor, high, low = match.groups()
    return f"{major}.{minor}.{high}{low}"


def firmware_major(version: str) -> int | None:
    """The leading number of a version (28 for ConnectX-7 firmware), None when not numeric."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None
