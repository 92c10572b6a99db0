"""Build a tiny Qwen2 model and byte-level BPE tokenizer locally, with no hub download.

vLLM needs a real Hugging Face model directory to serve. No hub is reachable from the
machines this project runs on, so this writes one from scratch in a few seconds: a
byte-level BPE tokenizer trained on deterministic generated text and a two-layer Qwen2
with seeded random weights. Its output is nonsense, which is fine: the routing
experiments only care about tokens, KV blocks and counters.

Runs under the vLLM venv's python (it needs torch, transformers and tokenizers); those
imports stay inside functions so the rest of `routing` can import this module without them.

    <vllm python> -m routing.lab.tinymodel OUT_DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
from pathlib import Path

SEED = 1234
# An upper bound: the generated corpus supports ~1,100 tokens (256 bytes + merges), after
# which training stops. With it a seed shared-prefix prompt (6,752 characters) is 1,253-1,254
# tokens and a unique one (3,589-3,671 characters) 955-1,037, well inside MAX_MODEL_LEN
# with room for the reply.
VOCAB_SIZE = 2048
MAX_MODEL_LEN = 4096
SPECIAL_TOKENS = ("<unk>", "<|endoftext|>")
END_OF_TEXT = "<|endoftext|>"
# --size presets, (hidden size, layers). `tiny` keeps prefill nearly free (routing checks only
# need tokens and blocks); the larger ones make prefill cost more than two servers contending
# for two cores, for latency checks. Prefill per 1,000 tokens on this machine is in the README
# (measured with `python -m benchmarks.bench_prefill_cost`).
SIZES = {"tiny": (128, 2), "small": (512, 4), "medium": (768, 8)}
# Said where `demo` and `servers` start, before anyone reads a reply.
GIBBERISH = ("the model's replies are gibberish by design: its weights are random, since routing needs only its "
             "tokens, KV blocks and counters")
# Lets /v1/chat/completions render messages; the model has no notion of roles anyway.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)

# Words the workshop prompts are made of, plus ordinary English, so the learned merges
# resemble what a real tokenizer does to such text: whole common words, split rare ones.
_DOMAIN_WORDS = (
    "You are an expert cloud infrastructure assistant specialising in Kubernetes and LLM serving "
    "Guideline consider scheduling queue depth KV cache reuse prefix affinity GPU memory pressure "
    "endpoint selection when advising on inference architecture Question name one factor "
    "Request context Unique segment padding text for request with no shared leading tokens "
    "model replica pod gateway router latency throughput token block prompt batch weight score"
).split()
_ENGLISH_WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by "
    "one had not but what all were when we there can your which their said if do will each "
    "about how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down only "
    "way find use may water long little very after words called just where most know get "
    "through back much before go good new write our used me man too any day same right look "
    "think also around another came come work three word must because does part even place well"
).split()


def training_corpus(seed: int = SEED, lines: int = 4000) -> list[str]:
    """Deterministic sentences mixing domain and English words, numbers and punctuation."""
    rng = random.Random(seed)
    words = _DOMAIN_WORDS * 3 + _ENGLISH_WORDS
    corpus = []
    for _ in range(lines):
        sentence = []
        for _ in range(rng.randint(6, 24)):
            word = rng.choice(words)
            roll = rng.random()
            if roll < 0.08:
                word = f"{word} {rng.randint(0, 200)}"
            elif roll < 0.12:
                word = f"{word}-{rng.randint(1, 40)}-{rng.choice(words)}-{rng.randint(1, 40)}"
            elif roll < 0.2:
                word += rng.choice(",.:;")
            sentence.append(word)
        corpus.append(" ".join(sentence))
    return corpus


def build_tokenizer(out_dir: Path, seed: int = SEED, vocab_size: int = VOCAB_SIZE):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(seed), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        model_max_length=MAX_MODEL_LEN,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(out_dir)
    return wrapped


def build_model(out_dir: Path, tokenizer, seed: int = SEED, hidden_size: int = 128, layers: int = 2) -> int:
    """Write a Qwen2 with seeded random weights; returns its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    eos_id = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=MAX_MODEL_LEN,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def ship_server_tokenizer(out_dir: Path) -> str:
    """Rewrite tokenizer.json as the tokenizer the server really runs; returns its class name.

    transformers 5 (which vLLM loads the tokenizer with) sees a Qwen2 model and loads
    Qwen2Tokenizer, which swaps in Qwen2's own pre-tokenizer (digits split one by one) for the
    trained one: the file written by build_tokenizer is then not what the server counts with
    (vllm-on-cpu.md: 0 of 10 prompts alike). Saving the loaded tokenizer's backend makes the
    shipped tokenizer.json the server's, so `--tokenizer MODEL_DIR` counts what vLLM counts.
    Needs config.json in place, which decides the tokenizer class.
    """
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(out_dir)
    loaded.backend_tokenizer.save(str(Path(out_dir) / "tokenizer.json"))
    return type(loaded).__name__


