"""The stage Lease's decisions: pure logic, no API."""

import datetime

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    InvalidInputError,
    KubeApiError,
    LeaseHeldError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._lease import (
    LeaseKeeper,
    LeaseSettings,
    StageLease,
    decide,
    format_micro_time,
    is_expired,
    keep_renewed,
    lease_body,
    parse_lease,
    renewal_due,
)

T0 = datetime.datetime(2026, 11, 25, 10, 0, 0, tzinfo=datetime.UTC)
ME = "alice@ctl (AWX job 7) run 1"
OTHER = "bob@ctl2 run 2"


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def lease(holder: str = OTHER, *, acquired: float = 0, renewed: float = 0, duration: int = 300, transitions: int = 2):
    # As the API server returns it (MicroTime with microseconds).
    return parse_lease(
        {
            "metadata": {"name": "gpufleet-upgrade", "namespace": "ns", "resourceVersion": "41"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration,
                "acquireTime": format_micro_time(at(acquired)),
                "renewTime": format_micro_time(at(renewed)),
                "leaseTransitions": transitions,
            },
        }
    )


def test_no_lease_is_created():
    assert decide(None, me=ME, now=T0).action == "create"


def test_a_valid_lease_of_another_run_is_refused_naming_holder_and_age():
    decision = decide(lease(acquired=0, renewed=500, duration=300), me=ME, now=at(754))
    assert decision.action == "refuse" and not decision.allowed
    assert decision.holder == OTHER and decision.age_seconds == 754 and decision.expires_in_seconds == 46
    assert OTHER in decision.reason and "for 12m34s" in decision.reason


@pytest.mark.parametrize("now, action", [(799.0, "refuse"), (800.0, "take"), (5000.0, "take")])
def test_expiry_is_renew_time_plus_duration(now, action):
    record = lease(renewed=500, duration=300)
    assert decide(record, me=ME, now=at(now)).action == action
    assert is_expired(record, now=at(now)) is (action == "take")


def test_a_released_lease_is_taken_at_once():
    assert decide(lease(holder="", renewed=100), me=ME, now=at(101)).action == "take"


def test_our_own_lease_is_renewed_keeping_its_acquire_time():
    previous = lease(holder=ME, acquired=10, renewed=200)
    decision = decide(previous, me=ME, now=at(250))
    assert decision.action == "renew"
    body = lease_body(
        name="gpufleet-upgrade", namespace="ns", me=ME, duration_seconds=300, now=at(250),
        previous=previous, decision=decision,
    )  # fmt: skip
    assert body["metadata"]["resourceVersion"] == "41", "renewals are guarded by resourceVersion"
    assert body["spec"]["acquireTime"] == "2026-11-25T10:00:10.000000Z"
    assert body["spec"]["renewTime"] == "2026-11-25T10:04:10.000000Z"
    assert body["spec"]["leaseTransitions"] == 2


def test_taking_over_restarts_acquire_time_and_counts_a_transition():
    previous = lease(acquired=0, renewed=0)
    decision = decide(previous, me=ME, now=at(900))
    body = lease_body(
        name="gpufleet-upgrade", namespace="ns", me=ME, duration_seconds=60, now=at(900),
        previous=previous, decision=decision,
    )  # fmt: skip
    assert body["spec"]["holderIdentity"] == ME and body["spec"]["leaseDurationSeconds"] == 60
    assert body["spec"]["acquireTime"] == body["spec"]["renewTime"] == "2026-11-25T10:15:00.000000Z"
    assert body["spec"]["leaseTransitions"] == 3


def test_renewal_is_due_after_a_third_of_the_duration():
    assert renewal_due(last_renew=None, now=T0, duration_seconds=300)
    assert not renewal_due(last_renew=T0, now=at(99), duration_seconds=300)
    assert renewal_due(last_renew=T0, now=at(100), duration_seconds=300)


def test_lease_times_without_fractions_are_read():
    record = parse_lease({"metadata": {}, "spec": {"holderIdentity": "x", "renewTime": "2026-11-25T10:00:00Z"}})
    assert record is not None and record.renew_time == T0 and record.acquire_time is None


@pytest.mark.parametrize(
    "obj, problem",
    [
        ({"metadata": {}, "spec": {"renewTime": "yesterday"}}, "Unreadable Lease time"),
        ({"metadata": {}, "spec": {"leaseDurationSeconds": "long"}}, "Unreadable Lease"),
        (["not", "an", "object"], "A Lease is an object"),
    ],
)
def test_unreadable_leases_are_explained(obj, problem):
    with pytest.raises(InvalidInputError, match=problem):
        parse_lease(obj)


