"""One model session: load a model, measure it, free it; a GPU running out of memory on the way is one line.

::

    with session("gpt2", variant="untrained", device="cuda", batch_size=8) as loaded:
        stats = taps.extract(loaded, texts, batch_size=8)

``session(name, batch_size=None, load=None, **options)`` loads through the one loader, ``registry.load(name,
**options)`` (``load``: a zero-argument loader built on it instead, such as ``registry.load_any`` or a checkpoint's
``Stage.load``; ``dtype`` is then only named in the message), and yields the ``Loaded``. ``release=True``
(``registry.load``'s) sends a Hub checkpoint downloaded only to be measured out of the cache once its weights are in
memory: its files are not read again.

On exit, however the block ends, the model is freed: the ``Loaded`` is emptied (its ``model``, ``preprocessor`` and
``tokenizer`` become None, so nothing may use it after the block), garbage is collected and PyTorch's CUDA cache is
emptied, so the next model finds the memory this one took. ``torch.cuda.OutOfMemoryError`` raised while loading or
measuring becomes ``registry.out_of_memory``'s ``ModelTooLargeError`` (naming ``batch_size`` when it ran out while
measuring), once the frames that ran out have let go of the model's tensors. ``out_of_memory(exc)`` is the one test
of that error: by its type, never by its message.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

from anisotropy.models import registry


def out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a GPU running out of memory."""
    return isinstance(exc, torch.cuda.OutOfMemoryError)


@contextmanager
def session(name, *, batch_size: int | None = None, load: Callable[[], registry.Loaded] | None = None,
            **options) -> Iterator[registry.Loaded]:
    """The model ``name`` loaded (``registry.load(name, **options)``, or ``load()``), freed when the block ends; out
    of GPU memory is ``registry.ModelTooLargeError`` (see the module docstring)."""
    if load is not None and set(options) - {"dtype"}:
        raise TypeError(f"session({name!r}): give either a loader or registry.load's options, not both "
                        f"({sorted(set(options) - {'dtype'})})")
    held: list[registry.Loaded] = []
    try:
        try:
            held.append(load() if load is not None else registry.load(name, **options))
        except torch.cuda.OutOfMemoryError as exc:
            _let_go(exc)
            raise registry.out_of_memory(str(name), options.get("dtype")) from None  # the weights alone: no batch
        try:
            yield held[0]
        except torch.cuda.OutOfMemoryError as exc:
            _let_go(exc)
            raise registry.out_of_memory(str(name), options.get("dtype"), batch_size) from None
    finally:
        _free(held)


def _let_go(exc: BaseException) -> None:
    """Let go of the frames ``exc`` ran out of memory in: their locals hold the model and its activations, and the
    functions they ran (closures such as a module call's) hold its modules, while ``exc`` outlives the session (the
    one line's context, in the caller's hands) and its traceback is still held by whoever is handling it."""
    tb, exc.__traceback__ = exc.__traceback__, None
    while tb is not None:
        following, tb.tb_next = tb.tb_next, None  # a frame nothing links to any more goes, with its function
        try:
            tb.tb_frame.clear()
        except RuntimeError:  # still running (the caller's, this session's): what it holds goes when it ends
            pass
        tb = following


def _free(held: list) -> None:
    for loaded in held:
        loaded.model = loaded.preprocessor = loaded.tokenizer = None
    held.clear()
    gc.collect()  # a model's modules may hold each other in cycles, which reference counting alone leaves
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # the blocks PyTorch keeps for reuse go back to the driver (and other processes)
