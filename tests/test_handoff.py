"""Large results handed from a worker to the parent in memory files over a socket
(perfreport.running.handoff): they arrive whole, in any order, and nothing is left open."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from perfreport.running import handoff
from perfreport.running.handoff import HandedOff, hand_off, handoff_channel, received

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd_create, /proc/self/fd")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


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
    assert open_fds() == before  # the memory files and the sockets closed


def test_a_descriptor_never_read_is_closed_with_the_channel() -> None:
    before = open_fds()
    with handoff_channel(forked=True) as channel:
        assert hand_off([1, 2, 3], channel, 7) == HandedOff(7)  # (sent from this process: the same socket)
        assert hand_off([4], channel, 8) == HandedOff(8)
        assert received(HandedOff(8), channel) == [4]
        assert list(channel.waiting) == [7]
    assert open_fds() == before


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
