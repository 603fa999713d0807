"""An independent client against the BMCs: community.general's redfish modules in a real ansible-playbook run.

community.general implements the DMTF flows (sessions, SimpleUpdate with a
task, ResetRequired handled by PerformRequestedOperations, system resets)
without knowing the twin, so a passing play says the BMCs speak Redfish the
way a real service does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bmc_harness import NODES, running_twin

from gpufleet_twin.redfish import build_firmware_image

VENV_BIN = Path(sys.executable).parent
ANSIBLE_PLAYBOOK = VENV_BIN / "ansible-playbook"

PLAYBOOK = """
- name: Update NIC firmware through the BMC
  hosts: localhost
  gather_facts: false
  module_defaults:
    community.general.redfish_info: &bmc
      baseuri: "{{ bmc_baseuri }}"
      validate_certs: true
      ca_path: "{{ bmc_ca_path }}"
      timeout: 20
    community.general.redfish_command: *bmc
  tasks:
    - name: Read the firmware inventory
      community.general.redfish_info:
        category: Update
        command: GetFirmwareInventory
        username: "{{ bmc_username }}"
        password: "{{ bmc_password }}"
      register: before

    - name: Check that the ConnectX-7 NICs run 28.39.10.02
      ansible.builtin.assert:
        that:
          - >-
            before.redfish_facts.firmware.entries
            | selectattr('Id', 'equalto', 'Installed-0-28.39.10.02__NIC.Slot.1-1-1') | list | length == 1

    - name: Log in
      community.general.redfish_command:
        category: Sessions
        command: CreateSession
        username: "{{ bmc_username }}"
        password: "{{ bmc_password }}"
      register: login

    - name: Start the update
      community.general.redfish_command:
        category: Update
        command: SimpleUpdate
        auth_token: "{{ login.session.token }}"
        update_image_uri: "{{ image_uri }}"
        update_protocol: HTTP
        update_apply_time: OnReset
      register: update

    - name: Wait until the update waits for a reset
      community.general.redfish_info:
        category: Update
        command: GetUpdateStatus
        auth_token: "{{ login.session.token }}"
        update_handle: "{{ update.return_values.update_status.handle }}"
      register: pending
      until: pending.redfish_facts.update_status.status == 'Pending'
      retries: 60
      delay: 1

    - name: Perform the reset the BMC asks for
      community.general.redfish_command:
        category: Update
        command: PerformRequestedOperations
        auth_token: "{{ login.session.token }}"
        update_handle: "{{ update.return_values.update_status.handle }}"
      register: performed

    - name: Wait for the update to complete
      community.general.redfish_info:
        category: Update
        command: GetUpdateStatus
        auth_token: "{{ login.session.token }}"
        update_handle: "{{ update.return_values.update_status.handle }}"
      register: finished
      until: finished.redfish_facts.update_status.status in ['Completed', 'Exception']
      retries: 60
      delay: 1

    - name: Read the firmware inventory again
      community.general.redfish_info:
        category: Update
        command: GetFirmwareInventory
        auth_token: "{{ login.session.token }}"
      register: after

    - name: Restart the host the hard way
      community.general.redfish_command:
        category: Systems
        command: PowerForceRestart
        username: "{{ bmc_username }}"
        password: "{{ bmc_password }}"
      register: restarted

    - name: Restart the second host gracefully
      community.general.redfish_command:
        category: Systems
        command: PowerGracefulRestart
        baseuri: "{{ bmc2_baseuri }}"
        username: "{{ bmc_username }}"
        password: "{{ bmc2_password }}"
      register: graceful

    - name: Log out
      community.general.redfish_command:
        category: Sessions
        command: DeleteSession
        auth_token: "{{ login.session.token }}"
        session_uri: "{{ login.session.uri }}"

    - name: Stage a BIOS update with Dell's own module (HttpPushUri on a 16G iDRAC, then SimpleUpdate)
      dellemc.openmanage.redfish_firmware:
        baseuri: "{{ bmc_baseuri }}"
        username: "{{ bmc_username }}"
        password: "{{ bmc_password }}"
        validate_certs: true
        ca_path: "{{ bmc_ca_path }}"
        image_uri: "{{ bios_image_path }}"
        job_wait: false
      register: dell_update

    - name: Save what the modules saw
      ansible.builtin.copy:
        dest: "{{ result_file }}"
        content: "{{ {'pending': pending.redfish_facts.update_status, 'performed': performed,
                      'finished': finished.redfish_facts.update_status, 'after': after.redfish_facts.firmware,
                      'restarted': restarted, 'graceful': graceful, 'dell_update': dell_update} | to_json }}"
        mode: "0600"
