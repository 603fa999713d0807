# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Version grammar of every matrix component (collection-internal).

Each component has its own version format and its own ordering; versions are
never compared as strings. ``parse_version(component, text)`` returns a
``Version`` whose ``key`` orders releases of that component, or raises
``VersionParseError`` naming what was expected. Placeholders such as
``6.x TBD`` are recognised separately (``is_placeholder``) because whether
they are allowed depends on the stage, not on the grammar.

Decisions documented in docs/matrix.md:

* MOFED and DOCA: the legacy tag ``24.07-0.6.1.0`` and the DOCA tag
  ``doca3.1.0-25.07-0.9.7.0-0`` both carry the OFED driver version
  ``YY.MM-a.b.c.d``; ordering uses that driver version (then the container
  build number), so the move from MOFED 24.10 to DOCA 25.07 is an upgrade and
  the ``docaX.Y.Z`` prefix is a label of the same driver build. A trailing
  container build (``-0``) is compared only when both sides carry one.
* NIC firmware: Dell iDRAC prints ``28.39.1002`` as ``28.39.10.02``; both
  normalise to (28, 39, 1002). The first field names the adapter family.
* Kernel: RPM-like. The upstream version (``5.14.0``) is compared
  numerically, then the release (``427.40.1.el9_4``) segment by segment as
  rpmvercmp does (digits numerically, letters alphabetically, a numeric
  segment is newer than an alphabetic one); the architecture is ignored.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Optional, Tuple

COMPONENT_EXAMPLES = {
    "openshift": "an OpenShift version like 4.16.23",
    "kernel": "a kernel version like 5.14.0-427.40.1.el9_4.x86_64",
    "gpu_operator": "a GPU Operator version like v24.9.0",
    "gpu_driver": "a driver version like 560.35.03",
    "cuda": "a CUDA version like 12.6",
    "network_operator": "a Network Operator version like v24.7.0",
    "mofed": "a MOFED/DOCA driver version like 24.07-0.6.1.0 or doca3.1.0-25.07-0.9.7.0-0",
    "firmware": "a NIC firmware version like 28.40.1000 (or Dell's 28.40.10.00)",
    "sriov_operator": "an SR-IOV operator version like 4.18.0",
    "dcgm": "a DCGM-exporter version like 3.3.8-3.6.0 (DCGM version - exporter version)",
    "dcgm_hostengine": (
        "a standalone DCGM host engine version like 4.2.3-1-ubuntu22.04 (ClusterPolicy spec.dcgm, "
        "used when the exporter connects to it instead of its embedded one)"
    ),
    "device_plugin": "a device plugin version like v0.16.2",
    "container_toolkit": "a container toolkit version like v1.16.2",
    "nccl": "an NCCL version like 2.22.3",
    "driver_type": "precompiled or compiled: how the GPU Operator installs the driver (driver.usePrecompiled)",
}

# driver_type is not a version: a change of it is disruptive at any version (docs/gpu_operator.md).
DRIVER_TYPES = ("compiled", "precompiled")

VERSION_COMPONENTS = tuple(name for name in COMPONENT_EXAMPLES if name != "firmware")

FIRMWARE_PREFIX = "firmware_"
FIRMWARE_KEY_PATTERN = re.compile(r"^firmware_[a-z0-9][a-z0-9_]*$")

_PLACEHOLDER_WORDS = re.compile(r"\b(tbd|tba|todo|unknown|latest)\b|\?", re.IGNORECASE)
_WILDCARD_SEGMENT = re.compile(r"(^|[.\-])[xX*](?=$|[.\-\s])")


class VersionParseError(ValueError):
    """A version string that does not fit its component's grammar."""

    def __init__(self, component: str, text: str, expected: str) -> None:
        super().__init__(f"found {text!r}, expected {expected}")
        self.component = component
        self.text = text
        self.expected = expected


