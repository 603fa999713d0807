"""The AWX / Automation Platform objects of awx/ against the awx.awx modules that apply them.

No AWX server runs here. Each object is checked with the argument spec the real awx.awx module (the one the pinned
``ansible`` package ships) hands to ``ControllerAPIModule``, captured by running the module's ``main()`` up to that
call, and validated by ansible-core's own ``ArgumentSpecValidator``: unknown options, wrong types, bad choices and
the modules' mutually-exclusive and required-if rules fail here as they would on the controller's host. Then the
references between objects, the workflow's shape and the surveys against the playbooks' argument specs.
"""

from __future__ import annotations

import importlib
import json
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from dateutil.rrule import rrulestr

ROOT = pathlib.Path(__file__).resolve().parents[2]
AWX = ROOT / "awx"
VENV_BIN = pathlib.Path(sys.executable).parent

# The variable of each kind of object (infra.aap_configuration's names) and the awx.awx module that applies it.
KINDS = {
    "controller_credential_types": "credential_type",
    "controller_credentials": "credential",
    "controller_execution_environments": "execution_environment",
    "controller_projects": "project",
    "controller_inventories": "inventory",
    "controller_inventory_sources": "inventory_source",
    "controller_templates": "job_template",
    "controller_workflows": "workflow_job_template",
    "controller_schedules": "schedule",
}
NODE_LINKS = ("success_nodes", "failure_nodes", "always_nodes")
# Credential types every AWX ships (awx/main/models/credential/__init__.py, ManagedCredentialType).
BUILTIN_CREDENTIAL_TYPES = {"OpenShift or Kubernetes API Bearer Token", "Source Control", "Machine", "Vault"}
BUILTIN_ORGANIZATIONS = {"Default"}
# Survey answer types and the role argument types they can fill (a survey answers text, integer or float).
SURVEY_TYPES = {
    "text": {"str", "path", "raw"},
    "multiplechoice": {"str"},
    "integer": {"int", "raw"},
    "float": {"float"},
}


class _UnsafeLoader(yaml.SafeLoader):
    """Reads Ansible's ``!unsafe`` (an AWX injector template kept raw) as the plain string it is."""


_UnsafeLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def _load(path: pathlib.Path) -> Any:
    return yaml.load(path.read_text(), Loader=_UnsafeLoader)  # a SafeLoader with one more tag


@pytest.fixture(scope="module")
def configs() -> dict[str, list[dict[str, Any]]]:
    merged: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((AWX / "configs").glob("*.yml")):
        for name, value in _load(path).items():
            assert name not in merged, f"{name} is defined twice ({path.name})"
            merged[name] = value
    return merged


class _Captured(Exception):
    """Stops a module's main() where it builds its ControllerAPIModule, before any request."""


def module_spec(module: str) -> dict[str, Any]:
    """The keyword arguments awx.awx's ``module`` gives ControllerAPIModule, its auth options merged in as it does."""
    loaded = importlib.import_module(f"ansible_collections.awx.awx.plugins.modules.{module}")
    real = loaded.ControllerAPIModule
    kwargs: dict[str, Any] = {}

    def capture(**given: Any) -> None:
        kwargs.update(given)
        raise _Captured()

    loaded.ControllerAPIModule = capture
    try:
        loaded.main()
    except _Captured:
        pass
    finally:
        loaded.ControllerAPIModule = real
    assert kwargs, f"awx.awx.{module} built no ControllerAPIModule"
    kwargs["argument_spec"] = {**real.AUTH_ARGSPEC, **kwargs["argument_spec"]}
    return kwargs


def validation_errors(module: str, params: dict[str, Any]) -> list[str]:
    spec = module_spec(module)
    validator = ArgumentSpecValidator(
        spec["argument_spec"],
        mutually_exclusive=spec.get("mutually_exclusive"),
        required_together=spec.get("required_together"),
        required_one_of=spec.get("required_one_of"),
        required_if=spec.get("required_if"),
        required_by=spec.get("required_by"),
    )
    return validator.validate(params).error_messages


