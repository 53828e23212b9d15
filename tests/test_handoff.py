"""Large results handed from a worker to the parent in memory files over a socket
(perfreport.running.handoff): they arrive whole, in any order, and nothing is left open."""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pandas as pd
import pytest

from perfreport.running import handoff
from perfreport.running.handoff import HandedOff, hand_off, handoff_channel, received

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd_create, /proc/self/fd")


def open_fds() -> set[tuple[str, str]]:
    """This process's open descriptors, each with what it is open on: a test checks that none
    it opened is left, whatever other threads of the test process (xdist's, a collector) close
    meanwhile (a count went 22 -> 21 in the suite now and then)."""
    gc.collect()
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:  # (the listing's own descriptor, gone by now)
            pass
    return out


def test_results_from_forked_workers_arrive_whole_in_any_order() -> None:
    before = open_fds()
    results = {job: {"job": job, "column": np.arange(job * 100_000, dtype=np.float64), "text": "µ" * job}
               for job in range(3)}
    with handoff_channel(forked=True) as channel:
        assert channel is not None
        sent = []
        for job in (2, 0, 1):  # each in a process of its own, as a pool's worker
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                code = 0 if hand_off(results[job], channel, job) == HandedOff(job) else 1
                os._exit(code)
            assert os.waitpid(pid, 0)[1] == 0
            sent.append(job)
        for job in (1, 2, 0):  # read in another order than sent: the others wait for their turn
            got = received(HandedOff(job), channel)
            assert got["job"] == job and got["text"] == "µ" * job
            np.testing.assert_array_equal(got["column"], results[job]["column"])
        assert channel.waiting == {}
    assert open_fds() - before == set()  # the memory files and the sockets closed


def test_a_descriptor_never_read_is_closed_with_the_channel() -> None:
    before = open_fds()
    with handoff_channel(forked=True) as channel:
        assert hand_off([1, 2, 3], channel, 7) == HandedOff(7)  # (sent from this process: the same socket)
        assert hand_off([4], channel, 8) == HandedOff(8)
        assert received(HandedOff(8), channel) == [4]
        assert list(channel.waiting) == [7]
    assert open_fds() - before == set()


def test_without_a_channel_the_result_takes_the_pipe(monkeypatch) -> None:
    with handoff_channel(forked=False) as channel:
        assert channel is None
        assert hand_off({"a": 1}, channel, 0) == {"a": 1}
        assert received({"a": 1}, channel) == {"a": 1}
    monkeypatch.delattr(handoff.os, "memfd_create")
    with handoff_channel(forked=True) as channel:
        assert channel is None


def test_no_memory_for_the_file_falls_back_to_the_pipe(monkeypatch) -> None:
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with handoff_channel(forked=True) as channel:
        monkeypatch.setattr(handoff.socket, "send_fds", full)
        assert hand_off({"big": "x" * 100}, channel, 0) == {"big": "x" * 100}
        assert channel.waiting == {}


def mappings() -> int:
    """The mappings of result files in this process (:mod:`perfreport.running.handoff` names its
    memory files so): counting every mapping made the tests depend on what else the process
    mapped meanwhile (another thread's allocations, an arena grown or merged)."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "memfd:perfreport-result" in line)


def test_arrays_arrive_as_writable_views_of_their_own_files_each_unmapped_when_gone() -> None:
    """The large arrays of a result come back without a copy, each a view of a memory file of
    its own: page-aligned, writable (a private mapping: the write stays here), equal to what was
    sent in every layout numpy pickles (C and Fortran order, a strided view, read-only, in a
    pandas frame). Each array's mapping goes with that array, not with the whole result, and
    none holds a descriptor; a small array travels in the pickle."""
    import mmap

    base = np.arange(60_000, dtype=np.int64).reshape(200, 300)  # 480 KB: a file of its own
    frozen = np.linspace(0.0, 1.0, 40_001)
    frozen.flags.writeable = False
    sent = {"c": base, "f": np.asfortranarray(base), "strided": base[:, ::7], "frozen": frozen,
            "frame": pd.DataFrame({"a": np.arange(50_000), "b": np.arange(50_000) / 3.0, "t": ["x"] * 50_000}),
            "odd": np.arange(3, dtype=np.int8), "empty": np.empty(0)}
    fds, maps = open_fds(), mappings()
    with handoff_channel(forked=True) as channel:
        assert hand_off(sent, channel, 0) == HandedOff(0)
        got = received(HandedOff(0), channel)
    assert open_fds() - fds == set()
    for key in ("c", "f", "strided", "frozen", "odd", "empty"):
        np.testing.assert_array_equal(got[key], sent[key])
        assert got[key].dtype == sent[key].dtype
    pd.testing.assert_frame_equal(got["frame"], sent["frame"])
    assert got["f"].flags.f_contiguous and got["c"].flags.c_contiguous
    for key in ("c", "f", "frozen"):
        assert got[key].ctypes.data % mmap.PAGESIZE == 0
    got["c"][0, 0] = -1  # writable, and the write is this process's own
    assert got["c"][0, 0] == -1 and base[0, 0] == 0
    mapped = mappings() - maps
    assert mapped >= 3  # c, f, frozen (and the frame's columns): not the small ones
    del got["c"]
    gc.collect()
    assert mappings() == maps + mapped - 1  # that array's file alone is gone
    np.testing.assert_array_equal(got["f"], sent["f"])
    del got
    gc.collect()
    assert mappings() == maps  # every file unmapped with its last array


def test_arrays_past_the_descriptors_a_message_carries_travel_in_the_pickle() -> None:
    """More large arrays than one message has descriptors for: the first MAX_FILES - 1 get files,
    the rest travel in the pickle, and all arrive equal."""
    sent = [np.full(handoff.OUT_OF_BAND_BYTES // 8, i, dtype=np.float64) for i in range(handoff.MAX_FILES + 20)]
    maps = mappings()
    with handoff_channel(forked=True) as channel:
        assert hand_off(sent, channel, 1) == HandedOff(1)
        got = received(HandedOff(1), channel)
    assert mappings() - maps == handoff.MAX_FILES - 1
    assert all(np.array_equal(a, b) for a, b in zip(got, sent)) and len(got) == len(sent)
    del got
    gc.collect()
    assert mappings() == maps


def test_without_the_c_library_the_file_is_copied(monkeypatch) -> None:
    monkeypatch.setattr(handoff, "_libc", lambda: None)
    sent = {"column": np.arange(100_000, dtype=np.float64), "text": "µ"}
    with handoff_channel(forked=True) as channel:
        assert hand_off(sent, channel, 3) == HandedOff(3)
        got = received(HandedOff(3), channel)
    np.testing.assert_array_equal(got["column"], sent["column"])
    assert got["text"] == "µ"
