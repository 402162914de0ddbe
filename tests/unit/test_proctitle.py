"""Process titles shown by ps."""

from __future__ import annotations

from jobmaster.proctitle import child_title, master_title


def test_master_title() -> None:
    assert master_title(3, 4, ["default", "low"]) == "jobmaster master [3/4 children] default,low"


def test_master_title_with_a_state() -> None:
    assert (
        master_title(3, 4, ["default", "low"], "quiet")
        == "jobmaster master [3/4 children] default,low quiet"
    )
    assert master_title(0, 2, ["default"], "stopping") == (
        "jobmaster master [0/2 children] default stopping"
    )


def test_child_title() -> None:
    assert child_title(2, 4, 5, ["default", "low"]) == "jobmaster child 2 [4/5 busy] default,low"


def test_child_title_with_a_state() -> None:
    assert (
        child_title(1, 0, 5, ["default"], "starting")
        == "jobmaster child 1 [0/5 busy] default starting"
    )
