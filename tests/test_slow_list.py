"""scripts/slow_tests.py: the table of slow tests written from a --durations run."""

from __future__ import annotations

from tests.helpers.scripts_loader import load_script

slow_tests = load_script("slow_tests")

DURATIONS = """\
============================== slowest durations ===============================
0.30s call     tests/test_a.py::test_all[one]
0.05s setup    tests/test_a.py::test_all[two words]
0.25s call     tests/test_a.py::test_all[two words]
0.10s call     tests/test_a.py::test_some[fast]
0.90s call     tests/test_a.py::test_some[slow id]
0.15s setup    tests/test_b.py::TestX::test_sum
0.10s call     tests/test_b.py::TestX::test_sum
0.00s teardown tests/test_b.py::test_quick
"""


def test_a_function_slow_in_every_parameter_is_listed_once_and_ids_keep_their_spaces() -> None:
    assert slow_tests.slow_ids(DURATIONS.splitlines(), 0.2) == [
        "tests/test_a.py::test_all",
        "tests/test_a.py::test_some[slow id]",
        "tests/test_b.py::TestX::test_sum",  # setup, call and teardown together
    ]
