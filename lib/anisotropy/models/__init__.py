"""Models: the papers' models as data (``registry`` and its table ``models.yml``), the model identity of a stored result
(``identity``: the same dict for the same model in every chapter), the memory guard of loading (``memory``: weights that
would not fit the device are refused before loading), one model session (``session``: load, measure,
free; out of GPU memory worded once), where real pretrained weights come from (``weights``), their conversion from
other formats (``conversion``, one module per format in ``formats``), the
offline tokenizers, CharacterBERT's character indexer, the attention variants, and the checks of converted weights against their reference runtimes
(``checks``, with the references in ``references``).

May import: the foundation modules, ``data``, ``measure``.
"""
