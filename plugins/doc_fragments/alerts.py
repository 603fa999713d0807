# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project


# The alerts gate of the rollout modules, mirrored by alerts_gate_suboptions() in
# plugins/module_utils/_alerts.py.

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  alerts:
    description:
      - The alerts gate, consulted before each node the rollout would start (also between the nodes of one run).
      - While a C(firing) Prometheus alert whose name matches O(alerts.alert_filter) is listed by
        C(GET /api/v1/alerts), no further node starts; nodes already under way finish. After
        O(alerts.wait_timeout) seconds the rollout halts naming the alerts; the nodes not started are left as they
        are, and the same task run again resumes where it stopped.
      - Works as kured's C(--alert-filter-regexp) with C(--alert-filter-match-only=true), and as
        M(gpufleet.upgrade.alerts_gate). Omitted, no alerts gate.
    type: dict
    suboptions:
      prometheus_url:
        description: Prometheus (or Thanos Querier) base URL.
        type: str
        required: true
      alert_filter:
        description: Regular expression over alert names (searched anywhere in the name).
        type: str
        required: true
      validate_certs:
        description: Verify Prometheus' TLS certificate.
        type: bool
        default: true
      wait_timeout:
        description: Seconds to hold before one node before halting.
        type: int
        default: 600
      wait_sleep:
        description: Seconds between two looks at the alerts.
        type: float
        default: 10.0
"""
