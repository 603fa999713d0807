# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Move an operator forward through its OLM Subscription (collection-internal; the I/O of olm_subscription_upgrade).

Read the Subscription; switch its channel when asked; wait for OLM to plan (``status.currentCSV`` and
``status.installPlanRef``, or a ``ResolutionFailed`` condition); approve the InstallPlan when OLM plans the target
(Manual approval); wait for the target CSV to reach ``Succeeded`` or ``Failed``. The decisions are the pure
functions of ``_olm``; every request goes through ``KubeApi`` (transient errors retried with bounded backoff) and
every wait through ``_wait.wait_until`` (bounded, monotonic clock).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, NoReturn, Optional

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    GpuFleetError,
    InvalidInputError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CSVS,
    INSTALL_PLANS,
    SUBSCRIPTIONS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._olm import (
    DEFAULT_PLAN_ADVICE,
    csv_outcome,
    plan_error,
    plan_state,
    subscription_diff,
    subscription_view,
    target_matches,
    upgrade_decision,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until


@dataclass(frozen=True)
class SubscriptionUpgradeOptions:
    name: str
    namespace: str
    channel: str = ""
    csv: str = ""
    version: str = ""
    package: str = ""
    advice: str = DEFAULT_PLAN_ADVICE
    wait_timeout: float = 1800.0
    wait_sleep: float = 5.0
    check_mode: bool = False
    diff: bool = False

    @property
    def has_target(self) -> bool:
        return bool(self.csv or self.version)

    @property
    def target(self) -> str:
        """The target as a person reads it: the CSV's name, or the package's (or any) CSV at the version."""
        if self.csv:
            return self.csv
        if self.version:
            return f"{self.package or 'the operator'} {self.version}"
        return "the channel's head"

    def matches(self, csv: str) -> bool:
        return target_matches(csv, target_csv=self.csv, version=self.version, package=self.package)


class SubscriptionUpgrade:
    """One run of the module against one Subscription."""

    def __init__(self, api: KubeApi, options: SubscriptionUpgradeOptions, *, pause: Callable[[float], None]) -> None:
        self.api = api
        self.options = options
        self.pause = pause
        self.started = time.monotonic()
        self.result: Dict[str, Any] = {"changed": False}

    def read_subscription(self) -> Dict[str, Any]:
        found = self.api.get(SUBSCRIPTIONS, self.options.name, namespace=self.options.namespace)
        if found is None:
            raise InvalidInputError(
                f"Subscription {self.options.namespace}/{self.options.name} does not exist: nothing was changed"
            )
        return found

    def remaining(self) -> float:
        return max(0.0, self.options.wait_timeout - (time.monotonic() - self.started))

    def fail(self, msg: str, *, timeout: bool = False) -> NoReturn:
        self.result["elapsed"] = round(time.monotonic() - self.started, 1)
        self.result["api_requests"] = self.api.requests_sent
        raise (WaitTimeoutError if timeout else GpuFleetError)(msg, result=dict(self.result))

    def run(self) -> Dict[str, Any]:
        opts = self.options
        subscription = self.read_subscription()
        decision = upgrade_decision(
            subscription, channel=opts.channel, matches=opts.matches, has_target=opts.has_target
        )
        before = decision["view"]
        self.result.update(
            installed_before=before["installed"],
            installed=before["installed"],
            target=opts.target,
            channel=opts.channel or before["channel"],
            channel_before=before["channel"],
            current_csv=before["current"],
            install_plan=before["install_plan"],
            csv_phase="",
        )
        if not decision["done"]:
            self.result["changed"] = True
            if not opts.check_mode:
                subscription = self.move(subscription, switch=decision["switch"], installed_before=before["installed"])
        if opts.check_mode:
            after = opts.csv or (before["current"] if opts.matches(before["current"]) else opts.target)
            self.result["installed"] = before["installed"] if decision["done"] else after
        else:
            self.wait_for_csv(self.result["installed"])
        if opts.check_mode or opts.diff:
            self.result["diff"] = subscription_diff(
                before, channel=opts.channel, installed=str(self.result["installed"])
            )
        self.result["elapsed"] = round(time.monotonic() - self.started, 1)
        self.result["api_requests"] = self.api.requests_sent
        return self.result

    def move(self, subscription: Dict[str, Any], *, switch: bool, installed_before: str) -> Dict[str, Any]:
        """Switch the channel, wait for OLM's plan, approve it; returns the Subscription as last read."""
        opts = self.options
        if switch:
            self.api.patch(SUBSCRIPTIONS, opts.name, {"spec": {"channel": opts.channel}}, namespace=opts.namespace)
        try:
            outcome = wait_until(
                self.read_subscription,
                lambda sub: bool(self.state(sub, installed_before)),
                timeout=self.remaining(),
                sleep=opts.wait_sleep,
                what=f"OLM to plan {opts.target} for Subscription {opts.namespace}/{opts.name}",
                pause=self.pause,
            )
        except WaitTimeoutError as err:
            last = err.result.get("last") or subscription
            self.note(last)
            self.fail(f"{err.msg}. {self.plan_error(last)}{self.switch_back(switch)}", timeout=True)
        subscription = outcome.value
        self.note(subscription)
        state = self.state(subscription, installed_before)
        if state == "other":
            self.fail(self.plan_error(subscription) + self.switch_back(switch))
        view = subscription_view(subscription)
        if state == "planned":
            self.approve(view["install_plan"])
            self.result["installed"] = view["current"]
        return subscription

    def switch_back(self, switched: bool) -> str:
        """Undo this run's channel switch after OLM planned no target (its plan stays unapproved): a sentence to add
        to the failure."""
        before = str(self.result.get("channel_before") or "")
        if not switched or not before:
            return ""
        opts = self.options
        try:
            self.api.patch(SUBSCRIPTIONS, opts.name, {"spec": {"channel": before}}, namespace=opts.namespace)
        except GpuFleetError as err:
            return (
                f". The Subscription stays on channel {opts.channel} (setting {before} back failed: {err.msg}); "
                f"restore it with: oc patch subscription {opts.name} -n {opts.namespace} --type merge "
                f'-p \'{{"spec":{{"channel":"{before}"}}}}\''
            )
        self.result["channel"] = before
        return f". The Subscription's channel was set back to {before}; its InstallPlan was not approved"

    def state(self, subscription: Dict[str, Any], installed_before: str) -> str:
        return plan_state(
            subscription,
            installed_before=installed_before,
            matches=self.options.matches,
            settled_without_target=not self.options.has_target,
        )

    def note(self, subscription: Dict[str, Any]) -> None:
        view = subscription_view(subscription)
        self.result.update(current_csv=view["current"], install_plan=view["install_plan"], installed=view["installed"])

    def plan_error(self, subscription: Dict[str, Any]) -> str:
        opts = self.options
        return plan_error(
            subscription,
            name=opts.name,
            namespace=opts.namespace,
            channel=opts.channel,
            target=opts.target,
            advice=opts.advice,
        )

    def approve(self, plan: str) -> None:
        """Approve the InstallPlan unless it is approved already (a re-run after an interrupted one)."""
        found = self.api.get(INSTALL_PLANS, plan, namespace=self.options.namespace)
        if found is None:
            self.fail(
                f"InstallPlan {self.options.namespace}/{plan} that Subscription {self.options.name} references is gone"
            )
        if not (found.get("spec") or {}).get("approved"):
            self.api.patch(INSTALL_PLANS, plan, {"spec": {"approved": True}}, namespace=self.options.namespace)

    def wait_for_csv(self, csv: str) -> None:
        """Wait for ``csv`` to reach Succeeded or Failed; a Failed CSV fails naming its message."""
        opts = self.options
        if not csv:
            return
        try:
            outcome = wait_until(
                lambda: self.api.get(CSVS, csv, namespace=opts.namespace),
                lambda found: bool(csv_outcome(found)),
                timeout=self.remaining(),
                sleep=opts.wait_sleep,
                what=f"CSV {opts.namespace}/{csv} to succeed",
                pause=self.pause,
            )
        except WaitTimeoutError as err:
            status = (err.result.get("last") or {}).get("status") or {}
            self.result["csv_phase"] = str(status.get("phase") or "")
            self.fail(
                f"{err.msg}: it is {status.get('phase') or 'not there'} {status.get('message') or ''}".strip(),
                timeout=True,
            )
        status = (outcome.value or {}).get("status") or {}
        self.result["csv_phase"] = str(status.get("phase"))
        if self.result["csv_phase"] == "Failed":
            self.fail(f"CSV {csv} is Failed: {status.get('message') or status.get('reason') or 'no message'}")


def run_subscription_upgrade(
    api: KubeApi, options: SubscriptionUpgradeOptions, *, pause: Optional[Callable[[float], None]] = None
) -> Dict[str, Any]:
    return SubscriptionUpgrade(api, options, pause=pause or time.sleep).run()
