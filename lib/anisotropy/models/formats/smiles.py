"""rxnmapper's ALBERT (a ``transformers`` folder of 2020, ``AlbertForMaskedLM``) and its atom-level SMILES tokenizer,
rebuilt as a fast tokenizer from the vocabulary."""

from __future__ import annotations

import json
import os
from pathlib import Path

from anisotropy.models.weights import FormatError, file_sha256, read_state_dict


# rxnmapper's SMILES regex (rxnmapper/smiles_utils.py, SMI_REGEX_PATTERN): bracket atoms, two-letter halogens, atoms,
# bonds, branches, ring closures and ">>"; every token of a reaction is one of these, and the vocabulary maps them
SMILES_REGEX = (r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>>?|\*|\$|"
                r"\%[0-9]{2}|[0-9])")


def smiles_tokenizer(vocab_file: str | os.PathLike):
    """rxnmapper's ``SmilesTokenizer`` (a ``BertTokenizer`` whose words are the matches of ``SMILES_REGEX``) as a
    fast tokenizer: the regex splits a reaction into atom-level tokens (nothing else: no lower-casing, no word
    pieces), each token is looked up in ``vocab.txt`` ([UNK] when absent), and [CLS] ... [SEP] surround it."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens = [t for t in Path(vocab_file).read_text().split("\n") if t]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(SMILES_REGEX), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                                   cls_token="[CLS]", mask_token="[MASK]", model_max_length=512)


def convert_rxn_albert(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """rxnmapper's ALBERT folder (``pytorch_model.bin`` = ``path``, ``config.json``, ``vocab.txt``) as a
    ``save_pretrained`` folder of ``AlbertForMaskedLM`` (its masked-LM head kept: the check predicts masked tokens)
    with the SMILES tokenizer (``smiles_tokenizer``). Every weight of the masked LM must come from the file; the file's
    pooler (``albert.pooler``, unused by the masked LM and by rxnmapper) is the only weight left out."""
    from transformers import AlbertConfig, AlbertForMaskedLM

    path, out_dir = Path(path), Path(out_dir)
    config = AlbertConfig.from_pretrained(str(path.parent))
    model = AlbertForMaskedLM(config)
    missing, unexpected = model.load_state_dict(read_state_dict(path), strict=False)
    missing = [k for k in missing if k != "predictions.decoder.weight"]  # tied to the embeddings
    if missing or set(unexpected) - {"albert.pooler.weight", "albert.pooler.bias"}:
        raise FormatError(f"{path}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.save_pretrained(out_dir)
    smiles_tokenizer(path.parent / "vocab.txt").save_pretrained(out_dir)
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": str(path), "sha256": file_sha256(path), "format": "transformers folder (AlbertForMaskedLM)",
         "kept": "everything but albert.pooler"}, indent=1))
    return out_dir
