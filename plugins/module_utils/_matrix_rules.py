# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Compatibility rules of the version matrix (collection-internal).

Each rule has a name, a documented reason and its own result (pass, warning
or violation) with the evidence behind it: catalog facts with their sources,
or the versions that differ. Where the catalog does not know, the result is a
warning ("not in catalog"), never a pass.

Rules on one version set (``check_version_set``) are reused by the planner on
the intermediate sets between steps; rules on stages (one group at a time,
upgrade order, rollback) look at the matrix as a whole (``evaluate_matrix``).
A stage's versions are its effective versions: those of the stage it builds
on (``Matrix.predecessor``) overlaid with what the stage pins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import Catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import (
    BASELINE_STAGE,
    STAGE_NAMES,
    Matrix,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import (
    FIRMWARE_PREFIX,
    Version,
    is_placeholder,
    is_version_component,
    placeholder_prefix,
    same_version,
    try_parse,
)

PASS = "pass"
WARNING = "warning"
VIOLATION = "violation"
_SEVERITY = {PASS: 0, WARNING: 1, VIOLATION: 2}

# Component groups in upgrade order (seed 000: GPU Operator -> Network
# Operator -> firmware -> OpenShift -> SR-IOV). Firmware is every firmware_* key.
FIRMWARE_GROUP = "firmware"
COMPONENT_GROUPS: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    (
        "gpu_operator",
        "GPU Operator",
        (
            "gpu_operator",
            "gpu_driver",
            "driver_type",
            "cuda",
            "dcgm",
            "dcgm_hostengine",
            "device_plugin",
            "container_toolkit",
            "nccl",
        ),
    ),
    ("network_operator", "Network Operator", ("network_operator", "mofed")),
    (FIRMWARE_GROUP, "firmware", ()),
    ("openshift", "OpenShift", ("openshift", "kernel")),
    ("sriov_operator", "SR-IOV", ("sriov_operator",)),
)
GROUP_ORDER = tuple(name for name, _title, _members in COMPONENT_GROUPS)
GROUP_TITLES = {name: title for name, title, _members in COMPONENT_GROUPS}

RULE_REASONS = {
    "one_group_at_a_time": (
        "If something breaks you must know which change caused it: a stage changes one group "
        "(GPU Operator, Network Operator, firmware, OpenShift, SR-IOV), so blame and rollback stay small."
    ),
    "gpu_operator_supports_driver": (
        "Each GPU Operator release documents the drivers it was validated with; another branch is untested "
        "with its operands and its driver upgrade controller."
    ),
    "driver_kernel": (
        "The GPU driver is a kernel module: a new kernel needs a driver built for it. On OpenShift the GPU "
        "Operator builds it on the node for the RHCOS releases it supports."
    ),
    "mofed_kernel": (
        "MOFED/DOCA is a set of kernel modules built per kernel; the Network Operator validates its driver "
        "container only on the OpenShift releases it lists."
    ),
    "openshift_kernel": (
        "OpenShift chooses the kernel: each release's RHCOS ships one RHEL kernel line. A matrix kernel that "
        "does not match the OpenShift version is wrong (e.g. OpenShift 4.17 is RHEL 9.4, kernel 5.14.0-427)."
    ),
    "firmware_mofed": (
        "NVIDIA releases each OFED/DOCA driver together with a ConnectX firmware train and tests them together; "
        "another train is untested with that driver."
    ),
    "upgrade_order": (
        "GPU Operator -> Network Operator -> firmware -> OpenShift -> SR-IOV: operators and drivers first, the "
        "kernel change (OpenShift) once everything that builds on the kernel is known good, SR-IOV last."
    ),
    "rollback_differs": (
        "The rollback entry is the last known-good set; without it, or when it equals production, there is "
        "nothing to go back to."
    ),
    "known_versions": (
        "A version that no known release has is a typo or a guess (GPU Operator v24.12.0 never existed)."
    ),
    "driver_cuda": (
        "The driver sets the highest CUDA version it runs (nvidia-smi 'CUDA Version'); newer CUDA needs a newer driver."
    ),
    "dcgm_exporter_hostengine": (
        "A DCGM Exporter release is paired with one DCGM release (the first part of its tag); when the exporter "
        "talks to a standalone host engine (ClusterPolicy spec.dcgm) instead of its embedded one, NVIDIA says to "
        "run the DCGM version paired with that exporter release, and the two move together."
    ),
    "sriov_openshift": (
        "OpenShift's SR-IOV Network Operator is built per OpenShift release (branch release-4.N ships 4.N.0)."
    ),
}
SET_RULES = (
    "gpu_operator_supports_driver",
    "driver_cuda",
    "dcgm_exporter_hostengine",
    "driver_kernel",
    "mofed_kernel",
    "openshift_kernel",
    "firmware_mofed",
    "sriov_openshift",
    "known_versions",
)
RULE_NAMES = tuple(RULE_REASONS)


