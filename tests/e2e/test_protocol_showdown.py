"""The protocol showdown (issue 38) in its --quick form: real coordinator, assignor service and
`connect-worker` processes; 3 workers, 3 connectors x 4 tasks; classic eager against `connect` +
push; one worker joins. The analytics job runs in the suite's shared Spark session over each mode's
event log; its figures and the status files' must agree, and the cooperative protocol must stop
strictly fewer items than eager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import protocol_showdown as sd

pytestmark = pytest.mark.timeout(600)


def test_quick_showdown(spark: Any, tmp_path: Path) -> None:
    lines: list[str] = []
    result = sd.showdown(sd.SIZES["quick"], ["eager", "push"], ["scale_out"], tmp_path, lambda: spark, lines.append)

    assert {(r["mode"], r["source"]) for r in result.records} == {
        (m, s) for m in ("eager", "push") for s in ("job", "status")
    }
    fig = result.figure
    # The status files saw the rebalance in both modes: eager stops everything it had.
    assert fig("eager", "scale_out", "status", "items_stopped") == 3 + 12
    assert fig("push", "scale_out", "status", "time_to_stable_ms") is not None
    # The cooperative protocol stops strictly fewer items, by either source.
    assert fig("push", "scale_out", "status", "items_stopped") < fig("eager", "scale_out", "status", "items_stopped")
    assert fig("push", "scale_out", "job", "items_stopped") < fig("eager", "scale_out", "status", "items_stopped")
    # The job saw what the status files saw, within the stated tolerance -- the classic group's
    # items too (the coordinator names them in its event log).
    assert fig("push", "scale_out", "job", "items_stopped") >= 1
    assert fig("eager", "scale_out", "job", "items_stopped") == 3 + 12
    # Every figure within the stated tolerance, item counts exactly.
    assert result.disagreements == [], "\n".join([*result.disagreements, *lines])
    assert result.gaps == []
