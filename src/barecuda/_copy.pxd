"""Copies (see _copy.pyx)."""
