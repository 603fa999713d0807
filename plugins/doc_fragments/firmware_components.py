# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

# The firmware to flash, the same entries for one BMC (firmware_idrac_flash)
# and for a rollout over nodes (nic_firmware_rollout); mirrored by
# firmware_components_argument_spec() in plugins/module_utils/_module.py.

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  components:
    description: The components to bring to a version.
    type: list
    elements: dict
    required: true
    suboptions:
      match:
        description:
          - Which inventory members, as a shell-style glob (when it holds C(*), C(?) or C([)) or a substring,
            tested case-insensitively against each member's C(Name), C(Id) and FQDD (C(ConnectX-7), C(NIC.Slot.3-*)).
        type: str
        required: true
      version:
        description:
          - Target version (the matrix's C(firmware_*) value). Required unless O(rollback=true); with
            O(rollback=true) it names the version the C(Previous-) image must have (and makes a repeated rollback a
            no-op).
        type: str
      image_path:
        description: Local image file, pushed with C(MultipartHttpPushUri). Needs O(components[].sha256).
        type: path
      image_uri:
        description: HTTP(S) URL the BMC fetches the image from (C(SimpleUpdate)). Needs O(components[].sha256).
        type: str
      sha256:
        description:
          - The image's sha256 (64 hex digits, optionally prefixed C(sha256:)).
          - Required with an image (O(components[].image_path) or O(components[].image_uri)); not with O(rollback).
        type: str
      name:
        description:
          - A label for the result, for example the matrix key C(firmware_cx7). Defaults to O(components[].match).
        type: str
"""
