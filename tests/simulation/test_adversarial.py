"""Bad input: the simulator feeds malformed and adversarial requests (random field values, unknown
members, epochs out of range, replayed heartbeats, huge lists) while the group runs, and checks each
gets the right error and changes nothing (the impostor and the replays excepted: they fence, or are
the lost-response case, and the safety invariants must hold all the same)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from services.coordinator.core import validation
from services.coordinator.core.coordinator import GroupCoordinator, Result
from services.coordinator.core.records import GroupMetadata
from simulator import adversarial
from simulator.engine import run_scenario
from simulator.scenario import BAD_REQUEST, CONNECT, Event, Scenario, generate


def with_bad_requests(seed: int, per_kind: int, kinds: tuple[str, ...] = adversarial.KINDS) -> Scenario:
    """A generated `connect` scenario plus `per_kind` bad requests of every kind, spread over its
    fault window (the bad requests speak the `connect` protocol)."""
    s = generate(seed, protocol=CONNECT)
    rng = random.Random(seed)
    extra = [
        Event(rng.randint(300, s.fault_window_ms - 1), BAD_REQUEST, -1, (kind, rng.randrange(2**31)))
        for kind in kinds
        for _ in range(per_kind)
    ]
    return replace(s, events=tuple(sorted([*s.events, *extra], key=lambda e: e.at_ms)))


def test_every_kind_of_bad_request_gets_the_right_error_and_changes_nothing() -> None:
    checked: Counter[str] = Counter()
    for seed in range(40):
        result = run_scenario(with_bad_requests(seed, per_kind=3))
        assert result.ok, result.violation
        checked.update(result.stats.bad_checked)
    assert set(checked) == set(adversarial.KINDS), checked
    assert min(checked.values()) >= 40, checked


def _hole_in_item_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation, "check_items", lambda *args, **kwargs: None)


def _rejected_yet_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """AlterConfigs answers its error but bumps the group epoch anyway."""
    original = GroupCoordinator.alter_configs

    def alter_configs(self: GroupCoordinator, req: Any, now_ms: int) -> Result:
        result = original(self, req, now_ms)
        group = self.state.groups.get(req.group_id)
        if result.response.error_code and group is not None:
            record = GroupMetadata(group.group_id, replace(group.meta, epoch=group.epoch + 1))
            self.state.replay(record)
            result.records.append(record)
        return result

    monkeypatch.setattr(GroupCoordinator, "alter_configs", alter_configs)


@pytest.mark.parametrize(
    ("hole", "kinds"),
    [(_hole_in_item_validation, ("heartbeat_invalid", "install")), (_rejected_yet_written, ("admin",))],
)
def test_a_hole_in_validation_is_found(monkeypatch: pytest.MonkeyPatch, hole: Any, kinds: tuple[str, ...]) -> None:
    hole(monkeypatch)
    for seed in range(20):
        result = run_scenario(with_bad_requests(seed, per_kind=10, kinds=kinds))
        if result.violation is not None:
            assert result.violation.invariant == "bad-input", result.violation
            return
    pytest.fail("the hole was not found in 20 seeds")


@pytest.mark.parametrize("kind", adversarial.KINDS)
def test_each_kind_states_an_error_the_spec_names(kind: str) -> None:
    from connect.coordinator.v1.common_pb2 import ErrorCode

    empty = adversarial.View({}, None, (), service=False, exists=False)
    for subseed in range(50):
        bad = adversarial.make(kind, subseed, empty)
        assert bad.expected in ErrorCode.values()
        assert bad.what
