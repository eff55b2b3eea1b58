"""Tests for lazygrad.knobs: parsing, error messages, Context overrides and the knob table."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lazygrad.knobs import KNOB_NAMES, KNOBS, Context, Knobs, describe, knobs, openmp_threads_setting

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, extra_environ: dict[str, str]) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter that can import lazygrad from this checkout."""
    environ = {name: value for name, value in os.environ.items() if name not in KNOB_NAMES}
    environ.update(extra_environ)
    environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=60)


# ---------------------------------------------------------------------------------------------
# Parsing the environment
# ---------------------------------------------------------------------------------------------

def test_knob_names_are_exactly_the_documented_variables():
    assert KNOB_NAMES == ("DEBUG", "DEV", "BEAM", "BEAM_TIMEOUT", "IGNORE_BEAM_CACHE", "NOOPT", "GRAPH",
                          "LAZYGRAD_CACHE", "DISABLE_CACHE", "PROGRESS", "CC")


def test_defaults_when_nothing_is_set():
    defaults = Knobs.from_environ({})
    assert defaults.debug == 0
    assert defaults.dev == "CPU"
    assert defaults.beam == 0
    assert defaults.noopt is False
    assert defaults.graph is False
    assert defaults.cache_dir == os.path.expanduser("~/.cache/lazygrad")
    assert defaults.disable_cache is False
    assert defaults.cc == ""
    assert defaults.progress is True


@pytest.mark.parametrize("environ, progress", [({"DEBUG": "0"}, False), ({"DEBUG": "1"}, True),
                                               ({"PROGRESS": "0"}, False), ({"DEBUG": ""}, True)])
def test_progress_is_off_when_asked_or_when_debug_0_is_given_explicitly(environ, progress):
    assert Knobs.from_environ(environ).progress is progress


def test_every_variable_is_parsed_into_its_attribute():
    parsed = Knobs.from_environ({
        "DEBUG": "4", "DEV": "opencl:1", "BEAM": " 8 ", "NOOPT": "yes", "GRAPH": "TRUE",
        "LAZYGRAD_CACHE": "/some/where", "DISABLE_CACHE": "1", "CC": "clang-17",
    })
    assert parsed.debug == 4
    assert parsed.dev == "OPENCL:1"
    assert parsed.beam == 8
    assert parsed.noopt is True
    assert parsed.graph is True
    assert parsed.cache_dir == "/some/where"
    assert parsed.disable_cache is True
    assert parsed.cc == "clang-17"


def test_integers_parse_to_int_type():
    parsed = Knobs.from_environ({"DEBUG": "2"})
    assert type(parsed.debug) is int


def test_empty_variable_counts_as_unset():
    parsed = Knobs.from_environ({"DEBUG": "", "DEV": "  ", "LAZYGRAD_CACHE": ""})
    assert parsed.debug == 0
    assert parsed.dev == "CPU"
    assert parsed.cache_dir == os.path.expanduser("~/.cache/lazygrad")


def test_cache_dir_expands_the_home_directory():
    parsed = Knobs.from_environ({"LAZYGRAD_CACHE": "~/elsewhere/cache"})
    assert parsed.cache_dir == os.path.join(os.path.expanduser("~"), "elsewhere", "cache")
    assert "~" not in parsed.cache_dir


@pytest.mark.parametrize("text, expected", [
    ("1", True), ("true", True), ("True", True), ("YES", True), ("yes", True),
    ("0", False), ("false", False), ("FALSE", False), ("No", False), ("no", False),
])
def test_bool_spellings(text, expected):
    assert Knobs.from_environ({"NOOPT": text}).noopt is expected


@pytest.mark.parametrize("device", ["CPU", "NPY", "OPENCL", "CUDA", "CUDA:0", "OPENCL:12", "cpu"])
def test_valid_devices(device):
    assert Knobs.from_environ({"DEV": device}).dev == device.upper()


