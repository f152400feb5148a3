"""Hub stand-in of almanach/manta-lm-base's configuration_manta.py: a tiny MantaConfig with the keys the stand-in's
model reads. Not the real code (see modeling_manta.py)."""

from transformers import PretrainedConfig


class MantaConfig(PretrainedConfig):
    model_type = "manta"

    def __init__(self, vocab_size=384, byte_embedding_dim=16, d_model=32, num_layers=2, num_decoder_layers=2,
                 num_heads=4, frontier_byte=35, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, **kwargs):
        self.vocab_size = vocab_size
        self.byte_embedding_dim = byte_embedding_dim
        self.d_model = d_model
        self.num_layers = num_layers
        self.num_decoder_layers = num_decoder_layers
        self.num_heads = num_heads
        self.frontier_byte = frontier_byte
        kwargs["is_encoder_decoder"] = True
        super().__init__(pad_token_id=pad_token_id, eos_token_id=eos_token_id,
                         decoder_start_token_id=decoder_start_token_id, **kwargs)