def build(out_dir: Path | str, seed: int = SEED, hidden_size: int = 128, layers: int = 2) -> dict:
    """Build tokenizer and model into out_dir; returns a summary (also written as tinymodel.json)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tokenizer = build_tokenizer(out, seed)
    parameters = build_model(out, tokenizer, seed, hidden_size, layers)
    server_tokenizer = ship_server_tokenizer(out)
    summary = {
        "dir": str(out),
        "seed": seed,
        "vocab": len(tokenizer),
        "maxModelLen": MAX_MODEL_LEN,
        "hiddenSize": hidden_size,
        "layers": layers,
        "parameters": parameters,
        "serverTokenizer": server_tokenizer,
        "seconds": round(time.monotonic() - started, 2),
    }
    (out / "tinymodel.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def is_built(out_dir: Path | str) -> bool:
    """Built, and with the server's tokenizer shipped (older builds lack it and are rebuilt)."""
    out = Path(out_dir)
    files = ("tinymodel.json", "config.json", "model.safetensors", "tokenizer.json")
    if not all((out / name).exists() for name in files):
        return False
    try:
        return "serverTokenizer" in json.loads((out / "tinymodel.json").read_text())
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m routing.lab.tinymodel",
        description="Build a tiny Qwen2 model + byte-level BPE tokenizer (no download) for a local vLLM. "
                    "Needs torch, transformers and tokenizers: run it with the vLLM venv's python.",
    )
    parser.add_argument("out_dir", help="directory to write the model into (created if missing)")
    parser.add_argument("--seed", type=int, default=SEED, help=f"seed for the corpus and weights (default {SEED})")
    parser.add_argument("--size", choices=tuple(SIZES), default="tiny",
                        help="preset width and depth: " + ", ".join(f"{name} = {width} wide, {layers} layers"
                                                                    for name, (width, layers) in SIZES.items())
                             + " (default tiny; --hidden-size and --layers override)")
    parser.add_argument("--hidden-size", type=int,
                        help="model width; larger makes prefill cost visible in latency (default: the size's)")
    parser.add_argument("--layers", type=int, help="transformer layers (default: the size's)")
    args = parser.parse_args(argv)
    preset_width, preset_layers = SIZES[args.size]
    args.hidden_size = preset_width if args.hidden_size is None else args.hidden_size
    args.layers = preset_layers if args.layers is None else args.layers
    if args.layers < 1:
        parser.error(f"--layers {args.layers}: a model needs at least one layer; try 2")
    if args.hidden_size < 8 or args.hidden_size % 8:
        parser.error(f"--hidden-size {args.hidden_size}: must be a multiple of 8 (4 attention heads, each of an "
                     "even size for rotary embeddings); try 128 or 256.")
    missing = [name for name in ("torch", "transformers", "tokenizers") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"error: {', '.join(missing)} not installed for {sys.executable}. Run this with the vLLM venv's "
              "python, e.g. .venv-vllm/bin/python -m routing.lab.tinymodel OUT_DIR (create that venv with "
              "`bash .ci/setup-vllm.sh .venv-vllm`).", file=sys.stderr)
        return 2
    summary = build(args.out_dir, args.seed, args.hidden_size, args.layers)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
