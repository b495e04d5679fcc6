--- Next edits in other files: "N more in M files", Tab into the next file, the quickfix list.
---
--- Design decisions:
--- - A nextEdit reply's edits each name their file (`textDocument.uri`); those of other files are
---   kept here, one set for the editor (the newest reply's), in the server's order: files that
---   import the changed one first, then by distance in the import graph.
--- - They are announced, not drawn: a virtual line "N more in M files" under the last in-file edit
---   (or the cursor's line once none is left), and `count()` for statuslines.
--- - Tab past the last in-file edit (`next`): the language server applies the next file's edits
---   (`editserver/applyEdits`, which refuses them if the file changed since they were computed,
---   then sends `workspace/applyEdit`), and the file opens at its first edit. A refused file is
---   dropped from the set with a one-line message; the next Tab goes on to the following file.
--- - `:Editserver next_edits` fills the quickfix list with every proposed edit, in-file ones too.

local util = require('editserver.util')

local api = vim.api
local M = {}

M.ns = api.nvim_create_namespace('editserver.next_edit.more')

---@type {id: string, client_id: integer, files: {uri: string, edits: table[]}[]}?
local set = nil
local applying = nil -- the file whose edits the language server is applying (one at a time)

--- Whether a file's edits are being applied (Tab waits for it rather than skipping a file).
function M.busy()
  return applying ~= nil
end

local function clear_hint()
  for _, b in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(b) then
      api.nvim_buf_clear_namespace(b, M.ns, 0, -1)
    end
  end
end

--- {edits = N, files = M} still proposed in other files (nil when none).
function M.count()
  if not set or #set.files == 0 then
    return nil
  end
  local n = 0
  for _, f in ipairs(set.files) do
    n = n + #f.edits
  end
  return { edits = n, files = #set.files }
end

--- The other files' proposed edits: {{uri, edits = {{range, newText}}}} in the server's order.
function M.files()
  return set and vim.deepcopy(set.files) or {}
end

--- Draw the hint in `bufnr` under row `row` (0-based).
function M.hint(bufnr, row)
  clear_hint()
  local c = M.count()
  if not c or not api.nvim_buf_is_valid(bufnr) then
    return
  end
  row = math.min(row, api.nvim_buf_line_count(bufnr) - 1)
  local text = ('%d more in %d file%s (Tab)'):format(c.edits, c.files, c.files == 1 and '' or 's')
  api.nvim_buf_set_extmark(bufnr, M.ns, row, 0, {
    virt_lines = { { { '  ' .. text, 'EditserverNextEditPreview' } } },
  })
end

--- Keep the other files' edits of a reply (or a partial) for `source` (the edited buffer's uri). A
--- reply with edits in its own file only leaves the other files' set of an earlier one as it is.
--- `final`: the whole reply, whose order (the server's ranking) the files take.
function M.add(client, id, edits, source, final)
  local others = {}
  for _, e in ipairs(edits or {}) do
    local uri = type(e) == 'table' and e.textDocument and e.textDocument.uri
    if uri and uri ~= source and e.range and type(e.newText) == 'string' then
      table.insert(others, e)
    end
  end
  if #others == 0 then
    return
  end
  if not set or set.id ~= id then
    set = { id = id, client_id = client.id, files = {} }
  end
  for _, e in ipairs(others) do
    local uri = e.textDocument.uri
    do
      local file
      for _, f in ipairs(set.files) do
        if f.uri == uri then
          file = f
        end
      end
      if not file then
        file = { uri = uri, edits = {} }
        table.insert(set.files, file)
      end
      local dup = false
      for _, x in ipairs(file.edits) do
        dup = dup or vim.deep_equal(x.range, e.range)
      end
      if not dup then
        table.insert(file.edits, { range = e.range, newText = e.newText })
      end
    end
  end
  if final then
    local rank = {}
    for i, e in ipairs(others) do
      rank[e.textDocument.uri] = rank[e.textDocument.uri] or i
    end
    table.sort(set.files, function(a, b)
      return (rank[a.uri] or math.huge) < (rank[b.uri] or math.huge)
    end)
  end
end

function M.clear(reject)
  if set and reject then
    local client = vim.lsp.get_client_by_id(set.client_id)
    if client then
      util.notify(client, 'editserver/didReject', { id = set.id })
    end
  end
  set = nil
  clear_hint()
end

--- Apply the next file's edits (through the language server) and open it at the first one.
--- Returns false when no other file has edits.
function M.next()
  if applying then
    return true -- one file at a time: this Tab waits for the one being applied
  end
  if not set or #set.files == 0 then
    return false
  end
  local client = vim.lsp.get_client_by_id(set.client_id)
  if not client then
    M.clear(false)
    return false
  end
  local file = table.remove(set.files, 1)
  local id = set.id
  applying = file.uri
  util.request(client, 'editserver/applyEdits', { id = id, uri = file.uri }, function(err, res)
    applying = nil
    if err or type(res) ~= 'table' or not res.applied then
      local why = (res and res.reason) or (err and err.message) or 'not applied'
      vim.notify(('editserver: %s: %s'):format(vim.fn.fnamemodify(vim.uri_to_fname(file.uri), ':~:.'), why))
      return
    end
    local bufnr = vim.uri_to_bufnr(file.uri)
    vim.cmd.buffer(bufnr)
    local row, col = util.to_byte(bufnr, res.range.start, client.offset_encoding)
    api.nvim_win_set_cursor(0, { row + 1, col })
    M.hint(bufnr, row)
    api.nvim_exec_autocmds('User', { pattern = 'EditserverCrossFile', modeline = false, data = { uri = file.uri } })
  end)
  return true
end

--- Every proposed edit (those shown in `bufnr` and those in other files) into the quickfix list.
function M.quickfix(shown)
  local items = {}
  for _, e in ipairs(shown or {}) do
    table.insert(items, { bufnr = e.bufnr, lnum = e.range[1] + 1, col = e.range[2] + 1, text = e.new })
  end
  for _, f in ipairs(set and set.files or {}) do
    local fname = vim.uri_to_fname(f.uri)
    local lines = vim.fn.filereadable(fname) == 1 and vim.fn.readfile(fname) or {}
    for _, e in ipairs(f.edits) do
      local s, t = e.range.start, e.range['end']
      local line = lines[s.line + 1] or ''
      local text = e.newText
      if s.line == t.line and not e.newText:find('\n', 1, true) then
        text = line:sub(1, s.character) .. e.newText .. line:sub(t.character + 1)
      end
      table.insert(items, { filename = fname, lnum = s.line + 1, col = s.character + 1, text = vim.trim(text) })
    end
  end
  vim.fn.setqflist({}, ' ', { title = 'editserver next edits', items = items })
  return #items
end

return M
