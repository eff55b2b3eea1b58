"""Tests for lazygrad.diskcache: keys, round trips, damaged entries, unwritable caches, concurrency."""

import errno
import hashlib
import importlib
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from lazygrad.diskcache import HEADER, MAGIC, cache_get, cache_key, cache_put
from lazygrad.knobs import KNOB_NAMES, Context

REPO_ROOT = Path(__file__).resolve().parents[2]
diskcache_module = importlib.import_module("lazygrad.diskcache")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, enabled cache directory for one test, and a fresh once-only warning flag."""
    monkeypatch.setattr(diskcache_module, "_warned_unwritable", False)
    directory = tmp_path / "cache"
    with Context(LAZYGRAD_CACHE=directory, DISABLE_CACHE=0):
        yield directory


def entry_path(cache_dir: Path, table: str, key: str) -> Path:
    return cache_dir / table / key[:2] / key


def files_under(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file())


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------

def test_cache_key_is_a_sha256_hex_digest():
    key = cache_key("CPU", "gcc 12.2", ("-O2", "-fPIC"), b"source", 3)
    assert len(key) == 64
    assert int(key, 16) >= 0
    assert key == cache_key("CPU", "gcc 12.2", ("-O2", "-fPIC"), b"source", 3)


@pytest.mark.parametrize("left, right", [
    (("ab", "c"), ("a", "bc")),
    (("1",), (1,)),
    (("x",), (b"x",)),
    ((True,), (1,)),
    ((None,), ("",)),
    (((1, 2), 3), (1, (2, 3))),
    ((("a",),), ("a",)),
    ((), ((),)),
    ((1.0,), (1,)),
    (("source", "-O2"), ("source", "-O3")),
])
def test_cache_key_distinguishes_different_parts(left, right):
    assert cache_key(*left) != cache_key(*right)


def test_cache_key_treats_lists_like_tuples():
    assert cache_key(["-O2", "-fPIC"]) == cache_key(("-O2", "-fPIC"))


def test_cache_key_is_the_same_in_another_process():
    code = ("from lazygrad.diskcache import cache_key; "
            "print(cache_key('CPU', ('-O2', 7), b'\\x00src', None, 0.5))")
    environ = {name: value for name, value in os.environ.items() if name not in KNOB_NAMES}
    environ["PYTHONPATH"] = str(REPO_ROOT)
    keys = set()
    for hash_seed in ("1", "2"):
        environ["PYTHONHASHSEED"] = hash_seed
        result = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                                text=True, timeout=60, check=True)
        keys.add(result.stdout.strip())
    assert keys == {cache_key("CPU", ("-O2", 7), b"\x00src", None, 0.5)}


def test_cache_key_rejects_unsupported_types():
    with pytest.raises(TypeError, match="cannot encode a dict"):
        cache_key("CPU", {"flags": "-O2"})


# ---------------------------------------------------------------------------------------------
# Round trips and layout
# ---------------------------------------------------------------------------------------------

def test_round_trip(cache_dir):
    key = cache_key("round trip")
    cache_put("compile_cpu", key, b"\x7fELF binary")
    assert cache_get("compile_cpu", key) == b"\x7fELF binary"


def test_missing_entry_is_none(cache_dir):
    assert cache_get("compile_cpu", cache_key("never stored")) is None


def test_empty_and_large_payloads_round_trip(cache_dir):
    large = os.urandom(3 * 1024 * 1024)
    cache_put("t", cache_key("empty"), b"")
    cache_put("t", cache_key("large"), large)
    assert cache_get("t", cache_key("empty")) == b""
    assert cache_get("t", cache_key("large")) == large


def test_bytearray_and_memoryview_are_accepted(cache_dir):
    cache_put("t", cache_key("ba"), bytearray(b"abc"))
    cache_put("t", cache_key("mv"), memoryview(b"def"))
    assert cache_get("t", cache_key("ba")) == b"abc"
    assert cache_get("t", cache_key("mv")) == b"def"


def test_put_rejects_values_that_are_not_bytes(cache_dir):
    with pytest.raises(TypeError, match="must be bytes, got str"):
        cache_put("t", cache_key("text"), "not bytes")


def test_put_replaces_an_existing_entry(cache_dir):
    key = cache_key("replace")
    cache_put("t", key, b"first")
    cache_put("t", key, b"second")
    assert cache_get("t", key) == b"second"


def test_tables_are_separate(cache_dir):
    key = cache_key("shared key")
    cache_put("compile_cpu", key, b"binary")
    cache_put("beam", key, b"opts")
    assert cache_get("compile_cpu", key) == b"binary"
    assert cache_get("beam", key) == b"opts"


def test_entry_layout_and_header(cache_dir):
    key = cache_key("layout")
    cache_put("compile_cpu", key, b"payload")
    path = entry_path(cache_dir, "compile_cpu", key)
    assert files_under(cache_dir) == [path]      # no temporary files left behind
    data = path.read_bytes()
    magic, length, checksum = HEADER.unpack_from(data)
    assert magic == MAGIC
    assert length == len(b"payload")
    assert checksum == hashlib.sha256(b"payload").digest()
    assert data[HEADER.size:] == b"payload"


@pytest.mark.parametrize("table, key", [
    ("../outside", "ab12"), ("t", "../../etc"), ("", "ab12"), ("t", ""), ("t", ".hidden"),
    ("a/b", "ab12"), ("t", "ab/cd"),
])
def test_table_and_key_cannot_escape_the_cache(cache_dir, table, key):
    with pytest.raises(ValueError, match="disk cache"):
        cache_put(table, key, b"x")
    with pytest.raises(ValueError, match="disk cache"):
        cache_get(table, key)


def test_settings_are_read_at_call_time(tmp_path, cache_dir):
    key = cache_key("which dir")
    cache_put("t", key, b"in the first cache")
    with Context(LAZYGRAD_CACHE=tmp_path / "other"):
        assert cache_get("t", key) is None
        cache_put("t", key, b"in the second cache")
    assert cache_get("t", key) == b"in the first cache"
    assert entry_path(tmp_path / "other", "t", key).exists()


# ---------------------------------------------------------------------------------------------
# Damaged entries are recomputed, never trusted
# ---------------------------------------------------------------------------------------------

def stored_entry(cache_dir: Path, payload: bytes = b"a compiled kernel" * 10) -> tuple[str, Path]:
    key = cache_key("damaged", payload)
    cache_put("t", key, payload)
    return key, entry_path(cache_dir, "t", key)


@pytest.mark.parametrize("keep", [0, 1, HEADER.size - 1, HEADER.size, HEADER.size + 5, -1])
def test_truncated_entry_is_none_and_rewritten_by_next_put(cache_dir, keep):
    key, path = stored_entry(cache_dir)
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    assert cache_get("t", key) is None
    assert not path.exists()                      # the bad file was removed
    cache_put("t", key, b"recompiled")
    assert cache_get("t", key) == b"recompiled"


def test_garbage_entry_is_none(cache_dir):
    key, path = stored_entry(cache_dir)
    path.write_bytes(os.urandom(200))
    assert cache_get("t", key) is None
    assert not path.exists()


def test_entry_with_wrong_magic_is_none(cache_dir):
    key, path = stored_entry(cache_dir)
    data = path.read_bytes()
    path.write_bytes(b"XXXX" + data[4:])
    assert cache_get("t", key) is None


def test_entry_with_a_flipped_payload_byte_is_none(cache_dir):
    key, path = stored_entry(cache_dir)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    assert cache_get("t", key) is None


def test_entry_with_extra_bytes_is_none(cache_dir):
    key, path = stored_entry(cache_dir)
    path.write_bytes(path.read_bytes() + b"trailing")
    assert cache_get("t", key) is None


def test_a_directory_where_an_entry_should_be_is_none(cache_dir):
    key = cache_key("a directory")
    entry_path(cache_dir, "t", key).mkdir(parents=True)
    assert cache_get("t", key) is None


# ---------------------------------------------------------------------------------------------
# A cache that cannot be written warns once and never fails
# ---------------------------------------------------------------------------------------------

def test_unwritable_cache_warns_once_and_does_not_raise(tmp_path, cache_dir):
    # A directory below a regular file cannot be created, even by root (tests may run as root,
    # for whom chmod does not block writes).
    blocker = tmp_path / "a_regular_file"
    blocker.write_text("not a directory")
    unwritable = blocker / "cache"
    with Context(LAZYGRAD_CACHE=unwritable):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache_put("compile_cpu", cache_key("one"), b"binary")
            cache_put("beam", cache_key("two"), b"opts")
            cache_put("compile_cpu", cache_key("three"), b"binary")
            assert cache_get("compile_cpu", cache_key("one")) is None
    assert len(caught) == 1
    warning = caught[0]
    assert warning.category is RuntimeWarning
    message = str(warning.message)
    assert str(unwritable) in message
    assert "LAZYGRAD_CACHE" in message
    assert "DISABLE_CACHE=1" in message


def test_failed_write_leaves_no_temporary_file(cache_dir, monkeypatch):
    def disk_full(source, destination):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(diskcache_module.os, "replace", disk_full)
    key = cache_key("full disk")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache_put("t", key, b"binary")
    assert len(caught) == 1
    assert "No space left" in str(caught[0].message)
    monkeypatch.undo()
    assert files_under(cache_dir) == []
    assert cache_get("t", key) is None


# ---------------------------------------------------------------------------------------------
# DISABLE_CACHE
# ---------------------------------------------------------------------------------------------

def test_disable_cache_turns_off_put(cache_dir):
    key = cache_key("disabled put")
    with Context(DISABLE_CACHE=1):
        cache_put("t", key, b"binary")
    assert not cache_dir.exists() or files_under(cache_dir) == []
    assert cache_get("t", key) is None


def test_disable_cache_turns_off_get(cache_dir):
    key = cache_key("disabled get")
    cache_put("t", key, b"binary")
    with Context(DISABLE_CACHE="yes"):
        assert cache_get("t", key) is None
    assert cache_get("t", key) == b"binary"


def test_disable_cache_does_not_warn_about_an_unwritable_cache(tmp_path, cache_dir):
    blocker = tmp_path / "a_regular_file"
    blocker.write_text("")
    with Context(LAZYGRAD_CACHE=blocker / "cache", DISABLE_CACHE=1):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cache_put("t", cache_key("quiet"), b"binary")


# ---------------------------------------------------------------------------------------------
# Several processes sharing one cache
# ---------------------------------------------------------------------------------------------

WRITER = """
import sys, time
from lazygrad.diskcache import cache_put
table, key, fill, start_at, repeats = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
payload = fill.encode() * (1024 * 1024)
while time.time() < start_at:
    time.sleep(0.001)
