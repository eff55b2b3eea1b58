"""GRAPH=1's files: written where the path printed says, under names another local user cannot take first."""
import os
import stat
import subprocess
import tempfile

import numpy as np

from lazygrad import Tensor
from lazygrad import graph as graph_module
from lazygrad.knobs import Context


def test_graph_1_prints_the_path_of_the_dot_file_it_writes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with Context(GRAPH=True):
        (Tensor(np.ones(4, np.float32), device="CPU") * 2).realize()
    message = capsys.readouterr().err
    path = message.split("GRAPH: wrote ")[1].split()[0]
    assert os.path.dirname(path) == str(tmp_path)
    with open(path) as file:
        assert file.read().startswith("digraph lazygrad {")


def test_graph_files_never_follow_a_symlink_planted_at_a_predictable_name(tmp_path, monkeypatch):
    """The names were $TMPDIR/lazygrad_graph_<pid>_<n>.dot, opened with open(path, "w"): another user
    could plant symlinks there and have the graph written over any file of ours."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    for number in range(1000):
        os.symlink(victim, tmp_path / f"lazygrad_graph_{os.getpid()}_{number}.dot")
    node = (Tensor(np.ones(4, np.float32), device="CPU") * 2).lazydata
    paths = {graph_module.write_graph([node]) for _ in range(3)}
    assert victim.read_text() == "untouched"
    assert len(paths) == 3
    for path in paths:
        status = os.lstat(path)
        assert stat.S_ISREG(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o600


def test_the_png_is_not_written_through_a_file_put_at_its_name_first(tmp_path, monkeypatch):
    """Graphviz draws to memory and the PNG is created exclusively, even if someone saw the DOT file
    appear and raced to put a symlink at the PNG's name."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(graph_module.shutil, "which", lambda name: "/usr/bin/dot")
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    race = {"plant": False}

    def fake_dot(command, capture_output):
        if race["plant"]:
            os.symlink(victim, command[-1][:-4] + ".png")
        return subprocess.CompletedProcess(command, 0, stdout=b"\x89PNG drawn", stderr=b"")

    monkeypatch.setattr(graph_module.subprocess, "run", fake_dot)
    node = (Tensor(np.ones(4, np.float32), device="CPU") * 2).lazydata
    drawn = graph_module.write_graph([node])
    with open(drawn[:-4] + ".png", "rb") as file:
        assert file.read() == b"\x89PNG drawn"
    race["plant"] = True
    raced = graph_module.write_graph([node])
    assert victim.read_text() == "untouched" and os.path.islink(raced[:-4] + ".png")