"""


@pytest.mark.slow
@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed in this venv")
def test_community_general_redfish_modules_update_nic_firmware(tmp_path: Path) -> None:
    with running_twin(tmp_path, time_scale=100.0) as bmcs:
        node = NODES[0]
        creds = bmcs.fleet.credentials(node)
        second = bmcs.fleet.credentials(NODES[1])
        image_uri = bmcs.publish_image("cx7-28.41.1000.bin", build_firmware_image("ConnectX-7", "28.41.1000"))
        bios_image = tmp_path / "BIOS_XE9680_2.4.1.bin"
        bios_image.write_bytes(build_firmware_image("BIOS", "2.4.1"))
        assert bmcs.ca_file is not None
        playbook = tmp_path / "update.yml"
        playbook.write_text(PLAYBOOK)
        result_file = tmp_path / "result.json"
        extra = {
            "bmc_baseuri": creds["address"].removeprefix("https://"),
            "bmc_username": creds["username"],
            "bmc_password": creds["password"],
            "bmc2_baseuri": second["address"].removeprefix("https://"),
            "bmc2_password": second["password"],
            "bmc_ca_path": str(bmcs.ca_file),
            "image_uri": image_uri,
            "bios_image_path": str(bios_image),
            "result_file": str(result_file),
        }
        (tmp_path / "vars.json").write_text(json.dumps(extra))
        (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        completed = subprocess.run(
            [
                str(ANSIBLE_PLAYBOOK),
                "-i",
                "localhost,",
                "-c",
                "local",
                str(playbook),
                "-e",
                f"@{tmp_path / 'vars.json'}",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
        seen = json.loads(result_file.read_text())
        assert seen["pending"]["resets_requested"] == [
            {"uri": "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset", "type": "GracefulRestart"}
        ]
        assert seen["performed"]["changed"] is True
        assert seen["finished"]["status"] == "Completed"
        versions = {entry["Id"]: entry["Version"] for entry in seen["after"]["entries"]}
        assert versions["Installed-0-28.41.10.00__NIC.Slot.1-1-1"] == "28.41.10.00"
        assert versions["Previous-0-28.39.10.02__NIC.Slot.1-1-1"] == "28.39.10.02"
        assert seen["restarted"]["changed"] is True
        assert seen["graceful"]["changed"] is True
        assert bmcs.call(lambda: bmcs.fleet.bmc(NODES[1]).boot_count) == 1
        assert not bmcs.health(NODES[1]).ready
        # Two resets reached the node: the requested one and the forced restart.
        assert bmcs.call(lambda: bmcs.fleet.bmc(node).boot_count) == 2
        assert {p.firmware for p in bmcs.health(node).ib_ports[:8]} == {"28.41.1000"}
        assert bmcs.call(lambda: len(bmcs.fleet.bmc(node).sessions)) == 0  # both modules logged out
        assert seen["dell_update"]["msg"] == "Successfully submitted the firmware update task."
        bios_job_id = seen["dell_update"]["task"]["id"]
        bmcs.wait_for(lambda: bmcs.call(lambda: bmcs.fleet.bmc(node).jobs[bios_job_id].state) == "Scheduled")
        assert "Available-159-2.4.1__BIOS.Setup.1-1" in bmcs.inventory_ids(node)
    shutil.rmtree(tmp_path / "ansible-home", ignore_errors=True)
