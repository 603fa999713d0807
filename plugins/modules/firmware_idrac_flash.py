#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: firmware_idrac_flash
short_description: Flash NIC, BIOS or BMC firmware through one Redfish BMC (Dell iDRAC and DMTF services)
version_added: 0.1.0
description:
  - Reads the BMC's C(FirmwareInventory), picks the components to update by name, Id or FQDD pattern
    (C(ConnectX-7), C(NIC.Slot.3-*), C(BIOS), C(iDRAC)) and compares the installed version with the target by value;
    a component already at its target is left alone and the task reports no change.
  - Mellanox/NVIDIA adapter firmware is compared in the matrix's firmware grammar, where iDRAC's C(28.39.10.02) and
    mlxfwmanager's C(28.39.1002) are the same version; other firmware compares field by field, numerically.
  - Checks each local image's sha256 before anything is sent to the BMC, and the sha256 of an image served over
    HTTP(S) (downloaded once) before the BMC is asked to fetch it. A mismatch fails the task and nothing is uploaded.
  - Pushes local images with the UpdateService's C(MultipartHttpPushUri), images given by URL with C(SimpleUpdate)
    (C(ImageURI)), then follows the Redfish task (on an iDRAC, the Dell job, which survives a BMC restart) with a
    bounded wait. Updates apply C(OnReset) or C(Immediate) (C(@Redfish.OperationApplyTime)).
  - With O(reboot=true), resets the host (C(ComputerSystem.Reset)), follows the jobs to their end, waits for the host
    and a restarting BMC to come back, then reads C(FirmwareInventory) again and fails unless every device runs its
    target. The session is logged out in every case.
  - With O(rollback=true), flashes the C(Previous-) image the iDRAC keeps for each matched device (Dell's documented
    rollback, C(SimpleUpdate) with the C(Previous-) member as C(ImageURI)) instead of an image.
  - Firmware jobs already waiting for a host reset (a run interrupted before its reboot) are applied first with
    O(reboot=true); without it nothing more is scheduled and a warning says so.
  - URIs come from the service root (no vendor paths in the generic client); iDRAC specifics (job URIs, member ids,
    rollback) live in one adapter. Failures carry the BMC's own message (C(@Message.ExtendedInfo), the job's
    C(Message) and C(MessageId)), the BMC's address and the job id.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpufleet.upgrade.redfish
  - gpufleet.upgrade.firmware_components
  - gpufleet.upgrade.wait.sleep
attributes:
  check_mode:
    support: full
    description: Reads the inventory and reports what would be flashed (and the checksums); uploads nothing.
  diff_mode:
    support: full
    description: Per device, the firmware version before and after.
