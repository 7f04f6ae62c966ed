"""tests/xdist_groups.py: the scopes tools/test.sh's workers take tests in."""
from __future__ import annotations

from pathlib import Path

from tests.xdist_groups import ONE_WORKER, ONE_WORKER_SCOPE, scope_of

TESTS = Path(__file__).resolve().parent


def test_every_one_worker_file_exists() -> None:
    """A renamed file would silently drop out of the group and overlap again."""
    missing = sorted(name for name in ONE_WORKER if not (TESTS / name).is_file())
    assert missing == []


def test_one_worker_files_share_a_scope_and_the_rest_go_by_file() -> None:
    assert scope_of("tests/test_hostile_limits.py::test_x[schema]") == ONE_WORKER_SCOPE
    assert scope_of("tests/test_deadlines.py::test_y") == ONE_WORKER_SCOPE
    assert scope_of("tests/test_samples.py::test_z[c_hello]") == "tests/test_samples.py"
    assert scope_of("tests/test_serve_api.py::TestA::test_b") == "tests/test_serve_api.py"