@pytest.mark.parametrize("environ, message", [
    ({"BEAM": "x"}, "BEAM expects an integer, got 'x'"),
    ({"DEBUG": "2.5"}, "DEBUG expects an integer, got '2.5'"),
    ({"BEAM": "-1"}, "BEAM expects an integer >= 0, got '-1'"),
    ({"NOOPT": "maybe"}, "NOOPT expects a boolean (0/1/true/false/yes/no), got 'maybe'"),
    ({"DISABLE_CACHE": "2"}, "DISABLE_CACHE expects a boolean (0/1/true/false/yes/no), got '2'"),
    ({"GRAPH": "on"}, "GRAPH expects a boolean (0/1/true/false/yes/no), got 'on'"),
    ({"DEV": "TPU"}, "DEV expects one of CPU, NPY, OPENCL, CUDA"),
    ({"DEV": "CUDA:x"}, "got 'CUDA:x'"),
    ({"DEV": "CUDA:"}, "got 'CUDA:'"),
    ({"DEV": "CUDA:-1"}, "got 'CUDA:-1'"),
])
def test_bad_values_name_the_variable_and_the_value(environ, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Knobs.from_environ(environ)


def test_environment_is_read_at_import():
    result = run_python("from lazygrad.knobs import knobs; print(knobs.debug, knobs.beam, knobs.dev)",
                        {"DEBUG": "3", "BEAM": "2", "DEV": "npy"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3", "2", "NPY"]


def test_bad_environment_fails_at_import_with_the_message():
    result = run_python("import lazygrad.knobs", {"BEAM": "x"})
    assert result.returncode != 0
    assert "ValueError: BEAM expects an integer, got 'x'" in result.stderr


def test_knobs_rejects_unknown_attributes():
    with pytest.raises(AttributeError):
        knobs.debgu = 2   # a typo must not silently create a new setting


def test_knob_attributes_are_plain_instance_attributes():
    # The hot path reads knobs.debug and friends: they must be stored values, not properties.
    for knob in KNOBS:
        assert not hasattr(getattr(Knobs, knob.attr), "fget"), knob.attr
        assert getattr(knobs, knob.attr) is not None


# ---------------------------------------------------------------------------------------------
# Context
# ---------------------------------------------------------------------------------------------

def test_context_overrides_and_restores():
    debug_before, noopt_before = knobs.debug, knobs.noopt
    with Context(DEBUG=2, NOOPT=1):
        assert knobs.debug == 2
        assert knobs.noopt is True
    assert knobs.debug == debug_before
    assert knobs.noopt is noopt_before


def test_context_nests_and_restores_each_level():
    beam_before = knobs.beam
    with Context(BEAM=2, DEBUG=1):
        with Context(BEAM=4):
            assert knobs.beam == 4
            assert knobs.debug == 1          # untouched by the inner block
            with Context(BEAM=8, DEBUG=3):
                assert (knobs.beam, knobs.debug) == (8, 3)
            assert (knobs.beam, knobs.debug) == (4, 1)
        assert knobs.beam == 2
    assert knobs.beam == beam_before


def test_context_restores_after_an_exception():
    dev_before = knobs.dev
    with pytest.raises(RuntimeError):
        with Context(DEV="NPY"):
            assert knobs.dev == "NPY"
            raise RuntimeError("boom")
    assert knobs.dev == dev_before


def test_context_object_can_be_entered_again():
    override = Context(DEBUG=5)
    debug_before = knobs.debug
    with override:
        with Context(DEBUG=1):
            with override:
                assert knobs.debug == 5
            assert knobs.debug == 1
        assert knobs.debug == 5
    assert knobs.debug == debug_before


def test_context_accepts_python_values(tmp_path):
    with Context(NOOPT=True, GRAPH="no", DEBUG=3, LAZYGRAD_CACHE=tmp_path, DEV="cuda:1"):
        assert knobs.noopt is True
        assert knobs.graph is False
        assert knobs.debug == 3
        assert knobs.cache_dir == str(tmp_path)
        assert knobs.dev == "CUDA:1"


def test_context_validates_values_before_changing_anything():
    before = repr(knobs)
    with pytest.raises(ValueError, match=re.escape("BEAM expects an integer, got 'x'")):
        Context(DEBUG=4, BEAM="x")
    with pytest.raises(ValueError, match="DEBUG expects an integer"):
        Context(DEBUG=True)
    with pytest.raises(ValueError, match="CC expects a string"):
        Context(CC=3)
    assert repr(knobs) == before


def test_context_rejects_unknown_names_and_lists_valid_ones():
    with pytest.raises(ValueError) as error:
        Context(DEBGU=2)
    message = str(error.value)
    assert "DEBGU" in message
    for name in KNOB_NAMES:
        assert name in message


def test_context_rejects_attribute_style_names():
    with pytest.raises(ValueError, match="unknown setting 'debug'"):
        Context(debug=2)


# ---------------------------------------------------------------------------------------------
# Documentation
# ---------------------------------------------------------------------------------------------

def test_describe_lists_every_knob_with_its_meaning_and_default():
    table = describe()
    lines = table.splitlines()
    assert len(lines) == 2 + len(KNOBS)       # header, separator, one row per knob
    for knob, line in zip(KNOBS, lines[2:]):
        assert f"`{knob.env}`" in line
        assert knob.meaning in line
        assert knob.type_name in line
        if knob.default:
            assert f"`{knob.default}`" in line


def test_every_knob_has_a_one_line_meaning():
    for knob in KNOBS:
        assert knob.meaning.strip(), knob.env
        assert "\n" not in knob.meaning, knob.env


def test_no_module_but_knobs_reads_the_environment():
    knobs_module = importlib.import_module("lazygrad.knobs")
    package_dir = Path(knobs_module.__file__).parent
    pattern = re.compile(r"os\.environ|getenv|environ\.get")
    offenders = []
    for source_file in sorted(package_dir.rglob("*.py")):
        if source_file.name == "knobs.py" and source_file.parent == package_dir:
            continue
        for number, line in enumerate(source_file.read_text().splitlines(), start=1):
            if pattern.search(line):
                offenders.append(f"{source_file.relative_to(package_dir)}:{number}: {line.strip()}")
    assert not offenders, "read settings through lazygrad.knobs instead:\n" + "\n".join(offenders)


def test_a_path_under_the_home_of_a_user_that_does_not_exist_is_an_error():
    with pytest.raises(ValueError, match="LAZYGRAD_CACHE: cannot expand '~no-such-user-lazygrad': no such user"):
        Knobs.from_environ({"LAZYGRAD_CACHE": "~no-such-user-lazygrad/cache"})


@pytest.mark.parametrize("setting,threads", [("3", 3), ("4,2", 4), (" 2 ", 2), ("0", None), ("many", None), ("", None)])
def test_the_openmp_thread_count_is_read_from_its_first_entry(monkeypatch, setting, threads):
    monkeypatch.setenv("OMP_NUM_THREADS", setting)
    assert openmp_threads_setting() == threads
