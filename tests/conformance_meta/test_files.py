"""Reports are written whole (a temporary file and a rename), and never replace what is not a
plain file: ``--json /dev/stdout``, a symbolic link to a log, a device. Before, the rename turned
``/dev/full`` into a regular file and a link into a copy."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conformance.files import atomic_write


def test_a_plain_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    atomic_write(str(target), "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left


def test_a_symbolic_link_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomic_write(str(link), "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_a_fifo_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        atomic_write(str(fifo), "through the pipe\n")
        assert os.read(reader, 100) == b"through the pipe\n"
    finally:
        os.close(reader)
    assert fifo.is_fifo()


def test_a_full_device_is_an_error_not_a_file_in_its_place(tmp_path: Path) -> None:
    # a device node of its own (the machine's /dev/full is not risked on a regression)
    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except (PermissionError, AttributeError, OSError):
        pytest.skip("cannot make a device node here (not root)")
    with pytest.raises(OSError):
        atomic_write(str(full), "x")
    assert full.is_char_device()


def test_text_utf8_cannot_encode_is_written_escaped(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    atomic_write(str(target), "bad \udcff here")  # a lone surrogate, from an implementation's message
    assert target.read_text() == "bad \\udcff here"
