"""The official ONNX backend node tests (onnx's in-memory generator) through lazygrad.onnx, on NPY and CPU.

Each test's status per device is pinned in expectations.txt, so a passing test that regresses fails,
and so does a test that starts passing while the file still says otherwise: regenerate the file
with `python test/onnx_runner/backend_cases.py --update` and commit it. The CPU variant carries the
`onnx_cpu` marker (see conftest.py).
"""
import pytest

pytest.importorskip("onnx")

from backend_cases import DEVICES, failure_reason, load_cases, read_expectations, run_case  # noqa: E402

NAMES = sorted(load_cases())
EXPECTED = read_expectations()
UPDATE = "python test/onnx_runner/backend_cases.py --update"
TARGET = 0.85


def check_case(name: str, device: str) -> None:
    expected = EXPECTED.get(name, {}).get(device)
    status, message = run_case(name, device)
    if expected is None:
        pytest.fail(f"{name} on {device} is not in expectations.txt (status {status}); run {UPDATE}")
    if status != expected:
        if expected == "pass":
            pytest.fail(f"{name} on {device} regressed: expected pass, got {status}: {message}")
        pytest.fail(f"{name} on {device}: expectations.txt says {expected}, got {status} "
                    f"({message[:300] if message else 'it passes now'}); if this is an improvement, run {UPDATE}")


@pytest.mark.parametrize("name", NAMES)
def test_node_npy(name):
    check_case(name, "NPY")


@pytest.mark.onnx_cpu
@pytest.mark.parametrize("name", NAMES)
def test_node_cpu(name):
    check_case(name, "CPU")


def test_expectations_list_every_node_test_of_the_pinned_onnx():
    assert sorted(EXPECTED) == NAMES, f"expectations.txt is out of date; run {UPDATE}"
    assert all(set(statuses) == set(DEVICES) for statuses in EXPECTED.values())


def test_every_test_that_does_not_pass_has_a_reason():
    unexplained = [name for name, statuses in EXPECTED.items()
                   if set(statuses.values()) != {"pass"} and failure_reason(name) is None]
    assert not unexplained, f"add the reason these fail to backend_cases.REASONS: {unexplained}"


def test_expectations_meet_the_cpu_target():
    passed = sum(1 for statuses in EXPECTED.values() if statuses["CPU"] == "pass")
    assert passed >= TARGET * len(NAMES), f"{passed} of {len(NAMES)} pass on CPU, below {TARGET:.0%}"
