"""``Held``: what the driver's code did in place to a value the child handed over (§9.1)."""

from __future__ import annotations

from conformance.wire.edits import Held


def test_no_edit_when_the_code_only_read_or_returned_something_else() -> None:
    held = Held({"messages": [{"content": [{"text": "a"}]}]})
    _ = [m for m in held.value["messages"]]
    assert held.edit() is None
    assert Held("text").edit() is None and Held(None).edit() is None


def test_an_edit_names_the_value_now_and_where_each_kept_container_came_from() -> None:
    first, second = {"content": [{"text": "a"}]}, {"content": [{"text": "b"}]}
    held = Held({"messages": [first, second]})
    for message in held.value["messages"]:
        message["content"][0]["text"] = "X"
    del held.value["messages"][:-1]
    edit = held.edit()
    assert edit is not None and edit["value"] == {"messages": [{"content": [{"text": "X"}]}]}
    assert sorted(edit["moves"]) == sorted([
        [[], []], [["messages"], ["messages"]], [["messages", 0], ["messages", 1]],
        [["messages", 0, "content"], ["messages", 1, "content"]],
        [["messages", 0, "content", 0], ["messages", 1, "content", 0]]])
    # reported once: the child's objects match now, and later edits are relative to this state
    assert held.edit() is None
    held.value["messages"][0]["content"].append({"text": "more"})
    later = held.edit()
    assert later is not None and [["messages", 0, "content"], ["messages", 0, "content"]] in later["moves"]
    assert [["messages", 0, "content", 1], ["messages", 0, "content", 1]] not in later["moves"]  # a new block


def test_a_container_replaced_by_an_equal_one_is_an_edit() -> None:
    # equal content, but the loop's object is no longer the one the code holds: the child must
    # not keep it at that place (moves tell it which objects stayed)
    held = Held({"args": {"q": 1}})
    held.value["args"] = {"q": 1}
    edit = held.edit()
    assert edit is not None and edit["moves"] == [[[], []]]
