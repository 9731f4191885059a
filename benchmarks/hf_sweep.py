"""A wide sweep of Hugging Face transformers families through ember.compile: each
base model built from a tiny config (no downloads), run under no_grad at two
input sizes, compared with eager. Prints, per family, whether the outputs match,
the graphs (one per input size, when nothing breaks) and graph breaks of the
compiled forward, and the first call's cold compile time; the last line counts
the families that matched with one graph per size. The integration
test (integration_tests/test_huggingface.py) checks twelve families in depth,
training included; this sweep checks that the rest of the library captures too.
The saved= column counts the compiles a saved entry served (no capture): run
the sweep twice with one EMBER_CACHE_DIR and the second run's are its warm
starts. With --train, each call is a training step instead (train mode, the backward of
the sum of the floating outputs): the outputs, every parameter's gradient and
the buffers (BatchNorm's running statistics) are compared with an eager copy's
(vision models in float64: see ``sweep_one``; within a tolerance of each tensor's
largest magnitude: see ``close``). Dropout, drop-path and layer-drop rates are
0 unless --dropout: then every such rate that defaults to 0 is 0.1, the others
keep their defaults, and eager's step and ember's start from the same seed, so
the masks must be the same draws.

Run: python benchmarks/hf_sweep.py [--families gpt2,bert] [--train [--dropout]]
"""

from __future__ import annotations

import argparse
import copy
import inspect
import os
import tempfile
import time
import traceback
import warnings

import torch
import transformers

import ember

VOCAB = 256
# Small sizes under every name configs use for them; a config takes the ones
# its constructor has.
SMALL = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=64,
    vocab_size=VOCAB,
    max_position_embeddings=128,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_inner=64,
    n_positions=128,
    d_model=32,
    d_ff=64,
    d_kv=8,
    num_layers=2,
    num_heads=4,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    ffn_dim=64,
    head_dim=8,
    embed_dim=32,
    embedding_size=32,
    rotary_dim=4,
    num_experts=4,
    num_local_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    decoder_start_token_id=1,
)
# Dropout off: eager and compiled draw different random streams.
TEXT = [
    "gpt2",
    "gpt_neox",
    "gptj",
    "opt",
    "bloom",
    "falcon",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi",
    "phi3",
    "stablelm",
    "starcoder2",
    "olmo",
    "olmo2",
    "cohere",
    "granite",
    "codegen",
    "biogpt",
    "xglm",
    "persimmon",
    "glm",
    "helium",
    "smollm3",
    "ernie4_5",
    "seed_oss",
    "bert",
    "roberta",
    "albert",
    "electra",
    "deberta",
    "deberta-v2",
    "distilbert",
    "mpnet",
    "xlm-roberta",
    "camembert",
    "squeezebert",
    "mobilebert",
    "convbert",
    "ernie",
    "megatron-bert",
    "roformer",
    "modernbert",
    "t5",
    "bart",
    "mbart",
    "pegasus",
    "marian",
    "blenderbot",
    "m2m_100",
    "mt5",
    "umt5",
]
# Vision families keep their own layer sizes (several take lists per stage).
VISION = {
    "beit": 32,
    "convnext": 64,
    "resnet": 32,
    "regnet": 32,
    "mobilenet_v2": 32,
    "efficientnet": 32,
    "segformer": 64,
    "dinov2": 32,
    "poolformer": 32,
    "mobilevit": 32,
    "cvt": 64,
}


def config(family: str, dropout: bool = False) -> transformers.PretrainedConfig:
    cls = type(transformers.AutoConfig.for_model(family))
    takes = set(inspect.signature(cls.__init__).parameters)
    sizes = {} if family in VISION else SMALL
    kwargs = {k: v for k, v in sizes.items() if k in takes}
    # No dropout (nor drop path, layer drop): training steps then compare. With
    # ``dropout``, every rate is on instead (same seeds make the same masks).
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if "drop" not in name:
            continue
        if isinstance(p.default, float) and (not dropout or p.default == 0.0):
            kwargs[name] = 0.1 if dropout else 0.0
        elif isinstance(p.default, (list, tuple)) and not dropout:
            kwargs[name] = [0.0] * len(p.default)  # (one rate per stage)
    return transformers.AutoConfig.for_model(family, **kwargs)


