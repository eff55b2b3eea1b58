"""The disk cache: compiled binaries and BEAM results kept between runs.

Foundation layer; devices store compiled binaries here and BEAM stores its winners. An entry is
found by a table name ("compile_cpu", "beam", ...) and a key made with `cache_key` from everything
that changes the result (device, compiler and its version, flags, source):

    key = cache_key("CPU", compiler_version, flags, source)
    binary = cache_get("compile_cpu", key)
    if binary is None:
        binary = compile(source)
        cache_put("compile_cpu", key, binary)

Entries live in `knobs.cache_dir/<table>/<key[:2]>/<key>` (`LAZYGRAD_CACHE`, by default
~/.cache/lazygrad). Each file is a header (magic, payload length, sha256 of the payload) followed
by the payload. A missing, truncated or corrupt entry reads as None and is removed, so the caller
simply recomputes it. Writes go to a temporary file in the same directory and are renamed into
place, so readers never see half an entry and several processes can share one cache. A cache that
cannot be written warns once per process and is otherwise ignored: it never makes a run fail.
`DISABLE_CACHE=1` turns the cache off. Settings are read at each call, so `Context` applies.
A cache directory owned by another user, or writable by group or others, is not used at all (a
warning says why, once): a library planted there would run its code when loaded, so the cache is
held to the rule ssh applies to its keys.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import tempfile
import warnings
from pathlib import Path
from typing import Any

from lazygrad.knobs import knobs

MAGIC = b"LGC1"                          # lazygrad cache, format 1
HEADER = struct.Struct("<4sQ32s")        # magic, payload length, sha256 digest of the payload

_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")

_warned_unwritable = False               # the unwritable-cache warning is given once per process
_trusted_dirs: dict[str, bool] = {}      # cache directory -> whether it may be used (checked once)


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------

def cache_key(*parts: Any) -> str:
    """The sha256 hex digest of the parts, encoded so that different parts never collide.

    Parts may be str, bytes, int, bool, float, None, and tuples or lists of those. The encoding
    tags each value with its type and length, so ("ab", "c") and ("a", "bc") differ, as do 1 and
    "1"; it does not depend on the Python process (unlike `hash`).
    """
    digest = hashlib.sha256()
    _encode_part(parts, digest)
    return digest.hexdigest()


def _encode_part(part: Any, digest: Any) -> None:
    if isinstance(part, (tuple, list)):
        digest.update(b"T" + struct.pack("<Q", len(part)))
        for item in part:
            _encode_part(item, digest)
        return
    if part is None:
        tag, payload = b"N", b""
    elif isinstance(part, bool):                  # before int: bool is a subclass of int
        tag, payload = b"B", b"1" if part else b"0"
    elif isinstance(part, int):
        tag, payload = b"I", str(part).encode()
    elif isinstance(part, float):
        tag, payload = b"F", part.hex().encode()  # exact and the same on every platform
    elif isinstance(part, str):
        tag, payload = b"S", part.encode("utf-8", "surrogatepass")
    elif isinstance(part, (bytes, bytearray, memoryview)):
        tag, payload = b"Y", bytes(part)
    else:
        raise TypeError(f"cache_key: cannot encode a {type(part).__name__} ({part!r}); "
                        "use str, bytes, int, bool, float, None or tuples of them")
    digest.update(tag + struct.pack("<Q", len(payload)) + payload)


# ---------------------------------------------------------------------------------------------
# Reading and writing entries
# ---------------------------------------------------------------------------------------------

def cache_get(table: str, key: str) -> bytes | None:
    """The payload stored under (table, key), or None when absent, damaged or the cache is off."""
    if knobs.disable_cache or not _trusted(knobs.cache_dir):
        return None
    path = _entry_path(table, key)
    try:
        data = path.read_bytes()
    except OSError:                      # missing, unreadable, or the cache dir is not a dir
        return None
    payload = _decode_entry(data)
    if payload is None:
        _remove_quietly(path)            # damaged: drop it so the next put starts clean
    return payload


def cache_put(table: str, key: str, value: bytes) -> None:
    """Stores value under (table, key), atomically. Never raises for a cache that can't be written."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"cache_put: value must be bytes, got {type(value).__name__}")
    if knobs.disable_cache or not _trusted(knobs.cache_dir):
        return
    path = _entry_path(table, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, _encode_entry(bytes(value)))
    except OSError as error:
        _warn_unwritable(error)


def _trusted(directory: str) -> bool:
    """Whether the cache directory is this user's and nobody else can write to it (a directory that
    does not exist yet is made by us, so it is). Decided once per directory and process."""
    trusted = _trusted_dirs.get(directory)
    if trusted is None:
        trusted = _trusted_dirs[directory] = _check_ownership(directory)
    return trusted


def _check_ownership(directory: str) -> bool:
    if not hasattr(os, "getuid"):  # Windows: no POSIX owners and modes to check
        return True
    try:
        status = os.stat(directory)
    except OSError:
        return True
    problem = None
    if status.st_uid != os.getuid():
        problem = f"is owned by user id {status.st_uid}, not by you ({os.getuid()})"
    elif status.st_mode & 0o022:
        problem = f"is writable by {'group and others' if status.st_mode & 0o022 == 0o022 else 'group' if status.st_mode & 0o020 else 'others'}"
    if problem is None:
        return True
    warnings.warn(f"lazygrad does not use its disk cache {directory}: the directory {problem}, so someone else "
                  "could plant a compiled kernel there. Going on without the cache; fix it with "
                  f"`chmod go-w {directory}`, or set LAZYGRAD_CACHE to a directory of your own.",
                  RuntimeWarning, stacklevel=3)
    return False


def _entry_path(table: str, key: str) -> Path:
    for what, name in (("table", table), ("key", key)):
        if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
            raise ValueError(f"disk cache: {what} must be letters, digits, '_', '.' or '-' "
                             f"(not starting with '.' or '-'), got {name!r}")
    return Path(knobs.cache_dir) / table / key[:2] / key


def _encode_entry(payload: bytes) -> bytes:
    return HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload


def _decode_entry(data: bytes) -> bytes | None:
    """The payload of an entry file's contents, or None if anything about it is wrong."""
    if len(data) < HEADER.size:
        return None
    magic, length, checksum = HEADER.unpack_from(data)
    payload = data[HEADER.size:]
    if magic != MAGIC or length != len(payload):
        return None
    if hashlib.sha256(payload).digest() != checksum:
        return None
    return payload


def _write_atomically(path: Path, data: bytes) -> None:
    """Writes a temporary file beside path, then renames it over path (atomic on POSIX)."""
    file_descriptor, temporary_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                                       suffix=".tmp")
    try:
        with os.fdopen(file_descriptor, "wb") as temporary_file:
            temporary_file.write(data)
        os.replace(temporary_name, path)
    except BaseException:
        _remove_quietly(Path(temporary_name))
        raise


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _warn_unwritable(error: OSError) -> None:
    global _warned_unwritable
    if _warned_unwritable:
        return
    _warned_unwritable = True
    warnings.warn(f"lazygrad cannot write its disk cache in {knobs.cache_dir} ({error}); "
                  "going on without caching. Set LAZYGRAD_CACHE to a writable directory, "
                  "or DISABLE_CACHE=1 to turn the cache off.", RuntimeWarning, stacklevel=3)
