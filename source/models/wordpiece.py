"""BERT's uncased tokenizer: basic splitting, then greedy longest-match WordPiece over vocab.txt.

Basic: strip accents (NFD, drop combining marks), lower-case, split on
whitespace, punctuation (ASCII symbols and Unicode P*) and CJK characters,
drop control characters. WordPiece: each word becomes the longest vocabulary
prefix, then "##"-prefixed continuations; a word with no split is [UNK].
"""
from __future__ import annotations

import os
import unicodedata

import numpy as np

MAX_WORD = 100


class WordPiece:
    """An uncased BERT tokenizer over a vocab.txt (one token a line, id = line number)."""

    def __init__(self, vocab_path: str | os.PathLike) -> None:
        with open(vocab_path, encoding="utf-8") as f:
            self.vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
        self.cls, self.sep, self.pad, self.unk = (self.vocab[t] for t in ("[CLS]", "[SEP]", "[PAD]", "[UNK]"))

    def words(self, text: str) -> list[str]:
        """The basic tokenizer: accents stripped, lower case, split on spaces and punctuation."""
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
        out: list[str] = []
        word: list[str] = []
        for ch in text:
            cat = unicodedata.category(ch)
            if ch.isspace():
                split, keep = True, False
            elif cat.startswith("C"):
                continue
            elif _is_punct(ch, cat) or _is_cjk(ch):
                split, keep = True, True
            else:
                word.append(ch)
                continue
            if word:
                out.append("".join(word))
                word = []
            if split and keep:
                out.append(ch)
        if word:
            out.append("".join(word))
        return out

    def pieces(self, word: str) -> list[int]:
        """Greedy longest-match WordPiece ids of one word."""
        if len(word) > MAX_WORD:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            if end == start:
                return [self.unk]
            start = end
        return ids

    def encode(self, texts: list[str], length: int) -> dict[str, np.ndarray]:
        """input_ids, attention_mask, token_type_ids (int64 [len(texts), length]): [CLS] ... [SEP], padded
        or truncated to ``length``."""
        ids = np.full((len(texts), length), self.pad, np.int64)
        mask = np.zeros((len(texts), length), np.int64)
        for row, text in enumerate(texts):
            tokens = [t for w in self.words(text) for t in self.pieces(w)][:length - 2]
            seq = [self.cls, *tokens, self.sep]
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _is_punct(ch: str, cat: str) -> bool:
    code = ord(ch)
    return 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126 or cat.startswith("P")


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                               (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))
