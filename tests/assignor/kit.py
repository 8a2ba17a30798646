"""A minimal stand-in for the coordinator around the assignor, so tests read like Connect's.

``Group`` keeps what the coordinator keeps between assignments (the target, the assignor state,
the clock) and replaces the target with each answer, exactly as the coordinator does: a member
that left disappears from the target once an assignment has been installed, so anything the
assignor must still know about it has to come back through ``assignor_state``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from connect.coordinator.v1 import assignor_pb2
from services.assignor import EAGER, INCREMENTAL_COOPERATIVE, MAX_DELAY_CONFIG, assign
from services.common.items import EMPTY, Items, TaskId, all_items

DELAY = 300_000
VERSIONS = {INCREMENTAL_COOPERATIVE: (1, 2), EAGER: (0, 0)}


def items_of(msg: assignor_pb2.AssignResponse) -> dict[str, Items]:
    return {m.member_id: Items.from_proto(m.connectors_and_tasks) for m in msg.members}


@dataclass
class Result:
    response: assignor_pb2.AssignResponse
    before: dict[str, Items]
    after: dict[str, Items]

    @property
    def delay(self) -> int:
        return self.response.rebalance_delay_ms

    def counts(self) -> dict[str, tuple[int, int]]:
        """Member id -> (connectors, tasks) in the new target."""
        return {m: (len(i.connectors), len(i.tasks)) for m, i in self.after.items()}

    def gained(self, member_id: str) -> Items:
        return self.after.get(member_id, EMPTY) - self.before.get(member_id, EMPTY)

    def revoked(self, member_id: str) -> Items:
        return self.before.get(member_id, EMPTY) - self.after.get(member_id, EMPTY)

    def moved(self) -> tuple[int, int]:
        """(connectors, tasks) that had an owner in the previous target and now have another one."""
        previous_owner = {k: m for m, items in self.before.items() for k in items.item_keys()}
        c = t = 0
        for m, items in self.after.items():
            for k in items.item_keys():
                if k in previous_owner and previous_owner[k] != m:
                    if isinstance(k, str):
                        c += 1
                    else:
                        t += 1
        return c, t


@dataclass
class Group:
    connectors: dict[str, int]
    assignor: str = INCREMENTAL_COOPERATIVE
    delay_ms: int | None = DELAY
    now_ms: int = 1_000_000
    members: dict[str, str | None] = field(default_factory=dict)
    target: dict[str, Items] = field(default_factory=dict)
    # What members run, when it differs from their target (not yet reconciled).
    owned: dict[str, Items] = field(default_factory=dict)
    state: bytes = b""

    def join(self, *member_ids: str, instance_id: str | None = None) -> Group:
        for m in member_ids:
            self.members[m] = instance_id
        return self

    def leave(self, *member_ids: str) -> Group:
        for m in member_ids:
            del self.members[m]
            self.owned.pop(m, None)
        return self

    def advance(self, ms: int) -> Group:
        self.now_ms += ms
        return self

    def request(self) -> assignor_pb2.AssignRequest:
        low, high = VERSIONS[self.assignor]
        req = assignor_pb2.AssignRequest(
            assignor_name=self.assignor,
            group_id="g",
            assignor_state=self.state,
            now_ms=self.now_ms,
        )
        if self.delay_ms is not None:
            req.group_configs[MAX_DELAY_CONFIG] = str(self.delay_ms)
        for mid, instance_id in self.members.items():
            gm = req.members.add(member_id=mid)
            if instance_id is not None:
                gm.instance_id = instance_id
            gm.assignor.name = self.assignor
            gm.assignor.minimum_version = low
            gm.assignor.maximum_version = high
            gm.assignor.version = high
            self.target.get(mid, EMPTY).to_proto(gm.target)
            self.owned.get(mid, self.target.get(mid, EMPTY)).to_proto(gm.owned)
        for name, count in self.connectors.items():
            req.connectors.add(name=name, task_count=count)
        for mid, items in self.target.items():
            items.to_proto(req.current_target.members.add(member_id=mid).connectors_and_tasks)
        return req

    def assign(self, *, reconcile: bool = True) -> Result:
        """One assignment, installed like the coordinator installs it (checked first, as it checks it).

        With ``reconcile`` every member then runs its new target; without, members keep running
        what they ran (e.g. a member joins before the previous revocations completed).
        """
        response = assign(self.request())
        assert response.error == 0, response.error_message
        after = items_of(response)
        check_installable(after, self.members, self.connectors, response.rebalance_delay_ms)
        if not reconcile:
            for m in self.members:
                self.owned.setdefault(m, self.target.get(m, EMPTY))
        else:
            self.owned.clear()
        result = Result(response, dict(self.target), after)
        self.target = after
        self.state = response.assignor_state
        return result


def check_installable(
    targets: Mapping[str, Items], members: Iterable[str], connectors: Mapping[str, int], delay_ms: int
) -> None:
    """What the coordinator checks before installing: one entry per live member, nothing assigned
    twice or unknown, and everything assigned unless the assignor holds work back on purpose."""
    assert sorted(targets) == sorted(members)
    owners = Counter(k for items in targets.values() for k in items.item_keys())
    assert all(n == 1 for n in owners.values()), [k for k, n in owners.items() if n > 1]
    configured = all_items(dict(connectors))
    assigned = Items(
        frozenset(k for k in owners if isinstance(k, str)), frozenset(k for k in owners if isinstance(k, TaskId))
    )
    assert assigned.issubset(configured), assigned - configured
    if delay_ms <= 0:
        assert assigned == configured, configured - assigned


def spread(targets: Mapping[str, Items]) -> tuple[int, int]:
    """(max - min) of connectors and of tasks per member."""
    cs = [len(i.connectors) for i in targets.values()]
    ts = [len(i.tasks) for i in targets.values()]
    return max(cs) - min(cs), max(ts) - min(ts)


def assert_balanced(targets: Mapping[str, Items]) -> None:
    c, t = spread(targets)
    assert c <= 1 and t <= 1, {m: str(i) for m, i in targets.items()}


def connectors(n: int, tasks: int, prefix: str = "connector") -> dict[str, int]:
    return {f"{prefix}{i}": tasks for i in range(1, n + 1)}
