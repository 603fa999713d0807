# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Typed errors of the collection (collection-internal).

Everything below ``main()`` raises a ``GpuFleetError``; each module's
``main()`` turns it into ``fail_json`` exactly once, with ``result`` carrying
whatever partial outcome the error holds so a person sees how far it got.
"""

from __future__ import annotations

from typing import Any


class GpuFleetError(Exception):
    """Base of every error the collection reports; main() turns it into fail_json."""

    def __init__(self, msg: str, *, result: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        # Partial outcome to return with the failure (timeline, nodes done...).
        self.result: dict[str, Any] = dict(result or {})


class InvalidInputError(GpuFleetError):
    """Bad input: an option, a file or a value that cannot be used. Nothing was changed."""


class KubeApiError(GpuFleetError):
    """The Kubernetes API refused or failed a request."""

    def __init__(
        self, msg: str, *, status: int = 0, reason: str = "", method: str = "", path: str = "", attempts: int = 1
    ) -> None:
        super().__init__(msg)
        self.status = status
        self.reason = reason
        self.method = method
        self.path = path
        # How many times the request was sent (transient failures are retried).
        self.attempts = attempts


class KubeUnreachableError(KubeApiError):
    """The API server did not answer (connection refused, TLS failure, timeout)."""


class WaitTimeoutError(GpuFleetError):
    """A bounded wait ended before its condition held."""


class RunCancelledError(GpuFleetError):
    """The ansible-playbook (or ansible) process that started this module is gone: stop, write nothing more."""


class LeaseHeldError(GpuFleetError):
    """Another run holds the stage's Lease (or took it over from this one)."""


class RolloutHaltedError(GpuFleetError):
    """A rollout stopped at a failed node; the cluster was left as it is for a person to read."""

    def __init__(self, msg: str, *, node: str = "", result: dict[str, Any] | None = None) -> None:
        super().__init__(msg, result=result)
        self.node = node


class RedfishError(GpuFleetError):
    """A BMC refused or failed a Redfish request; ``msg`` carries the BMC's own message."""


class RedfishHttpError(RedfishError):
    """The BMC answered a request with an error status; ``message_ids`` are its ``@Message.ExtendedInfo`` ids."""

    def __init__(
        self,
        msg: str,
        *,
        status: int = 0,
        uri: str = "",
        message_ids: tuple = (),
        result: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(msg, result=result)
        self.status = status
        self.uri = uri
        self.message_ids = tuple(message_ids)


class RedfishUnreachableError(RedfishError):
    """The BMC did not answer (connection refused or reset, timeout): it may be restarting."""


class AlertsFiringError(GpuFleetError):
    """Prometheus alerts matching the alerts gate's filter still fired when its wait ran out."""


class PushError(GpuFleetError):
    """The Pushgateway refused a stage's metrics or could not be reached."""
