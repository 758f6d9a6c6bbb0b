"""An R²AG generator for the result grid: the trained R²-Former in front of `generation.model`.

It answers a row's samples as the local generator does (same tokenisation, prompt cut, greedy
decoding, stop at the first line break), with two differences: each document of the prompt is
marked `[i]similarity: <R>` (`render`), and the LLM runs on input embeddings where each
placeholder holds the R²-Former's vector for that document (`generate_samples`). It refuses a
folder trained with another LLM, prompt style or chat template.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rulerag.generation.generators import check_chat_template, check_trained_with
from rulerag.generation.local import GenerationStats, LocalGenerator
from rulerag.generation.prompts import PromptFormat, Sample
from rulerag.generation.r2ag.data import R2AGCollator, make_example, marked_prompt
from rulerag.generation.r2ag.encoding import FeatureEncoder

__all__ = ["R2AGGenerator"]


class R2AGGenerator(LocalGenerator):
    """`model` is an `R2AGModel`; `features` gives each sample's retrieval features."""

    def __init__(self, model: Any, tokenizer: Any, features: FeatureEncoder, **kwargs: Any) -> None:
        super().__init__(model, tokenizer, **kwargs)
        self.features = features

    @classmethod
    def load(
        cls,
        folder: Path,
        features: FeatureEncoder,
        *,
        model_name: str,
        prompt_style: str,
        quantization: str | None = None,
        dtype: str | None = None,
        **kwargs: Any,
    ) -> R2AGGenerator:
        """The LLM (with the folder's LoRA merged in, if any) behind the folder's R²-Former."""
        from rulerag.generation.models import load_causal_lm, load_tokenizer
        from rulerag.generation.r2ag.model import R2AGModel
        from rulerag.generation.r2ag.prompting import add_placeholder
        from rulerag.generation.r2ag.training import ADAPTER_DIR, load_former

        if not (folder / "former.safetensors").is_file():
            raise FileNotFoundError(f"{folder}: run train_r2ag first")
        former, meta = load_former(folder)
        check_trained_with(
            folder, meta, model=model_name, prompt_style=prompt_style, stage="train_r2ag"
        )
        tokenizer = load_tokenizer(model_name, padding_side="left")
        llm = load_causal_lm(model_name, quantization=quantization, dtype=dtype)
        placeholder = add_placeholder(tokenizer, llm)
        if placeholder != meta.get("placeholder_id"):
            raise ValueError(f"{folder}: placeholder token id {placeholder} != trained one")
        if (folder / ADAPTER_DIR).is_dir():
            from peft import PeftModel

            llm = PeftModel.from_pretrained(llm, str(folder / ADAPTER_DIR))
            if quantization in (None, "", "none"):
                llm = llm.merge_and_unload()
        device = next(llm.parameters()).device
        model = R2AGModel(llm, former.to(device), placeholder).eval()
        kwargs.setdefault("name", f"{model_name}+r2ag:{folder.name}")
        generator = cls(model, tokenizer, features, **kwargs)
        check_chat_template(folder, meta, generator.chat_template)
        return generator

    @property
    def placeholder_id(self) -> int:
        return int(self.model.placeholder_id)

    def render(self, prompt_format: PromptFormat, kind: str, sample: Sample) -> str:
        """The row's prompt with each document marked by its placeholder."""
        return marked_prompt(prompt_format, kind, sample)

    def generate(self, prompts: Sequence[str]) -> list[str]:
        raise TypeError("an R²AG generator answers samples: call generate_samples")

    def generate_samples(self, samples: Sequence[Sample], prompts: Sequence[str]) -> list[str]:
        """Raw generations for `samples` with their rendered (`render`) prompts, in order."""
        import torch
        from tqdm.auto import tqdm

        started = time.perf_counter()
        examples = [
            make_example(s, self.encode(p), self.placeholder_id, self.features.features(s))
            for s, p in zip(tqdm(samples, desc="R²AG features", unit="query"), prompts, strict=True)
        ]
        collate = R2AGCollator(self.tokenizer.pad_token_id, side="left")
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].input_ids))
        outputs = [""] * len(examples)
        stats = GenerationStats(prompts=len(examples))
        device = next(self.model.former.parameters()).device
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            batch = {k: v.to(device) for k, v in collate([examples[i] for i in index]).items()}
            criteria = None
            if self.stop_at_newline:
                from transformers import StoppingCriteriaList

                # with inputs_embeds only, generate() sees the new tokens alone
                criteria = StoppingCriteriaList([self._newline_criterion(0)])
            with torch.inference_mode():
                new = self.model.generate(
                    batch["input_ids"],
                    batch["attention_mask"],
                    batch["features"],
                    batch["doc_mask"],
                    batch["first_doc"],
                    stopping_criteria=criteria,
                    **self.greedy_kwargs(),
                )
            self.collect(new, index, batch["attention_mask"], outputs, stats)
        stats.seconds = time.perf_counter() - started
        self.stats = stats
        return outputs
