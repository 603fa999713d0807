# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""What every module file shares (collection-internal): option pieces.

Each argument-spec piece is mirrored by the doc fragment named in its
docstring (as community.hashi_vault composes its specs), so an option has one
name, one type and one default across the collection.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from ansible.module_utils.basic import env_fallback

Spec = Dict[str, Dict[str, Any]]

WAIT_OPTIONS = ("wait", "wait_timeout", "wait_sleep")
WAIT_TIMEOUT = 3600
WAIT_SLEEP = 10.0


def wait_argument_spec(
    *, options: Sequence[str] = WAIT_OPTIONS, wait_timeout: int = WAIT_TIMEOUT, wait_sleep: float = WAIT_SLEEP
) -> Spec:
    """The wait options named in ``options`` (doc fragments gpufleet.upgrade.wait, .timeout, .sleep).

    A module whose work needs another default passes it here and documents it
    over the fragment's, saying why.
    """
    pieces: Spec = {
        "wait": {"type": "bool", "default": True},
        "wait_timeout": {"type": "int", "default": wait_timeout},
        "wait_sleep": {"type": "float", "default": wait_sleep},
    }
    unknown = sorted(set(options) - set(pieces))
    if unknown:
        raise ValueError(f"not wait options: {', '.join(unknown)}")
    return {name: pieces[name] for name in options}


def redfish_argument_spec(*, credentials_required: bool = False, aliases: Optional[Mapping[str, str]] = None) -> Spec:
    """How to reach a BMC (doc fragment gpufleet.upgrade.redfish); credentials fall back to REDFISH_* variables.

    ``aliases`` maps an option to an older name a module accepted before the
    options were shared, so existing playbooks keep working.
    """
    spec: Spec = {
        "bmc_username": {"type": "str", "fallback": (env_fallback, ["REDFISH_USERNAME"])},
        "bmc_password": {"type": "str", "no_log": True, "fallback": (env_fallback, ["REDFISH_PASSWORD"])},
        "bmc_validate_certs": {"type": "bool", "default": True},
        "bmc_ca_path": {"type": "path"},
        "bmc_timeout": {"type": "int", "default": 30},
    }
    if credentials_required:
        spec["bmc_username"]["required"] = True
        spec["bmc_password"]["required"] = True
    for name, alias in (aliases or {}).items():
        if name not in spec:
            raise ValueError(f"not a Redfish option: {name}")
        spec[name]["aliases"] = [alias]
    return spec


def firmware_components_argument_spec() -> Spec:
    """The firmware to flash (doc fragment gpufleet.upgrade.firmware_components); see _firmware_plan.component_specs."""
    return {
        "components": {
            "type": "list",
            "elements": "dict",
            "required": True,
            "options": {
                "match": {"type": "str", "required": True},
                "version": {"type": "str"},
                "image_path": {"type": "path"},
                "image_uri": {"type": "str"},
                "sha256": {"type": "str"},
                "name": {"type": "str"},
            },
        },
    }
