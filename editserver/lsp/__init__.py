"""editserver's language server (pygls): documents in, inline completions and next edits out.

The house has floors, and every import in it points down: a module imports only modules of a lower
floor, never one of its own floor or above; ``if TYPE_CHECKING:`` imports and imports inside
functions count too (tests/test_layers.py ``test_lsp_floors`` reads the table below). So there is
no import circle, and each floor can be read, and tested, knowing only the floors below it. The
package files (this one, nextedit/__init__.py) import nothing.

    0  documents privacy packages budget history telemetry
    1  settings treesitter model_client
    2  symbols rewrite telemetry_cli
    3  index
    4  state
    5  fim indexing nextedit.plan
    6  nextedit.ask
    7  nextedit.vet nextedit.reply
    8  server
    9  cli
    10 __main__

- 0-3, data and the code over it: open documents and ``uri_to_path``, excludeFiles, Go and Rust
  imports, the model's token limits, the edit history and recently viewed files, the local
  telemetry file; the settings, parse trees (``treesitter``: regions, uses, definitions), the model
  server's HTTP client (``model_client``); definitions/imports/uses per file (``symbols``), a
  region's prompt and a rewrite as minimal edits (``rewrite``); the workspace symbol ``index``.
- 4, ``state``: all the server shares (``ls.state``). It never imports the server, a handler or a
  stage.
- 5-7, logic over the state: inline completion (``fim``), the index's life (``indexing``), and next
  edits as a pipeline, a module a stage (``nextedit``: plan -> ask -> vet, reply). Logic modules
  take the state or plain values, never the server.
- 8, the face: ``server``, the ``EditLanguageServer`` and every LSP handler, registered in one place;
  9-10, how it starts: ``editserver lsp`` (``cli``), ``python -m editserver.lsp``.
"""
