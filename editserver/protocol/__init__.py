"""Wire formats every layer shares: Inception's next-edit prompt layout and FIM answer trimming.

Design decisions:
- Standard library only, and no import of any other package of this repository, so the LSP can
  build prompts and the model can parse them without either importing the other
  (tests/test_layers.py enforces it).
"""
