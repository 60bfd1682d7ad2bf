"""The quota counters (corral.host.quota), pure: a fake clock, no sandbox."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from corral.calls.messages import Answer, Malformed, Meta
from corral.config import Limits, QuotaOptions
from corral.errors import CorralError
from corral.host.quota import BYTES, CALLS, FILES, SLOTS, Quotas, QuotaUsage, Reservation
from corral.tools.patch_format import files_of


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def quotas(clock: Clock, **bounds: int) -> Quotas:
    return Quotas(QuotaOptions(**bounds), QuotaUsage(clock), Limits())


def refused(admitted: Any) -> CorralError:
    assert isinstance(admitted, CorralError), admitted
    return admitted


def test_a_sliding_window_holds_for_every_minute_and_retry_after_is_exact(clock: Clock) -> None:
    gate = quotas(clock, calls_per_minute=3)
    for _ in range(3):
        assert isinstance(admit(gate, "read_file", {}), dict)
        clock.now += 10  # uses at 1000, 1010, 1020
    error = refused(admit(gate, "read_file", {}))  # at 1030: the first ages out at 1060
    assert error.code == "quota_exceeded" and error.retry_after_s == 30.0
    assert "calls_per_minute = 3" in error.message and "3 calls" in error.message
    clock.now += 29.999
    assert refused(admit(gate, "read_file", {})).retry_after_s == pytest.approx(0.001)
    clock.now += 0.001  # exactly when it said: accepted
    assert isinstance(admit(gate, "read_file", {}), dict)
    # a fixed minute would now let 3 more in; the window still holds the last 3
    assert refused(admit(gate, "read_file", {})).retry_after_s == pytest.approx(10.0)


def test_a_refused_call_is_not_counted(clock: Clock) -> None:
    gate = quotas(clock, calls_per_minute=1)
    admit(gate, "read_file", {})
    for _ in range(5):
        refused(admit(gate, "read_file", {}))
    assert gate.usage.used(CALLS) == 1


def test_uses_close_together_share_a_slot_dated_by_the_latest(clock: Clock) -> None:
    usage = QuotaUsage(clock)
    bounds = {CALLS: 10_000}
    grain = 60 / SLOTS
    for _ in range(5000):  # a flood within one slot: memory stays one slot
        usage.take(bounds, {CALLS: 1})
        clock.now += grain / 10_000
    windows = usage._windows[CALLS]  # private: the bound on memory is the point
    assert len(windows.slots) == 1 and windows.total == 5000
    # dated by the latest use, so it ages out no sooner than any of them
    assert windows.slots[0].at == pytest.approx(clock.now - grain / 10_000)


def test_memory_is_bounded_by_the_number_of_slots(clock: Clock) -> None:
    usage = QuotaUsage(clock)
    bounds = {CALLS: 10**9}
    for _ in range(5 * SLOTS):
        usage.take(bounds, {CALLS: 1})
        clock.now += 60 / SLOTS / 2
    assert len(usage._windows[CALLS].slots) <= SLOTS + 1


def test_every_quota_is_taken_or_none(clock: Clock) -> None:
    usage = QuotaUsage(clock)
    bounds = {CALLS: 5, BYTES: 100}
    assert isinstance(usage.take(bounds, {CALLS: 1, BYTES: 90}), dict)
    assert usage.take(bounds, {CALLS: 1, BYTES: 20}) == (BYTES, 3600.0)
    assert usage.used(CALLS) == 1 and usage.used(BYTES) == 90


def test_the_longest_wait_is_the_one_reported(clock: Clock) -> None:
    usage = QuotaUsage(clock)
    bounds = {CALLS: 1, BYTES: 10}
    usage.take(bounds, {CALLS: 1, BYTES: 10})
    assert usage.take(bounds, {CALLS: 1, BYTES: 1}) == (BYTES, 3600.0)


def test_unbounded_quotas_are_not_counted(clock: Clock) -> None:
    usage = QuotaUsage(clock)
    assert usage.take({CALLS: 1}, {CALLS: 1, BYTES: 10**12}) != ()
    assert usage.used(BYTES) == 0


def admit(gate: Quotas, tool: str, args: dict[str, Any]) -> Reservation | CorralError:
    """As CallPlan admits a call: with its patch's files, read once."""
    return gate.admit(tool, args, files_of(args.get("patch")))


