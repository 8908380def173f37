"""``decide``: one tick of the planner, shared by the decider service, the simulator and the tests.

The stages of :mod:`planner_core.policy.stages`, in this order, each over every component:

1. ``observe_queues``: remember recent prefill queues and decode admission waits;
2. ``recommend_threshold``: threshold mode's recommendations, when due;
3. ``recommend_throughput``: throughput mode's recommendations, or combined mode's throughput floor,
   when due;
4. ``startup_lead``: the traffic samples until a worker ordered now serves;
5. ``predictive_floor_stage``: combined mode's predictive floor over that horizon;
6. ``recommend_load``: load mode's recommendations, and combined mode's over its floor, when due or
   on a fresh floor;
7. ``collect``: one recommended count and reason per component;
8. ``zero_traffic``: down to ``min_replicas`` at zero traffic, to zero after
   ``scale_to_zero_after_s``;
9. ``wake_from_zero``: a component at zero with demand comes back at once;
10. ``bound``: ``min_replicas`` / ``max_replicas``;
11. ``stabilise``: stabilisation windows, then rate limits;
12. ``budget``: the GPU budget on the final targets;
13. ``gate_transition``: the targets issuable now, the GPUs held while draining and pending counted
    in the budget;
14. ``finish``: the decision and the state for the next tick.

Under ``reference_compat`` the stages themselves behave as the reference planner: stages 1, 5, 8 and
9 change nothing, stage 11 only prunes its histories, stage 13 issues the final targets at once, and
stages 3 and 6 leave out their additions (see each stage).
"""

from __future__ import annotations

from planner_core.policy import stages
from planner_core.policy.config import PolicyConfig
from planner_core.policy.types import DecisionInputs, DecisionResult, PolicyState


def decide(
    inputs: DecisionInputs, state: PolicyState, cfg: PolicyConfig, now_s: float
) -> tuple[DecisionResult, PolicyState]:
    """One decision for every component in ``inputs.replicas``, and the state for the next one."""
    p = stages.start(inputs, state)
    p = stages.observe_queues(p, inputs, cfg, now_s)
    # the policy recommendations, each due on its own interval
    p = stages.recommend_threshold(p, inputs, cfg, now_s)
    p = stages.recommend_throughput(p, inputs, cfg, now_s)
    p = stages.startup_lead(p, inputs, cfg, now_s)
    p = stages.predictive_floor_stage(p, inputs, cfg, now_s)
    p = stages.recommend_load(p, inputs, cfg, now_s)
    p = stages.collect(p, inputs, cfg, now_s)
    # zero traffic, scale to zero, wake
    p = stages.zero_traffic(p, inputs, cfg, now_s)
    p = stages.wake_from_zero(p, inputs, cfg, now_s)
    # bounds, stabilisation, rate limits
    p = stages.bound(p, inputs, cfg, now_s)
    p = stages.stabilise(p, inputs, cfg, now_s)
    # the GPU budget on the final targets, then on the transition
    p = stages.budget(p, inputs, cfg, now_s)
    p = stages.gate_transition(p, inputs, cfg, now_s)
    return stages.finish(p, cfg, now_s)
