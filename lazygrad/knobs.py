"""Settings of lazygrad: the one module that reads environment variables.

Foundation layer. Each setting is declared once in `KNOBS` with its environment variable, type,
default and meaning. The environment is parsed once, at import, into the module-level `knobs`
object; the rest of lazygrad reads plain attributes such as `knobs.debug` or `knobs.beam` (a cheap
lookup, fine on hot paths) and never touches `os.environ`.

    DEBUG=2 BEAM=4 python train.py        # set from the shell

    with Context(DEBUG=2, NOOPT=1):       # or overridden in code, for a block
        ...

A bad value is an error that names the variable and the value ("BEAM expects an integer, got 'x'").
An empty variable (`DEBUG=`) counts as unset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

DEVICE_NAMES = ("CPU", "NPY", "OPENCL", "CUDA")

_TRUE_WORDS = ("1", "true", "yes")
_FALSE_WORDS = ("0", "false", "no")


# ---------------------------------------------------------------------------------------------
# Parsers: each takes the variable's name (for the error message) and a raw value, which is the
# text from the environment or a Python value given to Context, and returns the typed setting.
# ---------------------------------------------------------------------------------------------

def parse_count(name: str, raw: Any) -> int:
    """An integer >= 0 (DEBUG levels, beam widths)."""
    if isinstance(raw, bool):
        raise ValueError(f"{name} expects an integer, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    else:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ValueError(f"{name} expects an integer, got {str(raw)!r}") from None
    if value < 0:
        raise ValueError(f"{name} expects an integer >= 0, got {str(raw)!r}")
    return value


def parse_bool(name: str, raw: Any) -> bool:
    """A switch: 0/1/true/false/yes/no in any case."""
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"{name} expects a boolean (0/1/true/false/yes/no), got {str(raw)!r}")


def parse_text(name: str, raw: Any) -> str:
    """Any text, taken as it is."""
    if not isinstance(raw, str):
        raise ValueError(f"{name} expects a string, got {raw!r}")
    return raw


def parse_path(name: str, raw: Any) -> str:
    """A filesystem path; a leading ~ or ~user is expanded to that home directory."""
    if not isinstance(raw, (str, os.PathLike)):
        raise ValueError(f"{name} expects a path, got {raw!r}")
    path = os.path.expanduser(os.fspath(raw))
    if path.startswith("~"):  # ~user of a user that does not exist: never a folder named "~user"
        raise ValueError(f"{name}: cannot expand {path.split(os.sep)[0]!r}: no such user")
    return path


def parse_device(name: str, raw: Any) -> str:
    """A device name such as CPU, CUDA or OPENCL:1 (case-insensitive), returned in upper case."""
    text = str(raw).strip().upper()
    device, has_index, index = text.partition(":")
    if device not in DEVICE_NAMES or (has_index and not index.isdigit()):
        valid = ", ".join(DEVICE_NAMES)
        raise ValueError(f"{name} expects one of {valid}, optionally with ':N' (like CUDA:1), "
                         f"got {str(raw)!r}")
    return text


# ---------------------------------------------------------------------------------------------
# The settings
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Knob:
    """One setting: where it comes from, how it is parsed, and what it means."""
    env: str                              # environment variable, e.g. "DEBUG"
    attr: str                             # attribute on `knobs`, e.g. "debug"
    type_name: str                        # shown by describe()
    parse: Callable[[str, Any], Any]      # parse(env, raw) -> value, ValueError when bad
    default: str                          # the default, written as it would be in the environment
    meaning: str                          # one line, shown by describe()


KNOBS: tuple[Knob, ...] = (
    Knob("DEBUG", "debug", "int", parse_count, "0",
         "verbosity: 1 per realize, 2 per kernel timings, 3 AST and opts, 4 generated source, "
         "5 lazy graph and schedule, 6 compiler output"),
    Knob("DEV", "dev", "device", parse_device, "CPU",
         "default device: CPU, NPY, OPENCL or CUDA, optionally ':N' for the Nth one (CUDA:1)"),
    Knob("BEAM", "beam", "int", parse_count, "0",
         "autotune each new kernel with a beam search of this width (0: use the heuristic)"),
    Knob("BEAM_TIMEOUT", "beam_timeout", "int", parse_count, "30",
         "seconds BEAM may spend searching one kernel"),
    Knob("IGNORE_BEAM_CACHE", "ignore_beam_cache", "bool", parse_bool, "0",
         "search again with BEAM even when the disk cache holds a result for the kernel"),
    Knob("NOOPT", "noopt", "bool", parse_bool, "0",
         "apply no loop optimizations at all (the reference loop structure)"),
    Knob("GRAPH", "graph", "bool", parse_bool, "0",
         "write the lazy graph and the schedule as DOT (PNG where graphviz is present)"),
    Knob("LAZYGRAD_CACHE", "cache_dir", "path", parse_path, "~/.cache/lazygrad",
         "directory of the disk cache (compiled binaries, BEAM results)"),
    Knob("DISABLE_CACHE", "disable_cache", "bool", parse_bool, "0",
         "neither read nor write the disk cache"),
    Knob("PROGRESS", "progress", "bool", parse_bool, "1",
         "a progress bar on stderr while a call compiles for over a second (on a terminal only; "
         "DEBUG=0 set in the environment also turns it off)"),
    Knob("CC", "cc", "str", parse_text, "",
         "C compiler for the CPU device (empty: the first of gcc, clang, cc on PATH)"),
)

KNOB_NAMES: tuple[str, ...] = tuple(knob.env for knob in KNOBS)
_KNOBS_BY_ENV: dict[str, Knob] = {knob.env: knob for knob in KNOBS}


def parse_knob(env: str, raw: Any) -> Any:
    """Parses one setting given by its environment name; an empty value gives the default."""
    knob = _KNOBS_BY_ENV.get(env)
    if knob is None:
        raise ValueError(f"unknown setting {env!r}; valid settings are: {', '.join(KNOB_NAMES)}")
    if isinstance(raw, str) and raw.strip() == "":
        raw = knob.default
    return knob.parse(env, raw)


class Knobs:
    """The current value of every setting, as plain attributes (`knobs.debug`, `knobs.beam`, ...)."""

    __slots__ = tuple(knob.attr for knob in KNOBS)

    def __init__(self, values: Mapping[str, Any]):
        """Takes the parsed values keyed by attribute name; use `from_environ` to build one."""
        for knob in KNOBS:
            setattr(self, knob.attr, values[knob.attr])

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Knobs:
        """Parses every setting from an environment mapping; unset ones take their default."""
        values = {knob.attr: parse_knob(knob.env, environ.get(knob.env, "")) for knob in KNOBS}
        if environ.get("DEBUG", "").strip() == "0":  # asked for quiet in so many words
            values["progress"] = False
        return cls(values)

    def __repr__(self) -> str:
        fields = ", ".join(f"{knob.attr}={getattr(self, knob.attr)!r}" for knob in KNOBS)
        return f"Knobs({fields})"


knobs = Knobs.from_environ(os.environ)


def export_pocl_cache_settings() -> None:
    """PoCL (OpenCL on the CPU) keeps a kernel cache of its own, by default in ~/.cache/pocl: put it
    under LAZYGRAD_CACHE and turn it off with DISABLE_CACHE, as lazygrad's own, unless PoCL's
    variables are set already. devices/opencl.py calls this before PoCL loads."""
    os.environ.setdefault("POCL_CACHE_DIR", os.path.join(knobs.cache_dir, "pocl"))
    if knobs.disable_cache:
        os.environ.setdefault("POCL_KERNEL_CACHE", "0")


def openmp_threads_setting() -> int | None:
    """The thread count OMP_NUM_THREADS gives the kernels' parallel loops (its first entry, the
    outermost level's), or None where it is unset or not a count (OpenMP then uses every core)."""
    setting = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(setting) if setting.isdigit() and int(setting) > 0 else None


