# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The alerts gate: hold while Prometheus alerts that name trouble fire (collection-internal).

Before each node of a promotion and at each bake check, a run asks
Prometheus (``GET /api/v1/alerts``) for its active alerts and holds while
any alert whose name matches ``alert_filter`` (a regular expression over
alert names, searched like Python's ``re.search``) is ``firing``; ``pending``
alerts (waiting out their ``for``) do not hold. After a bounded wait
(``_wait.wait_until``) it halts naming the alerts. This is kured's
``--alert-filter-regexp`` with ``--alert-filter-match-only=true``: kured by
default ignores the alerts the expression matches and blocks on any other,
its match-only flag blocks on the matching ones only, which is what a filter
naming the alerts that should stop an upgrade means.

``firing_alerts`` is pure (Prometheus' answer in, names out); ``hold_while_firing``
does the waiting through a ``fetch(url) -> JSON``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Pattern

from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import SSLValidationError, open_url

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    AlertsFiringError,
    InvalidInputError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates import fetch_json_with
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates_parse import UnreadableOutputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

Fetch = Callable[[str], Any]


def compile_filter(alert_filter: str) -> Pattern[str]:
    if not alert_filter:
        raise InvalidInputError("alert_filter is empty: it would hold on every alert; name the alerts to hold on")
    try:
        return re.compile(alert_filter)
    except re.error as err:
        raise InvalidInputError(f"alert_filter {alert_filter!r} is not a regular expression: {err}") from err


@dataclass(frozen=True)
class FiringAlert:
    name: str
    labels: Dict[str, str]

    def describe(self) -> str:
        where = ", ".join(f"{key}={value}" for key, value in sorted(self.labels.items()) if key != "alertname")
        return f"{self.name}{{{where}}}" if where else self.name


def firing_alerts(answer: Any, *, pattern: Pattern[str]) -> List[FiringAlert]:
    """The firing alerts of a ``/api/v1/alerts`` answer whose name matches ``pattern``. Pure."""
    if not isinstance(answer, Mapping) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, Mapping) else None
        raise UnreadableOutputError(f"Prometheus did not list its alerts: {error or str(answer)[:200]}")
    alerts = (answer.get("data") or {}).get("alerts")
    if not isinstance(alerts, list):
        raise UnreadableOutputError("Prometheus answered /api/v1/alerts without a list of alerts")
    found = []
    for alert in alerts:
        if not isinstance(alert, Mapping) or alert.get("state") != "firing":
            continue
        labels = {str(key): str(value) for key, value in (alert.get("labels") or {}).items()}
        name = labels.get("alertname", "")
        if name and pattern.search(name):
            found.append(FiringAlert(name=name, labels=labels))
    return sorted(found, key=lambda alert: alert.describe())


def alerts_url(prometheus_url: str) -> str:
    return f"{prometheus_url.rstrip('/')}/api/v1/alerts"


def hold_while_firing(
    fetch: Fetch,
    *,
    prometheus_url: str,
    alert_filter: str,
    timeout: float,
    sleep: float,
    what: str,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
    controller: Optional[Any] = None,
    on_hold: Optional[Callable[[List[FiringAlert]], None]] = None,
) -> Dict[str, Any]:
    """Wait until no alert matching ``alert_filter`` fires; AlertsFiringError naming them after ``timeout``.

    ``on_hold`` is told the firing alerts once, at the first look that finds any (the run is holding)."""
    pattern = compile_filter(alert_filter)
    url = alerts_url(prometheus_url)
    seen: Dict[str, FiringAlert] = {}

    def observe() -> List[FiringAlert]:
        firing = firing_alerts(fetch(url), pattern=pattern)
        if firing and not seen and on_hold is not None:
            on_hold(firing)
        for alert in firing:
            seen.setdefault(alert.describe(), alert)
        return firing

    extra = {"controller": controller} if controller is not None else {}
    try:
        outcome = wait_until(
            observe,
            lambda firing: not firing,
            timeout=timeout,
            sleep=sleep,
            what=f"alerts matching {alert_filter!r} to stop firing ({what})",
            clock=clock,
            pause=pause,
            **extra,
        )
    except WaitTimeoutError as err:
        still = err.result.get("last") or []
        names = ", ".join(alert.describe() for alert in still)
        raise AlertsFiringError(
            f"{what}: halted after {err.result.get('elapsed', 0):.0f}s because Prometheus alerts matching "
            f"{alert_filter!r} are firing: {names}",
            result={"firing": [alert.describe() for alert in still], "elapsed": err.result.get("elapsed", 0)},
        ) from err
    return {
        "held": outcome.polls > 1,
        "elapsed": round(outcome.elapsed, 3),
        "held_for": sorted(seen),
        "firing": [],
    }


# -- the gate a rollout consults before each node -------------------------------------------------------------


@dataclass(frozen=True)
class AlertsGate:
    """The alerts gate as a rollout carries it: asked before each node it would start (``hold``)."""

    prometheus_url: str
    alert_filter: str
    fetch: Fetch
    timeout: float = 600.0
    sleep: float = 10.0

    def __post_init__(self) -> None:
        compile_filter(self.alert_filter)
        if not self.prometheus_url:
            raise InvalidInputError("the alerts gate needs prometheus_url with its alert_filter")
        if self.timeout < 0 or self.sleep <= 0:
            raise InvalidInputError("the alerts gate's wait_timeout must be >= 0 and its wait_sleep > 0")

    def firing(self) -> List[FiringAlert]:
        """One look: the matching alerts firing now (for a run that paces itself while it watches)."""
        return firing_alerts(self.fetch(alerts_url(self.prometheus_url)), pattern=compile_filter(self.alert_filter))

    def hold(
        self,
        what: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], None] = time.sleep,
        on_hold: Optional[Callable[[List[FiringAlert]], None]] = None,
    ) -> Dict[str, Any]:
        """Hold while a matching alert fires (``hold_while_firing``); AlertsFiringError naming them at the bound."""
        return hold_while_firing(
            self.fetch,
            prometheus_url=self.prometheus_url,
            alert_filter=self.alert_filter,
            timeout=self.timeout,
            sleep=self.sleep,
            what=what,
            clock=clock,
            pause=pause,
            on_hold=on_hold,
        )


