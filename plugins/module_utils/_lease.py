# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""One driver at a time: the stage's Lease in the cluster (collection-internal).

A stage of ``playbooks/upgrade.yml`` holds a ``coordination.k8s.io/v1`` Lease
in the ledger's namespace while it runs, with Kubernetes' leader-election
semantics (the API reference of LeaseSpec, client-go's leaderelection):

- ``holderIdentity`` names the holder; empty means nobody holds it and anyone
  may take it (client-go releases a lease that way);
- the lease is valid for ``leaseDurationSeconds`` after ``renewTime``; after
  that another run may take it over (``acquireTime`` restarts and
  ``leaseTransitions`` counts the change of holder);
- every write is a PUT guarded by ``resourceVersion`` (or a create), so two
  runs racing for it cannot both win: the loser gets 409 Conflict.  As
  client-go's ``tryAcquireOrRenew`` does on its next attempt, a 409 is not a
  verdict: the Lease is read again and the decision made again on what it now
  says (still ours, free or expired: write again; held by another run: refused
  naming the holder and its age), a bounded number of times.

Time is the API server's (``KubeApi.server_time``, the ``Date`` header), not
the controller's, so runs on controllers with skewed clocks agree on expiry.

The decision (may this run take it? has it expired?) is pure: plain data in,
a ``LeaseDecision`` out.  ``StageLease`` does the I/O; ``LeaseKeeper`` renews
the lease from the responses of the running module's own API requests (see
``KubeApi``), so every wait loop that polls the cluster keeps it alive.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    InvalidInputError,
    KubeApiError,
    LeaseHeldError,
    RunCancelledError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import LEASES
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

LEASE_API_VERSION = "coordination.k8s.io/v1"
# The environment variable through which roles/upgrade hands the stage's Lease to every module the stage runs
# (``environment:`` on the stage's block); KubeApi.from_params reads it, the way kubernetes.core reads K8S_AUTH_*.
LEASE_ENV = "GPUFLEET_UPGRADE_LEASE"
# Renew when a third of the duration has passed since the last renewal (client-go renews far more often than its
# lease lasts too), so two missed chances still leave the lease valid.
RENEW_FRACTION = 3.0
# Read-decide-write rounds when the write answers 409 (someone wrote the Lease between our read and our write). A
# renewal by our own keeper or a release racing a take settles in one more round; a Lease that changes under us
# every time is refused.
WRITE_ATTEMPTS = 4
# The shortest sleep of the Lease's keeper (real seconds), however fast the server's clock runs.
KEEPER_MIN_PAUSE = 0.01


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease object says, parsed."""

    holder: str
    duration_seconds: int
    acquire_time: Optional[datetime.datetime]
    renew_time: Optional[datetime.datetime]
    transitions: int
    resource_version: str


@dataclass(frozen=True)
class LeaseDecision:
    """``action``: ``create`` (no Lease yet), ``take`` (free or expired), ``renew`` (ours) or ``refuse``."""

    action: str
    reason: str
    holder: str = ""
    age_seconds: Optional[float] = None  # since acquireTime, on the server's clock
    since_renew_seconds: Optional[float] = None
    expires_in_seconds: Optional[float] = None

    @property
    def allowed(self) -> bool:
        return self.action != "refuse"

    def as_dict(self) -> Dict[str, Any]:
        return {
            "action": self.action,
            "reason": self.reason,
            "holder": self.holder,
            "age_seconds": self.age_seconds,
            "since_renew_seconds": self.since_renew_seconds,
            "expires_in_seconds": self.expires_in_seconds,
        }


# -- pure logic -------------------------------------------------------------------------------------------------
def parse_micro_time(value: Any) -> Optional[datetime.datetime]:
    """A MicroTime/Time string (RFC 3339, with or without fractions) as an aware UTC datetime; None if absent."""
    if not value:
        return None
    text = str(value).strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as err:
        raise InvalidInputError(f"Unreadable Lease time {value!r}: {err}") from err
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc)


def format_micro_time(moment: datetime.datetime) -> str:
    """MicroTime as the API server writes it: ``2006-01-02T15:04:05.000000Z``."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_lease(obj: Optional[Dict[str, Any]]) -> Optional[LeaseRecord]:
    """The Lease object as a ``LeaseRecord``; None when there is no Lease."""
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise InvalidInputError(f"A Lease is an object, got {type(obj).__name__}")
    spec = obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    if not isinstance(spec, dict) or not isinstance(meta, dict):
        raise InvalidInputError("A Lease has an object spec and metadata")
    try:
        duration = int(spec.get("leaseDurationSeconds") or 0)
        transitions = int(spec.get("leaseTransitions") or 0)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(f"Unreadable Lease {meta.get('name')!r}: {err}") from err
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=duration,
        acquire_time=parse_micro_time(spec.get("acquireTime")),
        renew_time=parse_micro_time(spec.get("renewTime") or spec.get("acquireTime")),
        transitions=transitions,
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def expires_at(lease: LeaseRecord) -> Optional[datetime.datetime]:
    """When the holder's claim lapses: ``renewTime + leaseDurationSeconds``; None for a lease nobody holds."""
    if not lease.holder or lease.renew_time is None:
        return None
    return lease.renew_time + datetime.timedelta(seconds=lease.duration_seconds)


