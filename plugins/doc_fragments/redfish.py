# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

# How to reach a Redfish BMC: one option set for every module that talks to
# BMCs, mirrored by redfish_argument_spec() in plugins/module_utils/_module.py.
# The names carry a bmc_ prefix because the same modules may also take
# kubernetes.core's connection options (username, password, validate_certs).

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  bmc_username:
    description:
      - BMC user. Falls back to the environment variable E(REDFISH_USERNAME).
    type: str
  bmc_password:
    description:
      - BMC password. Falls back to the environment variable E(REDFISH_PASSWORD). Never logged.
    type: str
  bmc_validate_certs:
    description:
      - Verify the BMC's TLS certificate. Leave on; give the CA with O(bmc_ca_path).
    type: bool
    default: true
  bmc_ca_path:
    description:
      - PEM file of the CA that signed the BMC's certificate.
    type: path
  bmc_timeout:
    description:
      - Seconds one Redfish request may take (an image upload gets at least 300).
    type: int
    default: 30
notes:
  - Redfish requests use Ansible's own URL helpers; no client library is needed.
  - Sessions (C(X-Auth-Token)) when the service offers them, HTTP basic auth otherwise; a session that dies while
    the BMC restarts (its own update) is renewed.
"""