def alerts_gate_suboptions() -> Dict[str, Any]:
    """The ``alerts`` option of the rollout modules (its documentation is the doc fragment ``alerts``)."""
    return {
        "type": "dict",
        "options": {
            "prometheus_url": {"type": "str", "required": True},
            "alert_filter": {"type": "str", "required": True},
            "validate_certs": {"type": "bool", "default": True},
            "wait_timeout": {"type": "int", "default": 600},
            "wait_sleep": {"type": "float", "default": 10.0},
        },
    }


def prometheus_fetch(*, validate_certs: bool) -> Fetch:
    """``fetch(url) -> JSON`` over ansible's open_url; its failures are UnreadableOutputError."""
    return fetch_json_with(
        open_url,
        validate_certs=validate_certs,
        timeout=30,
        errors=(OSError, ValueError, UrlConnectionError, SSLValidationError),
    )


def alerts_gate_from_params(params: Optional[Mapping[str, Any]]) -> Optional[AlertsGate]:
    """The gate a rollout module's ``alerts`` option asks for (None without it)."""
    if not params or not params.get("alert_filter"):
        return None
    return AlertsGate(
        prometheus_url=str(params.get("prometheus_url") or ""),
        alert_filter=str(params["alert_filter"]),
        fetch=prometheus_fetch(validate_certs=bool(params.get("validate_certs", True))),
        timeout=float(params.get("wait_timeout", 600)),
        sleep=float(params.get("wait_sleep", 10.0)),
    )