def is_expired(lease: LeaseRecord, *, now: datetime.datetime) -> bool:
    """True when nobody holds the lease or its holder stopped renewing it for ``leaseDurationSeconds``."""
    end = expires_at(lease)
    return end is None or now >= end


def decide(lease: Optional[LeaseRecord], *, me: str, now: datetime.datetime) -> LeaseDecision:
    """May the run ``me`` take (or keep) the lease at server time ``now``?"""
    if lease is None:
        return LeaseDecision(action="create", reason="No run holds the Lease")
    age = _seconds(now, lease.acquire_time)
    since_renew = _seconds(now, lease.renew_time)
    end = expires_at(lease)
    expires_in = None if end is None else (end - now).total_seconds()
    holder = lease.holder
    if holder == me:
        return LeaseDecision(
            action="renew",
            reason="This run holds the Lease",
            holder=holder,
            age_seconds=age,
            since_renew_seconds=since_renew,
            expires_in_seconds=expires_in,
        )
    if not holder:
        return LeaseDecision(action="take", reason="The Lease was released", age_seconds=age)
    if is_expired(lease, now=now):
        return LeaseDecision(
            action="take",
            reason=f"The Lease of {lease.holder} expired {_duration(-(expires_in or 0))} ago (not renewed for "
            f"{_duration(since_renew or 0)}; it lasts {lease.duration_seconds}s): that run stopped, this one resumes",
            holder=holder,
            age_seconds=age,
            since_renew_seconds=since_renew,
            expires_in_seconds=expires_in,
        )
    return LeaseDecision(
        action="refuse",
        reason=f"Another run holds the Lease: {lease.holder}, for {_duration(age or 0)} (renewed "
        f"{_duration(since_renew or 0)} ago, expires in {_duration(expires_in or 0)} unless renewed). Wait for it "
        "to end; a killed run's Lease expires after its duration and a re-run then resumes",
        holder=holder,
        age_seconds=age,
        since_renew_seconds=since_renew,
        expires_in_seconds=expires_in,
    )


def lease_body(
    *,
    name: str,
    namespace: str,
    me: str,
    duration_seconds: int,
    now: datetime.datetime,
    previous: Optional[LeaseRecord],
    decision: LeaseDecision,
) -> Dict[str, Any]:
    """The Lease this run writes to take or renew it (resourceVersion-guarded when it replaces one)."""
    keeps_acquire = decision.action == "renew" and previous is not None and previous.acquire_time is not None
    acquire = previous.acquire_time if keeps_acquire and previous is not None else now
    transitions = 0 if previous is None else previous.transitions + (0 if decision.action == "renew" else 1)
    metadata: Dict[str, Any] = {"name": name, "namespace": namespace}
    if previous is not None:
        metadata["resourceVersion"] = previous.resource_version
    return {
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": me,
            "leaseDurationSeconds": int(duration_seconds),
            "acquireTime": format_micro_time(acquire or now),
            "renewTime": format_micro_time(now),
            "leaseTransitions": transitions,
        },
    }


def renewal_due(*, last_renew: Optional[datetime.datetime], now: datetime.datetime, duration_seconds: int) -> bool:
    """Whether a third of the lease's duration has passed since this run last renewed it (server clock)."""
    if last_renew is None:
        return True
    return (now - last_renew).total_seconds() >= duration_seconds / RENEW_FRACTION


def _seconds(now: datetime.datetime, then: Optional[datetime.datetime]) -> Optional[float]:
    return None if then is None else round((now - then).total_seconds(), 3)


