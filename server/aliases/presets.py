"""The names known trainers log, mapped to normwatch's canonical names.

Each preset names where its names come from, so that a change upstream can be checked.
Only quantities with a canonical name are mapped; the rest stay as logged.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    """A trainer's names for normwatch's canonical metrics, most common spelling first."""

    name: str
    title: str
    source: str
    """Where the names are logged, as ``repository: path`` (and what writes them)."""
    pairs: tuple[tuple[str, str], ...]
    """``(alias, canonical)``, in order of preference among aliases of one canonical."""


OLMO_CORE = Preset(
    "olmo-core",
    "OLMo-core",
    "allenai/OLMo-core: src/olmo_core/train/common.py (TRAIN_CE_LOSS_METRIC, "
    "TRAIN_Z_LOSS_METRIC, OPTIM_GRAD_NORM_METRIC), "
    "src/olmo_core/train/train_module/transformer/train_module.py (optim_step: "
    '"LR (group N)" under the "optim" namespace)',
    (
        ("optim/total grad norm", "grad/norm/total"),
        ("train/CE loss", "train/loss"),
        ("train/Z loss", "train/z_loss"),
        ("optim/LR (group 0)", "optim/lr"),
    ),
)

LLMC = Preset(
    "llm.c",
    "llm.c",
    "karpathy/llm.c: llmc/logger.h (logger_log_train writes 's:<step> trl:<loss> "
    "lr:<lr> norm:<grad norm>', logger_log_val 's:<step> tel:<val loss>'); "
    "normwatch's own importer already maps these, the preset covers the raw field names",
    (
        ("norm", "grad/norm/total"),
        ("trl", "train/loss"),
        ("tel", "val/loss"),
        ("lr", "optim/lr"),
    ),
)

MEGATRON = Preset(
    "megatron",
    "Megatron-LM",
    "NVIDIA/Megatron-LM: megatron/training/training.py (training_log: 'grad-norm', "
    "'params-norm', 'learning-rate' and each loss_dict key; evaluate_and_print_results: "
    "'<key> validation'), pretrain_gpt.py (loss_func reports 'lm loss')",
    (
        ("grad-norm", "grad/norm/total"),
        ("params-norm", "params/norm/total"),
        ("lm loss", "train/loss"),
        ("lm loss validation", "val/loss"),
        ("learning-rate", "optim/lr"),
    ),
)

HF_TRAINER = Preset(
    "hf-trainer",
    "Hugging Face Trainer",
    "huggingface/transformers: src/transformers/trainer.py (_maybe_log_save_evaluate "
    "logs 'loss', 'grad_norm', 'learning_rate'; evaluation 'eval_loss'), "
    "src/transformers/integrations/integration_utils.py (rewrite_logs: 'train/<key>', "
    "'eval/<key>' as the W&B and other integrations log them)",
    (
        ("train/grad_norm", "grad/norm/total"),
        ("grad_norm", "grad/norm/total"),
        ("loss", "train/loss"),
        ("eval/loss", "val/loss"),
        ("eval_loss", "val/loss"),
        ("train/learning_rate", "optim/lr"),
        ("learning_rate", "optim/lr"),
    ),
)

PRESETS: dict[str, Preset] = {p.name: p for p in (OLMO_CORE, LLMC, MEGATRON, HF_TRAINER)}
"""Every preset by name, in the order the API lists them."""
