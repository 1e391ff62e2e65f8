"""The Python consumer shell."""
