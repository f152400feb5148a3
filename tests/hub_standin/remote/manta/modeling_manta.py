"""Hub stand-in of almanach/manta-lm-base's modeling_manta.py: tiny, with the input shapes and mask contract of the
real remote code as read in NathanGodey/transformers at 108c43a (src/transformers/models/manta/modeling_manta.py),
not its computation.

The contract kept: ``MantaModel.forward(input_ids, attention_mask, decoder_input_ids, ..., output_hidden_states)``;
the encoder (``get_encoder()``, ``MantaEncoderModel``) embeds bytes, cuts them into blocks at predicted frontiers
(here: a frontier before every byte ``config.frontier_byte``, a space in ByT5's ids; the first byte never starts one),
pools each block (here: the mean of its byte embeddings, projected to d_model) and runs its Transformer over the
blocks WITHOUT an attention mask (the real one passes none to its T5 stack), so in a padded batch the padding bytes
join the last block; the decoder reads bytes (decoder_input_ids), causally, with cross-attention over the encoder's
blocks masked by ``attention_mask``, the BYTE mask, as the real code passes it: given a mask whose length is not the
number of blocks, it fails, as the real code's T5 attention does. Output: ``Seq2SeqModelOutput`` with
``encoder_hidden_states`` (blocks; embeddings + one per layer) and ``decoder_hidden_states`` (bytes).
"""

from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqModelOutput

from .configuration_manta import MantaConfig


class MantaPreTrainedModel(PreTrainedModel):
    config_class = MantaConfig
    base_model_prefix = "manta"

    def _init_weights(self, module):
        pass  # the layers' own initialisation, from the seed set before construction


class MantaEncoderModel(MantaPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.byte_embeddings = nn.Embedding(config.vocab_size, config.byte_embedding_dim)
        self.pool_projection = nn.Linear(config.byte_embedding_dim, config.d_model)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(config.d_model, config.num_heads, 2 * config.d_model, dropout=0.0,
                                       batch_first=True) for _ in range(config.num_layers))

    def blocks(self, input_ids):
        """(batch, bytes) -> (batch, bytes) block index of every byte: a new block at each frontier byte."""
        frontier = input_ids == self.config.frontier_byte
        frontier[:, 0] = False
        return frontier.long().cumsum(dim=1)

    def forward(self, input_ids=None, attention_mask=None, output_hidden_states=None, return_dict=None, **kwargs):
        emb = self.byte_embeddings(input_ids)
        block = self.blocks(input_ids)
        n_blocks = int(block.max()) + 1
        onehot = nn.functional.one_hot(block, n_blocks).to(emb.dtype)  # (batch, bytes, blocks)
        pooled = onehot.transpose(1, 2) @ emb / onehot.sum(dim=1).clamp(min=1)[..., None]
        h = self.pool_projection(pooled)
        states = [h]
        for layer in self.layers:  # no mask: every block is attended, as in the real encoder
            h = layer(h)
            states.append(h)
        return BaseModelOutput(last_hidden_state=h, hidden_states=tuple(states) if output_hidden_states else None)


class MantaModel(MantaPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.encoder = MantaEncoderModel(config)
        self.decoder_embeddings = nn.Embedding(config.vocab_size, config.d_model)
        self.decoder_layers = nn.ModuleList(
            nn.TransformerDecoderLayer(config.d_model, config.num_heads, 2 * config.d_model, dropout=0.0,
                                       batch_first=True) for _ in range(config.num_decoder_layers))
        self.post_init()

    def get_encoder(self):
        return self.encoder

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        enc = self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        memory = enc.last_hidden_state
        cross_mask = None if attention_mask is None else ~attention_mask.bool()  # the byte mask, as the real code
        if cross_mask is not None and cross_mask.shape[1] != memory.shape[1]:
            raise RuntimeError(f"The size of tensor a ({memory.shape[1]}) must match the size of tensor b "
                               f"({cross_mask.shape[1]}) at non-singleton dimension 3")
        h = self.decoder_embeddings(decoder_input_ids)
        causal = nn.Transformer.generate_square_subsequent_mask(h.shape[1], dtype=h.dtype)
        pad = None if decoder_attention_mask is None else ~decoder_attention_mask.bool()
        states = [h]
        for layer in self.decoder_layers:
            h = layer(h, memory, tgt_mask=causal, tgt_key_padding_mask=pad, memory_key_padding_mask=cross_mask)
            states.append(h)
        return Seq2SeqModelOutput(last_hidden_state=h, encoder_last_hidden_state=memory,
                                  encoder_hidden_states=enc.hidden_states if output_hidden_states else None,
                                  decoder_hidden_states=tuple(states) if output_hidden_states else None)


class MantaForConditionalGeneration(MantaModel):
    pass