for _ in range(repeats):
    cache_put(table, key, payload)
"""


def test_two_processes_writing_the_same_key_both_succeed(cache_dir):
    key = cache_key("contended")
    environ = {name: value for name, value in os.environ.items() if name not in KNOB_NAMES}
    environ.update(PYTHONPATH=str(REPO_ROOT), LAZYGRAD_CACHE=str(cache_dir),
                   PYTHONWARNINGS="error")           # a cache warning would fail the writer
    start_at = time.time() + 1.0                     # both start writing at the same moment
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, "t", key, fill, str(start_at), "40"],
                                env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for fill in ("a", "b")]
    expected = {b"a" * 1024 * 1024, b"b" * 1024 * 1024}

    # Read while they write: once the entry exists it must always read back whole.
    seen_entry = False
    deadline = time.time() + 60
    while any(writer.poll() is None for writer in writers) and time.time() < deadline:
        value = cache_get("t", key)
        if value is None:
            assert not seen_entry, "an entry that existed read back as damaged or missing"
        else:
            assert value in expected
            seen_entry = True

    for writer in writers:
        _, errors = writer.communicate(timeout=60)
        assert writer.returncode == 0, errors.decode()
        assert errors == b""
    assert cache_get("t", key) in expected
    assert files_under(cache_dir) == [entry_path(cache_dir, "t", key)]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes only")
@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_cache_directory_others_can_write_is_not_used(tmp_path, monkeypatch, mode):
    monkeypatch.setattr(diskcache_module, "_trusted_dirs", {})
    directory = tmp_path / "shared-cache"
    directory.mkdir()
    directory.chmod(mode)
    with Context(LAZYGRAD_CACHE=directory, DISABLE_CACHE=0):
        with pytest.warns(RuntimeWarning, match=r"does not use its disk cache .*writable by .*chmod go-w"):
            cache_put("table", "key", b"planted?")
        assert cache_get("table", "key") is None
    assert files_under(directory) == []


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes only")
def test_a_cache_directory_of_another_user_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(diskcache_module, "_trusted_dirs", {})
    real_stat = os.stat

    class OtherOwner:
        def __init__(self, status):
            self.st_mode, self.st_uid = status.st_mode, status.st_uid + 1

    monkeypatch.setattr(diskcache_module.os, "stat", lambda path, *args, **kwargs: OtherOwner(real_stat(path)))
    with Context(LAZYGRAD_CACHE=tmp_path, DISABLE_CACHE=0):
        with pytest.warns(RuntimeWarning, match="is owned by user id"):
            assert cache_get("table", "key") is None


def test_a_cache_directory_of_our_own_is_used(cache_dir, monkeypatch):
    monkeypatch.setattr(diskcache_module, "_trusted_dirs", {})
    cache_dir.mkdir(mode=0o700)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache_put("table", "key", b"value")
        assert cache_get("table", "key") == b"value"
