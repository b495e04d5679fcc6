--- Small helpers shared by the plugin's modules: LSP calls that work on Neovim 0.10-0.12, and
--- conversions between LSP positions and buffer byte positions.
---
--- Design decisions:
--- - 0.11 made LSP client methods colon-calls (`client:request`); 0.10 needs dot-calls. One shim
---   here instead of version checks at every call site.
--- - Positions are converted with the client's negotiated offset encoding (utf-8/16/32), because
---   the server may count columns in UTF-16 units while buffers are bytes.

local M = {}

M.name = 'editserver'
M.has_011 = vim.fn.has('nvim-0.11') == 1

function M.request(client, method, params, handler, bufnr)
  if M.has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

function M.notify(client, method, params)
  if M.has_011 then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

--- `bufnr`, with nil and 0 meaning the current buffer.
function M.buf(bufnr)
  return (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
end

---@return vim.lsp.Client?
function M.client(bufnr)
  return vim.lsp.get_clients({ name = M.name, bufnr = bufnr })[1]
end

local function byteindex(line, index, encoding)
  if encoding == 'utf-8' then
    return math.min(index, #line)
  end
  local ok, col
  if M.has_011 then
    ok, col = pcall(vim.str_byteindex, line, encoding, index, false)
  else
    ok, col = pcall(vim.str_byteindex, line, index, encoding == 'utf-16')
  end
  return ok and col or #line
end

--- LSP position -> 0-based (row, byte col), clamped to the buffer.
function M.to_byte(bufnr, pos, encoding)
  local count = vim.api.nvim_buf_line_count(bufnr)
  if pos.line >= count then
    local last = vim.api.nvim_buf_get_lines(bufnr, count - 1, count, true)[1]
    return count - 1, #last
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, true)[1]
  return pos.line, byteindex(line, pos.character, encoding)
end

function M.get_text(bufnr, srow, scol, erow, ecol)
  return table.concat(vim.api.nvim_buf_get_text(bufnr, srow, scol, erow, ecol, {}), '\n')
end

--- Position right after `text` when it is inserted at (row, col).
function M.end_of(row, col, text)
  local lines = vim.split(text, '\n', { plain = true })
  if #lines == 1 then
    return row, col + #text
  end
  return row + #lines - 1, #lines[#lines]
end

--- Replace a byte range with `text`; returns the position after the inserted text.
function M.set_text(bufnr, srow, scol, erow, ecol, text)
  vim.api.nvim_buf_set_text(bufnr, srow, scol, erow, ecol, vim.split(text, '\n', { plain = true }))
  return M.end_of(srow, scol, text)
end

--- Set the cursor of the window showing `bufnr` (0-based row, byte col).
function M.set_cursor(bufnr, row, col)
  local win = vim.fn.bufwinid(bufnr)
  if win ~= -1 then
    vim.api.nvim_win_set_cursor(win, { row + 1, col })
  end
end

return M
