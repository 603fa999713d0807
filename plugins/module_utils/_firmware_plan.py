# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""What to flash on one BMC: pure planning from a firmware inventory (collection-internal).

Plain data in, decisions out; no I/O besides hashing a local image file.

- Components are chosen by a ``match`` pattern tested against each
  inventory member's Name, Id and FQDD (case-insensitive): a shell-style glob
  when it holds ``*``, ``?`` or ``[``, otherwise a substring. ``ConnectX-7``
  finds every ConnectX-7 adapter, ``NIC.Slot.3-*`` one slot, ``BIOS`` the BIOS.
- Versions are compared by value, never as strings. Mellanox/NVIDIA adapter
  firmware (ConnectX, BlueField) uses the matrix's firmware grammar, which
  reads iDRAC's ``28.39.10.02`` and mlxfwmanager's ``28.39.1002`` as the same
  version (28, 39, 1002): the iDRAC splits the four-digit subminor into two
  dotted pairs (see docs/matrix.md). Other firmware (BIOS ``2.3.5``, iDRAC
  ``7.10.30.00``) compares field by field, numbers numerically, so
  ``7.10.30.00`` equals ``7.10.30.0`` and precedes ``7.10.50.00``.
- An image's sha256 is checked before anything is sent to a BMC.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import try_parse

KIND_INSTALLED = "Installed"
KIND_PREVIOUS = "Previous"
KIND_AVAILABLE = "Available"

ACTION_NONE = "none"
ACTION_FLASH = "flash"
ACTION_ROLLBACK = "rollback"

# Words in an inventory Name that mark Mellanox/NVIDIA adapter firmware (xx.yy.zzzz versions).
_MELLANOX_WORDS = ("connectx", "bluefield", "mellanox", "nvidia network")
_GLOB_CHARACTERS = re.compile(r"[*?\[]")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIELD = re.compile(r"[.\-_ ]+")


# -- inventory ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InventoryItem:
    """One FirmwareInventory member as the plan needs it."""

    member_id: str
    uri: str
    name: str
    version: str
    fqdd: str = ""
    kind: str = KIND_INSTALLED
    # What an update package is matched against, where the BMC says (iDRAC: PCI vendor:device:subvendor:subdevice).
    hardware_id: str = ""
    updateable: bool = True

    @property
    def mellanox(self) -> bool:
        return any(word in self.name.lower() for word in _MELLANOX_WORDS)

    @property
    def device(self) -> str:
        """What names the device across its Installed/Previous members: the FQDD, else the Id."""
        return self.fqdd or self.member_id

    def as_dict(self) -> Dict[str, Any]:
        return {"id": self.member_id, "name": self.name, "version": self.version, "fqdd": self.fqdd, "kind": self.kind}


def generic_inventory_item(member: Mapping[str, Any]) -> InventoryItem:
    """A SoftwareInventory member read the DMTF way (every member is what is installed)."""
    return InventoryItem(
        member_id=str(member.get("Id") or ""),
        uri=str(member.get("@odata.id") or ""),
        name=str(member.get("Name") or ""),
        version=str(member.get("Version") or "").strip(),
        updateable=member.get("Updateable") is not False,
    )


def matches(pattern: str, item: InventoryItem) -> bool:
    """Whether ``pattern`` names ``item`` (glob or substring of Name, Id or FQDD, case-insensitive)."""
    wanted = pattern.strip().lower()
    if not wanted:
        return False
    fields = [text.lower() for text in (item.name, item.member_id, item.fqdd) if text]
    if _GLOB_CHARACTERS.search(wanted):
        return any(fnmatch.fnmatchcase(text, wanted) for text in fields)
    return any(wanted in text for text in fields)


# -- versions -----------------------------------------------------------------------------------------


def _generic_key(text: str) -> Tuple[Tuple[int, Any], ...]:
    # Numbers before words within a field position, so keys of mixed fields still order.
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower()) for part in _FIELD.split(text.strip()) if part)


def compare_firmware(installed: str, target: str, *, mellanox: bool) -> Optional[int]:
    """-1, 0, 1 comparing two versions of one device's firmware; None when they cannot be compared."""
    if not installed.strip() or not target.strip():
        return None
    if mellanox:
        left, right = try_parse("firmware_nic", installed), try_parse("firmware_nic", target)
        if left is not None and right is not None:
            return left.compare(right)
    left_key, right_key = _generic_key(installed), _generic_key(target)
    # Missing trailing numeric fields are zeros: iDRAC 7.10.30.00 is the 7.10.30 of its release notes.
    width = max(len(left_key), len(right_key))
    left_key += ((0, 0),) * (width - len(left_key))
    right_key += ((0, 0),) * (width - len(right_key))
    if left_key == right_key:
        return 0
    return -1 if left_key < right_key else 1


def same_firmware(installed: str, target: str, *, mellanox: bool) -> bool:
    return compare_firmware(installed, target, mellanox=mellanox) == 0