# What awx/apply.yml passes to each module: the object as written, but for a workflow's nodes (taken apart into
# node calls, then link calls). test_apply_passes_the_objects_as_tested pins apply.yml to these.
def workflow_params(workflow: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in workflow.items() if key != "simplified_workflow_nodes"}


def node_params(workflow: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    params = {key: value for key, value in node.items() if key not in NODE_LINKS}
    return {**params, "workflow_job_template": workflow["name"], "organization": workflow["organization"]}


def link_params(workflow: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    params = {key: value for key, value in node.items() if key in (*NODE_LINKS, "identifier")}
    return {**params, "workflow_job_template": workflow["name"], "organization": workflow["organization"]}


def module_calls(configs: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    calls = []
    for variable, module in KINDS.items():
        for item in configs[variable]:
            params = workflow_params(item) if module == "workflow_job_template" else item
            calls.append((module, item["name"], params))
    for workflow in configs["controller_workflows"]:
        for node in workflow.get("simplified_workflow_nodes", []):
            where = f"{workflow['name']}/{node['identifier']}"
            calls.append(("workflow_job_template_node", where, node_params(workflow, node)))
            if any(link in node for link in NODE_LINKS):
                calls.append(("workflow_job_template_node", where + " links", link_params(workflow, node)))
    return calls


def test_every_kind_is_defined_once(configs):
    assert sorted(configs) == sorted(KINDS)


def test_every_object_passes_its_awx_module_argument_spec(configs):
    calls = module_calls(configs)
    errors = [f"{module} {name}: {e}" for module, name, params in calls for e in validation_errors(module, params)]
    assert not errors, "\n".join(errors)
    assert len(calls) >= 20


def test_the_validation_catches_what_awx_would_refuse():
    """The captured specs are the modules' own: an unknown option, a bad choice and an approval node with a job."""
    unknown = validation_errors("job_template", {"name": "x", "playbok": "p"})
    assert any(e.startswith("playbok. Supported parameters include") for e in unknown), unknown
    assert validation_errors("schedule", {"name": "x", "verbosity": 9})
    node = {"identifier": "n", "workflow_job_template": "w", "unified_job_template": "t"}
    node["approval_node"] = {"name": "a"}
    assert any("mutually exclusive" in e for e in validation_errors("workflow_job_template_node", node))


def _names(configs: dict[str, list[dict[str, Any]]], variable: str) -> set[str]:
    return {item["name"] for item in configs[variable]}


def test_references_resolve(configs):
    credential_types = _names(configs, "controller_credential_types") | BUILTIN_CREDENTIAL_TYPES
    credentials = _names(configs, "controller_credentials")
    environments = _names(configs, "controller_execution_environments")
    projects = _names(configs, "controller_projects")
    inventories = _names(configs, "controller_inventories")
    templates = _names(configs, "controller_templates")
    workflows = _names(configs, "controller_workflows")
    problems = []

    def expect(value: Any, known: set[str], what: str) -> None:
        if value not in known:
            problems.append(f"{what}: {value!r} is not one of {sorted(known)}")

    for item in (item for variable in KINDS for item in configs[variable]):
        if "organization" in item:
            expect(item["organization"], BUILTIN_ORGANIZATIONS, f"{item['name']} organization")
    for credential in configs["controller_credentials"]:
        expect(credential["credential_type"], credential_types, f"credential {credential['name']}")
    for project in configs["controller_projects"]:
        expect(project.get("credential"), credentials, f"project {project['name']}")
        expect(project.get("default_environment"), environments, f"project {project['name']}")
    for source in configs["controller_inventory_sources"]:
        expect(source["inventory"], inventories, f"inventory source {source['name']}")
        expect(source["source_project"], projects, f"inventory source {source['name']}")
        assert (ROOT / source["source_path"]).is_file(), f"{source['name']}: no {source['source_path']} in the project"
    for template in configs["controller_templates"]:
        expect(template["project"], projects, f"template {template['name']}")
        expect(template["inventory"], inventories, f"template {template['name']}")
        expect(template["execution_environment"], environments, f"template {template['name']}")
        for credential in template.get("credentials", []):
            expect(credential, credentials, f"template {template['name']}")
        assert (ROOT / template["playbook"]).is_file(), f"{template['name']}: no playbook {template['playbook']}"
    for workflow in configs["controller_workflows"]:
        expect(workflow["inventory"], inventories, f"workflow {workflow['name']}")
        identifiers = [node["identifier"] for node in workflow["simplified_workflow_nodes"]]
        assert len(identifiers) == len(set(identifiers)), f"{workflow['name']}: a node identifier is used twice"
        for node in workflow["simplified_workflow_nodes"]:
            if "unified_job_template" in node:
                expect(node["unified_job_template"], templates, f"node {node['identifier']}")
            for link in NODE_LINKS:
                for target in node.get(link, []):
                    expect(target, set(identifiers), f"node {node['identifier']} {link}")
    for schedule in configs["controller_schedules"]:
        expect(schedule["unified_job_template"], templates | workflows, f"schedule {schedule['name']}")
    assert not problems, "\n".join(problems)


def _nodes(configs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    (workflow,) = configs["controller_workflows"]
    return {node["identifier"]: node for node in workflow["simplified_workflow_nodes"]}


def _template_of(nodes: dict[str, dict[str, Any]], identifier: str) -> str:
    return nodes[identifier].get("unified_job_template", "")


def test_workflow_is_canary_then_bake_decision_then_promote_with_rollback_on_failure(configs):
    nodes = _nodes(configs)
    (canary,) = [node for node in nodes.values() if node.get("unified_job_template") == "GPU fleet canary"]
    (decision,) = [nodes[target] for target in canary["success_nodes"]]
    assert decision["approval_node"]["name"], "the bake decision is an approval node with a name (awx.awx requires it)"
    (promote,) = [nodes[target] for target in decision["success_nodes"]]
    assert promote["unified_job_template"] == "GPU fleet promote"
    # Every stage that changes the cluster, and a denied decision, leads to a rollback on failure.
    for node in (canary, decision, promote):
        targets = node.get("failure_nodes", [])
        assert targets, f"{node['identifier']} has no failure path"
        assert all(_template_of(nodes, target) == "GPU fleet rollback" for target in targets)
    # A canary refused before any change must not undo an earlier promotion: its rollback is the canary node's.
    for node in (canary, decision):
        for target in node["failure_nodes"]:
            assert nodes[target]["extra_data"]["upgrade_rollback_to"] == "current_production"
    # No rollback runs after a successful promotion.
    assert not promote.get("success_nodes") and not promote.get("always_nodes")


def test_every_stage_has_a_template_and_audit_and_bake_are_scheduled(configs):
    stages = {t["extra_vars"].get("stage") for t in configs["controller_templates"] if "stage" in t["extra_vars"]}
    upgrade_spec = _argument_spec("upgrade")
    assert stages == set(upgrade_spec["upgrade_stage"]["choices"])
    playbooks = {t["name"]: t["playbook"] for t in configs["controller_templates"]}
    scheduled = {playbooks[s["unified_job_template"]] for s in configs["controller_schedules"]}
    by_stage = {t["extra_vars"].get("stage", "audit"): t["name"] for t in configs["controller_templates"]}
    assert {s["unified_job_template"] for s in configs["controller_schedules"]} == {by_stage["audit"], by_stage["bake"]}
    assert scheduled == {"playbooks/audit.yml", "playbooks/upgrade.yml"}


def test_schedules_are_rrules_awx_accepts(configs):
    for schedule in configs["controller_schedules"]:
        rule = schedule["rrule"]
        # AWX wants "DTSTART;TZID=...:YYYYMMDDTHHMMSS RRULE:..." on one line.
        assert re.fullmatch(r"DTSTART;TZID=[\w/+-]+:\d{8}T\d{6} RRULE:\S+", rule), rule
        recurrence = rule.split(" ")[1]
        parsed = rrulestr(recurrence, dtstart=None, forceset=False, ignoretz=True)
        assert parsed is not None


def _argument_spec(role: str) -> dict[str, Any]:
    return _load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def _role_of(playbook: str) -> str:
    return {"playbooks/audit.yml": "audit", "playbooks/upgrade.yml": "upgrade"}[playbook]


def _surveys(configs: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(object, role, survey) for every template and workflow with a survey; a workflow's questions feed upgrade.yml."""
    found = [(t["name"], _role_of(t["playbook"]), t["survey_spec"]) for t in configs["controller_templates"]]
    found += [(w["name"], "upgrade", w["survey_spec"]) for w in configs["controller_workflows"]]
    return found


def test_survey_questions_set_variables_the_playbooks_take(configs):
    problems = []
    for name, role, survey in _surveys(configs):
        options = _argument_spec(role)
        variables = [question["variable"] for question in survey["spec"]]
        assert len(variables) == len(set(variables)), f"{name}: a survey variable is asked twice"
        for question in survey["spec"]:
            where = f"{name} survey {question['variable']}"
            option = options.get(question["variable"])
            if option is None:
                problems.append(f"{where}: not an option of role {role}")
                continue
            if option.get("type", "str") not in SURVEY_TYPES[question["type"]]:
                problems.append(f"{where}: a {question['type']} answer for a {option.get('type')} option")
            if question["type"] == "multiplechoice":
                if not set(question["choices"]) <= set(option.get("choices", question["choices"])):
                    problems.append(f"{where}: choices {question['choices']} beyond {option['choices']}")
                if question["default"] not in question["choices"]:
                    problems.append(f"{where}: default {question['default']!r} is not a choice")
            if question["type"] == "text" and question.get("required") and not question.get("default"):
                problems.append(f"{where}: required with no default, so a scheduled run cannot answer it")
    assert not problems, "\n".join(problems)


def test_node_extra_data_answers_a_survey_question_of_its_template(configs):
    """AWX accepts a node's extra_data only for variables its template prompts for (here: asks in its survey)."""
    templates = {t["name"]: t for t in configs["controller_templates"]}
    for node in _nodes(configs).values():
        survey = templates.get(node.get("unified_job_template"), {}).get("survey_spec", {"spec": []})
        asked = {question["variable"] for question in survey["spec"]}
        assert set(node.get("extra_data", {})) <= asked, node["identifier"]


def test_fixed_extra_vars_are_what_the_playbooks_read(configs):
    inventory = _load(AWX / "inventory.yml")
    for template in configs["controller_templates"]:
        playbook = _load(ROOT / template["playbook"])
        hosts = playbook[0]["hosts"]
        group = template["extra_vars"]["gpufleet_clusters"]
        assert "gpufleet_clusters" in hosts, f"{template['playbook']} no longer reads gpufleet_clusters"
        assert group in inventory, f"{template['name']}: no group {group} in awx/inventory.yml"
        if "stage" in template["extra_vars"]:
            assert _role_of(template["playbook"]) == "upgrade"
            stage_vars = [v for v in _values_of(playbook[0], "upgrade_stage") if "stage" in str(v)]
            assert stage_vars, "upgrade.yml maps -e stage to upgrade_stage"


def _values_of(tree: Any, key: str) -> Iterator[Any]:
    """Every value of ``key`` anywhere in a YAML tree."""
    if isinstance(tree, dict):
        for name, value in tree.items():
            if name == key:
                yield value
            yield from _values_of(value, key)
    elif isinstance(tree, list):
        for item in tree:
            yield from _values_of(item, key)


def test_credentials_give_the_environment_the_collection_reads(configs):
    (bmc_type,) = configs["controller_credential_types"]
    assert set(bmc_type["injectors"]["env"]) == {"REDFISH_USERNAME", "REDFISH_PASSWORD"}
    module_utils = (ROOT / "plugins" / "module_utils" / "_module.py").read_text()
    for variable in bmc_type["injectors"]["env"]:
        assert f'"{variable}"' in module_utils, f"the Redfish options no longer fall back to {variable}"
    secret_fields = {f["id"] for f in bmc_type["inputs"]["fields"] if f.get("secret")}
    assert "password" in secret_fields
    clusters = [c for c in configs["controller_credentials"] if c["credential_type"].startswith("OpenShift")]
    assert clusters
    for cluster in clusters:
        # AWX injects K8S_AUTH_VERIFY_SSL=True only with verify_ssl and a CA; anything else turns verification off.
        assert cluster["inputs"]["verify_ssl"] is True and cluster["inputs"]["ssl_ca_cert"]
    for credential in configs["controller_credentials"]:
        for field, value in credential["inputs"].items():
            if isinstance(value, str) and any(word in field for word in ("token", "password")):
                assert value.startswith("{{"), f"{credential['name']} {field}: a secret written into Git"


# The service account of rbac/example-bindings.yaml each playbook's cluster credential holds a token of, bound
# to the shipped ClusterRole of the same name: the audit reads only.
PLAYBOOK_ACCOUNTS = {"playbooks/audit.yml": "gpufleet-audit", "playbooks/upgrade.yml": "gpufleet-upgrade"}


def test_each_template_holds_the_token_of_the_shipped_service_account_for_its_playbook(configs):
    bindings = {
        item["metadata"]["name"]: item
        for item in _load(ROOT / "rbac" / "example-bindings.yaml")["items"]
        if item["kind"] == "ClusterRoleBinding"
    }
    credentials = {credential["name"]: credential for credential in configs["controller_credentials"]}
    for template in configs["controller_templates"]:
        account = PLAYBOOK_ACCOUNTS[template["playbook"]]
        (cluster,) = [
            credentials[name]
            for name in template["credentials"]
            if credentials[name]["credential_type"].startswith("OpenShift")
        ]
        token = cluster["inputs"]["bearer_token"]
        assert token == f"{{{{ gpufleet_awx_k8s_{account.split('-')[1]}_bearer_token }}}}", template["name"]
        assert f"gpufleet/{account}" in cluster["description"], template["name"]
        binding = bindings[account]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account}
        assert {"kind": "ServiceAccount", "name": account, "namespace": "gpufleet"} in binding["subjects"]
        # The ClusterRole itself ships in rbac/<audit|upgrade>.yaml.
        shipped = ROOT / "rbac" / f"{account.split('-')[1]}.yaml"
        assert f"name: {account}\n" in shipped.read_text(), shipped


def test_apply_passes_the_objects_as_tested():
    """awx/apply.yml loops over each controller_* variable and passes each object as is (workflows: see above)."""
    (play,) = _load(AWX / "apply.yml")
    tasks = {task["name"]: task for task in play["tasks"]}
    direct = {module: variable for variable, module in KINDS.items() if module != "workflow_job_template"}
    seen = {}
    for task in tasks.values():
        module = next((key.split(".")[-1] for key in task if key.startswith("awx.awx.")), None)
        if module in direct:
            assert task["args"] == "{{ item }}", task["name"]
            seen[module] = task["loop"]
    assert seen == {module: "{{ " + variable + " }}" for module, variable in direct.items()}
    workflow = tasks["Apply the workflow job templates"]
    assert "rejectattr('key', 'eq', 'simplified_workflow_nodes')" in workflow["args"]
    nodes, links = tasks["Apply the workflow nodes"], tasks["Link the workflow nodes"]
    assert "rejectattr('key', 'in', __gpufleet_awx_links)" in nodes["args"]
    assert "selectattr('key', 'in', __gpufleet_awx_links + ['identifier'])" in links["args"]
    assert play["vars"]["__gpufleet_awx_links"] == list(NODE_LINKS)
    for task in (nodes, links):
        assert "'workflow_job_template': item.0.name, 'organization': item.0.organization" in task["args"]
    order = [task["name"] for task in play["tasks"]]
    assert order.index("Apply the credential types") < order.index("Apply the credentials")
    assert order.index("Apply the job templates") < order.index("Apply the workflow nodes")
    assert order.index("Link the workflow nodes") < order.index("Apply the schedules")


def test_apply_playbook_syntax(tmp_path):
    completed = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), str(AWX / "apply.yml"), "--syntax-check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": str(VENV_BIN), "HOME": str(tmp_path), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


# Values for the secrets apply.yml templates into the credentials, as `-e @secrets.yml` gives them.
SECRETS = {
    "gpufleet_awx_k8s_host": "https://api.example.test:6443",
    "gpufleet_awx_k8s_audit_bearer_token": "audit-token-for-the-test",
    "gpufleet_awx_k8s_upgrade_bearer_token": "upgrade-token-for-the-test",
    "gpufleet_awx_k8s_ca_cert": "-----BEGIN CERTIFICATE-----",
    "gpufleet_awx_bmc_username": "root",
    "gpufleet_awx_bmc_password": "password-for-the-test",
    "gpufleet_awx_git_username": "git",
    "gpufleet_awx_git_token": "git-token-for-the-test",
}


def _with_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _with_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_with_secrets(item) for item in value]
    if isinstance(value, str) and value.startswith("{{ gpufleet_awx_"):
        name = value[3:].split()[0]
        return SECRETS.get(name, "")
    return value


def test_apply_renders_exactly_the_validated_objects(tmp_path, configs):
    """apply.yml run by ansible-playbook, each awx.awx call turned into a debug of the arguments it would get.

    Nothing talks to a controller: the arguments each task renders (loops, filters, the secrets templated in, the
    injector templates kept raw) must equal the objects the tests above validated, in the same order.
    """
    (play,) = _load(AWX / "apply.yml")
    for task in play["tasks"]:
        module = next((key for key in task if key.startswith("awx.awx.")), None)
        if module:
            del task[module]
            task.pop("no_log", None)  # the test's own secrets, so the rendered credentials can be compared
            task["ansible.builtin.debug"] = {"msg": {"module": module.split(".")[-1], "params": task.pop("args")}}
    del play["module_defaults"]
    play["vars"]["gpufleet_awx_configs"] = str(AWX / "configs")
    copy = tmp_path / "apply.yml"
    copy.write_text(yaml.safe_dump([play], sort_keys=False))
    completed = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), str(copy), "-e", json.dumps(SECRETS)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            "PATH": str(VENV_BIN),
            "HOME": str(tmp_path),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_LOCALHOST_WARNING": "false",
        },
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    rendered = []
    for task in json.loads(completed.stdout)["plays"][0]["tasks"]:
        for result in task["hosts"]["localhost"].get("results", []):
            if not result.get("skipped") and "msg" in result:
                rendered.append((result["msg"]["module"], result["msg"]["params"]))
    expected = [(module, _with_secrets(params)) for module, name, params in module_calls(configs) if name]

    # module_calls lists a workflow's node and link calls node by node; apply.yml makes all nodes, then all links.
    def canonical(calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
        return sorted(json.dumps(call, sort_keys=True) for call in calls)

    assert canonical(rendered) == canonical(expected)
    errors = [f"{module}: {e}" for module, params in rendered for e in validation_errors(module, params)]
    assert not errors, "\n".join(errors)