def settle(gate: Quotas, taken: Any, tool: str, args: dict[str, Any], answer: Answer) -> None:
    gate.settle(taken, tool, args, files_of(args.get("patch")), answer)


def write(content: str, **more: Any) -> dict[str, Any]:
    return {"path": "a.txt", "content": content, "encoding": "utf-8", **more}


def answer(ok: bool = True, result: dict[str, Any] | None = None, written: int = 0) -> Answer:
    meta = Meta(bytes=written)
    if ok:
        return Answer(True, "t", result or {}, "", meta=meta)
    return Answer(False, "t", error={"code": "conflict", "message": "m"}, meta=meta)


def test_a_write_that_does_not_fit_is_refused_before_it_runs(clock: Clock) -> None:
    gate = quotas(clock, write_bytes_per_hour=10)
    taken = admit(gate, "write_file", write("123456"))
    assert isinstance(taken, dict)
    error = refused(admit(gate, "append_file", {"path": "a", "content": "é" * 3}))  # 6 bytes
    assert error.code == "quota_exceeded" and error.retry_after_s == 3600.0
    assert refused(admit(gate, "write_file", write("x" * 11))).code == "too_large"


def test_base64_content_counts_its_decoded_bytes(clock: Clock) -> None:
    gate = quotas(clock, write_bytes_per_hour=10)
    taken = admit(gate, "write_file", write("AAAAAAAAAA==", encoding="base64"))  # 7 bytes
    assert isinstance(taken, dict)
    assert gate.usage.used(BYTES) == 7


def test_a_forged_answer_does_not_lower_what_a_write_is_charged(clock: Clock) -> None:
    gate = quotas(clock, write_bytes_per_hour=100, files_created_per_hour=5)
    args = write("x" * 40)
    taken = admit(gate, "write_file", args)
    assert isinstance(taken, dict)
    settle(gate, taken, "write_file", args, answer(result={"created": True}, written=0))
    assert gate.usage.used(BYTES) == 40 and gate.usage.used(FILES) == 1


def test_a_worker_figure_is_floored_and_capped(clock: Clock) -> None:
    limits = Limits(max_file_bytes=1000, max_write_bytes=100)
    gate = Quotas(QuotaOptions(write_bytes_per_hour=10**9), QuotaUsage(clock), limits)
    edit = {"path": "a", "old_string": "x", "new_string": "    twelve bytes\n  "}
    for claimed, charged in [(0, 11), (500, 500), (10**12, 1100)]:
        taken = admit(gate, "edit_file", edit)
        assert isinstance(taken, dict)
        before = gate.usage.used(BYTES)
        settle(gate, taken, "edit_file", edit, answer(written=claimed))
        assert gate.usage.used(BYTES) - before == charged, claimed
    copy = {"source": "a", "destination": "b", "overwrite": False}
    taken = admit(gate, "copy_file", copy)
    assert isinstance(taken, dict)
    before = gate.usage.used(BYTES)
    settle(gate, taken, "copy_file", copy, answer(written=10**12))
    assert gate.usage.used(BYTES) - before == 1000


def test_a_writer_of_unknown_size_needs_some_room_and_is_counted_after(clock: Clock) -> None:
    gate = quotas(clock, write_bytes_per_hour=100)
    edit = {"path": "a", "old_string": "x", "new_string": "y"}
    taken = admit(gate, "edit_file", edit)
    assert isinstance(taken, dict)
    settle(gate, taken, "edit_file", edit, answer(written=150))  # past the quota: counted
    assert gate.usage.used(BYTES) == 150
    assert refused(admit(gate, "edit_file", edit)).code == "quota_exceeded"
    assert isinstance(admit(gate, "read_file", {"path": "a"}), dict)  # reads need no room


