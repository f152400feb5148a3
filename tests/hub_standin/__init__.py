"""Hub stand-in: a local Hugging Face Hub that serves the ``paper`` profile's models and data, tiny, under their
real hub ids, so that the profile's code path (``registry.load(..., "pretrained")``, ``data.load(...)``) runs
unmodified without network.

Layout
------
- ``build.py`` (runs in ``.venv``): ``paper_manifest()`` derives which repositories to serve from the ``paper``
  profile and what each holds from ``lib/anisotropy/hub_manifest.yml`` (the real Hub's file lists, weight formats, tokenizer and
  preprocessor presence, model_type/auto_map, recorded from public pages); ``populate(root, manifest)`` writes them as
  bare git repositories in olah's mirror layout::

      <root>/models/<org>/<name>       e.g. models/EleutherAI/pythia-410m (branches main, step0 ... step143000)
      <root>/models/<name>             ids without an org: models/gpt2, models/bert-base-uncased
      <root>/datasets/<org>/<name>     Salesforce/wikitext, frgfm/imagenette (+ refs/convert/parquet),
                                       openslr/librispeech_asr
      <root>/files/dc/enwik8.zip       served at /dc/enwik8.zip
      <root>/manifest.json             what is served (every branch's commit, its files, placeholders and the fields
                                       the manifest left unverified), what is not and why

  Models are the registry's ``tiny`` variant of the exact ``transformers`` class at a seed recorded in the manifest,
  saved with ``save_pretrained`` together with the preprocessor (and Whisper's text tokenizer), then cut to the Hub's
  shape: the listed weight format(s) only, no tokenizer where the Hub has none (Bloom's intermediate checkpoints:
  the registry reads it from ``bigscience/bloom-3b``, served beside them), legacy vocabularies where the Hub has no
  ``tokenizer.json``, placeholders for listed files no client reads. Where the manifest says ``unverified``, the
  registry's expectation is served and ``manifest.json`` says so. ``ensure_built()`` caches the build in
  ``$ANISOTROPY_CACHE/hub-standin/<hash>`` (default ``.cache/hub-standin/<hash>``), keyed by this builder's source,
  ``hub_manifest.yml``, the plan, ``models/registry.py``/``models/table.py``/``models/models.yml``/``data/*.py``, the packaged tokenizers and library versions.
- ``server.py`` (runs in ``.venv-hub``): olah 0.5.4 in offline mode with the root as its mirror, behind a thin ASGI
  layer (revision decoding and resolution, the Hub's error codes, gated repositories, the request log, enwik8).
- ``run.py``: ``ensure_venv()``, ``serve()`` and the command line; ``guard/sitecustomize.py`` keeps client processes
  on loopback.
- ``requirements.txt``: the exact versions of ``.venv-hub`` (olah declares ``huggingface_hub>=1.27``; the project's
  ``.venv`` keeps 0.36 for transformers 4.57).

Use
---
In Python (the tests do this)::

    from hub_standin import serve              # tests/ on sys.path
    with serve(gated_tokens=["hf_ok"]) as hub:
        subprocess.run([...], env=hub.env())   # HF_ENDPOINT etc.; clients read it at import time
        hub.requests()                         # the request log, one dict per request

From the shell (``make test`` creates ``.venv-hub``; so does ``python tests/hub_standin venv``)::

    .venv/bin/python tests/hub_standin serve               # prints the endpoint and the export lines
    .venv/bin/python tests/hub_standin run -- make book PROFILE=paper-sim
    .venv/bin/python tests/hub_standin run --accept-token hf_x -- python my_check.py
    .venv/bin/python tests/hub_standin build               # build (or reuse) and print the root

``paper-sim`` stands for a profile with the paper profile's models and sources at CPU-sized counts (the paper profile
itself asks for ``device: cuda`` in places); a client needs ``HF_ENDPOINT=http://127.0.0.1:<port>``, ``HF_HOME`` (a
fresh cache), ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE``/``TRANSFORMERS_OFFLINE`` unset,
``HF_HUB_DISABLE_TELEMETRY=1``, ``HF_UPDATE_DOWNLOAD_COUNTS=0`` and ``ANISOTROPY_ENWIK8_URL=<url>#sha256=<hex>``;
``StandIn.env()`` gives exactly that plus ``NO_PROXY`` and the guard.

Remote-code models (CharacterBERT, MANTa) are served in their Hub shape (config ``model_type``/``auto_map``, tiny
weights under the real name) with placeholder code modules that raise ImportError: their real code lives only on the
Hub. Not simulated: the Hub's redirect of legacy ids (``gpt2`` is served as
``gpt2``, not redirected to ``openai-community/gpt2``), the dataset viewer (``datasets-server``), Xet and LFS
transfers (files are plain git blobs), the contents of files no client reads here (TF/Flax/Rust/ONNX weights,
licences: placeholders), and olah's ``model_info`` fields ``gated`` (always false) and ``id`` of ids
without an org (``None/gpt2``).
"""

from .build import ensure_built, paper_manifest, populate
from .run import StandIn, ensure_venv, serve

__all__ = ["StandIn", "ensure_built", "ensure_venv", "paper_manifest", "populate", "serve"]
