"""The offline tokenizers of untrained and tiny text models: WordPiece, byte-level BPE and T5-style Unigram, trained
once on the offline prose and packaged (``lib/anisotropy/tokenizers/``), so every machine tokenizes the same way; and
the one WordPiece trainer (deterministic), which the self-trained suites use too.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

# Offline tokenizers trained on the prose, by kind (see offline_tokenizer).
OFFLINE_TOKENIZERS = ("wordpiece", "bpe", "unigram")

_SPECIALS = {
    "wordpiece": dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"),
    "bpe": dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                pad_token="<|endoftext|>"),
    "unigram": dict(pad_token="<pad>", eos_token="</s>", unk_token="<unk>"),
}
# Only BERT-style models take token types: a decoder such as GPT-2 would add the type-0 embedding, a vector common
# to every token, if the tokenizer handed it zeros.
_INPUT_NAMES = {"wordpiece": ["input_ids", "token_type_ids", "attention_mask"],
                "bpe": ["input_ids", "attention_mask"], "unigram": ["input_ids", "attention_mask"]}
PACKAGED_TOKENIZERS = Path(__file__).with_name("tokenizers")


def train_wordpiece(texts, vocab_size: int, specials=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")):
    """A lower-cased BERT-style WordPiece ``tokenizers.Tokenizer`` trained on the texts ``texts()`` yields (a function
    returning a fresh iterable, read twice and never held whole: WikiText-103's training split is ~0.5 GB of text),
    the same vocabulary in every process. The trainer gives the "##c" continuation pieces ids in hash order, which
    changes its merges from run to run; registering every "##c" of the corpus up front fixes them. No post-processor
    (callers add [CLS]/[SEP])."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    normalizer = normalizers.BertNormalizer(lowercase=True)
    chars = sorted({c for t in texts() for c in normalizer.normalize_str(t) if not c.isspace()})
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=[*specials, *("##" + c for c in chars)],
                                        show_progress=False)
    tok.train_from_iterator(texts(), trainer)
    vocab = tok.get_vocab(with_added_tokens=False)
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))  # rebuilt: the pinned pieces are not specials
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normalizer, pre_tokenizers.BertPreTokenizer(), decoders.WordPiece()
    tok.add_special_tokens(list(specials))
    return tok


def _train_tokenizer(kind: str, vocab_size: int):
    """Train one of ``OFFLINE_TOKENIZERS`` on the offline prose. Only ``write_packaged_tokenizers`` calls it: the
    Unigram trainer is not deterministic (its ties are broken in hash order) and the prose differs between Python
    versions, so the book reads the packaged files and every machine tokenizes the same way."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    # cost: pulls numpy into models.registry (which imports this module); only the maintainers' retraining reads it
    from anisotropy.data.prose import prose_paragraphs

    if kind == "wordpiece":  # BERT-style: lower-cased WordPiece, [CLS] text [SEP]
        tok = train_wordpiece(prose_paragraphs, vocab_size)
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        return tok
    if kind == "bpe":  # GPT-2-style: byte-level BPE, no tokens added around the text
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        # a fixed initial alphabet (all 256 bytes) makes the BPE trainer deterministic
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.decoder = decoders.ByteLevel()
    elif kind == "unigram":  # T5-style: Unigram on metaspace words, text </s>
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"],
                                          unk_token="<unk>", show_progress=False)
        tok.decoder = decoders.Metaspace()
    else:
        raise ValueError(f"unknown offline tokenizer kind {kind!r}; choose from {OFFLINE_TOKENIZERS}")
    tok.train_from_iterator(prose_paragraphs(), trainer=trainer)
    if kind == "unigram":
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return tok


def write_packaged_tokenizers(vocab_size: int = 4000) -> list[Path]:
    """Train every offline tokenizer and write it into the package (run by maintainers, not by the book)."""
    PACKAGED_TOKENIZERS.mkdir(exist_ok=True)
    written = []
    for kind in OFFLINE_TOKENIZERS:
        path = PACKAGED_TOKENIZERS / f"{kind}-{vocab_size}.json"
        _train_tokenizer(kind, vocab_size).save(str(path), pretty=False)
        written.append(path)
    return written


@lru_cache(maxsize=1)
def packaged_tokenizers_fingerprint() -> str:
    """SHA-256 (12 hex digits) of every packaged tokenizer file: results computed with them key on it."""
    h = hashlib.sha256()
    for path in sorted(PACKAGED_TOKENIZERS.glob("*.json")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:12]


def offline_tokenizer(kind: str, vocab_size: int = 4000):
    """The packaged ``PreTrainedTokenizerFast`` of the given kind (WordPiece, byte-level BPE or T5-style Unigram,
    trained on the offline prose by ``write_packaged_tokenizers``). Used by untrained and tiny text models."""
    from transformers import PreTrainedTokenizerFast

    if kind not in OFFLINE_TOKENIZERS:
        raise ValueError(f"unknown offline tokenizer kind {kind!r}; choose from {OFFLINE_TOKENIZERS}")
    path = PACKAGED_TOKENIZERS / f"{kind}-{vocab_size}.json"
    if not path.is_file():
        sizes = sorted(p.stem for p in PACKAGED_TOKENIZERS.glob(f"{kind}-*.json"))
        raise FileNotFoundError(f"no packaged {kind} tokenizer of vocabulary {vocab_size} (have {sizes}); "
                                f"write one with anisotropy.models.offline_tokenizers.write_packaged_tokenizers({vocab_size})")
    return PreTrainedTokenizerFast(tokenizer_file=str(path), model_input_names=_INPUT_NAMES[kind], **_SPECIALS[kind])
