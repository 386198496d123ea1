"""HF chat-template models: the model's own Jinja template renders, its family's parser reads."""
