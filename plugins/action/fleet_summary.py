# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The fleet_summary module's work, in the controller (its documentation: plugins/modules/fleet_summary.py).

It reads the hosts' results and writes files on the controller, and talks to no cluster, so it runs where its
inputs and outputs are: in Ansible's own process. Every playbook ends with it, and a module would start a Python
process and import Ansible's and Kubernetes' libraries for it (about 0.6 s of CPU per run, docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._fleet import (
    build_summary,
    render_html,
    render_markdown,
    summary_file_names,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import write_text_atomically
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_html import HAS_JINJA2
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, utc_now


def argument_spec() -> dict[str, dict[str, Any]]:
    """The module's options (its DOCUMENTATION, checked by tests/unit/plugins/action/test_fleet_summary.py).

    kubernetes.core's connection options are accepted and ignored: one module_defaults block for
    group/gpufleet.upgrade.k8s serves every module of the collection.
    """
    spec = {name: dict(option) for name, option in AUTH_ARG_SPEC.items()}
    spec.update(
        run={"type": "str", "required": True},
        results={"type": "list", "elements": "dict", "default": []},
        summary_files={"type": "list", "elements": "path", "default": []},
        summaries={"type": "list", "elements": "dict", "default": []},
        dest={"type": "path"},
        actor={"type": "str", "default": ""},
    )
    return spec


def summarise(params: dict[str, Any], *, check_mode: bool, generated_at: str | None = None) -> dict[str, Any]:
    """Build the summary from ``params`` (validated options) and write its files when ``dest`` is set."""
    summaries = [read_summary_file(path) for path in params["summary_files"]] + list(params["summaries"])
    summary = build_summary(
        run=params["run"],
        results=params["results"],
        summaries=summaries,
        actor=params["actor"],
        generated_at=generated_at or iso(utc_now()),
    )
    result: dict[str, Any] = {
        "changed": False,
        "summary": summary,
        "failed_clusters": summary["failed_clusters"],
        "files": {},
    }
    if not params["dest"]:
        return result
    texts = {
        "json": json.dumps(summary, indent=2, sort_keys=True) + "\n",
        "markdown": render_markdown(summary),
    }
    if HAS_JINJA2:
        texts["html"] = render_html(summary)
    for kind, name in summary_file_names(params["run"]).items():
        if kind not in texts:
            continue
        path = os.path.join(params["dest"], name)
        result["files"][kind] = path
        # The time it was generated always differs: compare without it.
        if _without_time(read_text(path), kind) == _without_time(texts[kind], kind):
            continue
        result["changed"] = True
        if not check_mode:
            try:
                write_text_atomically(path, texts[kind])
            except OSError as err:
                raise InvalidInputError(f"Cannot write the fleet summary to {path}: {err}") from err
    return result


def read_summary_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            summary = json.load(handle)
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"Cannot read the fleet summary {path}: {err}") from err
    if not isinstance(summary, dict):
        raise InvalidInputError(f"Cannot read the fleet summary {path}: it holds no JSON object")
    return summary


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def _without_time(text: str | None, kind: str) -> Any:
    if text is None:
        return None
    if kind == "json":
        try:
            data = json.loads(text)
        except ValueError:
            return text
        if isinstance(data, dict):
            data.pop("generated_at", None)
        return data
    return "\n".join(line for line in text.splitlines() if not line.startswith("Generated "))


class ActionModule(ActionBase):
    """gpufleet.upgrade.fleet_summary: summarise a fleet run, in the controller."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, params = self.validate_argument_spec(argument_spec=argument_spec())
        try:
            result.update(summarise(params, check_mode=bool(self._task.check_mode)))
        except InvalidInputError as err:
            raise AnsibleActionFail(f"Failed to summarise the fleet: {err.msg}") from None
        return result
