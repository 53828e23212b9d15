"""``hta.analyzers.cupti_counter_analysis``: the FLOP weights of CUPTI's SASS instruction counters."""

from __future__ import annotations

CUDA_SASS_INSTRUCTION_COUNTER_FLOPS: dict[str, float] = {
    f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum": 2 if "fma" in op else 1
    for op in ["ffma", "fmul", "fadd", "hfma", "hmul", "hadd", "dfma", "dmul", "dadd"]
}
"""Counter name -> FLOPs per instruction (a fused multiply-add counts 2)."""
