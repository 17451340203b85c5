"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

Only the leader schedules; standbys keep their informers warm and poll the
Lease every ``retry_period`` (plus up to 20% jitter).

* Expiry is judged on our own monotonic clock, never by comparing the remote
  ``renewTime`` with our wall clock. A standby notes *when it first saw* the
  current lease record (holderIdentity, leaseDurationSeconds, acquireTime,
  renewTime, leaseTransitions) and takes over only once that exact record has
  stayed unchanged for the record's ``leaseDurationSeconds`` since. Skew
  between the replicas' wall clocks does not matter, only their rates.
* Every write is a PUT carrying the resourceVersion we last read (optimistic
  concurrency): of two standbys racing for an expired lease one wins and the
  other gets 409 and tries again on its next poll. A missing Lease is created.
* ``leaseTransitions`` grows by one whenever the holder changes;
  ``acquireTime``/``renewTime`` are MicroTimes (wall clock, informational).
* The holder renews every ``retry_period`` and gives up (:class:`LeadershipLost`)
  when no renewal succeeded within ``renew_deadline``, or at once when the
  Lease names another holder. ``renew_deadline < lease_duration`` leaves the
  holder time to stop before anyone else may start.
* On graceful shutdown the holder writes holderIdentity ``""`` and
  leaseDurationSeconds 1 (client-go's ReleaseOnCancel): a standby takes the
  free lease on its next poll instead of waiting the lease out.

Each process elects under an identity of its own: the hostname, ``_`` and a
random UUID (:func:`process_identity`). The hostname alone, or hostname and
PID, is not unique: two replicas on the host network of one node share the
hostname, and in containers both run as PID 1.

The identity that runs the elector needs ``get``, ``create`` and ``update`` on
its Lease. The bootstrap ``system:kube-scheduler`` role grants get/update only
on the Lease named ``kube-scheduler``, so a kscheduler Lease needs a Role of
its own (see deploy/).
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from kscheduler.events import micro_time
from kscheduler.kube import ApiError

log = structlog.get_logger("kscheduler.leader")

#: Extra random share of ``retry_period`` added to each standby's poll, so that
#: standbys do not poll in lockstep. client-go adds up to 120%; 20% keeps a
#: released lease's hand-over within about one retry period.
JITTER = 0.2
#: Margin added when a standby sleeps until the observed record would expire.
_EXPIRY_MARGIN = 0.01


def process_identity() -> str:
    """A Lease holder identity no other process has: ``<hostname>_<random UUID>``.

    Called once per process; the UUID makes it unique even where replicas share
    the hostname and the PID (host-network containers, each PID 1).
    """
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class LeaseClient(Protocol):
    """The three calls the elector makes (:class:`kscheduler.kube.KubeClient` has them)."""

    async def get_json(self, path: str) -> Any: ...

    async def post_json(self, path: str, body: Any) -> Any: ...

    async def put_json(self, path: str, body: Any) -> Any: ...


class LeadershipLost(Exception):
    """Raised by :meth:`LeaderElector.hold` once this replica may no longer act as leader."""


@dataclass(frozen=True, slots=True)
class LeaderElectionRecord:
    """The Lease spec fields that make up the leader record."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaderElectionRecord:
        spec = lease.get("spec")
        if not isinstance(spec, Mapping):
            return cls()
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=_int(spec.get("leaseDurationSeconds")),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            lease_transitions=_int(spec.get("leaseTransitions")),
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time or None,
            "renewTime": self.renew_time or None,
            "leaseTransitions": self.lease_transitions,
        }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class LeaderElector:
    """Acquires, holds and releases one Lease for ``identity``.

    ``acquire()`` returns once we hold the lease; ``hold()`` renews it until it
    raises :class:`LeadershipLost` (or is cancelled); ``release()`` hands it back.
    ``is_leader()`` is the safe answer to "may I act as leader right now?".
    ``leader_changed`` (if set) is called with True/False whenever that changes
    for this replica through acquire/hold/release.

    All durations are seconds. ``clock`` must be monotonic; ``sleep`` and
    ``wall_clock`` are injectable for tests.
    """

    def __init__(
        self,
        kube: LeaseClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        leader_changed: Callable[[bool], None] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if min(lease_duration, renew_deadline, retry_period) <= 0:
            raise ValueError("leaseDuration, renewDeadline and retryPeriod must be positive")
        if lease_duration <= renew_deadline:
            raise ValueError("leaseDuration must be greater than renewDeadline")
        if renew_deadline <= retry_period:
            raise ValueError("renewDeadline must be greater than retryPeriod")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.leader_changed = leader_changed
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock
        self._rng = rng or random.Random()
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        #: The Lease object as last read or written (metadata.resourceVersion included).
        self._lease: dict[str, Any] | None = None
        #: Its record, and when (our clock) that exact record was first seen.
        self._observed: LeaderElectionRecord | None = None
        self._observed_at = 0.0
        #: When (our clock) the last successful write of ours as holder *started*.
        self._renewed_at: float | None = None
        self._leading = False
        self._last_error = ""

    @property
    def lease_key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holder(self) -> str:
        """The holder named by the last record we saw ("" if none or unknown)."""
        return self._observed.holder_identity if self._observed is not None else ""

    @property
    def observed_record(self) -> LeaderElectionRecord | None:
        return self._observed

    def is_leader(self) -> bool:
        """True only while ``now < start of our last successful write + renew_deadline``.

        The bound is safe: a standby can only have seen that write after it was
        sent, so it cannot take over before ``write start + leaseDuration``;
        counting from the write's start rather than its answer, and up to
        ``renew_deadline`` rather than ``lease_duration``, leaves
        ``lease_duration - renew_deadline`` for an in-flight bind to land and for
        the replicas' clocks to tick at slightly different rates.
        """
        return (
            self._leading
            and self._renewed_at is not None
            and self._clock() < self._renewed_at + self.renew_deadline
        )

    # ---- the three phases -----------------------------------------------------------------------
    async def acquire(self) -> None:
        """Return once we hold the lease; poll every retry_period (with jitter) until then."""
        log.info("waiting for the leader lease", lease=self.lease_key, identity=self.identity)
        while True:
            before = self.holder
            try:
                async with asyncio.timeout(self.renew_deadline):
                    ok = await self._try_acquire_or_renew()
            except TimeoutError:
                self._note_error("lease request timed out")
                ok = False
            if ok:
                log.info(
                    "acquired the leader lease",
                    lease=self.lease_key,
                    identity=self.identity,
                    previous=before or None,
                    transitions=self._observed.lease_transitions if self._observed else 0,
                )
                self._set_leading(True)
                return
            await self._sleep(self._standby_delay())

    async def hold(self) -> None:
        """Renew every retry_period until cancelled.

        Raises :class:`LeadershipLost` when no renewal succeeded within
        renew_deadline of the last good one, or at once when the Lease names
        another holder. Never returns normally.
        """
        if not self._leading or self._renewed_at is None:
            raise LeadershipLost("hold() called without holding the lease")
        try:
            while True:
                await self._sleep(self.retry_period)
                await self._renew()
        except LeadershipLost as exc:
            self._set_leading(False)
            log.warning("lost the leader lease", lease=self.lease_key, reason=str(exc))
            raise

    async def release(self) -> bool:
        """Hand the lease back if we still hold it: holderIdentity "", leaseDurationSeconds 1.

        Returns False if the write failed (the lease then expires on its own).
        """
        try:
            if self.holder != self.identity or self._lease is None:
                return True
            try:
                async with asyncio.timeout(self.renew_deadline):
                    return await self._release()
            except TimeoutError:
                log.warning("could not release the leader lease: timed out", lease=self.lease_key)
                return False
        finally:
            self._set_leading(False)

    # ---- internals ------------------------------------------------------------------------------
    async def _renew(self) -> None:
        assert self._renewed_at is not None
        deadline = self._renewed_at + self.renew_deadline
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise LeadershipLost(
                    f"no renewal succeeded within renewDeadline ({self.renew_deadline:g}s)"
                )
            try:
                async with asyncio.timeout(remaining):
                    ok = await self._try_acquire_or_renew()
            except TimeoutError:
                self._note_error("lease renewal timed out")
                continue
            if ok:
                return
            holder = self.holder
            if holder != self.identity:
                raise LeadershipLost(f"the lease is now held by {holder or 'nobody'}")
            await self._sleep(min(self.retry_period, max(deadline - self._clock(), 0.0)))

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt; True if we hold the lease afterwards. Errors are logged, not raised."""
        # Fast path, as client-go: the holder renews with the version it wrote last.
        if self._leading and self._lease is not None and self.holder == self.identity:
            started = self._clock()
            try:
                await self._put(self._record(self._observed), started)
                return True
            except Exception as exc:
                self._note_error(exc)
        try:
            record = self._observe(await self.kube.get_json(self._path))
        except ApiError as exc:
            if not exc.is_not_found:
                self._note_error(exc)
                return False
            return await self._create()
        except Exception as exc:
            self._note_error(exc)
            return False
        if (
            record.holder_identity
            and record.holder_identity != self.identity
            and self._clock() < self._observed_at + self._duration(record)
        ):
            return False  # held by someone else and not expired (on our clock)
        started = self._clock()
        try:
            await self._put(self._record(record), started)
        except Exception as exc:
            self._note_error(exc)
            return False
        return True

    def _record(self, old: LeaderElectionRecord | None) -> LeaderElectionRecord:
        """Our record, renewing ``old`` if it is ours, else taking over from it."""
        now = micro_time(self._wall_clock())
        duration = math.ceil(self.lease_duration)  # never promise less than we assume
        if old is not None and old.holder_identity == self.identity:
            return LeaderElectionRecord(
                self.identity, duration, old.acquire_time or now, now, old.lease_transitions
            )
        transitions = old.lease_transitions + 1 if old is not None else 0
        return LeaderElectionRecord(self.identity, duration, now, now, transitions)

    async def _create(self) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._record(None).to_spec(),
        }
        started = self._clock()
        try:
            created = await self.kube.post_json(
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", body
            )
        except Exception as exc:  # 409: another replica created it first
            self._note_error(exc)
            return False
        self._accept(created, started)
        log.info("created the leader lease", lease=self.lease_key, identity=self.identity)
        return True

    async def _put(self, record: LeaderElectionRecord, started: float) -> None:
        assert self._lease is not None
        body = dict(self._lease)
        body["spec"] = record.to_spec()
        written = await self.kube.put_json(self._path, body)
        self._accept(written, started)

    def _accept(self, lease: Any, started: float) -> None:
        """A write of ours as holder succeeded."""
        self._observe(lease)
        if self.holder == self.identity:
            self._renewed_at = started
        self._last_error = ""

    def _observe(self, lease: Any) -> LeaderElectionRecord:
        if not isinstance(lease, dict):
            raise TypeError(f"unexpected Lease answer: {type(lease).__name__}")
        record = LeaderElectionRecord.from_lease(lease)
        self._lease = lease
        if record != self._observed:
            previous = self.holder
            self._observed = record
            self._observed_at = self._clock()
            holder = record.holder_identity
            if holder != previous and holder and holder != self.identity:
                log.info("new leader observed", lease=self.lease_key, leader=holder)
        return record

    def _duration(self, record: LeaderElectionRecord) -> float:
        """How long the holder promised to keep its record fresh (the record says, as
        client-go; our own setting when the record says nothing)."""
        if record.lease_duration_seconds > 0:
            return float(record.lease_duration_seconds)
        return self.lease_duration

    def _standby_delay(self) -> float:
        """retry_period plus jitter, or less when the observed lease expires sooner."""
        delay = self.retry_period * (1.0 + JITTER * self._rng.random())
        record = self._observed
        if record is not None and record.holder_identity not in ("", self.identity):
            expires_in = self._observed_at + self._duration(record) - self._clock()
            if expires_in > 0:
                delay = min(delay, expires_in + _EXPIRY_MARGIN)
        return delay

    async def _release(self) -> bool:
        assert self._observed is not None
        for _ in range(2):
            now = micro_time(self._wall_clock())
            record = LeaderElectionRecord("", 1, now, now, self._observed.lease_transitions)
            try:
                await self._put(record, self._clock())
            except ApiError as exc:
                if not exc.is_conflict:
                    log.warning("could not release the leader lease", error=str(exc))
                    return False
                # our cached version is stale (e.g. a renewal cut short): re-read
                try:
                    self._observe(await self.kube.get_json(self._path))
                except Exception as read_exc:
                    log.warning("could not release the leader lease", error=str(read_exc))
                    return False
                if self.holder != self.identity:
                    return True  # not ours any more: nothing to hand back
                continue
            except Exception as exc:
                log.warning("could not release the leader lease", error=str(exc))
                return False
            log.info("released the leader lease", lease=self.lease_key, identity=self.identity)
            return True
        return False

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if not leading:
            self._renewed_at = None
        callback = self.leader_changed
        if callback is not None:
            try:
                callback(leading)
            except Exception:
                log.exception("leader_changed callback failed")

    def _note_error(self, error: BaseException | str) -> None:
        """Log a failed attempt; a repeat of the same failure only at debug level."""
        if isinstance(error, ApiError) and error.is_conflict:
            log.debug("lease update conflict; will retry", lease=self.lease_key)
            return
        text = str(error) or type(error).__name__
        if isinstance(error, ApiError) and error.status == 403:
            text += (
                f" (the identity needs get, create and update on leases {self.lease_key};"
                " system:kube-scheduler's bootstrap role covers only the lease named"
                " kube-scheduler)"
            )
        if text == self._last_error:
            log.debug("lease request failed", lease=self.lease_key, error=text)
            return
        self._last_error = text
        log.warning("lease request failed", lease=self.lease_key, error=text)
