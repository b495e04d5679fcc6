--- Next edits on screen: extmark geometry of hunks and edits, and drawing them.
---
--- Design decisions:
--- - Every hunk is an invisible range extmark in `ns_track` (so applying one moves the others
---   with the text); each edit also has one over its whole original range (`whole`), which says
---   which lines a multi-line preview shows.
--- - A one-line edit is drawn inline: its old tokens struck through, its new tokens as inline
---   virtual text after them. A multi-line edit keeps its lines (old tokens struck through) and
---   previews the new lines below as virtual lines: changed tokens `EditserverNextEditInsert`,
---   the rest `EditserverNextEditPreview`. No signs: the sign column never appears or shifts text.

local util = require('editserver.util')

local api = vim.api
local M = {}

M.ns_show = api.nvim_create_namespace('editserver.next_edit')
M.ns_track = api.nvim_create_namespace('editserver.next_edit.track')
local ns_track = M.ns_track

function M.hunk_range(bufnr, h)
  local m = api.nvim_buf_get_extmark_by_id(bufnr, ns_track, h.mark, { details = true })
  return m[1], m[2], m[3].end_row, m[3].end_col
end

function M.track(bufnr, srow, scol, erow, ecol)
  return api.nvim_buf_set_extmark(bufnr, ns_track, srow, scol, {
    end_row = erow,
    end_col = ecol,
    right_gravity = true, -- text inserted right before the hunk is not part of it
    end_right_gravity = false, -- nor text inserted right after it
  })
end

function M.before(ar, ac, br, bc)
  return ar < br or (ar == br and ac < bc)
end

--- The edit's whole range (union of its hunks).
function M.edit_range(bufnr, e)
  local sr, sc, er, ec
  for _, h in ipairs(e.hunks) do
    local a, b, c, d = M.hunk_range(bufnr, h)
    if not sr or M.before(a, b, sr, sc) then
      sr, sc = a, b
    end
    if not er or M.before(er, ec, c, d) then
      er, ec = c, d
    end
  end
  return sr, sc, er, ec
end

function M.sorted_hunks(bufnr, e)
  local hs = vim.list_slice(e.hunks)
  table.sort(hs, function(x, y)
    local a, b = M.hunk_range(bufnr, x)
    local c, d = M.hunk_range(bufnr, y)
    return M.before(a, b, c, d)
  end)
  return hs
end

--- Chunks {text, kind} of the text from (row, 0) to the end of `last_row` with the hunks applied;
--- kind is "same" or "new".
local function applied_chunks(bufnr, e, row, last_row)
  local chunks = {}
  local r, c = row, 0
  for _, h in ipairs(M.sorted_hunks(bufnr, e)) do
    local sr, sc, er, ec = M.hunk_range(bufnr, h)
    table.insert(chunks, { util.get_text(bufnr, r, c, sr, sc), 'same' })
    table.insert(chunks, { h.new, 'new' })
    r, c = er, ec
  end
  local tail = api.nvim_buf_get_lines(bufnr, last_row, last_row + 1, true)[1]
  table.insert(chunks, { util.get_text(bufnr, r, c, last_row, #tail), 'same' })
  return chunks
end

--- Split chunks into virtual lines.
local function to_virt_lines(chunks)
  local lines, cur = {}, {}
  for _, ch in ipairs(chunks) do
    local parts = vim.split(ch[1], '\n', { plain = true })
    for i, p in ipairs(parts) do
      if i > 1 then
        table.insert(lines, cur)
        cur = {}
      end
      if p ~= '' then
        table.insert(cur, { p, ch[2] == 'new' and 'EditserverNextEditInsert' or 'EditserverNextEditPreview' })
      end
    end
  end
  table.insert(lines, cur)
  for i, l in ipairs(lines) do
    if #l == 0 then
      lines[i] = { { ' ', 'EditserverNextEditPreview' } }
    end
  end
  return lines
end

function M.render(bufnr, set)
  api.nvim_buf_clear_namespace(bufnr, M.ns_show, 0, -1)
  if not set then
    return
  end
  for _, e in ipairs(set.edits) do
    for _, h in ipairs(e.hunks) do
      local sr, sc, er, ec = M.hunk_range(bufnr, h)
      if sr ~= er or sc ~= ec then
        api.nvim_buf_set_extmark(bufnr, M.ns_show, sr, sc, {
          end_row = er,
          end_col = ec,
          hl_group = 'EditserverNextEditDelete',
        })
      end
      if not e.preview and h.new ~= '' then
        api.nvim_buf_set_extmark(bufnr, M.ns_show, er, ec, {
          virt_text = { { h.new, 'EditserverNextEditInsert' } },
          virt_text_pos = 'inline',
        })
      end
    end
    if e.preview then
      local m = api.nvim_buf_get_extmark_by_id(bufnr, ns_track, e.whole, { details = true })
      local sr, er = m[1], m[3].end_row
      api.nvim_buf_set_extmark(bufnr, M.ns_show, er, 0, {
        virt_lines = to_virt_lines(applied_chunks(bufnr, e, sr, er)),
      })
    end
  end
end

--- The text the edit's whole range becomes.
function M.new_text_of(bufnr, e)
  local sr, sc, er, ec = M.edit_range(bufnr, e)
  local out, r, c = {}, sr, sc
  for _, h in ipairs(M.sorted_hunks(bufnr, e)) do
    local a, b, x, y = M.hunk_range(bufnr, h)
    table.insert(out, util.get_text(bufnr, r, c, a, b))
    table.insert(out, h.new)
    r, c = x, y
  end
  table.insert(out, util.get_text(bufnr, r, c, er, ec))
  return table.concat(out)
end

return M
