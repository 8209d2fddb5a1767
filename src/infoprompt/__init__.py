"""InfoPrompt: information-theoretic soft prompt tuning of frozen encoders."""

__version__ = "0.1.0"
