"""Next edits as a pipeline, one module a stage: plan -> ask -> vet -> reply.

Floors 5-7 (see lsp/__init__.py); this package file imports nothing. The handlers (server.py
``next_edit``, ``copilot_inline_edit``, ``apply_edits``) run the stages in order; no stage imports
a later one or the server.

- ``plan.py`` (floor 5): what changed since the document's previous request, whether an automatic
  request asks at all, and which regions to ask about: in the edited file, and in the files that
  import a changed name (cross-file planning).
- ``ask.py`` (floor 6): one prompt per region, the model calls (the best region first), and each
  rewritten region as minimal edits, handed on as it arrives. No vetting.
- ``vet.py`` (floor 7): what must never be shown, and the ranking of what is; the one place both are
  decided, answer by answer as ``ask`` hands them on (``Vetter``).
- ``reply.py`` (floor 7): the request's telemetry row under its one id, the reply shapes (nextEdit,
  Copilot's copilotInlineEdit, the nextEditPartial notifications), and the suggestions kept for
  ``editserver/applyEdits``.

The handler makes the request's one id (telemetry, partials, the reply and applyEdits all carry it)
and owns cancellation: a newer request for the same document, or a change to it, cancels the older
request's task (and its HTTP calls), which answers ``skipped: "superseded by a newer edit"``; a
client's ``$/cancelRequest`` is passed through to pygls, which answers RequestCancelled.
"""
