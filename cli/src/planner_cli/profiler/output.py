"""What a live sweep leaves behind: profiles (NPZ and JSON), plots, and the recommendation summary.

Layout of ``--out``::

    prefill_raw_data.{npz,json}   the chosen prefill TP's profile   (the decider's --profile-dir)
    decode_raw_data.{npz,json}    the chosen decode TP's profile
    tp{N}/...                     every swept TP's profiles
    prefill_ttft.png, decode_itl.png, throughput_per_gpu.png
    profile_summary.json
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from planner_cli.profiler.runner import TpResult
from planner_core.profile import DecodeProfile, PrefillProfile, save_decode, save_prefill
from planner_core.profiling import DecodeChoice, PlannerSettings, PrefillChoice


def write_profiles(out: Path, results: list[TpResult], prefill_tp: int, decode_tp: int) -> list[Path]:
    written: list[Path] = []
    by_tp = {r.tp: r for r in results}
    for r in results:
        folder = out / f"tp{r.tp}"
        for suffix in (".npz", ".json"):
            save_prefill(r.prefill, folder / f"prefill_raw_data{suffix}")
            save_decode(r.decode, folder / f"decode_raw_data{suffix}")
            written += [folder / f"prefill_raw_data{suffix}", folder / f"decode_raw_data{suffix}"]
    for suffix in (".npz", ".json"):
        save_prefill(by_tp[prefill_tp].prefill, out / f"prefill_raw_data{suffix}")
        save_decode(by_tp[decode_tp].decode, out / f"decode_raw_data{suffix}")
        written += [out / f"prefill_raw_data{suffix}", out / f"decode_raw_data{suffix}"]
    return written


def summary(
    results: list[TpResult],
    prefill: PrefillChoice,
    decode: DecodeChoice,
    settings: PlannerSettings,
    sla: dict[str, float],
    source: str,
    out: Path,
) -> dict[str, Any]:
    return {
        "source": source,
        "sla": sla,
        "out": str(out),
        "tp": {
            str(r.tp): {
                "max_kv_tokens": r.limits.max_kv_tokens,
                "context_length_tokens": r.limits.context_length_tokens,
                "prefill_points": int(r.prefill.isl_tokens.size),
                "decode_points": int(r.decode.itl_ms.size),
                "failed_requests": r.failed_requests,
                "skipped_points": r.skipped_points,
            }
            for r in results
        },
        "prefill": {k: _round(v) for k, v in asdict(prefill).items()},
        "decode": {k: _round(v) for k, v in asdict(decode).items()},
        "planner": {k: _round(v) for k, v in asdict(settings).items()},
    }


def _round(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


def write_summary(out: Path, data: dict[str, Any]) -> Path:
    path = out / "profile_summary.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def recommendation_lines(data: dict[str, Any]) -> list[str]:
    p, d, s, sla = data["prefill"], data["decode"], data["planner"], data["sla"]
    miss_p = "" if p["meets_sla"] else f"  (NO TP meets TTFT {sla['ttft_ms']:g} ms: fastest shown)"
    miss_d = "" if d["meets_sla"] else f"  (NO TP meets ITL {sla['itl_ms']:g} ms: fastest shown)"
    return [
        f"Suggested prefill TP:{p['tp']} (TTFT {p['ttft_ms']:.2f} ms at ISL {sla['isl']:g}, "
        f"throughput {p['thpt_per_gpu']:.1f} tokens/s/GPU){miss_p}",
        f"Suggested decode TP:{d['tp']} (ITL {d['itl_ms']:.2f} ms at context {d['context_tokens']:.0f}, "
        f"concurrency {d['concurrency']:.0f}, throughput {d['thpt_per_gpu']:.1f} tokens/s/GPU){miss_d}",
        f"Per-engine capacity at the SLA: prefill {s['prefill_req_per_s_per_engine']:.2f} req/s "
        f"({s['prefill_tokens_per_s_per_engine']:.0f} tokens/s), decode {s['decode_req_per_s_per_engine']:.2f} "
        f"req/s ({s['decode_tokens_per_s_per_engine']:.0f} tokens/s, {s['decode_concurrency_per_engine']:.0f} "
        f"requests in flight)",
        f"Planner settings: --gpus-per-prefill {s['gpus_per_prefill']} --gpus-per-decode {s['gpus_per_decode']} "
        f"--prefill-queue-up {s['prefill_queue_up']:g} --prefill-queue-down {s['prefill_queue_down']:g} "
        f"--decode-kv-up {s['decode_kv_up']:g} --decode-kv-down {s['decode_kv_down']:g} "
        f"--ttft-target-ms {sla['ttft_ms']:g} --itl-target-ms {sla['itl_ms']:g} --profile-dir {data['out']}",
    ]


class ProfileAtTp(Protocol):
    """What the plots need: a TpResult of a live sweep, or an --estimate."""

    @property
    def tp(self) -> int: ...
    @property
    def prefill(self) -> PrefillProfile: ...
    @property
    def decode(self) -> DecodeProfile: ...


def plot_all(out: Path, results: Sequence[ProfileAtTp], sla: dict[str, float]) -> list[Path]:
    """prefill_ttft.png, decode_itl.png, throughput_per_gpu.png; ``sla`` has ttft_ms, itl_ms, isl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [out / "prefill_ttft.png", out / "decode_itl.png", out / "throughput_per_gpu.png"]

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for r in results:
        ax.plot(r.prefill.isl_tokens, r.prefill.ttft_ms, "o-", label=f"TP{r.tp}")
    ax.axhline(sla["ttft_ms"], linestyle="--", color="red", label=f"TTFT SLA {sla['ttft_ms']:g} ms")
    ax.axvline(sla["isl"], linestyle=":", color="grey", label=f"target ISL {sla['isl']:g}")
    ax.set(xlabel="ISL (tokens)", ylabel="TTFT (ms)", title="Prefill: TTFT vs ISL")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths[0], dpi=90)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.2), squeeze=False)
    for ax, r in zip(axes[0], results, strict=True):
        for ctx in np.unique(r.decode.context_length_tokens):
            m = r.decode.context_length_tokens == ctx
            ax.plot(r.decode.kv_usage[m], r.decode.itl_ms[m], "o-", label=f"context {ctx:.0f}")
        ax.axhline(sla["itl_ms"], linestyle="--", color="red", label=f"ITL SLA {sla['itl_ms']:g} ms")
        ax.set(xlabel="active KV usage", ylabel="ITL (ms)", title=f"Decode TP{r.tp}: ITL vs KV usage")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(paths[1], dpi=90)
    plt.close(fig)

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in results:
        a.plot(r.prefill.isl_tokens, r.prefill.thpt_per_gpu, "o-", label=f"TP{r.tp}")
        order = np.argsort(r.decode.itl_ms)
        b.scatter(r.decode.itl_ms[order], r.decode.thpt_per_gpu[order], label=f"TP{r.tp}", s=14)
    a.set(xlabel="ISL (tokens)", ylabel="prefill tokens/s/GPU", title="Prefill throughput per GPU")
    b.axvline(sla["itl_ms"], linestyle="--", color="red", label="ITL SLA")
    b.set(xlabel="ITL (ms)", ylabel="decode tokens/s/GPU", title="Decode throughput per GPU vs ITL")
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths[2], dpi=90)
    plt.close(fig)
    return paths