options:
  bmc_address:
    description: The BMC, C(https://host[:port]).
    type: str
    required: true
    aliases: [baseurl]
  bmc_username:
    required: true
  bmc_password:
    required: true
  bmc_ca_path:
    aliases: [ca_path]
  bmc_timeout:
    aliases: [timeout]
  apply_time:
    description: When the BMC applies the update. C(Immediate) makes the BMC reboot the host itself for host components.
    type: str
    choices: [OnReset, Immediate]
    default: OnReset
  reboot:
    description: Reset the host to apply updates scheduled C(OnReset), wait for it and verify the new versions.
    type: bool
    default: false
  reset_type:
    description: C(ResetType) of the host reset.
    type: str
    choices: [GracefulRestart, ForceRestart, PowerCycle]
    default: GracefulRestart
  power_cycle_on_reboot_pending:
    description:
      - What to do when an update job ends "Job completed, server reboot pending" (an iDRAC NIC whose firmware
        activates only at a cold boot; dell/iDRAC-Redfish-Scripting issues 266 and 375).
      - C(true) power-cycles the host (C(PowerCycle), else C(ForceOff) then C(On)), follows the jobs again and
        verifies the versions in FirmwareInventory.
      - C(false) stops with an error naming the BMC, the jobs and how to complete them; nothing is power cycled.
      - Check mode never power-cycles.
    type: bool
    default: false
  rollback:
    description: Flash the C(Previous-) image the BMC keeps for each matched device instead of an image.
    type: bool
    default: false
  allow_downgrade:
    description: Flash a target older than the installed version (otherwise the task fails naming both).
    type: bool
    default: false
  job_timeout:
    description: Seconds to wait for each update job to be scheduled or done.
    type: int
    default: 1800
  reboot_timeout:
    description: Seconds to wait for the jobs that run during the reboot and for the host to come back.
    type: int
    default: 1800
  wait_sleep:
    description:
      - Seconds between two looks at a job or the host.
      - 5 rather than the collection's 10 - a BMC job moves through its states in seconds once it runs, and each
        look is one small Redfish GET.
    default: 5
notes:
  - The Kubernetes connection options (O(kubeconfig), O(host), O(username), O(password), O(validate_certs), ...) are
    accepted and ignored, so that the one C(module_defaults) block for C(group/gpufleet.upgrade.k8s) the playbooks set
    from each cluster serves this module too; the BMC is reached with the C(bmc_) options only.
  - Before 0.1.0 was released the BMC options also had the aliases C(username), C(password) and C(validate_certs);
    they are kubernetes.core's connection options now. A task that still says C(username) fails naming
    O(bmc_username) as missing; a C(validate_certs=false) meant for the BMC no longer turns its TLS check off.
seealso:
  - module: gpufleet.upgrade.nic_firmware_rollout
"""

EXAMPLES = r"""
- name: Flash ConnectX-7 firmware and reboot to apply it
  gpufleet.upgrade.firmware_idrac_flash:
    bmc_address: https://idrac-gpu-worker-003.example.com
    bmc_username: "{{ vault_bmc_username }}"
    bmc_password: "{{ vault_bmc_password }}"
    bmc_ca_path: /etc/pki/idrac-ca.pem
    components:
      - name: firmware_cx7
        match: ConnectX-7
        version: "28.42.1000"
        image_path: /srv/firmware/fw-ConnectX7-rel-28_42_1000.bin
        sha256: "{{ cx7_image_sha256 }}"
    reboot: true
  register: flashed

- name: Show what would be flashed on a BMC (no upload)
  gpufleet.upgrade.firmware_idrac_flash:
    bmc_address: https://idrac-gpu-worker-004.example.com
    bmc_username: "{{ vault_bmc_username }}"
    bmc_password: "{{ vault_bmc_password }}"
    components:
      - match: BIOS
        version: "2.4.1"
        image_uri: http://repo.example.com/dell/BIOS_2.4.1.EXE
        sha256: "{{ bios_image_sha256 }}"
  check_mode: true

- name: Roll the NICs back to the image the iDRAC keeps
  gpufleet.upgrade.firmware_idrac_flash:
    bmc_address: https://idrac-gpu-worker-003.example.com
    bmc_username: "{{ vault_bmc_username }}"
    bmc_password: "{{ vault_bmc_password }}"
    components:
      - match: ConnectX-7
        version: "28.39.1002"
    rollback: true
    reboot: true
"""

RETURN = r"""
bmc:
  description: The BMC's address.
  returned: always
  type: str
  sample: https://127.1.0.3:41949
adapter:
  description: C(idrac) for a Dell iDRAC, C(dmtf) for any other Redfish service.
  returned: when the BMC was reached
  type: str
  sample: idrac
components:
  description: Per component, what was decided and for which devices.
  returned: when the BMC was reached
  type: list
  elements: dict
  sample:
    - component: firmware_cx7
      match: ConnectX-7
      target: "28.42.1000"
      action: flash
      reason: "8 of 8 device(s): 28.39.10.02 -> 28.42.1000"
      devices:
        - {device: NIC.Slot.1-1-1, id: Installed-0-28.39.10.02__NIC.Slot.1-1-1, installed: 28.39.10.02,
           target: "28.42.1000", action: flash, name: Nvidia ConnectX-7 Single Port NDR OSFP Adapter}
versions:
  description: Device (FQDD) to version, before and after (after as read back from the BMC once verified).
  returned: when the BMC was reached
  type: dict
  sample: {before: {NIC.Slot.1-1-1: 28.39.10.02}, after: {NIC.Slot.1-1-1: 28.42.10.00}}
jobs:
  description: The update jobs with their last state and the BMC's message.
  returned: always
  type: list
  elements: dict
  sample:
    - {component: firmware_cx7, job_id: JID_178000000123, state: Completed, message: Job completed successfully.,
       message_id: RED001}
pending_jobs:
  description: Firmware jobs that already waited for a host reset when the run began.
  returned: always
  type: list
  elements: dict
pending_reset:
  description: Updates are scheduled and wait for a host reset (O(reboot=false)); versions are not verified yet.
  returned: always
  type: bool
rebooted:
  description: Whether the host was reset (by this task or, with C(Immediate), by the BMC).
  returned: always
  type: bool
host_back_after:
  description: Seconds from the end of the jobs until the BMC reported the host on and booted.
  returned: when rebooted
  type: float
power_cycle:
  description:
    - When jobs ended "Job completed, server reboot pending" and O(power_cycle_on_reboot_pending=true) - those jobs,
      the reset sent (C(PowerCycle), or C(ForceOff+On) where PowerCycle is not offered) and when the host was back.
  returned: when the host was power cycled for jobs pending a reboot
  type: dict
  sample: {reboot_pending_jobs: [JID_178000000123], reset: {reset_type: PowerCycle}, host_back_after: 310.2}
checksums:
  description: Image label to the sha256 that was verified.
  returned: always
  type: dict
elapsed:
  description: Seconds the task took.
  returned: always
  type: float
diff:
  description: Versions before and after, with C(--diff).
  returned: with diff mode, when the BMC was reached
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_flash import FlashOptions, run_flash
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import component_specs
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import k8s_auth_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import (
    firmware_components_argument_spec,
    redfish_argument_spec,
    run_module,
    wait_argument_spec,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import RedfishSettings

# The names these options had before they were shared with nic_firmware_rollout. Not username, password and
# validate_certs: those are kubernetes.core's connection options, which module_defaults for
# group/gpufleet.upgrade.k8s gives every module of the collection, and an alias wins over its option in
# AnsibleModule, so the cluster's values would have reached the BMC.
OLD_REDFISH_NAMES = {
    "bmc_ca_path": "ca_path",
    "bmc_timeout": "timeout",
}


def argument_spec():
    # Accepted and ignored: the cluster's connection options from module_defaults (see OLD_REDFISH_NAMES).
    spec = k8s_auth_argument_spec()
    spec["bmc_address"] = {"type": "str", "required": True, "aliases": ["baseurl"]}
    spec.update(redfish_argument_spec(credentials_required=True, aliases=OLD_REDFISH_NAMES))
    spec.update(firmware_components_argument_spec())
    spec.update(
        apply_time={"type": "str", "choices": ["OnReset", "Immediate"], "default": "OnReset"},
        reboot={"type": "bool", "default": False},
        reset_type={
            "type": "str",
            "choices": ["GracefulRestart", "ForceRestart", "PowerCycle"],
            "default": "GracefulRestart",
        },
        power_cycle_on_reboot_pending={"type": "bool", "default": False},
        rollback={"type": "bool", "default": False},
        allow_downgrade={"type": "bool", "default": False},
        job_timeout={"type": "int", "default": 1800},
        reboot_timeout={"type": "int", "default": 1800},
    )
    spec.update(wait_argument_spec(options=("wait_sleep",), wait_sleep=5.0))
    return spec


def flash(module):
    params = module.params
    settings = RedfishSettings(
        baseurl=params["bmc_address"],
        username=params["bmc_username"],
        password=params["bmc_password"],
        validate_certs=params["bmc_validate_certs"],
        ca_path=params["bmc_ca_path"],
        timeout=params["bmc_timeout"],
    )
    options = FlashOptions(
        components=component_specs(params["components"]),
        apply_time=params["apply_time"],
        reboot=params["reboot"],
        reset_type=params["reset_type"],
        power_cycle_on_reboot_pending=params["power_cycle_on_reboot_pending"],
        rollback=params["rollback"],
        allow_downgrade=params["allow_downgrade"],
        job_timeout=params["job_timeout"],
        reboot_timeout=params["reboot_timeout"],
        wait_sleep=params["wait_sleep"],
        check_mode=module.check_mode,
    )
    result = run_flash(settings, options)
    if module._diff and "versions" in result:
        result["diff"] = {"before": result["versions"]["before"], "after": result["versions"]["after"]}
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module, lambda: flash(module), failure=f"Failed to flash firmware through {module.params['bmc_address']}"
    )


if __name__ == "__main__":
    main()
