--- Next edits: proposed edits anywhere in the buffer, drawn where they are, applied with keys.
---
--- Design decisions:
--- - When to ask: at once on leaving insert mode having typed something, or once idle
---   (`next_edit.debounce_ms`) after a normal-mode change; a bare InsertLeave asks nothing. Requests say
---   `trigger = "auto"`, and the language server asks the model only when the edit renamed
---   something, changed a literal or a signature. Any new edit cancels the request in flight.
--- - Streaming: requests ask for `partialResults`; each `editserver/nextEditPartial` is drawn as it
---   arrives (best regions first, as the server finishes them), the final reply completes the set
---   and gives each edit its index.
--- - Each edit is split into token hunks (diff.lua), each tracked by an invisible range extmark so
---   applying one moves the others with the text.
--- - Drawing, as Copilot's next edits do: a one-line change shows only its changed tokens inline
---   (old tokens struck through, new tokens after them); a multi-line change leaves the lines as
---   they are (changed tokens struck through) and previews the new lines below them as virtual
---   lines, changed tokens highlighted. No signs: the sign column never appears or shifts text.
--- - `jump` goes to the next edit in document order from the cursor (wrapping); on an edit's lines
---   it applies that edit, so <Tab><Tab> = go there, apply. Past the last one, edits the reply
---   proposed in other files follow (crossfile.lua): Tab applies the next file's and opens it.
--- - Leaving insert mode after typing asks at once (the edit is done); a normal-mode change (`x`,
---   `p`, `.`) waits `next_edit.debounce_ms`, since another may follow.
--- - Partial accept applies whole hunks: "word" the next hunk, "line" every hunk starting on its
---   line, so the buffer never holds half a token of either side.
--- - Any edit the user makes while edits are shown rejects them (didReject); the plugin's own changes
---   are recognised by changedtick.

local util = require('editserver.util')
local diff = require('editserver.diff')
local draw = require('editserver.nextedit_draw')
local crossfile = require('editserver.crossfile')

local api = vim.api
local M = {}

M.ns_show = draw.ns_show
local ns_track = draw.ns_track
local METHOD = 'editserver/nextEdit'

---@type table<integer, table>  per buffer: {set?, timer?, own_tick?, insert_tick?, pending?, opts, last?}
local buffers = {}

local hunk_range, track, before, edit_range = draw.hunk_range, draw.track, draw.before, draw.edit_range
local sorted_hunks, new_text_of = draw.sorted_hunks, draw.new_text_of

local function render(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
  draw.render(bufnr, set)
  -- "N more in M files" under the last in-file edit, or the cursor's line once none is left
  local row = api.nvim_win_get_cursor(vim.fn.bufwinid(bufnr) ~= -1 and vim.fn.bufwinid(bufnr) or 0)[1] - 1
  if set then
    row = 0
    for _, e in ipairs(set.edits) do
      local _, _, erow = draw.edit_range(bufnr, e)
      row = math.max(row, erow)
    end
  end
  crossfile.hint(bufnr, row)
end

local function clear(bufnr)
  local b = buffers[bufnr]
  if b then
    b.set = nil
  end
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns_show, 0, -1)
    api.nvim_buf_clear_namespace(bufnr, ns_track, 0, -1)
  end
end

local function send(set, method, params)
  local client = vim.lsp.get_client_by_id(set.client_id)
  if client then
    util.notify(client, method, params)
  end
end

