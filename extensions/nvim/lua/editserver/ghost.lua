--- Ghost text: inline completions at the cursor in insert mode.
---
--- Design decisions:
--- - Neovim 0.12+: rendering, requests and accepting are `vim.lsp.inline_completion`'s; this module
---   only adds partial accept, dismiss and telemetry around it. Older Neovim (or `fim.native =
---   false`): the same behaviour drawn with a plain extmark (inline virtual text + virtual lines).
--- - Telemetry: the suggestion id rides in each item's `editserver.inlineAccepted` command. A full
---   accept runs that command (the server records it); partial accepts send `editserver/didAccept`
---   with the accepted text; a suggestion hidden without being accepted sends `didReject`;
---   `didShow` goes out when an item is displayed. To see what the native renderer displays, the
---   RPC client is wrapped (`wrap_rpc`) so inlineCompletion responses pass through `on_items`.
--- - Partial accept inserts the next word/line of the remaining text itself (same rules as the VS
---   Code extension, see partial.lua); the next keystroke-triggered request brings the rest back.
--- - Keys are expr mappings that fall back to the key's normal meaning when nothing is shown.
--- - After a full accept that completes the line, no ghost text is shown until the user types
---   again (the editor's own re-request right after the accept is answered with nothing): a
---   suggestion nobody asked for at the end of a finished line is noise (a stray `)`).
--- - A typed character that contradicts the ghost text clears it at once (InsertCharPre), instead of
---   leaving the stale text up until the next answer arrives.

local util = require('editserver.util')
local partial = require('editserver.partial')

local api = vim.api
local M = {}

local ns = api.nvim_create_namespace('editserver.ghost')
local METHOD = 'textDocument/inlineCompletion'

---@class editserver.GhostItem
---@field id string?
---@field client_id integer
---@field text string       full insertText
---@field srow integer      range start (0-based row, byte col); the cursor when the item has no range
---@field scol integer
---@field erow integer
---@field ecol integer
---@field command table?
---@field accepted boolean

---@type table<integer, editserver.GhostItem?>  bufnr -> item on screen
local shown = {}
---@type table<integer, {timer: uv.uv_timer_t?, native: boolean, quiet: boolean?}>
local buffers = {}

--- True while answers for `bufnr` are to be dropped (after an accept that completed the line).
local function quiet(bufnr)
  local b = buffers[bufnr]
  return b ~= nil and b.quiet == true
end

local function item_id(item)
  local cmd = item.command
  local arg = cmd and cmd.arguments and cmd.arguments[1]
  return type(arg) == 'table' and type(arg.id) == 'string' and arg.id or nil
end

function M.native_available()
  return vim.lsp.inline_completion ~= nil and vim.lsp.inline_completion.get ~= nil
end

--- Telemetry for what is on screen: reject the previous suggestion when a different one replaces it.
local function set_shown(bufnr, item)
  local prev = shown[bufnr]
  if prev and prev.id and not prev.accepted and (not item or prev.id ~= item.id) then
    local client = vim.lsp.get_client_by_id(prev.client_id)
    if client then
      util.notify(client, 'editserver/didReject', { id = prev.id })
    end
  end
  shown[bufnr] = item
  if item and item.id and (not prev or prev.id ~= item.id) then
    local client = vim.lsp.get_client_by_id(item.client_id)
    if client then
      util.notify(client, 'editserver/didShow', { id = item.id })
    end
  end
end

--- Convert the first LSP item of a response into the module's item (byte positions).
local function to_item(bufnr, client, result)
  local items = result and (result.items or result) or {}
  local raw = items[1]
  if not raw then
    return nil
  end
  local text = type(raw.insertText) == 'string' and raw.insertText or (raw.insertText or {}).value or ''
  local srow, scol, erow, ecol
  if raw.range then
    srow, scol = util.to_byte(bufnr, raw.range.start, client.offset_encoding)
    erow, ecol = util.to_byte(bufnr, raw.range['end'], client.offset_encoding)
  else
    local cur = api.nvim_win_get_cursor(vim.fn.bufwinid(bufnr))
    srow, scol = cur[1] - 1, cur[2]
    erow, ecol = srow, scol
  end
  return {
    id = item_id(raw),
    client_id = client.id,
    text = text,
    srow = srow,
    scol = scol,
    erow = erow,
    ecol = ecol,
    command = raw.command,
    accepted = false,
  }
end

--- Called with every inlineCompletion response (native path, via the wrapped RPC client).
function M.on_items(params, result)
  local bufnr = vim.uri_to_bufnr(params.textDocument.uri)
  local client = util.client(bufnr)
  if not client or not buffers[bufnr] or not buffers[bufnr].native or api.nvim_get_mode().mode:sub(1, 1) ~= 'i' then
    return
  end
  set_shown(bufnr, to_item(bufnr, client, result))
end

--- Wrap an RPC client so inlineCompletion responses are observed after the normal handler ran.
function M.wrap_rpc(rpc)
  local request = rpc.request
  rpc.request = function(method, params, callback, notify_reply_callback)
    if method == METHOD and callback then
      local inner = callback
      callback = function(err, result, ...)
        local ok, bufnr = pcall(vim.uri_to_bufnr, params.textDocument.uri)
        if ok and quiet(bufnr) then
          result = { items = {} }
        end
        local r = { inner(err, result, ...) }
        if not err then
          pcall(M.on_items, params, result)
        end
        return unpack(r)
      end
    end
    return request(method, params, callback, notify_reply_callback)
  end
  return rpc
end

-- ---- the plugin's own renderer (Neovim < 0.12 or fim.native = false) ----------------------------

--- The part of the item not yet in the buffer: text after what was typed between range start and cursor.
local function remaining(bufnr, item)
  local cur = api.nvim_win_get_cursor(vim.fn.bufwinid(bufnr))
  local row, col = cur[1] - 1, cur[2]
  if row ~= item.srow or col < item.scol then
    return item.text, row, col
  end
  local typed = api.nvim_buf_get_text(bufnr, row, item.scol, row, col, {})[1] or ''
  if item.text:sub(1, #typed) == typed then
    return item.text:sub(#typed + 1), row, col
  end
  return item.text, row, col
end

local function draw(bufnr)
  api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
  local item = shown[bufnr]
  if not item then
    return
  end
  local rest, row, col = remaining(bufnr, item)
  local lines = vim.split(rest, '\n', { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    table.insert(virt_lines, { { lines[i], 'EditserverGhost' } })
  end
  api.nvim_buf_set_extmark(bufnr, ns, row, col, {
    virt_text = { { lines[1], 'EditserverGhost' } },
    virt_text_pos = 'inline',
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = 'combine',
  })
end

local function hide(bufnr)
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
  end
end

local function request(bufnr)
  local client = util.client(bufnr)
  if not client or api.nvim_get_mode().mode:sub(1, 1) ~= 'i' then
    return
  end
  local tick = api.nvim_buf_get_changedtick(bufnr)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 2 } -- Automatic
  util.request(client, METHOD, params, function(err, result)
    if err or not api.nvim_buf_is_valid(bufnr) or api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return
    end
    if api.nvim_get_mode().mode:sub(1, 1) ~= 'i' or api.nvim_get_current_buf() ~= bufnr then
      return
    end
    local item = to_item(bufnr, client, result)
    if item and (remaining(bufnr, item) == '' or quiet(bufnr)) then
      item = nil
    end
    set_shown(bufnr, item)
    draw(bufnr)
  end, bufnr)
end

local function schedule_request(bufnr, debounce_ms)
  local b = buffers[bufnr]
  hide(bufnr)
  if b.timer then
    b.timer:stop()
    b.timer:close()
  end
  b.timer = vim.defer_fn(function()
    b.timer = nil
    if api.nvim_buf_is_valid(bufnr) and api.nvim_get_current_buf() == bufnr then
      request(bufnr)
    end
  end, debounce_ms)
end

-- ---- public API -------------------------------------------------------------------------------

---@param client vim.lsp.Client
---@param bufnr integer
---@param opts editserver.Options
function M.attach(client, bufnr, opts)
  if buffers[bufnr] or not opts.fim.enabled then
    return
  end
  local native = opts.fim.native ~= false and M.native_available()
  buffers[bufnr] = { native = native }
  local group = api.nvim_create_augroup('editserver.ghost.' .. bufnr, { clear = true })
  if native then
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
  else
    api.nvim_create_autocmd({ 'InsertEnter', 'TextChangedI', 'CursorMovedI' }, {
      group = group,
      buffer = bufnr,
      callback = function()
        if shown[bufnr] and shown[bufnr].accepted then
          shown[bufnr] = nil
        end
        schedule_request(bufnr, opts.debounce_ms)
      end,
    })
  end
  api.nvim_create_autocmd('InsertLeave', {
    group = group,
    buffer = bufnr,
    callback = function()
      buffers[bufnr].quiet = false
      hide(bufnr)
      set_shown(bufnr, nil)
    end,
  })
  api.nvim_create_autocmd('InsertCharPre', {
    group = group,
    buffer = bufnr,
    callback = function()
      local b = buffers[bufnr]
      b.quiet = false -- the user typed: a fresh request may show again
      local item = shown[bufnr]
      if not item or item.accepted then
        return
      end
      local rest = remaining(bufnr, item)
      local ch = vim.v.char
      if rest ~= '' and rest:sub(1, #ch) ~= ch then
        M.clear_stale(bufnr)
      end
    end,
  })
  api.nvim_create_autocmd({ 'BufUnload', 'LspDetach' }, {
    group = group,
    buffer = bufnr,
    callback = function(ev)
      if ev.event == 'LspDetach' and ev.data.client_id ~= client.id then
        return
      end
      M.detach(bufnr)
    end,
  })
end

function M.detach(bufnr)
  local b = buffers[bufnr]
  if not b then
    return
  end
  if b.timer then
    b.timer:stop()
    b.timer:close()
  end
  if b.native and api.nvim_buf_is_valid(bufnr) then
    vim.lsp.inline_completion.enable(false, { bufnr = bufnr })
  end
  hide(bufnr)
  shown[bufnr] = nil
  buffers[bufnr] = nil
  pcall(api.nvim_del_augroup_by_name, 'editserver.ghost.' .. bufnr)
end

--- The suggestion on screen in `bufnr` (nil if none): {id, text, ...}.
function M.current(bufnr)
  return shown[util.buf(bufnr)]
end

local function exec_command(client, command, bufnr)
  if util.has_011 then
    client:exec_cmd(command, { bufnr = bufnr })
  else
    util.request(client, 'workspace/executeCommand', command, function() end, bufnr)
  end
end

--- Hide a suggestion the user's typing contradicts (didReject), at once.
function M.clear_stale(bufnr)
  local b = buffers[bufnr]
  if not b or not shown[bufnr] then
    return
  end
  set_shown(bufnr, nil)
  if b.native then
    -- InsertCharPre forbids some changes (textlock): drop the drawn text now, reset the module after
    local ns_native = api.nvim_get_namespaces()['nvim.lsp.inline_completion']
    if ns_native then
      pcall(api.nvim_buf_clear_namespace, bufnr, ns_native, 0, -1)
    end
  else
    hide(bufnr)
  end
end

--- After a full accept: stay quiet until the user types, when the accept finished the line.
local function quiet_if_line_done(bufnr)
  vim.schedule(function()
    local b = buffers[bufnr]
    if not b or not api.nvim_buf_is_valid(bufnr) or api.nvim_get_current_buf() ~= bufnr then
      return
    end
    local row, col = unpack(api.nvim_win_get_cursor(0))
    local line = api.nvim_buf_get_lines(bufnr, row - 1, row, true)[1]
    if line:sub(col + 1):match('^%s*$') then
      b.quiet = true
      hide(bufnr)
      if b.native then
        local ns_native = api.nvim_get_namespaces()['nvim.lsp.inline_completion']
        if ns_native then
          api.nvim_buf_clear_namespace(bufnr, ns_native, 0, -1)
        end
      end
    end
  end)
end

--- Accept the whole suggestion. Returns false when nothing is shown (the caller falls back).
function M.accept(bufnr)
  bufnr = util.buf(bufnr)
  local b, item = buffers[bufnr], shown[bufnr]
  if not b or not item then
    return false
  end
  if b.native then
    if not vim.lsp.inline_completion.get({ bufnr = bufnr }) then
      return false
    end
    item.accepted = true
    quiet_if_line_done(bufnr)
    return true
  end
  item.accepted = true
  vim.schedule(function()
    hide(bufnr)
    local row, col = util.set_text(bufnr, item.srow, item.scol, item.erow, item.ecol, item.text)
    util.set_cursor(bufnr, row, col)
    local client = vim.lsp.get_client_by_id(item.client_id)
    if client and item.command then
      exec_command(client, item.command, bufnr)
    end
    quiet_if_line_done(bufnr)
  end)
  return true
end

--- Insert the next word/line of the suggestion at the cursor and report it (didAccept partial).
local function insert_partial(bufnr, item, kind)
  local rest, row, col = remaining(bufnr, item)
  local slice = partial.slice(rest, kind)
  if slice == '' then
    return
  end
  local erow, ecol = util.set_text(bufnr, row, col, row, col, slice)
  util.set_cursor(bufnr, erow, ecol)
  local client = vim.lsp.get_client_by_id(item.client_id)
  if client and item.id then
    util.notify(client, 'editserver/didAccept', { id = item.id, partial = kind, acceptedText = slice })
  end
end

---@param kind "word"|"line"
function M.accept_partial(kind, bufnr)
  bufnr = util.buf(bufnr)
  local b, item = buffers[bufnr], shown[bufnr]
  if not b or not item then
    return false
  end
  -- A partially accepted suggestion is not rejected when the next one replaces it.
  item.accepted = true
  if b.native then
    return vim.lsp.inline_completion.get({
      bufnr = bufnr,
      on_accept = function()
        insert_partial(bufnr, item, kind)
      end,
    })
  end
  vim.schedule(function()
    hide(bufnr)
    insert_partial(bufnr, item, kind)
  end)
  return true
end

--- Hide the suggestion (didReject). Returns false when nothing is shown.
function M.dismiss(bufnr)
  bufnr = util.buf(bufnr)
  local b = buffers[bufnr]
  if not b or not shown[bufnr] then
    return false
  end
  set_shown(bufnr, nil)
  if b.native then
    -- The native module has no dismiss: re-enabling drops its current item and clears the text.
    vim.lsp.inline_completion.enable(false, { bufnr = bufnr })
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
  else
    if b.timer then
      b.timer:stop()
      b.timer:close()
      b.timer = nil
    end
    hide(bufnr)
  end
  return true
end

return M