@dataclass
class Finding:
    status: str
    message: str
    evidence: List[str] = field(default_factory=list)

    def as_dict(self) -> Dict[str, Any]:
        return {"status": self.status, "message": self.message, "evidence": list(self.evidence)}


@dataclass
class RuleResult:
    rule: str
    stage: str
    findings: List[Finding]

    @property
    def status(self) -> str:
        return worst_status(finding.status for finding in self.findings)

    @property
    def reason(self) -> str:
        return RULE_REASONS[self.rule]

    def as_dict(self) -> Dict[str, Any]:
        return {
            "rule": self.rule,
            "stage": self.stage,
            "status": self.status,
            "reason": self.reason,
            "findings": [finding.as_dict() for finding in self.findings],
        }


@dataclass
class RuleReport:
    results: List[RuleResult]

    @property
    def status(self) -> str:
        return worst_status(result.status for result in self.results)

    def by_status(self, status: str) -> List[RuleResult]:
        return [result for result in self.results if result.status == status]

    def result(self, rule: str, stage: str) -> Optional[RuleResult]:
        for result in self.results:
            if result.rule == rule and result.stage == stage:
                return result
        return None

    def as_dict(self) -> Dict[str, Any]:
        counts = {PASS: 0, WARNING: 0, VIOLATION: 0}
        for result in self.results:
            counts[result.status] += 1
        return {"status": self.status, "counts": counts, "results": [result.as_dict() for result in self.results]}


def worst_status(statuses: Any) -> str:
    worst = PASS
    for status in statuses:
        if _SEVERITY[status] > _SEVERITY[worst]:
            worst = status
    return worst


def group_of(component: str) -> Optional[str]:
    if component.startswith(FIRMWARE_PREFIX):
        return FIRMWARE_GROUP
    for name, _title, members in COMPONENT_GROUPS:
        if component in members:
            return name
    return None


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def changed_components(before: Mapping[str, Any], after: Mapping[str, Any]) -> List[str]:
    """Version components whose value differs (by the component's rules), in upgrade-group order."""
    keys = [key for key in set(before) | set(after) if isinstance(key, str) and is_version_component(key)]
    changed = [key for key in keys if not same_version(key, _text(before.get(key)), _text(after.get(key)))]
    return sorted(changed, key=_component_order)


def _component_order(component: str) -> Tuple[int, int, str]:
    group = group_of(component) or ""
    group_index = GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)
    members: Sequence[str] = ()
    for name, _title, group_members in COMPONENT_GROUPS:
        if name == group:
            members = group_members
    member_index = members.index(component) if component in members else len(members)
    return group_index, member_index, component


def changed_groups(before: Mapping[str, Any], after: Mapping[str, Any]) -> Dict[str, List[str]]:
    """Group -> changed components, groups in upgrade order."""
    groups: Dict[str, List[str]] = {}
    for component in changed_components(before, after):
        groups.setdefault(group_of(component) or "other", []).append(component)
    return groups


def _parsed(versions: Mapping[str, Any], component: str) -> Tuple[Optional[str], Optional[Version]]:
    text = _text(versions.get(component))
    if text is None:
        return None, None
    return text, try_parse(component, text)


def _not_known(text: str, what: str) -> Finding:
    if is_placeholder(text):
        return Finding(WARNING, f"{what} {text!r} is a placeholder: nothing to check yet")
    return Finding(WARNING, f"{what} {text!r} is not in catalog")


# -- rules on one version set -------------------------------------------------


