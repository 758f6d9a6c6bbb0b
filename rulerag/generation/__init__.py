"""Generation: prompts, local and API generators, generator training (RGFT / SSFT).

* `prompts`  - the paper's prompt (Instruct / Retrieved documents / Rules / Query / Answer) and
               its rule-free and query-only variants; one function for training and inference.
* `models`   - model names to folders: the offline SmolLM2 GGUF converted once to a normal HF
               folder under `.models/`, any local path or hub id otherwise.
* `local`    - transformers causal LMs, batched greedy decoding.
* `api`      - an OpenAI-compatible chat API with the paper's 3-shot prompt.
* `training` - LoRA / QLoRA with the HF Trainer, loss on answer tokens only.
* `adapters` - the adapter training sequence (`fit_adapter`) and stage `train_generator`'s work.
* `samples`  - benchmark records + retrieval runs -> generator inputs.
* `settings` - the `generation` section: params profiles (cpu / paper), the Table 2 grid,
               training's knobs.
* `grid_names` - a grid row and the retrieval run it reads, by name.
* `grid`     - one row of the grid: prompts in, scored answers out (`run_row`).
* `rows`     - which generator answers a row (stages `generate`, `generate_r2ag`, `robustness`).
* `r2ag`     - R²AG: retrieval features, the R²-Former and retrieval-aware prompting; `r2ag.fit`
               is stage `train_r2ag`'s work and the grid's side of a trained variant.

Importing this package does not import torch or transformers; the modules that need them
import them when called.
"""

from rulerag.generation.prompts import PROMPT_KINDS, Sample, render_prompt

__all__ = ["PROMPT_KINDS", "Sample", "render_prompt"]