def inputs(family: str, cfg, batch: int, seq: int) -> dict:
    if family in VISION:
        side = VISION[family]
        return {"pixel_values": torch.randn(batch, 3, side, side)}
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, : seq // 4] = 0  # left padding in the first row
    made = {"input_ids": torch.randint(3, VOCAB, (batch, seq)), "attention_mask": mask}
    if cfg.is_encoder_decoder:
        made["decoder_input_ids"] = torch.randint(3, VOCAB, (batch, seq))
    return made


def tensors(out) -> list[torch.Tensor]:
    """The tensors of a model output (caches and other objects left out)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in tensors(item)]
    return []


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Within 1e-4 plus 1e-3 of the largest magnitude of ``want``: relative to
    the tensor, not each element (a gradient through BatchNorm over a few
    pixels spans eight orders of magnitude, and its small elements carry the
    rounding of its large ones)."""
    if got.shape != want.shape:
        return False
    if want.numel() == 0:
        return True
    error = (got.double() - want.double()).abs().max()
    return bool(error <= 1e-4 + 1e-3 * want.double().abs().max())


def same(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        (g is None and w is None) or (g is not None and w is not None and close(g, w))
        for g, w in zip(got, want)
    )


SIZES = ((2, 8), (3, 12))  # (batch, sequence): the second call recompiles


def step(fn, model: torch.nn.Module, x: dict, train: bool) -> list:
    """The output tensors of ``fn(**x)``; in training, then the gradients of the
    sum of the floating ones and the model's buffers after the step."""
    out = tensors(fn(**x))
    if not train:
        return out
    for p in model.parameters():
        p.grad = None
    sum(t.sum() for t in out if t.requires_grad).backward()
    grads = [p.grad for p in model.parameters()]
    return [t.detach() for t in out] + grads + list(model.buffers())


def sweep_one(
    family: str, train: bool = False, dropout: bool = False
) -> tuple[bool, str]:
    """Whether ``family`` matched eager with at most one graph per size (and
    no break), and its line."""
    torch.manual_seed(0)
    cfg = config(family, dropout)
    model = transformers.AutoModel.from_config(cfg).train(train)
    # BatchNorm in training over a batch of a few pixels normalizes pairs of
    # nearly equal values: float32 rounding flips signs. float64 compares.
    dtype = torch.float64 if train and family in VISION else torch.float32
    model = model.to(dtype)
    reference = copy.deepcopy(model)  # (a training step updates buffers)
    compiled = ember.compile(model)
    matches, cold = [], 0.0
    with torch.set_grad_enabled(train), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for batch, seq in SIZES:
            x = {
                k: v.to(dtype) if v.is_floating_point() else v
                for k, v in inputs(family, cfg, batch, seq).items()
            }
            torch.manual_seed(1)
            want = step(reference, reference, x, train)
            torch.manual_seed(1)
            start = time.perf_counter()
            got = step(compiled, model, x, train)
            cold = cold or time.perf_counter() - start
            matches.append(same(got, want))
    forward = compiled._compiled_forward
    graphs, breaks = len(forward.log.graphs), len(forward.breaks)
    compiles = forward.log.compiles
    saved = sum(
        "saved_entry" in c.seconds and "capture" not in c.seconds for c in compiles
    )
    line = (
        f"match={'yes' if all(matches) else 'NO'} graphs={graphs} "
        f"breaks={breaks} cold={cold:.1f}s saved={saved}/{len(compiles)}"
    )
    # (a warm run may serve both sizes from one saved entry with symbolic sizes)
    return all(matches) and 1 <= graphs <= len(SIZES) and breaks == 0, line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join([*TEXT, *VISION]))
    parser.add_argument("--train", action="store_true", help="training steps")
    parser.add_argument(
        "--dropout", action="store_true", help="dropout on, the same seeds"
    )
    args = parser.parse_args()
    families = args.families.split(",")
    os.environ.setdefault("EMBER_CACHE_DIR", tempfile.mkdtemp(prefix="ember-sweep-"))
    whole = 0
    for family in families:
        try:
            good, line = sweep_one(family, args.train, args.dropout)
        except Exception as error:
            traceback.print_exc()
            good, line = False, f"error: {type(error).__name__}: {str(error)[:200]}"
        whole += good
        print(f"{family:14} {line}", flush=True)
    print(f"{whole} of {len(families)} families match eager, at most one graph a size")


if __name__ == "__main__":
    main()
