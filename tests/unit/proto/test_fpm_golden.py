"""Golden bytes: the FPM payload is a msgpack map in the reference field order, framed in 3 parts."""

from __future__ import annotations

import msgspec
import pytest

from planner_proto import (
    ForwardPassMetrics,
    FrameError,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
    encode_fpm,
    pack_frames,
    unpack_frames,
)

FPM = ForwardPassMetrics(
    worker_id="w0",
    dp_rank=0,
    counter_id=3,
    wall_time=0.025,
    scheduled_requests=ScheduledRequestMetrics(num_prefill_requests=1, sum_prefill_tokens=512),
    queued_requests=QueuedRequestMetrics(),
)

# Hand-checked: 0x87 = fixmap of 7 entries; keys are fixstr (0xa0 | len); 0xcb = float64;
# 0xcd 0x0200 = uint16 512; nested maps 0x87 (7 scheduled fields) and 0x86 (6 queued fields).
GOLDEN = bytes.fromhex(
    "87"
    "a776657273696f6e"
    "01"  # "version": 1
    "a9776f726b65725f6964"
    "a27730"  # "worker_id": "w0"
    "a764705f72616e6b"
    "00"  # "dp_rank": 0
    "aa636f756e7465725f6964"
    "03"  # "counter_id": 3
    "a977616c6c5f74696d65"
    "cb3f9999999999999a"  # "wall_time": 0.025
    "b27363686564756c65645f7265717565737473"
    "87"  # "scheduled_requests": {7}
    "b46e756d5f70726566696c6c5f7265717565737473"
    "01"
    "b273756d5f70726566696c6c5f746f6b656e73"
    "cd0200"
    "b27661725f70726566696c6c5f6c656e677468"
    "cb0000000000000000"
    "b573756d5f70726566696c6c5f6b765f746f6b656e73"
    "00"
    "b36e756d5f6465636f64655f7265717565737473"
    "00"
    "b473756d5f6465636f64655f6b765f746f6b656e73"
    "00"
    "b47661725f6465636f64655f6b765f746f6b656e73"
    "cb0000000000000000"
    "af7175657565645f7265717565737473"
    "86"  # "queued_requests": {6}
    "b46e756d5f70726566696c6c5f7265717565737473"
    "00"
    "b273756d5f70726566696c6c5f746f6b656e73"
    "00"
    "b27661725f70726566696c6c5f6c656e677468"
    "cb0000000000000000"
    "b36e756d5f6465636f64655f7265717565737473"
    "00"
    "b473756d5f6465636f64655f6b765f746f6b656e73"
    "00"
    "b47661725f6465636f64655f6b765f746f6b656e73"
    "cb0000000000000000"
)


def test_fpm_golden_bytes() -> None:
    assert encode_fpm(FPM) == GOLDEN


def test_fpm_is_a_string_keyed_map_in_reference_order() -> None:
    decoded = msgspec.msgpack.decode(encode_fpm(FPM))
    assert list(decoded) == [
        "version",
        "worker_id",
        "dp_rank",
        "counter_id",
        "wall_time",
        "scheduled_requests",
        "queued_requests",
    ]


def test_framing_golden() -> None:
    # sequence 258 = 0x0102 as u64 big-endian
    frames = pack_frames(258, GOLDEN)
    assert frames == [b"", b"\x00\x00\x00\x00\x00\x00\x01\x02", GOLDEN]
    assert unpack_frames(frames) == (258, GOLDEN)


def test_framing_max_sequence() -> None:
    assert unpack_frames(pack_frames(2**64 - 1, b"x"))[0] == 2**64 - 1


@pytest.mark.parametrize(
    "frames",
    [
        [b"", b"\x00" * 8],
        [b"", b"\x00" * 7, b"p"],
        [b"", b"\x00" * 9, b"p"],
        [b"", b"\x00" * 8, b"p", b"q"],
        [],
    ],
    ids=["two-frames", "short-seq", "long-seq", "four-frames", "none"],
)
def test_bad_framing_raises_frame_error(frames: list[bytes]) -> None:
    with pytest.raises(FrameError) as info:
        unpack_frames(frames)
    assert info.value.reason == "framing"
