"""The decider report's pure parts."""

from __future__ import annotations


def test_attainment_note_lists_the_predicted_attainment_per_candidate() -> None:
    from planner_decider.report import attainment_note

    diag = {
        "prefill.predictive_floor": 5.0,
        "prefill.predictive.predicted_attainment_at_4": 0.979,
        "prefill.predictive.predicted_attainment_at_5": 0.994,
        "prefill.predictive.predicted_attainment_at_6": 0.998,
        "decode.throughput_floor": 2.0,
    }
    note = attainment_note(diag, {"prefill": 5, "decode": 2})
    assert note == "predicted attainment: prefill 5: 99.4 % (4: 97.9 %, 6: 99.8 %)"
    assert attainment_note({"decode.throughput_floor": 2.0}, {"decode": 2}) == ""
    cold = {**diag, "prefill.predictive.target_attainment": 0.985}
    assert attainment_note(cold, {"prefill": 5}) == (
        "predicted attainment: prefill 5: 99.4 % (target 98.5 %; 4: 97.9 %, 6: 99.8 %)"
    )