def test_files_created_are_reserved_and_an_answer_may_only_lower_them(clock: Clock) -> None:
    gate = quotas(clock, files_created_per_hour=2)
    first, second = admit(gate, "write_file", write("a")), admit(gate, "create_directory", {})
    assert isinstance(first, dict) and isinstance(second, dict)
    # two in flight hold both: a third waits even before either answers
    assert refused(admit(gate, "copy_file", {})).code == "quota_exceeded"
    settle(gate, first, "write_file", write("a"), answer(result={"created": False}))
    assert gate.usage.used(FILES) == 1
    patch = {"patch": "*** Begin Patch\n*** Add File: a\n+x\n*** Add File: b\n+y\n*** End Patch"}
    assert refused(admit(gate, "apply_patch", patch)).code == "quota_exceeded"  # two at most
    three = {"patch": patch["patch"].replace("*** End", "*** Add File: c\n+z\n*** End")}
    assert "adds 3 files" in refused(admit(gate, "apply_patch", three)).message  # never fits
    settle(gate, second, "create_directory", {}, answer(result={"created": True}))
    assert gate.usage.used(FILES) == 1
    one = {"patch": "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch"}
    taken = admit(gate, "apply_patch", one)
    assert isinstance(taken, dict)
    settle(gate, taken, "apply_patch", one, answer(result={"files": [{"action": "add"}] * 9}))
    assert gate.usage.used(FILES) == 2  # the answer claimed 9: no more than the request allows


def test_an_error_answer_gives_back_its_reservation_but_not_its_call(clock: Clock) -> None:
    gate = quotas(clock, calls_per_minute=5, write_bytes_per_hour=10, files_created_per_hour=1)
    args = write("x" * 10)
    taken = admit(gate, "write_file", args)
    assert isinstance(taken, dict)
    settle(gate, taken, "write_file", args, answer(ok=False))
    assert (gate.usage.used(CALLS), gate.usage.used(BYTES), gate.usage.used(FILES)) == (1, 0, 0)


def test_a_settlement_after_its_slot_aged_out_counts_the_extra_now(clock: Clock) -> None:
    gate = quotas(clock, write_bytes_per_hour=10**6)
    edit = {"path": "a", "old_string": "x", "new_string": "y"}
    taken = admit(gate, "edit_file", edit)
    assert isinstance(taken, dict)
    clock.now += 3600
    settle(gate, taken, "edit_file", edit, answer(written=300))
    assert gate.usage.used(BYTES) == 300  # counted as a use of now


def test_concurrent_admissions_hold_the_quota_exactly(clock: Clock) -> None:
    gate = quotas(clock, calls_per_minute=37)
    results: list[Any] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        results.extend(admit(gate, "read_file", {}) for _ in range(50))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(isinstance(r, dict) for r in results) == 37


def test_quota_options_check_themselves_and_merge_to_the_stricter() -> None:
    with pytest.raises(ValueError, match="calls_per_minute must be a positive integer"):
        QuotaOptions(calls_per_minute=0)
    assert not QuotaOptions().bounded
    merged = QuotaOptions(calls_per_minute=5, write_bytes_per_hour=100).stricter(
        QuotaOptions(calls_per_minute=9, files_created_per_hour=3))
    assert merged == QuotaOptions(5, 100, 3)


def test_a_dry_run_is_a_call_and_writes_nothing(clock: Clock) -> None:
    gate = quotas(clock, calls_per_minute=5, write_bytes_per_hour=10, files_created_per_hour=1)
    edit = {"path": "a", "old_string": "x", "new_string": "y" * 40, "dry_run": True}
    taken = admit(gate, "edit_file", edit)
    assert isinstance(taken, dict)
    settle(gate, taken, "edit_file", edit, answer(written=40))
    patch = {"patch": "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch", "dry_run": True}
    taken = admit(gate, "apply_patch", patch)
    assert isinstance(taken, dict)
    settle(gate, taken, "apply_patch", patch, answer(result={"files": [{"action": "add"}]}))
    assert (gate.usage.used(CALLS), gate.usage.used(BYTES), gate.usage.used(FILES)) == (2, 0, 0)


def test_base64_padding_does_not_shrink_what_a_write_is_charged(clock: Clock) -> None:
    gate = quotas(clock, write_bytes_per_hour=100)
    assert isinstance(admit(gate, "write_file", write("AAAA==", encoding="base64")), dict)
    assert gate.usage.used(BYTES) == 3  # b64decode(validate=True) gives 3 bytes


