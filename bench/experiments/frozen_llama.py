"""A factory for `bench ddp --model py:bench/experiments/frozen_llama.py:make`: the LLaMA-style model
of own-models-vs-plain-loop.sh (Hugging Face's LlamaForCausalLM from a config, random weights) with
everything frozen but the token embeddings, the output projection and every layer's q_proj, as
a fine-tune that trains a few tensors would be. The widths come from DDPCHECK_VALIDATE_FFN and
friends so the script and its plain loop build the same model."""

import os

import torch

SEQ = int(os.environ.get("DDPCHECK_VALIDATE_SEQ", "1024"))


def config():
    import transformers

    return transformers.AutoConfig.for_model(
        "llama",
        hidden_size=1024,
        num_hidden_layers=12,
        intermediate_size=int(os.environ.get("DDPCHECK_VALIDATE_FFN", "2816")),
        num_attention_heads=16,
        num_key_value_heads=16,
    )


def make():
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import transformers

    cfg = config()
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("model.embed_tokens") or name.startswith("lm_head")
                         or ".q_proj." in name)

    def batch(n, device, generator):
        ids = torch.randint(0, cfg.vocab_size, (n, SEQ), device=device, generator=generator)
        return {"input_ids": ids, "labels": ids}

    return {"model": model, "batch": batch, "tokens_per_sample": SEQ}
