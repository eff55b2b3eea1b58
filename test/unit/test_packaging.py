"""What `pip install .` ships: setup.py's find_packages takes only folders with an __init__.py, so
a folder of lazygrad without one would be left out of a wheel (imports work in the repo and in an
editable install, then fail for every user of a built one)."""
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]


def test_every_folder_of_python_files_is_a_package_setup_ships():
    folders = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "lazygrad").rglob("*.py")}
    shipped = set(find_packages(str(ROOT), exclude=["test", "test.*", "tests", "tests.*"]))
    assert folders - shipped == set()
