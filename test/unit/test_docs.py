"""Docs that cannot drift: every setting and every stats counter is documented in the README."""
from dataclasses import fields
from pathlib import Path

import pytest

from lazygrad.knobs import KNOB_NAMES
from lazygrad.stats import Stats

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize("name", KNOB_NAMES)
def test_every_setting_is_in_the_readme_table(name):
    assert f"| `{name}` |" in README


@pytest.mark.parametrize("name", [field.name for field in fields(Stats)])
def test_every_stats_counter_is_documented(name):
    assert f"| `{name}` |" in README


def test_the_readme_shows_the_test_command():
    assert "make test" in README
