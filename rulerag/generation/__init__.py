"""Generation: prompts, local and API generators, generator training (RGFT / SSFT).

* `prompts`  - the paper's prompt (Instruct / Retrieved documents / Rules / Query / Answer) and
               its rule-free and query-only variants; one function for training and inference.
* `models`   - model names to folders: the offline SmolLM2 GGUF converted once to a normal HF
               folder under `.models/`, any local path or hub id otherwise.
* `local`    - transformers causal LMs, batched greedy decoding.
* `api`      - an OpenAI-compatible chat API with the paper's 3-shot prompt.
* `training` - LoRA / QLoRA with the HF Trainer, loss on answer tokens only.
* `samples`  - benchmark records + retrieval runs -> generator inputs.
* `config`   - params profiles (cpu / paper) and the Table 2 grid.
* `r2ag`     - R²AG: retrieval features, the R²-Former and retrieval-aware prompting (issue 14,
               library only so far; no stage or grid row yet).

Importing this package does not import torch or transformers; the modules that need them
import them when called.
"""

from rulerag.generation.prompts import PROMPT_KINDS, Sample, render_prompt

__all__ = ["PROMPT_KINDS", "Sample", "render_prompt"]
