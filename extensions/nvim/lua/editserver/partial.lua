--- Partial accept: which prefix of a suggestion "accept word" / "accept line" takes.
---
--- Design decisions (the same rules as the VS Code extension's src/logic/partial.ts):
--- - A word is leading whitespace (newlines included) plus one run of word characters or one run
---   of punctuation. Word characters are ASCII letters, digits, `_` and any non-ASCII byte (so
---   UTF-8 letters are never split; Lua patterns are byte-based).
--- - A line is the text up to the first line break; when the text starts with a line break, the
---   break plus the following line, so repeated "accept line" walks down the suggestion.

local M = {}

---@param text string
---@return string
function M.word(text)
  local ws = text:match('^%s*')
  local rest = text:sub(#ws + 1)
  local w = rest:match('^[%w_\128-\255]+') or rest:match('^[^%w_%s\128-\255]+') or ''
  return ws .. w
end

---@param text string
---@return string
function M.line(text)
  local nl = text:match('^\r?\n') or ''
  return nl .. text:sub(#nl + 1):match('^[^\r\n]*')
end

---@param text string
---@param kind "word"|"line"
function M.slice(text, kind)
  return kind == 'word' and M.word(text) or M.line(text)
end

return M
