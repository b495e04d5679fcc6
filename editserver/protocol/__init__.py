"""Wire formats every layer shares: Inception's next-edit prompt layout, FIM answer trimming, and
the language server's telemetry log (its layout and the examples ``align`` reads from it).

Design decisions:
- Standard library only, and no import of any other package of this repository, so the LSP can
  build prompts and the model can parse them without either importing the other
  (tests/test_layers.py enforces it).
"""
