"""editserver's language server (pygls): documents in, inline completions and next edits out."""