@dataclass(frozen=True)
class Version:
    """One parsed version.

    ``key`` orders versions of one component; ``tail`` holds a part compared
    only when both sides have it (the container build of a MOFED tag).
    ``detail`` carries parsed facts rules need (driver branch, RHEL of a kernel...).
    """

    component: str
    text: str
    key: Tuple
    tail: Optional[Tuple] = None
    detail: dict = field(default_factory=dict, compare=False, hash=False)

    def compare(self, other: Version) -> int:
        """-1, 0 or 1 comparing two versions of the same component."""
        if self.key != other.key:
            return -1 if self.key < other.key else 1
        if self.tail is not None and other.tail is not None and self.tail != other.tail:
            return -1 if self.tail < other.tail else 1
        return 0

    def same_as(self, other: Version) -> bool:
        return self.compare(other) == 0

    def __str__(self) -> str:
        return self.text


def component_kind(component: str) -> str:
    """The grammar a matrix key uses: firmware_<name> keys share one."""
    if component.startswith(FIRMWARE_PREFIX):
        return "firmware"
    return component


def is_version_component(component: str) -> bool:
    return component in VERSION_COMPONENTS or bool(FIRMWARE_KEY_PATTERN.match(component))


def expected_text(component: str) -> str:
    return COMPONENT_EXAMPLES.get(component_kind(component), "a version")


def is_placeholder(text: str) -> bool:
    """True for values that stand for a version not decided yet: '6.x TBD', 'TBD', '4.17.x'."""
    stripped = text.strip()
    if not stripped:
        return False
    return bool(_PLACEHOLDER_WORDS.search(stripped) or _WILDCARD_SEGMENT.search(stripped))


def placeholder_prefix(text: str) -> Tuple[int, ...]:
    """The numeric fields a placeholder does commit to: '6.x TBD' -> (6,), '4.17.x' -> (4, 17)."""
    fields = []
    for part in re.split(r"[.\-\s]", text.strip()):
        if part.isdigit():
            fields.append(int(part))
        else:
            break
    return tuple(fields)


def _ints(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _rpm_segments(text: str) -> Tuple:
    # rpmvercmp: compare maximal runs of digits or letters; separators only
    # delimit. A numeric run is newer than an alphabetic one, hence the tags.
    segments = []
    for run in re.findall(r"\d+|[A-Za-z]+", text):
        if run.isdigit():
            segments.append((1, int(run), ""))
        else:
            segments.append((0, 0, run))
    return tuple(segments)


_RELEASE_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([A-Za-z0-9][A-Za-z0-9.\-]*))?$")
_DRIVER = re.compile(r"^(\d{3,})\.(\d+)(?:\.(\d+))?$")
_CUDA = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
_MOFED = re.compile(
    r"^(?:doca(?P<doca>\d+(?:\.\d+){1,3})-)?"
    r"(?P<major>\d+)\.(?P<minor>\d+)-(?P<rest>\d+(?:\.\d+){2,4})"
    r"(?:-(?P<build>\d+))?$"
)
_FIRMWARE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?$")
_OPENSHIFT = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([A-Za-z0-9][A-Za-z0-9.\-]*))?$")
_KERNEL = re.compile(
    r"^(?P<version>\d+(?:\.\d+)+)-(?P<release>[A-Za-z0-9._+~\-]+?)(?:\.(?P<arch>x86_64|aarch64|ppc64le|s390x|noarch))?$"
)
_DCGM = re.compile(r"^(\d+\.\d+\.\d+)-(\d+\.\d+\.\d+)(?:-([a-z][a-z0-9.\-]*))?$")
_HOSTENGINE = re.compile(r"^(\d+\.\d+\.\d+)(?:-(\d+))?(?:-([a-z][a-z0-9.\-]*))?$")
_TOOL = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([a-z][a-z0-9.\-]*))?$")
_OS_SUFFIX = re.compile(r"^(?:ubi\d+|ubuntu[\d.]*|rhel[\d.]*|rhcos[\d.\-]*|centos\d*|distroless)$")
_NCCL = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-(\d+))?$")
_DIST = re.compile(r"\bel(\d+)(?:_(\d+))?\b")


def _prerelease_key(pre: Optional[str]) -> Tuple:
    # A pre-release (4.19.0-ec.2, v24.3.0-rc.1) sorts before its release.
    if pre is None:
        return (1,)
    return (0, _rpm_segments(pre))


