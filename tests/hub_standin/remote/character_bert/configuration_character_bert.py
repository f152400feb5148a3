"""Hub stand-in of helboukkouri/character-bert's configuration_character_bert.py: a tiny CharacterBertConfig with the
keys the stand-in's model reads. Not the real code (see modeling_character_bert.py)."""

from transformers import PretrainedConfig


class CharacterBertConfig(PretrainedConfig):
    model_type = "character_bert"

    def __init__(self, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512,
                 character_embedding_dim=8, n_characters=263, max_word_length=50, pad_token_id=0, **kwargs):
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.character_embedding_dim = character_embedding_dim
        self.n_characters = n_characters
        self.max_word_length = max_word_length
        super().__init__(pad_token_id=pad_token_id, **kwargs)
