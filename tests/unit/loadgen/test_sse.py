"""OpenAI completion stream lines, and what a whole stream says about its request (pure)."""

from __future__ import annotations

import pytest

from planner_loadgen.sse import Line, LineKind, StreamState, parse_line

TOKEN = '{"choices":[{"text":"a","index":0,"finish_reason":null}]}'
LAST = '{"choices":[{"text":"","index":0,"finish_reason":"length"}],"usage":{"completion_tokens":7}}'


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("", Line(LineKind.SKIP)),  # event separator
        (": keep-alive", Line(LineKind.SKIP)),  # comment
        ("event: completion", Line(LineKind.SKIP)),  # another field
        ("data: [DONE]", Line(LineKind.DONE)),
        ("data:[DONE]", Line(LineKind.DONE)),  # the space after the colon is optional
        (f"data: {TOKEN}", Line(LineKind.CHUNK, has_text=True)),
        (f"data: {LAST}", Line(LineKind.CHUNK, finished=True, usage_tokens=7)),
        ('data: {"choices":[],"usage":{"completion_tokens":3}}', Line(LineKind.CHUNK, usage_tokens=3)),
        ('data: {"choices":[{"text":"","finish_reason":null}]}', Line(LineKind.CHUNK)),  # no text: no arrival
    ],
)
def test_parse_good_lines(line: str, expected: Line) -> None:
    assert parse_line(line) == expected


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("data: {not json", LineKind.BAD),
        ("data: [1, 2]", LineKind.BAD),  # JSON, not an object
        ('data: {"choices": "x"}', LineKind.BAD),
        ('data: {"choices": [1]}', LineKind.BAD),
        ('data: {"choices": [], "usage": {"completion_tokens": "7"}}', LineKind.BAD),
        ('data: {"choices": [], "usage": {"completion_tokens": -1}}', LineKind.BAD),
        ('data: {"choices": [], "usage": [7]}', LineKind.BAD),
        ('data: {"error": {"message": "slot unavailable"}}', LineKind.ERROR),
    ],
)
def test_parse_bad_lines(line: str, kind: LineKind) -> None:
    got = parse_line(line)
    assert got.kind is kind and got.detail


def feed(lines: list[tuple[str, float]]) -> StreamState:
    st = StreamState()
    for line, t in lines:
        st.feed(parse_line(line), t)
    return st


@pytest.mark.parametrize(
    ("lines", "error", "first", "last", "tokens"),
    [
        # three arrivals at 1.0, 1.5, 2.0, then the usage says 7 tokens: tokens = max(3, 7)
        (
            [(f"data: {TOKEN}", t) for t in (1.0, 1.5, 2.0)]
            + [(f"data: {LAST}", 2.1), ("data: [DONE]", 2.2)],
            "",
            1.0,
            2.0,
            7,
        ),
        # finish_reason without [DONE] is a complete answer
        ([(f"data: {TOKEN}", 1.0), (f"data: {LAST}", 1.1)], "", 1.0, 1.0, 7),
        # closed after a token, with neither [DONE] nor finish_reason
        ([(f"data: {TOKEN}", 1.0)], "truncated", 1.0, 1.0, 1),
        ([("data: [DONE]", 1.0)], "no_tokens", None, None, 0),
        # all text held back (not valid UTF-8 yet), the usage counts 7 tokens: they came with the last chunk
        ([(f"data: {LAST}", 1.3), ("data: [DONE]", 1.4)], "", 1.3, 1.3, 7),
        ([('data: {"choices":[{"text":"","finish_reason":"stop"}]}', 1.3)], "no_tokens", None, None, 0),
        ([(f"data: {TOKEN}", 1.0), ("data: {oops", 1.2)], "bad_stream", 1.0, 1.0, 1),
        ([(f"data: {TOKEN}", 1.0), ('data: {"error": "x"}', 1.2)], "engine_error", 1.0, 1.0, 1),
    ],
)
def test_stream_end(
    lines: list[tuple[str, float]], error: str, first: float | None, last: float | None, tokens: int
) -> None:
    st = feed(lines)
    assert (st.end(), st.first_token_s, st.last_token_s, st.tokens) == (error, first, last, tokens)