def _rule_gpu_operator_supports_driver(versions: Mapping[str, Any], catalog: Catalog) -> List[Finding]:
    operator_text, operator = _parsed(versions, "gpu_operator")
    driver_text, driver = _parsed(versions, "gpu_driver")
    if operator_text is None or driver_text is None:
        return [Finding(PASS, "not applicable: the stage pins no gpu_operator or no gpu_driver")]
    if operator is None or driver is None:
        return [_not_known(operator_text if operator is None else driver_text, "version")]
    release = catalog.gpu_operator_release(operator)
    if release is None:
        return [Finding(WARNING, f"GPU Operator {operator_text} is not in catalog; cannot check driver {driver_text}")]
    tag, entry = release
    evidence = list(catalog.release_fact("gpu_operator", tag).sources)
    default = entry.get("default_driver")
    documented = list(entry.get("documented_drivers", []))
    if default and same_version("gpu_driver", default, driver_text):
        return [Finding(PASS, f"{driver_text} is the default driver of GPU Operator {tag}", evidence)]
    if any(same_version("gpu_driver", known, driver_text) for known in documented):
        return [Finding(PASS, f"{driver_text} is documented for GPU Operator {tag}", evidence)]
    listed = documented or ([default] if default else [])
    branches = sorted({int(known.split(".")[0]) for known in listed})
    branch = driver.detail["branch"]
    if branch in branches:
        same_branch = [known for known in listed if int(known.split(".")[0]) == branch]
        return [
            Finding(
                WARNING,
                f"branch {branch} is documented for GPU Operator {tag} ({', '.join(same_branch)}), "
                f"but {driver_text} is not listed",
                evidence,
            )
        ]
    if not documented:
        return [Finding(WARNING, f"the catalog has no documented driver list for GPU Operator {tag}", evidence)]
    return [
        Finding(
            VIOLATION,
            f"GPU Operator {tag} documents driver branches {', '.join(str(b) for b in branches)}; "
            f"found {driver_text} (branch {branch})",
            evidence,
        )
    ]


def _rule_driver_cuda(versions: Mapping[str, Any], catalog: Catalog) -> List[Finding]:
    cuda_text, cuda = _parsed(versions, "cuda")
    driver_text, driver = _parsed(versions, "gpu_driver")
    if cuda_text is None or driver_text is None:
        return [Finding(PASS, "not applicable: the stage pins no cuda or no gpu_driver")]
    if cuda is None or driver is None:
        return [_not_known(cuda_text if cuda is None else driver_text, "version")]
    fact = catalog.driver_cuda(driver.detail["branch"])
    if fact is None:
        return [Finding(WARNING, f"the CUDA version of driver branch {driver.detail['branch']} is not in catalog")]
    highest = try_parse("cuda", fact.value)
    if highest is None:
        return [Finding(WARNING, f"the catalog's CUDA for driver branch {driver.detail['branch']} is {fact.value!r}")]
    # A driver runs every patch release of the CUDA minor it reports (nvidia-smi says 12.6, 12.6.2 runs).
    if cuda.key[:2] > highest.key[:2]:
        return [
            Finding(
                VIOLATION,
                f"driver branch {driver.detail['branch']} runs CUDA up to {fact.value}; the stage expects {cuda_text}",
                list(fact.sources),
            )
        ]
    return [Finding(PASS, f"driver branch {driver.detail['branch']} runs CUDA up to {fact.value}", list(fact.sources))]


# NVIDIA's statements on the pairing (rule evidence; the rule needs no catalog facts).
DCGM_PAIRING_SOURCES = (
    "DCGM Exporter version compatibility: run DCGM Exporter with the DCGM version paired with that exporter "
    "release; tags are <dcgm-version>-<dcgm-exporter-version> "
    "<https://docs.nvidia.com/datacenter/dcgm/latest/installation/install-dcgm-exporter.html"
    "#dcgm-exporter-version-compatibility>",
    "DCGM Exporter 4.9.0 release notes: requests between libdcgm 4.7.1 and an earlier host engine fail with an "
    "API version mismatch <https://github.com/NVIDIA/dcgm-exporter/releases/tag/4.9.0>",
)


def _rule_dcgm_exporter_hostengine(versions: Mapping[str, Any]) -> List[Finding]:
    """The standalone host engine runs the DCGM release the exporter tag is paired with."""
    exporter_text, exporter = _parsed(versions, "dcgm")
    engine_text, engine = _parsed(versions, "dcgm_hostengine")
    if exporter_text is None or engine_text is None:
        return [Finding(PASS, "not applicable: the stage pins no dcgm or no dcgm_hostengine (embedded host engine)")]
    if exporter is None or engine is None:
        return [_not_known(exporter_text if exporter is None else engine_text, "version")]
    paired, running = exporter.detail["dcgm"], engine.detail["dcgm"]
    evidence = list(DCGM_PAIRING_SOURCES)
    what = f"dcgm {exporter_text} is paired with DCGM {paired}; dcgm_hostengine {engine_text} runs DCGM {running}"
    if paired == running:
        return [Finding(PASS, what, evidence)]
    if paired.split(".")[:2] == running.split(".")[:2]:
        return [
            Finding(
                WARNING,
                f"{what}: same {'.'.join(paired.split('.')[:2])} line, another patch release (a patch release "
                "has changed the host engine API before); set dcgm_hostengine to DCGM "
                f"{paired} or pick the exporter paired with {running}",
                evidence,
            )
        ]
    return [
        Finding(
            VIOLATION,
            f"{what}: the exporter and the host engine must move together; set dcgm_hostengine to DCGM {paired} "
            f"(or dcgm to an exporter release paired with DCGM {running}) in the same stage",
            evidence,
        )
    ]