def _duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    if whole < 120:
        return f"{whole}s"
    if whole < 7200:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{(whole % 3600) // 60:02d}m"


# -- I/O ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LeaseSettings:
    """Which Lease, who holds it, how long it lasts."""

    namespace: str
    name: str
    holder: str
    duration_seconds: int

    def __post_init__(self) -> None:
        for field_name in ("namespace", "name", "holder"):
            if not str(getattr(self, field_name) or "").strip():
                raise InvalidInputError(f"The stage Lease needs a non-empty {field_name}")
        if int(self.duration_seconds) < 1:
            raise InvalidInputError(
                f"The stage Lease's duration must be at least 1 second, got {self.duration_seconds}"
            )

    def to_json(self) -> str:
        return json.dumps(
            {
                "namespace": self.namespace,
                "name": self.name,
                "holder": self.holder,
                "duration_seconds": self.duration_seconds,
            }
        )

    @classmethod
    def from_environment(cls, environ: Optional[Dict[str, str]] = None) -> Optional["LeaseSettings"]:
        """The Lease roles/upgrade hands to the stage's modules through ``GPUFLEET_UPGRADE_LEASE``; None if unset."""
        text = (os.environ if environ is None else environ).get(LEASE_ENV, "").strip()
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(
                namespace=str(data["namespace"]),
                name=str(data["name"]),
                holder=str(data["holder"]),
                duration_seconds=int(data["duration_seconds"]),
            )
        except (ValueError, TypeError, KeyError) as err:
            raise InvalidInputError(
                f"{LEASE_ENV} must be JSON with namespace, name, holder and duration_seconds: {err}"
            ) from err


class StageLease:
    """Reads, takes, renews and releases the stage's Lease through a ``KubeApi``."""

    def __init__(self, api: Any, settings: LeaseSettings) -> None:
        self._api = api
        self._ref = LEASES
        self.settings = settings

    @property
    def api(self) -> Any:
        return self._api

    def read(self) -> Optional[LeaseRecord]:
        return parse_lease(self._api.get(self._ref, self.settings.name, namespace=self.settings.namespace))

    def acquire(self, *, check_mode: bool = False) -> tuple[LeaseDecision, bool]:
        """Take or renew the lease; (decision, changed).  A refusal raises ``LeaseHeldError`` before any write."""
        return self._settle(now=None, renewing=False, check_mode=check_mode)

    def renew(self, now: datetime.datetime) -> None:
        """Renew the lease this run holds; ``LeaseHeldError`` when another run has taken it meanwhile."""
        self._settle(now=now, renewing=True, check_mode=False)

    def _settle(
        self, *, now: Optional[datetime.datetime], renewing: bool, check_mode: bool
    ) -> tuple[LeaseDecision, bool]:
        """Read, decide, write; a 409 on the write means the Lease changed since the read: read and decide again."""
        conflict: Optional[KubeApiError] = None
        for attempt in range(WRITE_ATTEMPTS):
            moment = now if now is not None and attempt == 0 else self._api.server_time()
            previous = self.read()
            decision = decide(previous, me=self.settings.holder, now=moment)
            raced = "" if conflict is None else " (it changed between this run's read and its write: 409 Conflict)"
            if renewing and decision.action != "renew":
                raise LeaseHeldError(
                    f"This run lost the stage Lease {self.settings.namespace}/{self.settings.name} and stops{raced}: "
                    f"{decision.reason if decision.holder else 'it was released or deleted'}",
                    result={"lease": self._describe(previous), "decision": decision.as_dict()},
                )
            if not decision.allowed:
                raise LeaseHeldError(
                    f"Refused before any change{raced}: {decision.reason}",
                    result={"lease": self._describe(previous), "decision": decision.as_dict()},
                )
            if check_mode:
                # The real run writes the Lease whatever it decided (a renewal moves renewTime): changed either way.
                return decision, True
            try:
                self._write(previous, decision, moment)
            except KubeApiError as err:
                if err.status != 409:
                    raise
                conflict = err
                continue
            return decision, True
        raise LeaseHeldError(
            f"Refused: the stage Lease {self.settings.namespace}/{self.settings.name} changed between every read and "
            f"write of this run ({WRITE_ATTEMPTS} attempts, 409 Conflict each time; last: {conflict})"
        )

    def release(self, *, check_mode: bool = False) -> bool:
        """Give the lease up if this run holds it (holder emptied, as client-go releases); True when changed.

        The run's keeper may renew the Lease between this read and this write (a 409 on the guarded write): read
        again and release what is still this run's, a bounded number of times."""
        conflict: Optional[KubeApiError] = None
        for _attempt in range(WRITE_ATTEMPTS):
            previous = self.read()
            if previous is None or previous.holder != self.settings.holder:
                return False
            if check_mode:
                return True
            try:
                self._api.replace(self._ref, self._released_body(previous))
            except KubeApiError as err:
                if err.status != 409:
                    raise
                conflict = err
                continue
            return True
        raise LeaseHeldError(
            f"Could not release the stage Lease {self.settings.namespace}/{self.settings.name}: it changed between "
            f"every read and write ({WRITE_ATTEMPTS} attempts, 409 Conflict each time; last: {conflict})"
        )

    def _released_body(self, previous: LeaseRecord) -> Dict[str, Any]:
        now = self._api.server_time()
        return {
            "apiVersion": LEASE_API_VERSION,
            "kind": "Lease",
            "metadata": {
                "name": self.settings.name,
                "namespace": self.settings.namespace,
                "resourceVersion": previous.resource_version,
            },
            "spec": {
                "holderIdentity": "",
                "leaseDurationSeconds": previous.duration_seconds,
                "acquireTime": format_micro_time(previous.acquire_time or now),
                "renewTime": format_micro_time(now),
                "leaseTransitions": previous.transitions,
            },
        }

    def describe(self) -> Dict[str, Any]:
        return self._describe(self.read())

    def _write(self, previous: Optional[LeaseRecord], decision: LeaseDecision, now: datetime.datetime) -> None:
        body = lease_body(
            name=self.settings.name,
            namespace=self.settings.namespace,
            me=self.settings.holder,
            duration_seconds=self.settings.duration_seconds,
            now=now,
            previous=previous,
            decision=decision,
        )
        if previous is None:
            self._api.create(self._ref, body, namespace=self.settings.namespace)
        else:
            self._api.replace(self._ref, body)

    def _describe(self, lease: Optional[LeaseRecord]) -> Dict[str, Any]:
        found: Dict[str, Any] = {"namespace": self.settings.namespace, "name": self.settings.name}
        if lease is not None:
            found.update(
                holder=lease.holder,
                lease_duration_seconds=lease.duration_seconds,
                acquire_time=None if lease.acquire_time is None else format_micro_time(lease.acquire_time),
                renew_time=None if lease.renew_time is None else format_micro_time(lease.renew_time),
                lease_transitions=lease.transitions,
            )
        return found


class LeaseKeeper:
    """Renews the stage's Lease while a module works, from the server's clock seen in its API responses.

    ``KubeApi`` calls ``observe(server_now)`` after each response that carries a
    ``Date`` header; when a third of the duration has passed since the last
    renewal, the keeper renews (reentrant calls during its own requests are
    ignored).  A run that finds the lease taken by another stops with
    ``LeaseHeldError``: it must not drive the rollout a second time.
    """

    def __init__(self, lease: StageLease) -> None:
        self._lease = lease
        self._last_renew: Optional[datetime.datetime] = None
        self._busy = False
        self.renewals = 0

    def ensure_held(self, api: Any) -> None:
        """Before this module's first request: check (and renew) that its run still holds the lease."""
        if self._busy or self._last_renew is not None:
            return
        self._busy = True
        try:
            now = api.server_time()
        finally:
            self._busy = False
        self.observe(now)

    def observe(self, server_now: datetime.datetime) -> None:
        if self._busy:
            return
        if not renewal_due(
            last_renew=self._last_renew, now=server_now, duration_seconds=self._lease.settings.duration_seconds
        ):
            return
        self._busy = True
        try:
            self._lease.renew(server_now)
            self._last_renew = server_now
            self.renewals += 1
        finally:
            self._busy = False


@dataclass
class ServerClockEstimate:
    """The API server's clock between reads, from the rate it ran at between the last two (a simulated cluster's
    clock may run faster than the controller's): so the keeper reads it only when a renewal may be due."""

    wall: float
    server: datetime.datetime
    rate: Optional[float] = None  # server seconds per controller second; None until read twice

    def now(self, wall: float) -> datetime.datetime:
        return self.server + datetime.timedelta(seconds=(wall - self.wall) * (self.rate or 1.0))

    def update(self, *, wall: float, server: datetime.datetime) -> None:
        if wall > self.wall:
            self.rate = max((server - self.server).total_seconds() / (wall - self.wall), 0.0)
        self.wall, self.server = wall, server


def keep_renewed(
    lease: StageLease,
    *,
    keep_for: float,
    poll: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> str:
    """Renew the Lease this run holds between the modules of its stage, and why it stopped.

    Modules of this collection renew it from their own requests (``LeaseKeeper``); a role's task that waits with a
    kubernetes.core module or an ``until:`` loop sends nothing of ours, and could outlast the Lease. This loop
    renews it (a third of its duration after the last renewal, on the server's clock) until the Lease is no longer
    this run's (released at the end of the stage, or taken), the ansible process that started it is gone (a killed
    run's Lease must expire: ``wait_until`` stops when it is), or ``keep_for`` seconds have passed.
    """
    estimate = ServerClockEstimate(wall=clock(), server=lease.api.server_time())
    last_renew = estimate.server
    lease.renew(last_renew)
    duration = lease.settings.duration_seconds

    def renew_when_due() -> bool:
        nonlocal last_renew
        wall = clock()
        # Read the server's clock when a renewal may be due by the estimate (always until its rate is known).
        if estimate.rate is not None and not renewal_due(
            last_renew=last_renew,
            now=estimate.now(wall) + datetime.timedelta(seconds=KEEPER_MIN_PAUSE * estimate.rate),
            duration_seconds=duration,
        ):
            return False
        estimate.update(wall=wall, server=lease.api.server_time())
        if renewal_due(last_renew=last_renew, now=estimate.server, duration_seconds=duration):
            lease.renew(estimate.server)
            last_renew = estimate.server
        return False

    deadline = clock() + keep_for

    def pause_until_due(_shortest: float) -> None:
        # ``poll``, or less when the next renewal (a third of the duration after the last, on the server's clock)
        # comes sooner: on a server clock faster than ours (a simulated cluster's) a sleep of ``poll`` let the Lease
        # lapse between two renewals (a 60 s Lease on a clock 600 times as fast lasts 0.1 s of ours).
        now = clock()
        # Until the server clock's rate is known (read twice), the second read comes at once.
        seconds = poll if estimate.rate is not None else KEEPER_MIN_PAUSE
        if estimate.rate:
            due = last_renew + datetime.timedelta(seconds=duration / RENEW_FRACTION)
            seconds = min(poll, max((due - estimate.now(now)).total_seconds() / estimate.rate, KEEPER_MIN_PAUSE))
        pause(max(min(seconds, deadline - now), 0.0))

    try:
        # ``sleep`` is only the shortest pause, which bounds the number of polls; pause_until_due decides each one.
        wait_until(renew_when_due, bool, timeout=keep_for, sleep=KEEPER_MIN_PAUSE, what="renewing the stage Lease",
                   clock=clock, pause=pause_until_due)  # fmt: skip
    except LeaseHeldError:
        return "the Lease is no longer this run's (released or taken)"
    except RunCancelledError:
        return "the ansible process that started it is gone"
    except WaitTimeoutError:
        return f"kept for {keep_for:g}s"
    return "stopped"


def start_keeper(keep: Callable[[], Any]) -> int:
    """Run ``keep`` in a child process that outlives this module; returns its pid.

    The child stays in the run's process group (killing the group kills it too) and its standard streams go to
    /dev/null, so Ansible, which reads the module's output to its end, does not wait for it.
    """
    pid = os.fork()
    if pid:
        return pid
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(null, stream)
        keep()
    finally:
        os._exit(0)  # nothing of the module's exit (its result was printed by the parent) runs twice


def run_stage_lease(api: Any, *, settings: LeaseSettings, state: str, check_mode: bool) -> Dict[str, Any]:
    """The ``stage_lease`` module's work: take (or keep) the lease with ``present``, give it up with ``absent``."""
    lease = StageLease(api, settings)
    before = lease.describe()
    if state == "present":
        decision, changed = lease.acquire(check_mode=check_mode)
        result: Dict[str, Any] = {"decision": decision.as_dict(), "held": not check_mode}
    elif state == "absent":
        changed = lease.release(check_mode=check_mode)
        result = {"held": False}
    else:
        raise InvalidInputError(f"state must be present or absent, got {state!r}")
    after = before if check_mode else lease.describe()
    result.update(
        changed=changed,
        lease=after,
        diff={
            "before": {"holder": before.get("holder", "")},
            "after": {"holder": _expected_holder(after, settings, state, check_mode)},
        },
        api_requests=api.requests_sent,
    )
    return result


def _expected_holder(after: Dict[str, Any], settings: LeaseSettings, state: str, check_mode: bool) -> str:
    if not check_mode:
        return str(after.get("holder", ""))
    if state == "present":
        return settings.holder
    return "" if after.get("holder") == settings.holder else str(after.get("holder", ""))