--- Proposed edits in `bufnr`, for statuslines and tests:
--- {id, edits = {{index, range = {srow, scol, erow, ecol}, old, new, preview, hunks}}}.
function M.current(bufnr)
  bufnr = util.buf(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
  if not set then
    return nil
  end
  local out = { id = set.id, edits = {} }
  for _, e in ipairs(set.edits) do
    local srow, scol, erow, ecol = edit_range(bufnr, e)
    table.insert(out.edits, {
      index = e.index,
      range = { srow, scol, erow, ecol },
      old = util.get_text(bufnr, srow, scol, erow, ecol),
      new = new_text_of(bufnr, e),
      preview = e.preview,
      hunks = #e.hunks,
    })
  end
  return out
end

--- The last final nextEdit reply for `bufnr`: {id, count, skipped?, partials}.
function M.last(bufnr)
  local b = buffers[util.buf(bufnr)]
  return b and b.last
end

function M.visible(bufnr)
  local b = buffers[util.buf(bufnr)]
  return b ~= nil and b.set ~= nil
end

local function key_of(e)
  return ('%d:%d:%d:%d:%s'):format(e.range.start.line, e.range.start.character, e.range['end'].line, e.range['end'].character, e.newText)
end

--- Add server edits (LSP shape) to the buffer's set `id`, creating it when needed.
local function add(bufnr, client, id, edits, first_index)
  local b = buffers[bufnr]
  if not b.set or b.set.id ~= id then
    clear(bufnr)
    b.set = { id = id, client_id = client.id, edits = {}, shown = false }
  end
  local set = b.set
  local uri = vim.uri_from_bufnr(bufnr)
  crossfile.add(client, id, edits, uri, first_index == 0)
  for i, e in ipairs(edits) do
    local key = type(e) == 'table' and e.range and type(e.newText) == 'string' and key_of(e)
    local dup = false
    for _, x in ipairs(set.edits) do
      if key and x.key == key then
        x.index = first_index and (first_index + i - 1) or x.index
        dup = true
      end
    end
    if key and not dup and e.textDocument and e.textDocument.uri == uri then
      local srow, scol = util.to_byte(bufnr, e.range.start, client.offset_encoding)
      local erow, ecol = util.to_byte(bufnr, e.range['end'], client.offset_encoding)
      local old = util.get_text(bufnr, srow, scol, erow, ecol)
      if old ~= e.newText then
        local edit = { index = (first_index or #set.edits) + i - 1, key = key, hunks = {} }
        edit.whole = track(bufnr, srow, scol, erow, ecol) -- the previewed lines
        edit.preview = old:find('\n', 1, true) ~= nil or e.newText:find('\n', 1, true) ~= nil
        for _, h in ipairs(diff.hunks(old, e.newText)) do
          local hr, hc = util.end_of(srow, scol, old:sub(1, h.off))
          local her, hec = util.end_of(hr, hc, h.old)
          table.insert(edit.hunks, { mark = track(bufnr, hr, hc, her, hec), new = h.new })
        end
        table.insert(set.edits, edit)
      end
    end
  end
  if #set.edits == 0 then
    b.set = nil
    render(bufnr)
    return
  end
  render(bufnr)
  if not set.shown then
    set.shown = true
    send(set, 'editserver/didShow', { id = set.id })
  end
end

--- Show a whole nextEdit reply (replaces what is shown).
function M.show(bufnr, client, result)
  bufnr = util.buf(bufnr)
  clear(bufnr)
  if type(result) ~= 'table' or type(result.id) ~= 'string' or type(result.edits) ~= 'table' then
    return
  end
  add(bufnr, client, result.id, result.edits, 0)
end

local function usable(bufnr, b, version)
  return api.nvim_buf_is_valid(bufnr)
    and b.pending ~= nil
    and api.nvim_buf_get_changedtick(bufnr) == b.pending.tick
    and (version == nil or version == b.pending.version)
    and api.nvim_get_mode().mode:sub(1, 1) ~= 'i' -- typing: ghost text has the floor
end

--- `editserver/nextEditPartial`: one region's edits, drawn as soon as they arrive.
function M.on_partial(_, params, ctx)
  if type(params) ~= 'table' or type(params.textDocument) ~= 'table' or type(params.edits) ~= 'table' then
    return
  end
  local bufnr = vim.uri_to_bufnr(params.textDocument.uri)
  local b = buffers[bufnr]
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  if not b or not client or not usable(bufnr, b, params.textDocument.version) then
    return
  end
  b.pending.partials = b.pending.partials + 1
  add(bufnr, client, params.id, params.edits, nil)
end

local function cancel(bufnr)
  local b = buffers[bufnr]
  local p = b and b.pending
  if not p then
    return
  end
  b.pending = nil
  local client = vim.lsp.get_client_by_id(p.client_id)
  if client and p.request_id then
    if util.has_011 then
      client:cancel_request(p.request_id)
    else
      client.cancel_request(p.request_id)
    end
  end
end

--- Ask the server for next edits at the cursor. `trigger`: "auto" (after an edit) or "manual".
function M.request(bufnr, trigger)
  bufnr = util.buf(bufnr)
  local b = buffers[bufnr]
  local client = util.client(bufnr)
  if not b or not client then
    return false
  end
  cancel(bufnr)
  local pos = vim.lsp.util.make_position_params(0, client.offset_encoding).position
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = pos,
    trigger = trigger or 'manual',
    partialResults = true,
  }
  local pending = {
    tick = api.nvim_buf_get_changedtick(bufnr),
    version = vim.lsp.util.buf_versions[bufnr],
    client_id = client.id,
    partials = 0,
  }
  b.pending = pending
  local _, request_id = util.request(client, METHOD, params, function(err, result)
    if b.pending ~= pending then
      return -- cancelled or superseded
    end
    if err then
      b.pending = nil
      return -- the server logged it; a failed suggestion is not worth interrupting the user
    end
    b.last = {
      id = type(result) == 'table' and result.id or nil,
      count = type(result) == 'table' and type(result.edits) == 'table' and #result.edits or 0,
      skipped = type(result) == 'table' and result.skipped or nil,
      partials = pending.partials,
    }
    if not usable(bufnr, b, nil) then
      b.pending = nil
      return -- the text moved on; a newer request is coming
    end
    b.pending = nil
    if type(result) == 'table' and type(result.id) == 'string' and type(result.edits) == 'table' then
      if #result.edits > 0 then
        add(bufnr, client, result.id, result.edits, 0)
      end
    end
  end, bufnr)
  pending.request_id = request_id
  return true
end

--- Reject and hide what is shown (and, with `others`, the edits proposed in other files).
function M.dismiss(bufnr, others)
  bufnr = util.buf(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
  if others ~= false and crossfile.count() then
    crossfile.clear(not set)
    if not set then
      return true
    end
  end
  if not set then
    return false
  end
  clear(bufnr)
  send(set, 'editserver/didReject', { id = set.id })
  return true
end

local function cursor(bufnr)
  local c = api.nvim_win_get_cursor(vim.fn.bufwinid(bufnr))
  return c[1] - 1, c[2]
end

--- The edit on the cursor's line(s), if any.
local function edit_at_cursor(bufnr, set)
  local row = cursor(bufnr)
  for _, e in ipairs(set.edits) do
    local srow, _, erow = edit_range(bufnr, e)
    if row >= srow and row <= erow then
      return e
    end
  end
end

--- Edits in document order starting at the cursor, wrapping around.
local function order(bufnr, set)
  local row, col = cursor(bufnr)
  local sorted = vim.list_slice(set.edits)
  table.sort(sorted, function(a, b)
    local ar, ac = edit_range(bufnr, a)
    local br, bc = edit_range(bufnr, b)
    return before(ar, ac, br, bc)
  end)
  local after, earlier = {}, {}
  for _, e in ipairs(sorted) do
    local _, _, erow, ecol = edit_range(bufnr, e)
    table.insert((erow > row or (erow == row and ecol >= col)) and after or earlier, e)
  end
  return vim.list_extend(after, earlier)
end

--- Apply hunks of `e` (all of them by default), last first; the cursor ends after the first one.
local function apply_hunks(bufnr, e, hunks)
  local b = buffers[bufnr]
  local crow, ccol
  for i = #hunks, 1, -1 do
    local h = hunks[i]
    local sr, sc, er, ec = hunk_range(bufnr, h)
    crow, ccol = util.set_text(bufnr, sr, sc, er, ec, h.new)
    api.nvim_buf_del_extmark(bufnr, ns_track, h.mark)
    for j, x in ipairs(e.hunks) do
      if x == h then
        table.remove(e.hunks, j)
        break
      end
    end
  end
  b.own_tick = api.nvim_buf_get_changedtick(bufnr)
  if crow then
    util.set_cursor(bufnr, crow, math.max(ccol - 1, 0))
  end
end

local function finish_if_done(bufnr, set, e)
  if #e.hunks == 0 then
    api.nvim_buf_del_extmark(bufnr, ns_track, e.whole)
    for i, x in ipairs(set.edits) do
      if x == e then
        table.remove(set.edits, i)
        break
      end
    end
  end
  if #set.edits == 0 then
    clear(bufnr)
    buffers[bufnr].set = nil
  end
  render(bufnr)
end

--- Apply one edit completely (didAccept with its index).
local function apply(bufnr, set, e)
  apply_hunks(bufnr, e, sorted_hunks(bufnr, e))
  send(set, 'editserver/didAccept', { id = set.id, editIndex = e.index })
  finish_if_done(bufnr, set, e)
end

--- Jump to the next proposed edit; on one, apply it. Returns false when nothing is shown.
function M.jump(bufnr)
  bufnr = util.buf(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
  if not set then
    return crossfile.next()
  end
  local here = edit_at_cursor(bufnr, set)
  if here then
    apply(bufnr, set, here)
    return true
  end
  local target = order(bufnr, set)[1]
  local first = sorted_hunks(bufnr, target)[1]
  local row, col = hunk_range(bufnr, first)
  util.set_cursor(bufnr, row, col)
  return true
end

--- Apply the edit on the cursor's line, or the next one, without jumping first.
function M.accept(bufnr)
  bufnr = util.buf(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
  if not set then
    return false
  end
  apply(bufnr, set, edit_at_cursor(bufnr, set) or order(bufnr, set)[1])
  return true
end

--- Accept the next hunk ("word") or the hunks of the next line ("line") of the edit on the cursor's
--- line (jumps there first if none is).
---@param kind "word"|"line"
function M.accept_partial(kind, bufnr)
  bufnr = util.buf(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
  if not set then
    return false
  end
  local e = edit_at_cursor(bufnr, set)
  if not e then
    return M.jump(bufnr)
  end
  local hs = sorted_hunks(bufnr, e)
  local take = { hs[1] }
  if kind == 'line' then
    local row = hunk_range(bufnr, hs[1])
    for i = 2, #hs do
      if hunk_range(bufnr, hs[i]) == row then
        table.insert(take, hs[i])
      end
    end
  end
  local text = {}
  for _, h in ipairs(take) do
    table.insert(text, h.new)
  end
  -- apply_hunks applies in reverse, so the cursor ends after the first one taken
  apply_hunks(bufnr, e, take)
  send(set, 'editserver/didAccept', {
    id = set.id,
    editIndex = e.index,
    partial = kind,
    acceptedText = table.concat(text),
  })
  finish_if_done(bufnr, set, e)
  return true
end

local function schedule_request(bufnr)
  local b = buffers[bufnr]
  if b.timer then
    b.timer:stop()
    b.timer:close()
  end
  b.timer = vim.defer_fn(function()
    b.timer = nil
    if api.nvim_buf_is_valid(bufnr) and api.nvim_get_current_buf() == bufnr then
      M.request(bufnr, 'auto')
    end
  end, b.opts.next_edit.debounce_ms)
end

function M.attach(_, bufnr, opts)
  if buffers[bufnr] or not opts.next_edit.enabled then
    return
  end
  buffers[bufnr] = { opts = opts }
  local group = api.nvim_create_augroup('editserver.next_edit.' .. bufnr, { clear = true })
  api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI', 'InsertEnter', 'InsertLeave' }, {
    group = group,
    buffer = bufnr,
    callback = function(ev)
      local b = buffers[bufnr]
      local tick = api.nvim_buf_get_changedtick(bufnr)
      if ev.event == 'InsertEnter' then
        b.insert_tick = tick
        return
      end
      if ev.event == 'TextChanged' and (b.own_tick == tick or b.asked_tick == tick) then
        return -- our own apply, or the TextChanged that follows leaving insert mode (asked already)
      end
      if ev.event ~= 'InsertLeave' then
        cancel(bufnr) -- a new edit makes the request in flight stale
        M.dismiss(bufnr, false)
      end
      if not opts.next_edit.auto then
        return
      end
      if ev.event == 'InsertLeave' and b.insert_tick ~= tick then
        if b.timer then
          b.timer:stop()
          b.timer:close()
          b.timer = nil
        end
        b.asked_tick = tick
        M.request(bufnr, 'auto') -- leaving insert mode says the edit is done: no debounce
      elseif ev.event == 'TextChanged' then
        schedule_request(bufnr)
      end
    end,
  })
  api.nvim_create_autocmd({ 'BufUnload' }, {
    group = group,
    buffer = bufnr,
    callback = function()
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
  cancel(bufnr)
  clear(bufnr)
  buffers[bufnr] = nil
  pcall(api.nvim_del_augroup_by_name, 'editserver.next_edit.' .. bufnr)
end

return M
