"""Tests for lazygrad.stats: the shared work counters."""

import importlib

import pytest

from lazygrad.stats import Stats, stats

FIELDS = ("kernels", "flops", "bytes", "compiles", "cache_hits")


@pytest.fixture(autouse=True)
def fresh_stats():
    stats.reset()
    yield
    stats.reset()


def test_counters_start_at_zero_after_reset():
    for name in FIELDS:
        value = getattr(stats, name)
        assert type(value) is int and value == 0, name


def test_counters_add_up():
    stats.kernels += 1
    stats.kernels += 2
    stats.flops += 1_000_000
    stats.bytes += 4096
    stats.compiles += 1
    stats.cache_hits += 5
    assert (stats.kernels, stats.flops, stats.bytes, stats.compiles, stats.cache_hits) == \
        (3, 1_000_000, 4096, 1, 5)


def test_reset_zeroes_every_counter():
    for number, name in enumerate(FIELDS, start=1):
        setattr(stats, name, number * 10)
    stats.reset()
    assert all(getattr(stats, name) == 0 for name in FIELDS)


def test_repr_shows_every_field_and_value():
    stats.kernels = 7
    stats.cache_hits = 3
    text = repr(stats)
    for name in FIELDS:
        assert f"{name}=" in text
    assert "kernels=7" in text
    assert "cache_hits=3" in text


def test_misspelled_counter_is_an_error():
    with pytest.raises(AttributeError):
        stats.kernel = 1


def test_stats_is_one_shared_object():
    module = importlib.import_module("lazygrad.stats")
    assert module.stats is stats
    assert isinstance(stats, Stats)
