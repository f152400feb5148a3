"""Stand-in remote code of the two remote-code models (CharacterBERT, MANTa-LM): tiny modules under the Hub's own
file names with the input shapes and mask contract of the real code (each module's docstring names the source it
was read from), served by the Hub stand-in in place of code it cannot run, and loaded by the tests as transformers
loads a Hub repository's code (``trust_remote_code``).

``repo_files(repo, seed)``: the files of one repository: ``config.json`` (its ``model_type`` and an ``auto_map`` to the
stand-in classes), the code files, tiny random weights (``model.safetensors`` and ``pytorch_model.bin``, seeded) and,
where the Hub's tokenizer is a transformers class (MANTa: ByT5's), its ``tokenizer_config.json``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Hub repository -> (folder of its stand-in code here, auto_map of its config.json)
STANDINS = {
    "helboukkouri/character-bert": ("character_bert", {
        "AutoConfig": "configuration_character_bert.CharacterBertConfig",
        "AutoModel": "modeling_character_bert.CharacterBertModel"}),
    "almanach/manta-lm-base": ("manta", {
        "AutoConfig": "configuration_manta.MantaConfig", "AutoModel": "modeling_manta.MantaModel",
        "AutoModelForSeq2SeqLM": "modeling_manta.MantaForConditionalGeneration"}),
}

# Hub repository -> the transformers tokenizer class its tokenizer_config.json names
TOKENIZERS = {"almanach/manta-lm-base": "ByT5Tokenizer"}


def code_files(repo: str) -> dict[str, bytes]:
    """The stand-in's code files of ``repo`` (``configuration_*.py``, ``modeling_*.py``)."""
    folder, _ = STANDINS[repo]
    return {p.name: p.read_bytes() for p in sorted((HERE / folder).glob("*.py"))}


def repo_files(repo: str, seed: int) -> dict[str, bytes]:
    """config.json, code and seeded tiny weights of ``repo``'s stand-in, as a Hub repository holds them."""
    import torch
    from transformers import AutoConfig, AutoModel

    _, auto_map = STANDINS[repo]
    code = code_files(repo)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, data in code.items():
            (folder / name).write_bytes(data)
        config_class = auto_map["AutoConfig"].split(".")[-1]
        (folder / "config.json").write_text(json.dumps({"auto_map": auto_map, "model_type": _model_type(repo),
                                                        "architectures": [config_class.replace("Config", "Model")]}))
        config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
        torch.manual_seed(seed)
        model = AutoModel.from_config(config, trust_remote_code=True)
        model.save_pretrained(folder, safe_serialization=True)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        if repo in TOKENIZERS:
            import transformers

            getattr(transformers, TOKENIZERS[repo])().save_pretrained(folder)
        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    config = json.loads(files["config.json"])
    config["auto_map"] = auto_map  # save_pretrained writes the auto_map from the dynamic module's name
    files["config.json"] = json.dumps(config, indent=2, sort_keys=True).encode()
    return {**files, **code}


def _model_type(repo: str) -> str:
    return {"helboukkouri/character-bert": "character_bert", "almanach/manta-lm-base": "manta"}[repo]