# -- images -----------------------------------------------------------------------------------------


def normalise_sha256(text: str) -> str:
    """``sha256:ABC...`` or ``abc...`` -> ``abc...``; InvalidInputError when it is not 64 hex digits."""
    value = text.strip().lower()
    if value.startswith("sha256:"):
        value = value[len("sha256:") :]
    if not _SHA256.match(value):
        raise InvalidInputError(f"sha256 must be 64 hexadecimal digits, got {text!r}")
    return value


def sha256_of_file(path: str, *, chunk_size: int = 1024 * 1024) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as image:
            for chunk in iter(lambda: image.read(chunk_size), b""):
                digest.update(chunk)
    except OSError as err:
        raise InvalidInputError(f"Cannot read the image {path}: {err.strerror or err}") from err
    return digest.hexdigest()


def check_sha256(*, actual: str, expected: str, image: str) -> None:
    """Refuse an image whose digest differs: nothing may be uploaded then."""
    if actual.lower() != normalise_sha256(expected):
        raise InvalidInputError(
            f"Checksum mismatch for {image}: sha256 is {actual}, expected {normalise_sha256(expected)}; "
            "nothing was uploaded"
        )


# -- the plan ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentSpec:
    """One component to bring to a version (the module's ``components`` entry)."""

    match: str
    version: str = ""
    image_path: str = ""
    image_uri: str = ""
    sha256: str = ""
    name: str = ""  # a label for reports (the matrix key, e.g. firmware_cx7); defaults to match

    @property
    def label(self) -> str:
        return self.name or self.match


def component_specs(entries: Sequence[Mapping[str, Any]]) -> List[ComponentSpec]:
    """The modules' ``components`` option (firmware_components_argument_spec) as ComponentSpecs."""
    return [
        ComponentSpec(
            match=entry["match"],
            version=entry.get("version") or "",
            image_path=entry.get("image_path") or "",
            image_uri=entry.get("image_uri") or "",
            sha256=entry.get("sha256") or "",
            name=entry.get("name") or "",
        )
        for entry in entries
    ]


@dataclass(frozen=True)
class DevicePlan:
    """One device (FQDD) of a component: what it runs, what it will run."""

    device: str
    member_id: str
    name: str
    installed: str
    target: str
    action: str
    uri: str = ""  # the Installed member's URI (an update's Targets)
    previous: str = ""  # version of the Previous- image the BMC keeps, if any
    rollback_uri: str = ""  # that image's URI, for a rollback

    def as_dict(self) -> Dict[str, Any]:
        entry = {
            "device": self.device,
            "id": self.member_id,
            "name": self.name,
            "installed": self.installed,
            "target": self.target,
            "action": self.action,
        }
        if self.previous:
            entry["previous"] = self.previous
        return entry


@dataclass(frozen=True)
class ComponentPlan:
    spec: ComponentSpec
    action: str
    devices: Tuple[DevicePlan, ...]
    reason: str = ""

    @property
    def needs_work(self) -> bool:
        return self.action != ACTION_NONE

    @property
    def to_change(self) -> Tuple[DevicePlan, ...]:
        return tuple(device for device in self.devices if device.action != ACTION_NONE)

    def as_dict(self) -> Dict[str, Any]:
        return {
            "component": self.spec.label,
            "match": self.spec.match,
            "target": self.spec.version,
            "action": self.action,
            "reason": self.reason,
            "devices": [device.as_dict() for device in self.devices],
        }


@dataclass(frozen=True)
class FlashPlan:
    components: Tuple[ComponentPlan, ...]
    rollback: bool = False
    warnings: Tuple[str, ...] = field(default=())

    @property
    def changes(self) -> Tuple[ComponentPlan, ...]:
        return tuple(component for component in self.components if component.needs_work)

    def as_dict(self) -> List[Dict[str, Any]]:
        return [component.as_dict() for component in self.components]

    def versions(self) -> Dict[str, str]:
        """device -> version installed now (for diff before)."""
        return {device.device: device.installed for component in self.components for device in component.devices}

    def versions_after(self) -> Dict[str, str]:
        """device -> version once the plan is carried out (for diff after)."""
        return {
            device.device: device.target if device.action != ACTION_NONE else device.installed
            for component in self.components
            for device in component.devices
        }


def _describe(items: Sequence[InventoryItem]) -> str:
    names = sorted({f"{item.name} ({item.device})" for item in items})
    shown = ", ".join(names[:12])
    return shown + (f" and {len(names) - 12} more" if len(names) > 12 else "")


