"""Hub stand-in of almanach/manta-lm-base's tokenization_manta.py (38 B on the Hub, its content not read): MANTa
reads UTF-8 bytes as ByT5 does; tokenizer_config.json names ByT5Tokenizer."""

from transformers import ByT5Tokenizer  # noqa: F401
