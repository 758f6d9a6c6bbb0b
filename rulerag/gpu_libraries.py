"""The GPU libraries' notices on a CPU run, left unsaid.

peft and sentence-transformers import bitsandbytes whenever it is installed, and
accelerate imports DeepSpeed whenever it is installed (the Trainer's `unwrap_model`), so a CPU
run printed two notices that are true of every CPU run and say nothing about this one:

* bitsandbytes, at import on a CPU with AVX512-BF16: "Failed to load CPU gemm_4bit_forward
  from kernels-community ..." (its optional `kernels` package is not installed: 4-bit NF4 on
  the CPU falls back to bitsandbytes' own kernel, which `generation.models` already warns is
  slow). bitsandbytes has no switch for it; the record goes through Python's logging, under
  the logger `bitsandbytes.backends.cpu.ops`, where a filter drops this one message and
  nothing else.
* DeepSpeed, at import without a CUDA device: "Setting accelerator to CPU. If you have GPU or
  other accelerator, we were unable to detect it." DeepSpeed's documented `DS_ACCELERATOR`
  (its accelerator set-up guide) names the accelerator instead of detecting it: `cpu` where
  torch sees no CUDA device, which is what the detection chooses there; a GPU run and a
  `DS_ACCELERATOR` set by the user are left alone.

`quiet_gpu_libraries()` does both; the library calls it before it imports transformers, peft
or sentence-transformers (idempotent, and cheap once torch is imported).
"""

from __future__ import annotations

import logging
import os

__all__ = ["BNB_LOGGER", "DS_ACCELERATOR_ENV", "quiet_gpu_libraries"]

#: the logger bitsandbytes' CPU backend reports its missing `kernels` package through
BNB_LOGGER = "bitsandbytes.backends.cpu.ops"
#: DeepSpeed's override of its accelerator detection
DS_ACCELERATOR_ENV = "DS_ACCELERATOR"


def _not_the_kernels_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Failed to load CPU gemm_4bit_forward")


def quiet_gpu_libraries() -> None:
    """Drop bitsandbytes' `kernels` notice; on a machine without CUDA, set DS_ACCELERATOR=cpu
    (unless set) so that DeepSpeed does not announce its fallback."""
    logger = logging.getLogger(BNB_LOGGER)
    if _not_the_kernels_notice not in logger.filters:
        logger.addFilter(_not_the_kernels_notice)
    if DS_ACCELERATOR_ENV not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ[DS_ACCELERATOR_ENV] = "cpu"
