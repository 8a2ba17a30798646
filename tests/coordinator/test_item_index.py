"""The compact item -> member index behaves exactly as the dict it replaces (hypothesis, against a dict)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.items import TaskId, all_items
from services.coordinator.core.item_index import DENSE_LIMIT, ItemIndex

_task_numbers = st.one_of(st.integers(0, 12), st.sampled_from([DENSE_LIMIT - 1, DENSE_LIMIT, 2**31 - 1, -1]))
_keys = st.one_of(
    st.sampled_from(["A", "B", "C"]),
    st.builds(TaskId, st.sampled_from(["A", "B"]), _task_numbers),
)
_ops = st.lists(st.tuples(st.sampled_from(["set", "del", "get"]), _keys, st.sampled_from(["w1", "w2", "w3"])))


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_every_operation_answers_as_a_dict_does(ops: list[tuple[str, object, str]]) -> None:
    index, model = ItemIndex(), {}
    for op, key, member in ops:
        if op == "set":
            index[key] = member  # type: ignore[index]
            model[key] = member
        elif op == "del":
            if key in model:
                del index[key]  # type: ignore[arg-type]
                del model[key]
            else:
                with pytest.raises(KeyError):
                    del index[key]  # type: ignore[arg-type]
        assert index.get(key) == model.get(key)  # type: ignore[arg-type]
        assert (key in index) == (key in model)
        assert index.get(key, "none") == model.get(key, "none")  # type: ignore[arg-type]
    assert index == model and dict(index) == model and len(index) == len(model)
    assert set(index.keys()) == set(model) and sorted(map(str, index)) == sorted(map(str, model))
    for key in model:
        assert index[key] == model[key]  # type: ignore[index]


def test_emptied_connectors_leave_no_list_behind_and_plain_tuples_are_keys_too() -> None:
    index = ItemIndex()
    items = all_items({"A": 1000})
    for key in items.item_keys():
        index[key] = "w1"
    assert index[("A", 999)] == "w1" and ("A", 1000) not in index and index.get("B") is None  # type: ignore[index]
    for key in items.item_keys():
        del index[key]
    assert len(index) == 0 and index == {} and index._tasks == {}