def _platform_changed(versions: Mapping[str, Any], previous: Mapping[str, Any], section: str) -> bool:
    """The kernel, OpenShift or the operator that builds the driver differs from the set this comes from."""
    return any(
        not same_version(component, _text(previous.get(component)), _text(versions.get(component)))
        for component in ("kernel", "openshift", section)
    )


def _operator_builds_for_kernel(
    versions: Mapping[str, Any],
    previous: Optional[Mapping[str, Any]],
    catalog: Catalog,
    *,
    section: str,
    what: str,
) -> List[Finding]:
    """The operator that builds the driver is validated on the stage's OpenShift (so on its RHCOS kernel).

    Checked whenever the kernel, OpenShift or that operator changes: a new OpenShift with the kernel left to
    inherit, or a new operator on the same OpenShift, is as much a new pairing as a new kernel.
    """
    kernel_text = _text(versions.get("kernel"))
    title = GROUP_TITLES[section]
    if previous is not None and not _platform_changed(versions, previous, section):
        return [Finding(PASS, f"kernel, OpenShift and {title} unchanged: the running {what} build stays valid")]
    operator_text, operator = _parsed(versions, section)
    openshift_text, openshift = _parsed(versions, "openshift")
    if previous is None and (operator is None or openshift is None):
        return [Finding(PASS, f"not applicable: the baseline pins no {title} or no OpenShift release")]
    findings: List[Finding] = []
    if kernel_text is not None and is_placeholder(kernel_text):
        findings.append(Finding(WARNING, f"the new kernel is a placeholder ({kernel_text!r})"))
    if operator_text is None or operator is None:
        findings.append(Finding(WARNING, f"the platform changes but the stage pins no usable {title} version"))
        return findings
    if openshift is None:
        findings.append(
            Finding(
                WARNING,
                f"kernel {kernel_text}: the catalog knows {what} builds only per OpenShift release; "
                "check that a build exists for this kernel",
            )
        )
        return findings
    release = (
        catalog.gpu_operator_release(operator)
        if section == "gpu_operator"
        else catalog.network_operator_release(operator)
    )
    if release is None:
        findings.append(Finding(WARNING, f"{title} {operator_text} is not in catalog"))
        return findings
    tag, entry = release
    supported = entry.get("openshift") or []
    evidence = list(catalog.release_fact(section, tag).sources)
    minor = openshift.detail["minor"]
    if not supported:
        findings.append(Finding(WARNING, f"the OpenShift releases validated for {title} {tag} are not in catalog"))
    elif minor in supported:
        findings.append(
            Finding(
                PASS,
                f"{title} {tag} builds the {what} for the RHCOS kernel of OpenShift {minor} "
                f"(validated: {', '.join(supported)})",
                evidence,
            )
        )
    elif previous is None:
        # The baseline is what runs: worth knowing, but refusing it would also refuse the upgrade that leaves it.
        findings.append(
            Finding(
                WARNING,
                f"the baseline runs {title} {tag} on OpenShift {openshift_text}, "
                f"validated only on OpenShift {', '.join(supported)}",
                evidence,
            )
        )
    else:
        findings.append(
            Finding(
                VIOLATION,
                f"OpenShift {openshift_text} and its RHCOS kernel: {title} {tag} is validated only on "
                f"OpenShift {', '.join(supported)}",
                evidence,
            )
        )
    return findings


