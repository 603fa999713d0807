# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Time as Kubernetes writes it: now, one formatter, one parser (collection-internal).

Kubernetes serializes two time types (k8s.io/apimachinery/pkg/apis/meta/v1):
``Time`` is RFC 3339 to the second (``2026-11-22T08:25:11Z``: creationTimestamp,
conditions, core/v1 Events' firstTimestamp/lastTimestamp) and ``MicroTime`` is
RFC 3339 with six fractional digits (``RFC3339Micro``, ``2026-11-22T08:25:11.123456Z``:
Leases' acquireTime/renewTime, Events' eventTime). Go's RFC 3339 parser, which
``Time`` decodes with, also takes a fraction and any offset. So ``parse_time``
reads all of these, and ``iso`` writes ``Time`` (``micro=True``: ``MicroTime``).
The cluster's own clock is ``KubeApi.server_time()``.
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Optional

# RFC 3339 section 5.6 date-time; "T"/"Z" may be lower case, and a space stands
# for "T" as the RFC allows. An offset is required: a time without one is not
# a point in time.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def utc_now() -> datetime.datetime:
    """This machine's time, aware, in UTC."""
    return datetime.datetime.now(datetime.timezone.utc)


def iso(moment: datetime.datetime, *, micro: bool = False) -> str:
    """``moment`` in UTC as metav1.Time writes it (seconds), or as MicroTime with ``micro``."""
    utc = moment.astimezone(datetime.timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> Optional[datetime.datetime]:
    """An RFC 3339 time (seconds or any fraction, ``Z`` or an offset) as an aware UTC datetime.

    None for anything else (None, "", a date alone, a time without offset, a
    value out of range): Kubernetes fields are often absent, and callers decide
    whether that is an error.
    """
    if not isinstance(value, str):
        return None
    match = _RFC3339.fullmatch(value.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_hours, off_minutes = match.groups()
    # Past microseconds (Go writes up to nanoseconds) the digits are dropped, not rounded, as Go's Truncate.
    microsecond = int((fraction or "0")[:6].ljust(6, "0"))
    offset = datetime.timedelta(0)
    if not zulu:
        offset = datetime.timedelta(hours=int(off_hours), minutes=int(off_minutes))
        offset = -offset if sign == "-" else offset
    try:
        zone = datetime.timezone(offset)
        moment = datetime.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), microsecond, tzinfo=zone
        )
    except ValueError:
        return None
    return moment.astimezone(datetime.timezone.utc)
