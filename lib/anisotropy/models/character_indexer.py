"""CharacterBERT's input: words, each a fixed row of character ids, as the authors' ``CharacterIndexer`` builds them
(github.com/helboukkouri/character-bert at e2396a6, ``utils/character_cnn.py``; their README splits words with BERT's
uncased basic tokenizer, lower-casing and cutting punctuation off, never into wordpieces).

A word is ``MAX_WORD_LENGTH`` = 50 ids: beginning-of-word, its UTF-8 bytes (at most 48), end-of-word, then padding
characters; ``[CLS]`` and ``[SEP]`` are the beginning- and end-of-sentence characters framed the same way; every id is
shifted by +1 so that 0 is left to padding words (a row of zeros). Ids before the shift: bytes 0-255, sentence begin
256, sentence end 257, word begin 258, word end 259, padding character 260.

``CharacterIndexer()(texts, max_length)`` returns ``input_ids`` (texts, words, 50), ``attention_mask`` (texts, words)
(1 on a word, [CLS] and [SEP]; 0 on padding words) and ``special_tokens_mask`` (1 on [CLS] and [SEP]), with at most
``max_length`` words a text, [CLS] and [SEP] included.
"""

from __future__ import annotations

from typing import Sequence

MAX_WORD_LENGTH = 50
SENTENCE_BEGIN, SENTENCE_END, WORD_BEGIN, WORD_END, PADDING_CHARACTER = 256, 257, 258, 259, 260
# CharacterBERT's position table (BERT's 512): the longest text in words, [CLS] and [SEP] included.
MAX_WORDS = 512


def word_ids(word: str) -> list[int]:
    """The 50 shifted character ids of one word (its UTF-8 bytes cut to 48)."""
    data = word.encode("utf-8", "ignore")[: MAX_WORD_LENGTH - 2]
    ids = [WORD_BEGIN, *data, WORD_END] + [PADDING_CHARACTER] * (MAX_WORD_LENGTH - 2 - len(data))
    return [i + 1 for i in ids]


def _framed(character: int) -> list[int]:
    ids = [WORD_BEGIN, character, WORD_END] + [PADDING_CHARACTER] * (MAX_WORD_LENGTH - 3)
    return [i + 1 for i in ids]


CLS_IDS, SEP_IDS = _framed(SENTENCE_BEGIN), _framed(SENTENCE_END)


class CharacterIndexer:
    """Texts -> CharacterBERT's batch (see the module docstring). ``model_max_length`` is the position table's size,
    which ``measure.taps.position_limit`` reads."""

    model_max_length = MAX_WORDS

    def __init__(self):
        from transformers.models.bert.tokenization_bert import BasicTokenizer

        self.splitter = BasicTokenizer(do_lower_case=True)

    def words(self, text: str) -> list[str]:
        """The words of ``text`` as CharacterBERT reads them (lower case, punctuation apart)."""
        return self.splitter.tokenize(text)

    def __call__(self, texts: Sequence[str], max_length: int = MAX_WORDS) -> dict:
        import torch

        if max_length < 3:
            raise ValueError(f"max_length counts [CLS] and [SEP]: at least 3 words, got {max_length}")
        rows = [[CLS_IDS, *(word_ids(w) for w in self.words(t)[: max_length - 2]), SEP_IDS] for t in texts]
        width = max((len(r) for r in rows), default=0)
        ids = torch.zeros(len(rows), width, MAX_WORD_LENGTH, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        special = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            special[i, 0] = special[i, len(row) - 1] = 1
        return {"input_ids": ids, "attention_mask": mask, "special_tokens_mask": special}