def test_settings_from_the_environment():
    assert LeaseSettings.from_environment({}) is None
    settings = LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=60)
    assert LeaseSettings.from_environment({"GPUFLEET_UPGRADE_LEASE": settings.to_json()}) == settings
    with pytest.raises(InvalidInputError, match="GPUFLEET_UPGRADE_LEASE must be JSON"):
        LeaseSettings.from_environment({"GPUFLEET_UPGRADE_LEASE": "{}"})
    with pytest.raises(InvalidInputError, match="at least 1 second"):
        LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=0)


# -- the keeper, on a fake API (renewal pacing and a lost lease) ------------------------------------------------


class FakeApi:
    """Stores one Lease; counts writes; its clock is set by the test."""

    def __init__(self, stored=None):
        self.stored = stored
        self.now = T0
        self.writes = 0
        self.requests_sent = 0

    def server_time(self):
        return self.now

    def get(self, ref, name, *, namespace=None):
        return self.stored

    def create(self, ref, body, *, namespace=None):
        self.writes += 1
        self.stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.writes)}}
        return self.stored

    def replace(self, ref, body):
        self.writes += 1
        self.stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.writes)}}
        return self.stored


def test_the_keeper_renews_every_third_of_the_duration_and_stops_when_the_lease_is_lost():
    api = FakeApi()
    settings = LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300)
    lease = StageLease(api, settings)
    decision, changed = lease.acquire()
    assert (decision.action, changed, api.writes) == ("create", True, 1)
    keeper = LeaseKeeper(lease)
    keeper.ensure_held(api)
    assert api.writes == 2, "checked and renewed before the module's first request"
    for seconds in (50, 99):
        keeper.observe(at(seconds))
    assert api.writes == 2
    keeper.observe(at(100))
    assert api.writes == 3 and api.stored["spec"]["renewTime"] == format_micro_time(at(100))
    api.stored["spec"]["holderIdentity"] = OTHER  # another run took it over
    with pytest.raises(LeaseHeldError, match="lost the stage Lease"):
        keeper.observe(at(250))


def test_a_refused_acquire_and_check_mode_write_nothing():
    api = FakeApi(
        {"metadata": {"resourceVersion": "9"}, "spec": {"holderIdentity": OTHER, "leaseDurationSeconds": 300,
                                                        "renewTime": format_micro_time(T0)}}
    )  # fmt: skip
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    with pytest.raises(LeaseHeldError, match=f"Refused before any change: Another run holds the Lease: {OTHER}"):
        lease.acquire(check_mode=True)
    api.now = at(301)
    decision, changed = lease.acquire(check_mode=True)
    assert decision.action == "take" and changed and api.writes == 0
    assert lease.release() is False, "a Lease held by another run is left alone"


class RacingApi(FakeApi):
    """Answers 409 Conflict to the next ``conflicts`` writes, after applying ``meanwhile`` (another run's write)."""

    def __init__(self, stored=None, *, conflicts=1, meanwhile=None):
        super().__init__(stored)
        self.conflicts = conflicts
        self.meanwhile = meanwhile
        self.refused = 0

    def _race(self):
        if self.conflicts <= 0:
            return
        self.conflicts -= 1
        self.refused += 1
        if self.meanwhile is not None:
            self.meanwhile(self)
        raise KubeApiError("PUT leases/l: Conflict", status=409, reason="Conflict")

    def create(self, ref, body, *, namespace=None):
        self._race()
        return super().create(ref, body, namespace=namespace)

    def replace(self, ref, body):
        self._race()
        return super().replace(ref, body)


def held_by(holder, *, renewed=T0):
    return {"metadata": {"resourceVersion": "7"}, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 300,
                                                           "acquireTime": format_micro_time(T0),
                                                           "renewTime": format_micro_time(renewed)}}  # fmt: skip


@pytest.mark.parametrize("holder", [ME, ""], ids=["ours", "free"])
def test_a_conflict_on_the_write_is_read_again_and_retried_while_the_lease_is_ours_or_free(holder):
    api = RacingApi(held_by(holder), conflicts=2)
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    decision, changed = lease.acquire()
    assert decision.action == ("renew" if holder else "take")
    assert changed and api.refused == 2 and api.writes == 1
    assert api.stored["spec"]["holderIdentity"] == ME
    api.conflicts, api.now = 1, at(120)
    lease.renew(at(120))
    assert api.refused == 3 and api.writes == 2
    assert api.stored["spec"]["renewTime"] == format_micro_time(at(120))


