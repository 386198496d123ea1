"""gpt-oss: harmony messages rendered and parsed with openai-harmony."""
