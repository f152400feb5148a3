"""References: what converted weights are checked against (the original CRAFT module, the reference vision
packages and ONNX runtime, CTranslate2's Whisper transcription, the ``gguf`` package's dequantised tensors).

May import: the foundation modules, ``models``.
"""
