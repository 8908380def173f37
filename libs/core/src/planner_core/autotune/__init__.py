"""Search vLLM memory settings (utilisation, graphs, context, KV dtype, seqs, TP) for a workload."""

from planner_core.autotune.search import (
    AutotuneResult,
    Candidate,
    ObjectiveWeights,
    Reason,
    SearchSpace,
    evaluate,
    graph_coverage,
    pareto_front,
    search,
    vllm_flags,
)
from planner_core.autotune.workload import WorkloadProfile, from_lengths, synthetic

__all__ = [
    "AutotuneResult",
    "Candidate",
    "ObjectiveWeights",
    "Reason",
    "SearchSpace",
    "WorkloadProfile",
    "evaluate",
    "from_lengths",
    "graph_coverage",
    "pareto_front",
    "search",
    "synthetic",
    "vllm_flags",
]
