"""The Redis backends of the stores (`--state-url`): shared by every gateway process and pod."""