def plan_component(
    spec: ComponentSpec,
    inventory: Sequence[InventoryItem],
    *,
    rollback: bool = False,
    allow_downgrade: bool = False,
) -> ComponentPlan:
    """Decide what one component needs. Raises InvalidInputError when the request cannot be met."""
    installed = [item for item in inventory if item.kind == KIND_INSTALLED and matches(spec.match, item)]
    if not installed:
        listed = _describe([item for item in inventory if item.kind == KIND_INSTALLED])
        raise InvalidInputError(f"No installed firmware matches {spec.match!r}; the BMC lists: {listed or 'nothing'}")
    previous_by_device = {item.device: item for item in inventory if item.kind == KIND_PREVIOUS}
    devices: List[DevicePlan] = []
    for item in sorted(installed, key=lambda entry: entry.device):
        previous = previous_by_device.get(item.device)
        target = spec.version.strip()
        if rollback:
            devices.append(_rollback_device(spec, item, previous, target=target))
            continue
        if not target:
            raise InvalidInputError(f"Component {spec.label}: a target version is needed")
        order = compare_firmware(item.version, target, mellanox=item.mellanox)
        if order == 0:
            action = ACTION_NONE
        elif order is not None and order > 0 and not allow_downgrade:
            raise InvalidInputError(
                f"{item.name} ({item.device}) runs {item.version}, newer than the target {target}: "
                "refusing to downgrade (set allow_downgrade, or roll back to the Previous image)"
            )
        else:
            action = ACTION_FLASH
        if not item.updateable and action != ACTION_NONE:
            raise InvalidInputError(f"{item.name} ({item.device}) is not updateable through this BMC")
        devices.append(
            DevicePlan(
                device=item.device,
                member_id=item.member_id,
                name=item.name,
                installed=item.version,
                target=target,
                action=action,
                uri=item.uri,
                previous=previous.version if previous else "",
                rollback_uri=previous.uri if previous else "",
            )
        )
    changing = [device for device in devices if device.action != ACTION_NONE]
    if not changing:
        reason = f"all {len(devices)} device(s) run {spec.version or 'the Previous image'}"
        return ComponentPlan(spec=spec, action=ACTION_NONE, devices=tuple(devices), reason=reason)
    action = ACTION_ROLLBACK if rollback else ACTION_FLASH
    olds = sorted({device.installed for device in changing})
    news = sorted({device.target for device in changing})
    reason = f"{len(changing)} of {len(devices)} device(s): {', '.join(olds)} -> {', '.join(news)}"
    return ComponentPlan(spec=spec, action=action, devices=tuple(devices), reason=reason)


def _rollback_device(
    spec: ComponentSpec, item: InventoryItem, previous: Optional[InventoryItem], *, target: str
) -> DevicePlan:
    """Roll one device back to the image the BMC keeps; with a target, only if that image is the target."""
    if target and same_firmware(item.version, target, mellanox=item.mellanox):
        action = ACTION_NONE
    elif previous is None:
        raise InvalidInputError(
            f"{item.name} ({item.device}) has no Previous firmware image on the BMC to roll back to"
        )
    elif target and not same_firmware(previous.version, target, mellanox=item.mellanox):
        raise InvalidInputError(
            f"The Previous image of {item.name} ({item.device}) is {previous.version}, not {target}: "
            "flash the target image instead of rolling back"
        )
    else:
        action = ACTION_ROLLBACK
    return DevicePlan(
        device=item.device,
        member_id=item.member_id,
        name=item.name,
        installed=item.version,
        target=previous.version if previous is not None and action == ACTION_ROLLBACK else (target or item.version),
        action=action,
        uri=item.uri,
        previous=previous.version if previous else "",
        rollback_uri=previous.uri if previous else "",
    )


def plan_flash(
    specs: Sequence[ComponentSpec],
    inventory: Sequence[InventoryItem],
    *,
    rollback: bool = False,
    allow_downgrade: bool = False,
) -> FlashPlan:
    """The plan for every component; one device matched by two components is an error."""
    labels = [spec.label for spec in specs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        # Images and jobs are kept by label: a second component of that name would upload the first one's image.
        raise InvalidInputError(f"Components named more than once: {', '.join(repeated)}; give each its own name")
    components = tuple(
        plan_component(spec, inventory, rollback=rollback, allow_downgrade=allow_downgrade) for spec in specs
    )
    owners: Dict[str, str] = {}
    for component in components:
        for device in component.devices:
            other = owners.setdefault(device.device, component.spec.label)
            if other != component.spec.label:
                raise InvalidInputError(
                    f"{device.name} ({device.device}) is matched by both {other} and {component.spec.label}: "
                    "make the match patterns narrower"
                )
    return FlashPlan(components=components, rollback=rollback)


def verify_versions(plan: FlashPlan, inventory: Sequence[InventoryItem]) -> List[str]:
    """Devices of the plan that do not run their target now: one line each ('' list when all do)."""
    installed = {item.device: item for item in inventory if item.kind == KIND_INSTALLED}
    problems = []
    for component in plan.changes:
        for device in component.to_change:
            now = installed.get(device.device)
            if now is None:
                problems.append(f"{device.name} ({device.device}) is no longer in the firmware inventory")
            elif not same_firmware(now.version, device.target, mellanox=now.mellanox):
                problems.append(f"{device.name} ({device.device}) runs {now.version}, expected {device.target}")
    return problems