def export_openmp_threads_default(threads: int) -> None:
    """OMP_NUM_THREADS for the kernels, unless the user set it: OpenMP reads it once, when the first
    kernel loads. lazygrad.distributed calls this so that ranks sharing a machine split its cores."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


class Context:
    """Overrides settings inside a `with` block and restores them afterwards; nestable.

        with Context(DEBUG=2, NOOPT=1):
            ...

    Names are the environment variables' names; values are checked as the environment's are, so
    `Context(BEAM="x")` raises at once, before anything changes. Python values work too:
    `Context(NOOPT=True, LAZYGRAD_CACHE=tmp_path)`.
    """

    def __init__(self, **overrides: Any):
        self._new_values: dict[str, Any] = {}
        for env, raw in overrides.items():
            value = parse_knob(env, raw)      # raises for an unknown name or a bad value
            self._new_values[_KNOBS_BY_ENV[env].attr] = value
        self._saved_values: list[dict[str, Any]] = []   # a stack, so one Context can be re-entered

    def __enter__(self) -> Context:
        self._saved_values.append({attr: getattr(knobs, attr) for attr in self._new_values})
        for attr, value in self._new_values.items():
            setattr(knobs, attr, value)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for attr, value in self._saved_values.pop().items():
            setattr(knobs, attr, value)


def describe() -> str:
    """A Markdown table of every setting: variable, type, default and meaning."""
    rows = [("variable", "type", "default", "meaning")]
    for knob in KNOBS:
        default = f"`{knob.default}`" if knob.default else "(empty)"
        rows.append((f"`{knob.env}`", knob.type_name, default, knob.meaning))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]

    def format_row(row: tuple[str, ...]) -> str:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)] + [row[3]]
        return "| " + " | ".join(cells) + " |"

    separator = "| " + " | ".join("-" * width for width in widths) + " | --- |"
    lines = [format_row(rows[0]), separator] + [format_row(row) for row in rows[1:]]
    return "\n".join(lines)