def test_the_parent_directories_a_call_made_count_up_to_its_paths_depth(clock: Clock) -> None:
    gate = quotas(clock, files_created_per_hour=100)
    args = write("x", path="a/b/c/f.txt")
    taken = admit(gate, "write_file", args)
    assert isinstance(taken, dict)
    made = Answer(True, "t", {"created": True}, "", meta=Meta(dirs_made=10**9))  # forged
    settle(gate, taken, "write_file", args, made)
    assert gate.usage.used(FILES) == 4  # the file and at most a, b and c


def test_the_parent_directories_are_reserved_before_the_call_and_settled_down(
        clock: Clock) -> None:
    gate = quotas(clock, files_created_per_hour=6)
    args = write("x", path="a/b/c/f.txt")
    first = admit(gate, "write_file", args)
    assert isinstance(first, dict) and gate.usage.used(FILES) == 4  # before it answers
    assert refused(admit(gate, "write_file", args)).code == "quota_exceeded"  # 4 + 4 > 6
    made = Answer(True, "t", {"created": True}, "", meta=Meta(dirs_made=1))
    settle(gate, first, "write_file", args, made)
    assert gate.usage.used(FILES) == 2
    moved = {"patch": "*** Begin Patch\n*** Update File: x\n*** Move to: d/e/x\n*** End Patch"}
    second = admit(gate, "apply_patch", moved)  # a move adds no file: its 2 directories
    assert isinstance(second, dict) and gate.usage.used(FILES) == 4
    settle(gate, second, "apply_patch", moved, answer(result={"files": [{"action": "move"}]}))
    assert gate.usage.used(FILES) == 2  # it made none
    assert "lies 6 directories deep" in refused(
        admit(gate, "create_directory", {"path": "a/b/c/d/e/f/g"})).message


@pytest.mark.parametrize("field", ["dirs_made", "history_bytes", "bytes"])
@pytest.mark.parametrize("made", [-1, 1.5, "3", True, False, 0.0, None])
def test_a_count_that_is_not_a_count_is_a_malformed_answer(field: str, made: Any) -> None:
    with pytest.raises(Malformed, match=field):
        Meta.from_wire({field: made})
    assert Meta.from_wire(Meta(dirs_made=3).to_wire()).dirs_made == 3
    assert Meta.from_wire(Meta(history_bytes=5).to_wire()).history_bytes == 5


@pytest.mark.parametrize("ids", ["a", [1], None, {}, 0, [None]])
def test_history_ids_that_are_not_a_list_of_ids_are_a_malformed_answer(ids: Any) -> None:
    with pytest.raises(Malformed, match="history_ids"):
        Meta.from_wire({"history_ids": ids})
    assert Meta.from_wire(Meta(history_ids=("r1",)).to_wire()).history_ids == ("r1",)
    assert Meta.from_wire(Meta().to_wire()) == Meta()


def test_a_directory_on_the_way_is_reserved_once_and_from_its_root(clock: Clock) -> None:
    gate = Quotas(QuotaOptions(files_created_per_hour=100), QuotaUsage(clock), Limits(),
                  ["/srv/deep/work/space", "/other"])
    adds = "".join(f"*** Add File: src/main/app/F{i}.java\n+x\n" for i in range(10))
    patch = {"patch": f"*** Begin Patch\n{adds}*** Add File: src/test/T.java\n+x\n*** End Patch"}
    taken = admit(gate, "apply_patch", patch)  # 11 files; src, src/main, src/main/app, src/test
    assert isinstance(taken, dict) and gate.usage.used(FILES) == 15
    gate.release(taken)
    for path, reserved in (("/srv/deep/work/space/a/f.txt", 2), ("/other/f.txt", 1),
                           ("/srv/deep/work/spacer/f.txt", 5), ("a/../b/./c/f.txt", 3)):
        taken = admit(gate, "write_file", write("x", path=path))
        assert isinstance(taken, dict) and gate.usage.used(FILES) == reserved, path
        gate.release(taken)