def _parse_release(component: str, text: str) -> Version:
    match = _RELEASE_VERSION.match(text)
    if not match:
        raise VersionParseError(component, text, expected_text(component))
    numbers = tuple(int(match.group(i)) for i in (1, 2, 3))
    return Version(component, text, numbers + _prerelease_key(match.group(4)))


def _parse_driver(text: str) -> Version:
    match = _DRIVER.match(text)
    if not match:
        raise VersionParseError("gpu_driver", text, expected_text("gpu_driver"))
    branch = int(match.group(1))
    # Two-part drivers (595.80) exist; a missing patch orders as 0.
    numbers = (branch, int(match.group(2)), int(match.group(3) or 0))
    return Version("gpu_driver", text, numbers, detail={"branch": branch})


def _parse_cuda(text: str) -> Version:
    match = _CUDA.match(text)
    if not match:
        raise VersionParseError("cuda", text, expected_text("cuda"))
    return Version("cuda", text, (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)))


def _parse_mofed(text: str) -> Version:
    match = _MOFED.match(text)
    if not match:
        raise VersionParseError("mofed", text, expected_text("mofed"))
    driver = (int(match.group("major")), int(match.group("minor")), *_ints(match.group("rest")))
    build = match.group("build")
    doca = match.group("doca")
    driver_text = "{}.{}-{}".format(match.group("major"), match.group("minor"), match.group("rest"))
    return Version(
        "mofed",
        text,
        (driver,),
        tail=(int(build),) if build is not None else None,
        detail={"driver": driver_text, "doca": doca, "release": (driver[0], driver[1])},
    )


def _parse_firmware(component: str, text: str) -> Version:
    match = _FIRMWARE.match(text)
    if not match:
        raise VersionParseError(component, text, expected_text(component))
    major, minor = int(match.group(1)), int(match.group(2))
    if match.group(4) is None:
        subminor = int(match.group(3))
    else:
        # Dell iDRAC splits the four-digit subminor into two dotted pairs.
        if len(match.group(3)) > 2 or len(match.group(4)) > 2:
            raise VersionParseError(component, text, expected_text(component))
        subminor = int(match.group(3) + match.group(4).zfill(2))
    return Version(
        component,
        text,
        (major, minor, subminor),
        detail={"family_id": major, "train": (minor, subminor)},
    )


def _parse_openshift(text: str) -> Version:
    match = _OPENSHIFT.match(text)
    if not match:
        raise VersionParseError("openshift", text, expected_text("openshift"))
    numbers = tuple(int(match.group(i)) for i in (1, 2, 3))
    return Version(
        "openshift",
        text,
        numbers + _prerelease_key(match.group(4)),
        detail={"minor": f"{numbers[0]}.{numbers[1]}"},
    )


def _parse_kernel(text: str) -> Version:
    match = _KERNEL.match(text)
    if not match:
        raise VersionParseError("kernel", text, expected_text("kernel"))
    version, release = match.group("version"), match.group("release")
    dist = _DIST.search(release)
    rhel = None
    if dist:
        rhel = f"{dist.group(1)}.{dist.group(2)}" if dist.group(2) else dist.group(1)
    stream = re.match(r"^(\d+)", release)
    return Version(
        "kernel",
        text,
        (_ints(version), _rpm_segments(release)),
        detail={
            "version": version,
            "release": release,
            "arch": match.group("arch"),
            "rhel": rhel,
            "release_stream": stream.group(1) if stream else None,
        },
    )


def _parse_dcgm(text: str) -> Version:
    match = _DCGM.match(text)
    if not match:
        raise VersionParseError("dcgm", text, expected_text("dcgm"))
    return Version(
        "dcgm",
        text,
        (_ints(match.group(1)), _ints(match.group(2))),
        detail={"dcgm": match.group(1), "exporter": match.group(2), "suffix": match.group(3)},
    )


def _parse_dcgm_hostengine(text: str) -> Version:
    # The image tag is DCGM version, package build, base image (4.2.3-1-ubuntu22.04).
    match = _HOSTENGINE.match(text)
    if not match:
        raise VersionParseError("dcgm_hostengine", text, expected_text("dcgm_hostengine"))
    return Version(
        "dcgm_hostengine",
        text,
        (_ints(match.group(1)), int(match.group(2) or 0)),
        detail={"dcgm": match.group(1), "suffix": match.group(3)},
    )