def _rule_openshift_kernel(versions: Mapping[str, Any], catalog: Catalog) -> List[Finding]:
    openshift_text, openshift = _parsed(versions, "openshift")
    kernel_text, kernel = _parsed(versions, "kernel")
    if openshift_text is None or kernel_text is None:
        return [Finding(PASS, "not applicable: the stage pins no openshift or no kernel")]
    if openshift is None:
        return [_not_known(openshift_text, "OpenShift")]
    minor = openshift.detail["minor"]
    entry = catalog.openshift_minor(minor)
    if entry is None:
        return [Finding(WARNING, f"the RHCOS of OpenShift {minor} is not in catalog")]
    rhel = entry["rhel"]
    rhel_entry = catalog.rhel_kernel(rhel)
    evidence = list(catalog.openshift_fact(minor, rhel).sources)
    line = f"el{rhel.replace('.', '_')}"
    expected = f"a RHEL {rhel} kernel (*.{line})"
    if rhel_entry is not None:
        facts, fact = rhel_entry
        evidence += [source for source in fact.sources if source not in evidence]
        stream = facts.get("release_stream")
        expected = f"{facts['kernel']}-{stream + '.' if stream else ''}*.{line}"
    if kernel is None:
        prefix = placeholder_prefix(kernel_text)
        if rhel_entry is not None and prefix:
            known = tuple(int(part) for part in rhel_entry[0]["kernel"].split("."))
            if known[: len(prefix)] != prefix:
                return [
                    Finding(
                        VIOLATION,
                        f"OpenShift {minor} ships RHCOS on RHEL {rhel} with kernel {expected}; "
                        f"the stage expects {kernel_text!r}",
                        evidence,
                    )
                ]
        return [_not_known(kernel_text, "kernel")]
    exact = (entry.get("kernels") or {}).get(openshift_text)
    if exact:
        if same_version("kernel", exact, kernel_text):
            return [Finding(PASS, f"OpenShift {openshift_text} ships kernel {exact}", evidence)]
        return [Finding(VIOLATION, f"OpenShift {openshift_text} ships kernel {exact}; found {kernel_text}", evidence)]
    problems = []
    if kernel.detail["rhel"] != rhel:
        problems.append(f"its RHEL line is {kernel.detail['rhel'] or 'unknown'}, not {rhel}")
    if rhel_entry is not None:
        facts = rhel_entry[0]
        if kernel.detail["version"] != facts["kernel"]:
            problems.append(f"its version is {kernel.detail['version']}, not {facts['kernel']}")
        stream = facts.get("release_stream")
        if stream and kernel.detail["release_stream"] != stream:
            problems.append(f"its release stream is {kernel.detail['release_stream']}, not {stream}")
    if problems:
        return [
            Finding(
                VIOLATION,
                f"OpenShift {minor} ships RHCOS on RHEL {rhel} with kernel {expected}; {kernel_text}: "
                + "; ".join(problems),
                evidence,
            )
        ]
    return [
        Finding(
            PASS,
            f"{kernel_text} is a kernel of RHCOS {minor} (RHEL {rhel}, {expected}); "
            f"the exact z-stream kernel of {openshift_text} is not pinned by the catalog",
            evidence,
        )
    ]


def _rule_firmware_mofed(versions: Mapping[str, Any], catalog: Catalog) -> List[Finding]:
    firmware_keys = sorted(key for key in versions if isinstance(key, str) and key.startswith(FIRMWARE_PREFIX))
    if not firmware_keys:
        return [Finding(PASS, "not applicable: the stage pins no firmware_* versions")]
    mofed_text, mofed = _parsed(versions, "mofed")
    pairing = catalog.mofed_firmware(mofed) if mofed is not None else None
    findings: List[Finding] = []
    for key in firmware_keys:
        text, firmware = _parsed(versions, key)
        if text is None:
            continue
        if firmware is None:
            findings.append(_not_known(text, key))
            continue
        findings.extend(_firmware_family_findings(key, text, firmware, catalog))
        if mofed_text is None:
            findings.append(Finding(PASS, f"{key} {text}: the stage pins no mofed to pair with"))
            continue
        if mofed is None or pairing is None:
            findings.append(
                Finding(WARNING, f"{key} {text}: the firmware released with MOFED {mofed_text} is not in catalog")
            )
            continue
        _pair_key, fact = pairing
        train = fact.value.split(".")
        pair_minor, pair_sub = int(train[1]), int(train[2])
        minor, subminor = firmware.detail["train"]
        label = f"MOFED {mofed_text} was released with firmware {fact.value}"
        if (minor, subminor) == (pair_minor, pair_sub):
            findings.append(Finding(PASS, f"{label}; {key} is {text}", list(fact.sources)))
        elif minor == pair_minor:
            findings.append(
                Finding(WARNING, f"{label}; {key} {text} is the same train, another build", list(fact.sources))
            )
        else:
            findings.append(
                Finding(
                    WARNING,
                    f"{label}; {key} {text} is train xx.{minor} (tested together: xx.{pair_minor})",
                    list(fact.sources),
                )
            )
    return findings


