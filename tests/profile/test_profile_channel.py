"""The hook channel's files and readers (worker side and launcher side)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ecolaunch.errors import ConfigError
from ecolaunch.profile import channel


def test_writer_appends_little_endian_float64_stamps(tmp_path: Path) -> None:
    clock = iter([1.5, 2.0, 4.25])
    writer = channel.StepWriter(tmp_path, 3, clock=lambda: next(clock))
    assert not channel.steps_path(tmp_path, 3).exists()  # opened lazily
    for _ in range(3):
        writer.stamp()
    writer.close()
    raw = channel.steps_path(tmp_path, 3).read_bytes()
    assert raw == b"".join(channel.STAMP.pack(v) for v in (1.5, 2.0, 4.25))
    assert channel.read_steps(tmp_path) == {3: [1.5, 2.0, 4.25]}


def test_read_steps_several_ranks_and_stray_files(tmp_path: Path) -> None:
    for rank, values in ((0, [1.0, 2.0]), (1, [1.5])):
        channel.steps_path(tmp_path, rank).write_bytes(b"".join(channel.STAMP.pack(v) for v in values))
    (tmp_path / "steps-x.bin").write_bytes(b"12345678")
    (tmp_path / "notes.txt").write_text("ignored")
    assert channel.read_steps(tmp_path) == {0: [1.0, 2.0], 1: [1.5]}
    assert channel.read_steps(tmp_path / "absent") == {}


def test_read_steps_drops_only_the_torn_tail(tmp_path: Path) -> None:
    data = channel.STAMP.pack(7.0) + channel.STAMP.pack(8.0)[:5]
    channel.steps_path(tmp_path, 0).write_bytes(data)
    assert channel.read_steps(tmp_path) == {0: [7.0]}


def test_hints_are_written_atomically_and_read_from_the_lowest_rank(tmp_path: Path) -> None:
    channel.write_hints(tmp_path, 1, {"name": "b"})
    channel.write_hints(tmp_path, 0, {"name": "a", "memory_mib": 10})
    channel.write_hints(tmp_path, 0, {"name": "a2"})  # replaces
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hints-0.json", "hints-1.json"]  # no temp files left
    assert channel.read_hints(tmp_path) == {"name": "a2"}
    assert channel.read_hints(tmp_path / "absent") == {}


def test_read_hints_skips_corrupt_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    channel.hints_path(tmp_path, 0).write_text("{not json")
    channel.hints_path(tmp_path, 1).write_text("[1, 2]")
    channel.write_hints(tmp_path, 2, {"profile_safe": True})
    with caplog.at_level(logging.WARNING, logger="ecolaunch.profile.channel"):
        assert channel.read_hints(tmp_path) == {"profile_safe": True}
    assert len(caplog.records) == 2


def test_iteration_times() -> None:
    stamps = [0.0, 1.0, 3.0, 3.5, 4.0, 4.0, 5.0]
    assert channel.iteration_times(stamps, 0) == [1.0, 2.0, 0.5, 0.5, 1.0]  # the zero interval is dropped
    assert channel.iteration_times(stamps, 2) == [0.5, 0.5, 1.0]
    assert channel.iteration_times(stamps, 10) == []
    assert channel.iteration_times([], 0) == []


@pytest.mark.parametrize("warmup", [-1, 1.5, True, "2"])
def test_iteration_times_rejects_bad_warmup(warmup: object) -> None:
    with pytest.raises(ConfigError):
        channel.iteration_times([0.0, 1.0], warmup)  # type: ignore[arg-type]


def test_writer_raises_oserror_for_a_missing_directory(tmp_path: Path) -> None:
    writer = channel.StepWriter(tmp_path / "missing", 0)
    with pytest.raises(OSError):
        writer.stamp()
