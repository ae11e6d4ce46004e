"""Closed forms of the collective costs (Thakur et al. 2005; nccl-tests PERFORMANCE.md)."""

import math

import pytest

from simdl.collectives import bus_bytes_factor, collective_time


def test_ring_all_reduce_closed_form():
    # 8 ranks, 1 GB, 100 GB/s per rank, 5 us per step: 2*7*5us + 2*7/8 * 1e9/1e11
    t = collective_time("all_reduce", 1e9, 8, 100e9, 5e-6, "ring")
    assert t == pytest.approx(14 * 5e-6 + 2 * 7 / 8 * 0.01)


def test_all_gather_and_reduce_scatter_are_half_an_all_reduce_in_bandwidth():
    ar = collective_time("all_reduce", 1e9, 4, 50e9, 0.0, "ring")
    ag = collective_time("all_gather", 1e9, 4, 50e9, 0.0, "ring")
    rs = collective_time("reduce_scatter", 1e9, 4, 50e9, 0.0, "ring")
    assert ag == pytest.approx(ar / 2) and rs == pytest.approx(ar / 2)


def test_tree_wins_for_small_messages_ring_for_large():
    small_ring = collective_time("all_reduce", 1e3, 64, 25e9, 10e-6, "ring")
    small_tree = collective_time("all_reduce", 1e3, 64, 25e9, 10e-6, "tree")
    assert small_tree < small_ring
    big_ring = collective_time("all_reduce", 1e9, 64, 25e9, 10e-6, "ring")
    big_tree = collective_time("all_reduce", 1e9, 64, 25e9, 10e-6, "tree")
    assert big_ring < big_tree
    assert collective_time("all_reduce", 1e9, 64, 25e9, 10e-6, "auto") == min(big_ring, big_tree)
    assert small_tree == pytest.approx(2 * math.ceil(math.log2(64)) * 10e-6 + 2 * 1e3 / 25e9)


def test_single_rank_costs_nothing():
    assert collective_time("all_reduce", 1e9, 1, 1e9, 1e-5) == 0.0


def test_bus_bandwidth_factors_match_nccl_tests():
    assert bus_bytes_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_bytes_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert bus_bytes_factor("broadcast", 8) == 1.0


def test_unknown_collective_is_rejected():
    from simdl.errors import SimdlError

    with pytest.raises(SimdlError, match="all_reduce"):
        collective_time("allreduce", 1.0, 2, 1.0, 0.0, "ring")