def _firmware_family_findings(key: str, text: str, firmware: Version, catalog: Catalog) -> List[Finding]:
    family_id = firmware.detail["family_id"]
    family = catalog.firmware_family(family_id)
    if family is None:
        return [Finding(WARNING, f"{key} {text}: adapter family {family_id} is not in catalog")]
    named = catalog.firmware_family_for_key(key[len(FIRMWARE_PREFIX) :])
    if named is not None and named[0] != str(family_id):
        return [
            Finding(
                WARNING,
                f"{key} is named for {named[1].value} ({named[0]}.x firmware) but {text} is {family.value} "
                f"firmware ({family_id}.x)",
                list(family.sources),
            )
        ]
    return []


def _rule_sriov_openshift(versions: Mapping[str, Any], catalog: Catalog) -> List[Finding]:
    sriov_text, sriov = _parsed(versions, "sriov_operator")
    openshift_text, openshift = _parsed(versions, "openshift")
    if sriov_text is None or openshift_text is None:
        return [Finding(PASS, "not applicable: the stage pins no sriov_operator or no openshift")]
    if sriov is None or openshift is None:
        return [_not_known(sriov_text if sriov is None else openshift_text, "version")]
    release = catalog.sriov_release(sriov)
    if release is None:
        return [Finding(WARNING, f"SR-IOV Network Operator {sriov_text} is not in catalog")]
    _tag, fact = release
    if fact.value != openshift.detail["minor"]:
        return [
            Finding(
                WARNING,
                f"SR-IOV Network Operator {sriov_text} is built for OpenShift {fact.value}; "
                f"the stage runs OpenShift {openshift_text}",
                list(fact.sources),
            )
        ]
    return [
        Finding(PASS, f"SR-IOV Network Operator {sriov_text} is built for OpenShift {fact.value}", list(fact.sources))
    ]


def _known_release(section: str, text: str, version: Version, catalog: Catalog) -> Finding:
    name = "GPU Operator" if section == "gpu_operator" else "Network Operator"
    release = (
        catalog.gpu_operator_release(version)
        if section == "gpu_operator"
        else catalog.network_operator_release(version)
    )
    if release is not None:
        return Finding(PASS, f"{name} {text} is a release", list(catalog.release_fact(section, release[0]).sources))
    newest = catalog.newest_release(section)
    if newest is not None and version.compare(newest) > 0:
        return Finding(WARNING, f"{name} {text} is newer than the catalog's newest release {newest.text}")
    line = catalog.release_line_known(section, version)
    if line is not None and not line.value:
        return Finding(
            VIOLATION,
            f"{name} {text}: there is no {version.key[0]}.{version.key[1]} release line",
            list(line.sources),
        )
    return Finding(WARNING, f"{name} {text} is not in catalog")


def _rule_known_versions(versions: Mapping[str, Any], catalog: Catalog) -> List[Finding]:
    findings: List[Finding] = []
    drivers = catalog.known_drivers()
    mofeds = catalog.known_mofed()
    for component in sorted((key for key in versions if isinstance(key, str)), key=_component_order):
        if not is_version_component(component):
            continue
        text, version = _parsed(versions, component)
        if text is None:
            continue
        if version is None:
            findings.append(_not_known(text, component))
            continue
        findings.append(_known_version_finding(component, text, version, catalog, drivers=drivers, mofeds=mofeds))
    return findings or [Finding(PASS, "no versions to check")]


def _matching(component: str, text: str, known: Mapping[str, List[str]]) -> Optional[Tuple[str, List[str]]]:
    for candidate, where in known.items():
        if same_version(component, candidate, text):
            return candidate, where
    return None


