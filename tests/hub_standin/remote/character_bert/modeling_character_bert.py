"""Hub stand-in of helboukkouri/character-bert's modeling code: tiny, with the input shapes and mask contract of the
authors' CharacterBertModel (github.com/helboukkouri/character-bert at e2396a6, modeling/character_bert.py and
modeling/character_cnn.py), not its computation.

The contract kept: ``input_ids`` are (batch, words, 50) character ids (0 = a padding word, as the authors'
CharacterIndexer pads), ``attention_mask`` (batch, words); each word's vector comes from its own characters (here: an
embedding of the 262 + 1 character ids, one convolution and a max over the 50 characters, where the real model has
ELMo's character CNN and highway layers), plus a position embedding per word; the Transformer layers attend to the
words the mask keeps. Output: ``hidden_states`` (batch, words, hidden) for the embeddings and each layer. Any input
of another shape fails, as the real model's ``input_ids[:, :, 0]`` does.
"""

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from .configuration_character_bert import CharacterBertConfig


class CharacterBertModel(PreTrainedModel):
    config_class = CharacterBertConfig
    base_model_prefix = "character_bert"

    def __init__(self, config):
        super().__init__(config)
        self.char_embeddings = nn.Embedding(config.n_characters, config.character_embedding_dim, padding_idx=0)
        self.char_cnn = nn.Conv1d(config.character_embedding_dim, config.hidden_size, kernel_size=3, padding=1)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(config.hidden_size, config.num_attention_heads, 2 * config.hidden_size,
                                       dropout=0.0, batch_first=True) for _ in range(config.num_hidden_layers))
        self.post_init()

    def _init_weights(self, module):
        pass  # the layers' own initialisation, from the seed set before construction

    def forward(self, input_ids=None, attention_mask=None, output_hidden_states=None, return_dict=None, **kwargs):
        if input_ids.dim() != 3 or input_ids.shape[-1] != self.config.max_word_length:
            raise ValueError(f"CharacterBERT takes (batch, words, {self.config.max_word_length}) character ids, got "
                             f"{tuple(input_ids.shape)}")
        batch, words, chars = input_ids.shape
        c = self.char_embeddings(input_ids.reshape(batch * words, chars)).transpose(1, 2)
        w = self.char_cnn(c).max(dim=2).values.reshape(batch, words, -1)
        h = self.norm(w + self.position_embeddings(torch.arange(words, device=input_ids.device))[None])
        pad = None if attention_mask is None else ~attention_mask.bool()
        states = [h]
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=pad)
            states.append(h)
        return BaseModelOutput(last_hidden_state=h, hidden_states=tuple(states) if output_hidden_states else None)
