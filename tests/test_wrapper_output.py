"""The wrapper's exit status taken off the end of a check's output
(sandbox/container/exec_watch.py WrapperOutput; sandbox/image/harness/check.sh writes
it), whatever the frames' cuts and however standard output and error interleave."""

from __future__ import annotations

from sandbox.container.exec_watch import WrapperOutput


class Collected:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


def read(*frames: tuple[int, bytes]) -> tuple[int | None, bytes]:
    collected = Collected()
    output = WrapperOutput(collected)  # type: ignore[arg-type]
    for stream, data in frames:
        output.write(stream, data)
    return output.end(), collected.data


def test_it_takes_the_status_off_the_end_of_standard_error() -> None:
    assert read((1, b"out\n"), (2, b"err\n\x1eharness-exit:3\x1e")) == (3, b"out\nerr\n")
    assert read((2, b"\x1eharness-exit:0\x1e")) == (0, b"")


def test_it_finds_the_status_cut_across_frames_and_behind_later_standard_output() -> None:
    # The engine copies the two streams apart: the check's last standard output may
    # arrive after the wrapper's trailer, or between its pieces.
    frames = ((2, b"x" * 40), (2, b"\x1eharness-"), (1, b"late"), (2, b"exit:137\x1e"))
    assert read(*frames) == (137, b"x" * 40 + b"late")


def test_it_leaves_the_check_s_own_bytes_alone() -> None:
    assert read((2, b"a\x1eb")) == (None, b"a\x1eb")
    assert read((2, b"x\x1e"), (2, b"\x1eharness-exit:2\x1e")) == (2, b"x\x1e")
    message = b"sh: 1: cannot create orders/built.txt: Read-only file system\n"
    assert read((2, message), (2, b"\x1eharness-exit:2\x1e")) == (2, message)


def test_it_takes_no_status_from_a_stream_that_ends_without_one() -> None:
    # The wrapper was killed: the engine is asked instead.
    assert read((1, b"partial")) == (None, b"partial")
    assert read((2, b"\x1eharness-exit:0")) == (None, b"\x1eharness-exit:0")


def test_it_takes_an_imitation_followed_by_more_standard_error_for_output() -> None:
    frames = ((2, b"\x1eharness-exit:0\x1e"), (1, b"after\n"), (2, b"\x1eharness-exit:5\x1e"))
    assert read(*frames) == (5, b"after\n\x1eharness-exit:0\x1e")