def _known_version_finding(
    component: str,
    text: str,
    version: Version,
    catalog: Catalog,
    *,
    drivers: Mapping[str, List[str]],
    mofeds: Mapping[str, List[str]],
) -> Finding:
    if component in ("gpu_operator", "network_operator"):
        return _known_release(component, text, version, catalog)
    if component == "gpu_driver":
        match = _matching(component, text, drivers)
        if match:
            return Finding(PASS, f"driver {text} is documented for GPU Operator {', '.join(match[1])}")
        return Finding(WARNING, f"driver {text} is not documented by any GPU Operator release in the catalog")
    if component == "mofed":
        match = _matching(component, text, mofeds)
        if match:
            return Finding(PASS, f"MOFED/DOCA {text} is known ({', '.join(match[1])})")
        return Finding(WARNING, f"MOFED/DOCA {text} is not in catalog")
    if component in ("dcgm", "dcgm_hostengine", "device_plugin", "container_toolkit"):
        match = _matching(component, text, catalog.operand_defaults(component))
        if match:
            return Finding(PASS, f"{component} {text} ships with GPU Operator {', '.join(match[1])}")
        return Finding(WARNING, f"{component} {text} is not the default of any GPU Operator release in the catalog")
    if component == "openshift":
        minor = version.detail["minor"]
        if catalog.openshift_minor(minor) is not None:
            return Finding(PASS, f"OpenShift {minor} is in catalog")
        return Finding(WARNING, f"OpenShift {minor} is not in catalog")
    if component == "kernel":
        rhel = version.detail["rhel"]
        entry = catalog.rhel_kernel(rhel) if rhel else None
        if entry is not None and entry[0].get("release_stream") == version.detail["release_stream"]:
            return Finding(PASS, f"kernel {text} belongs to the RHEL {rhel} kernel line", list(entry[1].sources))
        return Finding(WARNING, f"kernel line of {text} is not in catalog")
    if component.startswith(FIRMWARE_PREFIX):
        family = catalog.firmware_family(version.detail["family_id"])
        if family is not None:
            return Finding(PASS, f"{component} {text} is {family.value} firmware", list(family.sources))
        return Finding(WARNING, f"{component} {text}: adapter family {version.detail['family_id']} is not in catalog")
    if component == "cuda":
        known = [entry["cuda"] for entry in (catalog.data.get("driver_cuda") or {}).values()]
        if any(same_version("cuda", candidate, text) for candidate in known):
            return Finding(PASS, f"CUDA {text} is a version a known driver branch reports")
        return Finding(WARNING, f"CUDA {text} is not in catalog")
    if component == "sriov_operator":
        release = catalog.sriov_release(version)
        if release is not None:
            return Finding(PASS, f"SR-IOV Network Operator {text} is a release", list(release[1].sources))
        return Finding(WARNING, f"SR-IOV Network Operator {text} is not in catalog")
    return Finding(WARNING, f"the catalog has no {component} releases; {text} is not checked")


def check_version_set(
    versions: Mapping[str, Any],
    *,
    catalog: Catalog,
    previous: Optional[Mapping[str, Any]] = None,
) -> Dict[str, List[Finding]]:
    """Findings of every rule on one version set; ``previous`` is the set it comes from (kernel changes)."""
    return {
        "gpu_operator_supports_driver": _rule_gpu_operator_supports_driver(versions, catalog),
        "driver_cuda": _rule_driver_cuda(versions, catalog),
        "dcgm_exporter_hostengine": _rule_dcgm_exporter_hostengine(versions),
        "driver_kernel": _operator_builds_for_kernel(
            versions, previous, catalog, section="gpu_operator", what="GPU driver"
        ),
        "mofed_kernel": _operator_builds_for_kernel(
            versions, previous, catalog, section="network_operator", what="MOFED/DOCA driver"
        ),
        "openshift_kernel": _rule_openshift_kernel(versions, catalog),
        "firmware_mofed": _rule_firmware_mofed(versions, catalog),
        "sriov_openshift": _rule_sriov_openshift(versions, catalog),
        "known_versions": _rule_known_versions(versions, catalog),
    }


# -- rules on stages ----------------------------------------------------------


def _describe_groups(groups: Mapping[str, List[str]]) -> str:
    return "; ".join(f"{GROUP_TITLES.get(group, group)} ({', '.join(members)})" for group, members in groups.items())


def _rule_one_group(matrix: Matrix, stage: str) -> List[Finding]:
    previous = matrix.predecessor(stage) or BASELINE_STAGE
    before = matrix.effective_versions(previous)
    after = matrix.effective_versions(stage)
    groups = changed_groups(before, after)
    if not groups:
        return [Finding(PASS, f"{stage} changes nothing compared with {previous}")]
    if len(groups) == 1:
        return [Finding(PASS, f"{stage} changes one group compared with {previous}: {_describe_groups(groups)}")]
    return [
        Finding(
            VIOLATION,
            f"{stage} changes {len(groups)} groups at once compared with {previous}: {_describe_groups(groups)}; "
            f"the planner splits this into steps, one group each",
            [
                f"{key}: {_text(before.get(key))} -> {_text(after.get(key))}"
                for members in groups.values()
                for key in members
            ],
        )
    ]


