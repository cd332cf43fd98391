"""The CPU speed tricks, one home: what each does, where it acts, and what it measured.

Each is kept because it was worth 5 % or more on at least one CPU kind in the precision that
kind trains in; figures are speed-ups (time without / time with) on 2 threads.
`python scripts/benchmark.py --sections cpu_speed` re-measures the four that can be switched
within one process, on any machine (alternated rounds; repeated runs vary by about 0.05). Its
results here, and a run of it on the same CPU held to AVX2 kernels (ATEN_CPU_CAPABILITY=avx2,
ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2: another CPU kind's code paths, not its
caches or clocks), are docs/cpu_speed/*.json and the table in docs/benchmarks.md ("The hot
paths"). The two process-wide settings are measured in fresh processes with the train.py
command given there.

process.py (configure_cpu: every entry point, before torch starts its threads)
  oneDNN kernel cache 16,384 instead of 1,024: the LSTM's shrinking batch meets more shapes
      than 1,024 kernels in a bf16 step. make train's model, 60 steps: AMX Xeon 1.33x / 1.36x,
      Zen 4 EPYC 1.17x / 1.15x (two rounds each).
  glibc malloc kept from handing memory back (mallopt): a step's multi-MB tensors are not
      page-faulted in again. make train's model, 60 steps: Zen 4 EPYC 1.15x / 1.29x; no second
      CPU kind measured yet.
  denormal floats flushed to zero: a sharpened softmax makes most probabilities denormal.
      Transformer + aoa at epoch 4: AMX Xeon 4.08x. Zen 4 EPYC computes on denormal operands
      at full speed (0.98x on the benchmark's products; 1.00x with AVX2 kernels): free there.
step_linear.py (StepLinear, in the LSTM's teacher-forced training)
  each recurrent weight's gradient one matmul over all steps, not T small ones and T - 1 sums.
      Training step: AVX2 EPYC fp32 1.08x (its training precision); Zen 4 EPYC fp32 1.05x,
      bf16 1.01x; Zen 4 with AVX2 kernels fp32 1.01x.
packed.py (decoding_packed: greedy, sampling, beam search)
  each linear's weight packed once per search for oneDNN. Greedy, 64 images x 20 tokens: Zen 4
      EPYC fp32 1.29x, bf16 1.05x; with AVX2 kernels fp32 1.10x.
half_tanh.py (additive attention's score)
  tanh(x) = 2 sigmoid(2x) - 1: torch's fp32 tanh is ~5x its sigmoid. Additive training step:
      Zen 4 EPYC fp32 1.09x, bf16 1.13x; with AVX2 kernels fp32 1.09x.
"""

from .half_tanh import half_tanh_, half_tanh_reference
from .packed import decoding_packed, packed_linears
from .process import configure_cpu, flush_denormals, set_malloc
from .step_linear import StepLinear

__all__ = ["StepLinear", "configure_cpu", "decoding_packed", "flush_denormals", "half_tanh_",
           "half_tanh_reference", "packed_linears", "set_malloc"]
