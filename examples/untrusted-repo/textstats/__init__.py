"""textstats: tiny text statistics (lines, words, characters, most common words)."""

from .counting import Stats, count_text, top_words

__all__ = ["Stats", "count_text", "top_words"]
__version__ = "0.1.0"