def test_a_conflict_because_another_run_took_the_lease_is_refused_naming_it_and_its_age():
    def bob_takes_it(api):
        api.stored = held_by(OTHER, renewed=at(10))
        api.stored["spec"]["acquireTime"] = format_micro_time(at(10))

    api = RacingApi(held_by(ME), conflicts=1, meanwhile=bob_takes_it)
    api.now = at(40)
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    with pytest.raises(LeaseHeldError, match=rf"409 Conflict\): Another run holds the Lease: {OTHER}, for 30s"):
        lease.acquire()
    assert api.writes == 0 and api.stored["spec"]["holderIdentity"] == OTHER
    api.conflicts = 1
    api.stored = held_by(ME)
    with pytest.raises(LeaseHeldError, match=rf"lost the stage Lease ns/l and stops .*{OTHER}, for 30s"):
        lease.renew(at(40))


def test_a_lease_that_changes_under_every_write_is_refused_after_bounded_attempts():
    api = RacingApi(held_by(ME), conflicts=100)
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    with pytest.raises(LeaseHeldError, match=r"changed between every read and write of this run \(4 attempts"):
        lease.acquire()
    assert api.refused == 4 and api.writes == 0


class SimulatedTime:
    """A controller clock the keeper sleeps on, and a server clock running ``scale`` times faster (the twin's)."""

    def __init__(self, api, *, scale: float):
        self.api, self.scale, self.wall = api, scale, 0.0
        self.events = []

    def clock(self):
        return self.wall

    def pause(self, seconds):
        self.wall += seconds
        self.api.now = T0 + datetime.timedelta(seconds=self.wall * self.scale)
        for when, event in list(self.events):
            if self.wall >= when:
                self.events.remove((when, event))
                event()


# (600, 60): a 60 s Lease on the twin's clock at 600 times ours lasts 0.1 s of ours, less than the keeper's poll.
@pytest.mark.parametrize(("scale", "duration"), [(1.0, 300), (60.0, 300), (600.0, 60)])
def test_keep_renewed_keeps_the_lease_valid_on_a_fast_server_clock_until_it_is_released(scale, duration):
    api = FakeApi()
    settings = LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=duration)
    lease = StageLease(api, settings)
    lease.acquire()
    time = SimulatedTime(api, scale=scale)
    renewals = []
    real_replace = api.replace

    def replace(ref, body):
        renewals.append(api.now)
        assert not is_expired(parse_lease(api.stored), now=api.now), "renewed only after it had expired"
        return real_replace(ref, body)

    api.replace = replace
    time.events.append((3000 / scale, lease.release))  # the stage ends after 3000 s of server time
    stopped = keep_renewed(lease, keep_for=10_000, clock=time.clock, pause=time.pause)
    assert stopped == "the Lease is no longer this run's (released or taken)"
    assert len(renewals) >= 3000 / duration, renewals  # at least once per duration while the stage ran
    assert api.stored["spec"]["holderIdentity"] == ""  # the keeper did not take the released Lease back


def test_keep_renewed_stops_after_its_time():
    api = FakeApi()
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    lease.acquire()
    time = SimulatedTime(api, scale=1.0)
    assert keep_renewed(lease, keep_for=500, clock=time.clock, pause=time.pause) == "kept for 500s"


def test_a_release_racing_the_keepers_renewal_reads_again_and_releases():
    """The run's keeper renews between the release's read and its write (409 Conflict): the release reads the Lease
    again, finds it still this run's, and empties its holder; a Lease another run took meanwhile is left alone."""

    def keeper_renews(api):
        api.stored = {**api.stored, "metadata": {"resourceVersion": "8"}}

    api = RacingApi(held_by(ME), conflicts=2, meanwhile=keeper_renews)
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    assert lease.release() is True
    assert api.refused == 2 and api.writes == 1 and api.stored["spec"]["holderIdentity"] == ""

    def another_run_takes_it(api):
        api.stored = held_by(OTHER)

    api = RacingApi(held_by(ME), conflicts=1, meanwhile=another_run_takes_it)
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    assert lease.release() is False
    assert api.writes == 0 and api.stored["spec"]["holderIdentity"] == OTHER

    api = RacingApi(held_by(ME), conflicts=10)
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    with pytest.raises(LeaseHeldError, match="Could not release the stage Lease ns/l"):
        lease.release()


def test_check_mode_says_changed_for_a_renewal_as_the_real_run_does():
    """A renewal writes renewTime: check mode predicts changed=True and writes nothing, the real run writes."""
    api = FakeApi()
    lease = StageLease(api, LeaseSettings(namespace="ns", name="l", holder=ME, duration_seconds=300))
    lease.acquire()
    decision, changed = lease.acquire(check_mode=True)
    assert (decision.action, changed, api.writes) == ("renew", True, 1)
    decision, changed = lease.acquire()
    assert (decision.action, changed, api.writes) == ("renew", True, 2)