def _parse_tool(component: str, text: str) -> Version:
    # Operand image tags may carry an OS suffix (v0.16.2-ubi8, v1.16.2-ubuntu20.04): the same release
    # built for another base image. Any other suffix (v0.17.0-rc.1) is a pre-release, older than its release.
    match = _TOOL.match(text)
    if not match:
        raise VersionParseError(component, text, expected_text(component))
    suffix = match.group(4)
    pre = None if suffix is None or _OS_SUFFIX.match(suffix) else suffix
    numbers = tuple(int(match.group(i)) for i in (1, 2, 3))
    return Version(component, text, numbers + _prerelease_key(pre), detail={"suffix": suffix})


def _parse_nccl(text: str) -> Version:
    match = _NCCL.match(text)
    if not match:
        raise VersionParseError("nccl", text, expected_text("nccl"))
    return Version("nccl", text, (*tuple(int(match.group(i)) for i in (1, 2, 3)), int(match.group(4) or 0)))


def _parse_sriov(text: str) -> Version:
    # OLM CSVs carry a build suffix (4.16.0-202410011135); the release is x.y.z.
    match = _RELEASE_VERSION.match(text)
    if not match:
        raise VersionParseError("sriov_operator", text, expected_text("sriov_operator"))
    numbers = tuple(int(match.group(i)) for i in (1, 2, 3))
    suffix = match.group(4)
    build = (int(suffix),) if suffix and suffix.isdigit() else None
    key = numbers + (_prerelease_key(None) if build is not None else _prerelease_key(suffix))
    return Version("sriov_operator", text, key, tail=build, detail={"minor": f"{numbers[0]}.{numbers[1]}"})


def _parse_driver_type(text: str) -> Version:
    if text not in DRIVER_TYPES:
        raise VersionParseError("driver_type", text, "precompiled or compiled")
    return Version("driver_type", text, (DRIVER_TYPES.index(text),))


def parse_version(component: str, text: object) -> Version:
    """Parse ``text`` by the grammar of ``component`` (``firmware_<name>`` keys included)."""
    if not isinstance(text, str):
        raise VersionParseError(component, repr(text), expected_text(component) + " as a quoted string")
    value = text.strip()
    kind = component_kind(component)
    if kind in ("gpu_operator", "network_operator"):
        return _parse_release(component, value)
    if kind == "gpu_driver":
        return _parse_driver(value)
    if kind == "cuda":
        return _parse_cuda(value)
    if kind == "mofed":
        return _parse_mofed(value)
    if kind == "firmware":
        return _parse_firmware(component, value)
    if kind == "openshift":
        return _parse_openshift(value)
    if kind == "kernel":
        return _parse_kernel(value)
    if kind == "dcgm":
        return _parse_dcgm(value)
    if kind == "dcgm_hostengine":
        return _parse_dcgm_hostengine(value)
    if kind in ("device_plugin", "container_toolkit"):
        return _parse_tool(component, value)
    if kind == "nccl":
        return _parse_nccl(value)
    if kind == "sriov_operator":
        return _parse_sriov(value)
    if kind == "driver_type":
        return _parse_driver_type(value)
    raise VersionParseError(component, value, "a known component")


def try_parse(component: str, text: object) -> Optional[Version]:
    try:
        return parse_version(component, text)
    except VersionParseError:
        return None


def compare_versions(component: str, left: str, right: str) -> int:
    """Order two version strings of one component; raises VersionParseError when either does not parse."""
    return parse_version(component, left).compare(parse_version(component, right))


# An audit compares the same few version strings on every node: parse each pair once.
@functools.lru_cache(maxsize=4096)
def same_version(component: str, left: Optional[str], right: Optional[str]) -> bool:
    """Equal by the component's rules; values that do not parse fall back to exact text."""
    if left is None or right is None:
        return left is right
    parsed_left, parsed_right = try_parse(component, left), try_parse(component, right)
    if parsed_left is None or parsed_right is None:
        return left.strip() == right.strip()
    return parsed_left.same_as(parsed_right)