def _rule_upgrade_order(matrix: Matrix, stage: str) -> List[Finding]:
    pipeline = [name for name in ("current_production", "canary_testing", "next_planned") if name in matrix.stages]
    if stage not in pipeline or pipeline.index(stage) == 0:
        return [Finding(PASS, "not applicable")]
    findings: List[Finding] = []
    latest_index = -1
    latest_group = ""
    for index in range(1, len(pipeline)):
        earlier, later = pipeline[index - 1], pipeline[index]
        before, after = matrix.effective_versions(earlier), matrix.effective_versions(later)
        groups = changed_groups(before, after)
        indexes = {group: GROUP_ORDER.index(group) for group in groups if group in GROUP_ORDER}
        if later == stage:
            early = [group for group, index in indexes.items() if index < latest_index]
            for group in early:
                findings.append(
                    Finding(
                        VIOLATION,
                        f"{stage} changes {GROUP_TITLES[group]} after {GROUP_TITLES[latest_group]} changed in an "
                        f"earlier stage; the order is " + " -> ".join(GROUP_TITLES[name] for name in GROUP_ORDER),
                    )
                )
            for component in changed_components(before, after):
                old, new = (
                    try_parse(component, _text(before.get(component))),
                    try_parse(component, _text(after.get(component))),
                )
                if old is not None and new is not None and new.compare(old) < 0:
                    findings.append(
                        Finding(
                            WARNING,
                            f"{stage} downgrades {component} from {old.text} to {new.text} ({earlier} -> {stage})",
                        )
                    )
            if not findings:
                order = " -> ".join(GROUP_TITLES[group] for group in indexes) or "nothing"
                findings.append(Finding(PASS, f"{earlier} -> {stage} changes {order}, in order"))
            break
        if indexes:
            highest = max(indexes, key=lambda group: indexes[group])
            if indexes[highest] >= latest_index:
                latest_index, latest_group = indexes[highest], highest
    return findings


# What a rollback cannot restore, and why (the openshift role refuses to roll back, too).
ONE_WAY_COMPONENTS = {"openshift": "OpenShift has no downgrades, and its RHCOS kernel goes with it"}


def _rule_rollback(matrix: Matrix) -> List[Finding]:
    if "rollback" not in matrix.stages:
        return [Finding(WARNING, "no rollback entry: keep the last known-good versions in the matrix")]
    production = matrix.effective_versions(BASELINE_STAGE)
    rollback = matrix.effective_versions("rollback")
    changed = changed_components(production, rollback)
    if not changed:
        return [Finding(VIOLATION, "rollback equals current_production: it restores nothing")]
    findings = [
        Finding(
            PASS,
            f"rollback differs from current_production in {', '.join(changed)}",
            [f"{key}: {_text(production.get(key))} -> {_text(rollback.get(key))}" for key in changed],
        )
    ]
    for component in changed:
        now, back = (
            try_parse(component, _text(production.get(component))),
            try_parse(component, _text(rollback.get(component))),
        )
        if now is not None and back is not None and back.compare(now) > 0:
            findings.append(Finding(WARNING, f"rollback {component} {back.text} is newer than production {now.text}"))
    for component in (c for c in changed if c in ONE_WAY_COMPONENTS):
        findings.append(
            Finding(
                WARNING,
                f"{component} cannot go back ({ONE_WAY_COMPONENTS[component]}): a rollback leaves it at "
                f"{_text(production.get(component))}, not {_text(rollback.get(component))}",
            )
        )
    return findings


def evaluate_matrix(matrix: Matrix, *, catalog: Catalog) -> RuleReport:
    """Every rule on every stage of a valid matrix (validate first: values are assumed to be strings)."""
    results: List[RuleResult] = []
    for stage in STAGE_NAMES:
        if stage not in matrix.stages:
            continue
        versions = matrix.effective_versions(stage)
        previous_stage = matrix.predecessor(stage)
        previous = matrix.effective_versions(previous_stage) if previous_stage else None
        for rule, findings in check_version_set(versions, catalog=catalog, previous=previous).items():
            results.append(RuleResult(rule=rule, stage=stage, findings=findings))
        if stage in ("canary_testing", "next_planned"):
            results.append(RuleResult("one_group_at_a_time", stage, _rule_one_group(matrix, stage)))
            results.append(RuleResult("upgrade_order", stage, _rule_upgrade_order(matrix, stage)))
    results.append(RuleResult("rollback_differs", "rollback", _rule_rollback(matrix)))
    return RuleReport(results=results)
