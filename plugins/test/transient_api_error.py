# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Test plugin: is a task result a transient Kubernetes API failure, worth sending again?"""

from __future__ import annotations

DOCUMENTATION = r"""
name: transient_api_error
short_description: Whether a failed task hit a transient Kubernetes API error
version_added: 0.1.0
description:
  - True when a failed task result (of a C(kubernetes.core) module, say) says the API server
    throttled (429), failed or was unavailable (500, 502, 503, 504), lost a write race (409 Conflict)
    or dropped the connection; false for every other result, success included.
  - Answers such as 400, 401, 403, 404, 409 AlreadyExists or 422 are not transient, so a task
    retried with this test fails at once on them.
  - The collection's modules apply the same statuses to their own requests (bounded, jittered retries).
options:
  _input:
    description: A registered task result.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Label the node, riding out a busy API server
  kubernetes.core.k8s:
    state: patched
    kind: Node
    name: gpu-worker-001
    definition:
      metadata:
        labels:
          gpu-canary: "true"
  register: labelled
  until: labelled is not gpufleet.upgrade.transient_api_error
  retries: 6
  delay: "{{ range(2, 5) | random }}"
"""

RETURN = r"""
_value:
  description: Whether the result is a transient API failure.
  type: bool
"""

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import transient_failure  # noqa: E402


def transient_api_error(result):
    return bool(transient_failure(result))


class TestModule:
    def tests(self):
        return {"transient_api_error": transient_api_error}
