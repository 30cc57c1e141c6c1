"""vLLM's offline engine, run by the ``vllm-offline`` test in vLLM's own environment
(scripts/vllm-env.sh): ``python -m milabench.vllm_child SETTINGS.json`` (the file
milabench.offline writes: the model folder, lengths, prompts as token ids, engine settings).

It imports vLLM and the standard library only (vLLM's environment has no milarun). It builds
an ``LLM`` on the model folder with random weights (``load_format="dummy"``), prefix caching
off, and keeps ``2 x max_num_seqs`` requests of fixed token-id prompts in the engine, each
asking for exactly ``output_len`` tokens (EOS ignored). It prints one JSON line when ready
(``{"ready": ..., "vllm": version}``), then one per engine step with the output tokens that
step made (``{"tokens": n}``), until its parent stops it.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main(settings: dict[str, Any]) -> None:
    import vllm
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=settings["folder"],
        load_format="dummy",
        dtype=settings["dtype"],
        max_num_seqs=settings["max_num_seqs"],
        max_model_len=settings["input_len"] + settings["output_len"],
        enable_prefix_caching=False,
        enforce_eager=not settings["cuda_graphs"],
        kv_cache_dtype=settings["kv_dtype"],
        seed=settings["seed"],
    )
    engine = llm.llm_engine
    params = SamplingParams(
        max_tokens=settings["output_len"],
        min_tokens=settings["output_len"],
        ignore_eos=True,
        temperature=0.0,
    )
    prompts = settings["prompts"]
    made: dict[str, int] = {}
    sent = 0

    def refill() -> None:
        nonlocal sent
        while len(made) < 2 * settings["max_num_seqs"]:
            request = str(sent)
            engine.add_request(request, {"prompt_token_ids": prompts[sent % len(prompts)]}, params)
            made[request] = 0
            sent += 1

    refill()
    print(json.dumps({"ready": True, "vllm": vllm.__version__}), flush=True)
    while True:
        tokens = 0
        for output in engine.step():
            count = len(output.outputs[0].token_ids) if output.outputs else 0
            tokens += count - made.get(output.request_id, 0)
            if output.finished:
                made.pop(output.request_id, None)
            else:
                made[output.request_id] = count
        refill()
        print(json.dumps({"tokens": tokens}), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as settings_file:
        main(json.load(settings_file))
