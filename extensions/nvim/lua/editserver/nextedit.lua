--- Next edits: proposed edits anywhere in the buffer, drawn where they are, applied with keys.
---
--- Design decisions:
--- - Each proposed edit is tracked by an invisible range extmark, so applying one edit (or part of
---   one) moves the others with the text; nothing is re-requested until the user edits.
--- - Display trims the text the edit keeps (common prefix/suffix) so a rename shows only the changed
---   word: the old part highlighted as deleted, then "→" and the new part as inline virtual text
---   (further lines as virtual lines), and a sign on the edit's first line.
--- - `jump` goes to the next edit in document order from the cursor (wrapping); on an edit's lines
---   it applies that edit, so <Tab><Tab> = go there, apply.
--- - Partial accept (word/line) removes the edit's old part with the first piece and then inserts
---   its new part piece by piece; the edit stays proposed until all of it is in.
--- - Any edit the user makes while edits are shown rejects them (didReject) and asks again after
---   `debounce_ms`; the plugin's own changes are recognised by changedtick.

local util = require('editserver.util')
local partial = require('editserver.partial')

local api = vim.api
local M = {}

M.ns_show = api.nvim_create_namespace('editserver.next_edit')
local ns_track = api.nvim_create_namespace('editserver.next_edit.track')
local METHOD = 'editserver/nextEdit'

---@class editserver.NextEdit
---@field index integer  index in the server's `edits` (didAccept's editIndex)
---@field mark integer   tracker extmark spanning the text the edit replaces
---@field new_text string

---@class editserver.NextEditSet
---@field id string
---@field client_id integer
---@field edits editserver.NextEdit[]

---@type table<integer, {set: editserver.NextEditSet?, timer: uv.uv_timer_t?, own_tick: integer?, opts: editserver.Options}>
local buffers = {}

local function range_of(bufnr, e)
  local m = api.nvim_buf_get_extmark_by_id(bufnr, ns_track, e.mark, { details = true })
  return m[1], m[2], m[3].end_row, m[3].end_col
end

local function track(bufnr, srow, scol, erow, ecol)
  return api.nvim_buf_set_extmark(bufnr, ns_track, srow, scol, {
    end_row = erow,
    end_col = ecol,
    right_gravity = true, -- text inserted right before the edit is not part of it
    end_right_gravity = false, -- nor text inserted right after it
  })
end

--- Common prefix and suffix lengths (bytes) of `a` and `b`, not overlapping.
local function trim(a, b)
  local n = math.min(#a, #b)
  local p = 0
  while p < n and a:byte(p + 1) == b:byte(p + 1) do
    p = p + 1
  end
  local s = 0
  while s < n - p and a:byte(#a - s) == b:byte(#b - s) do
    s = s + 1
  end
  return p, s
end

--- The edit split into kept/changed parts: old text, the changed old part's range, the new part.
local function parts(bufnr, e)
  local srow, scol, erow, ecol = range_of(bufnr, e)
  local old = util.get_text(bufnr, srow, scol, erow, ecol)
  local p, s = trim(old, e.new_text)
  local mrow, mcol = util.end_of(srow, scol, old:sub(1, p))
  local old_mid = old:sub(p + 1, #old - s)
  local nrow, ncol = util.end_of(mrow, mcol, old_mid)
  return {
    srow = srow,
    scol = scol,
    erow = erow,
    ecol = ecol,
    old = old,
    p = p,
    s = s,
    old_mid = old_mid,
    new_mid = e.new_text:sub(p + 1, #e.new_text - s),
    mid = { mrow, mcol, nrow, ncol },
  }
end

local function render(bufnr)
  api.nvim_buf_clear_namespace(bufnr, M.ns_show, 0, -1)
  local set = buffers[bufnr] and buffers[bufnr].set
  if not set then
    return
  end
  for _, e in ipairs(set.edits) do
    local x = parts(bufnr, e)
    local mrow, mcol, nrow, ncol = unpack(x.mid)
    if x.old_mid ~= '' then
      api.nvim_buf_set_extmark(bufnr, M.ns_show, mrow, mcol, {
        end_row = nrow,
        end_col = ncol,
        hl_group = 'EditserverNextEditDelete',
      })
    end
    local lines = vim.split(x.new_mid, '\n', { plain = true })
    if x.old_mid ~= '' and x.new_mid ~= '' then
      -- A replacement reads "old→new" (old struck through), also without colours.
      lines[1] = '→' .. lines[1]
    end
    local virt_lines = {}
    for i = 2, #lines do
      table.insert(virt_lines, { { lines[i], 'EditserverNextEditInsert' } })
    end
    api.nvim_buf_set_extmark(bufnr, M.ns_show, nrow, ncol, {
      virt_text = lines[1] ~= '' and { { lines[1], 'EditserverNextEditInsert' } } or nil,
      virt_text_pos = 'inline',
      virt_lines = #virt_lines > 0 and virt_lines or nil,
      sign_text = nrow == mrow and '»' or nil,
      sign_hl_group = 'EditserverNextEditSign',
    })
    if nrow ~= mrow then
      api.nvim_buf_set_extmark(bufnr, M.ns_show, mrow, 0, { sign_text = '»', sign_hl_group = 'EditserverNextEditSign' })
    end
  end
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

--- Proposed edits in `bufnr`, for statuslines and tests: list of {index, range = {srow, scol, erow, ecol}, old, new}.
function M.current(bufnr)
  bufnr = util.buf(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
  if not set then
    return nil
  end
  local out = { id = set.id, edits = {} }
  for _, e in ipairs(set.edits) do
    local srow, scol, erow, ecol = range_of(bufnr, e)
    table.insert(out.edits, {
      index = e.index,
      range = { srow, scol, erow, ecol },
      old = util.get_text(bufnr, srow, scol, erow, ecol),
      new = e.new_text,
    })
  end
  return out
end

--- The last nextEdit response for `bufnr`: {id, count} (count = edits the server proposed).
function M.last(bufnr)
  local b = buffers[util.buf(bufnr)]
  return b and b.last
end

function M.visible(bufnr)
  local b = buffers[util.buf(bufnr)]
  return b ~= nil and b.set ~= nil
end

--- Show a nextEdit response (exposed for the renderer's own tests as `M.show`).
local function show(bufnr, client, result)
  bufnr = util.buf(bufnr)
  clear(bufnr)
  if buffers[bufnr] then
    buffers[bufnr].last = { id = type(result) == 'table' and result.id or nil, count = type(result) == 'table' and type(result.edits) == 'table' and #result.edits or 0 }
  end
  if type(result) ~= 'table' or type(result.id) ~= 'string' or type(result.edits) ~= 'table' then
    return
  end
  local uri = vim.uri_from_bufnr(bufnr)
  local set = { id = result.id, client_id = client.id, edits = {} }
  for i, e in ipairs(result.edits) do
    if e.textDocument and e.textDocument.uri == uri and e.range and type(e.newText) == 'string' then
      local srow, scol = util.to_byte(bufnr, e.range.start, client.offset_encoding)
      local erow, ecol = util.to_byte(bufnr, e.range['end'], client.offset_encoding)
      if util.get_text(bufnr, srow, scol, erow, ecol) ~= e.newText then
        table.insert(set.edits, { index = i - 1, mark = track(bufnr, srow, scol, erow, ecol), new_text = e.newText })
      end
    end
  end
  if #set.edits == 0 then
    return
  end
  buffers[bufnr].set = set
  render(bufnr)
  send(set, 'editserver/didShow', { id = set.id })
end

M.show = show

--- Ask the server for next edits at the cursor.
function M.request(bufnr)
  bufnr = util.buf(bufnr)
  local b = buffers[bufnr]
  local client = util.client(bufnr)
  if not b or not client then
    return false
  end
  local tick = api.nvim_buf_get_changedtick(bufnr)
  local pos = vim.lsp.util.make_position_params(0, client.offset_encoding).position
  util.request(client, METHOD, { textDocument = { uri = vim.uri_from_bufnr(bufnr) }, position = pos }, function(err, result)
    if err then
      vim.notify(('editserver: next edit failed: %s'):format(err.message or vim.inspect(err)), vim.log.levels.WARN)
      return
    end
    if not api.nvim_buf_is_valid(bufnr) or api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return -- the text moved on; a newer request is coming
    end
    if api.nvim_get_mode().mode:sub(1, 1) == 'i' then
      return -- typing: ghost text has the floor
    end
    show(bufnr, client, result)
  end, bufnr)
  return true
end

--- Reject and hide what is shown.
function M.dismiss(bufnr)
  bufnr = util.buf(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
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
    local srow, _, erow = range_of(bufnr, e)
    if row >= srow and row <= erow then
      return e
    end
  end
end

--- Edits in document order starting at the cursor, wrapping around.
local function order(bufnr, set)
  local row, col = cursor(bufnr)
  local sorted = vim.deepcopy(set.edits)
  table.sort(sorted, function(a, b)
    local ar, ac = range_of(bufnr, a)
    local br, bc = range_of(bufnr, b)
    return ar < br or (ar == br and ac < bc)
  end)
  local after, before = {}, {}
  for _, e in ipairs(sorted) do
    local _, _, erow, ecol = range_of(bufnr, e)
    table.insert((erow > row or (erow == row and ecol >= col)) and after or before, e)
  end
  return vim.list_extend(after, before)
end

local function finish_edit(bufnr, set, e)
  for i, x in ipairs(set.edits) do
    if x == e then
      table.remove(set.edits, i)
      break
    end
  end
  api.nvim_buf_del_extmark(bufnr, ns_track, e.mark)
  if #set.edits == 0 then
    clear(bufnr)
  else
    render(bufnr)
  end
end

--- Apply one edit completely (didAccept with its index).
local function apply(bufnr, set, e)
  local x = parts(bufnr, e)
  local mrow, mcol, nrow, ncol = unpack(x.mid)
  local row, col = util.set_text(bufnr, mrow, mcol, nrow, ncol, x.new_mid)
  buffers[bufnr].own_tick = api.nvim_buf_get_changedtick(bufnr)
  util.set_cursor(bufnr, row, math.max(col - 1, 0))
  send(set, 'editserver/didAccept', { id = set.id, editIndex = e.index })
  finish_edit(bufnr, set, e)
end

--- Jump to the next proposed edit; on one, apply it. Returns false when nothing is shown.
function M.jump(bufnr)
  bufnr = util.buf(bufnr)
  local set = buffers[bufnr] and buffers[bufnr].set
  if not set then
    return false
  end
  local here = edit_at_cursor(bufnr, set)
  if here then
    apply(bufnr, set, here)
    return true
  end
  local target = order(bufnr, set)[1]
  local mrow, mcol = unpack(parts(bufnr, target).mid)
  util.set_cursor(bufnr, mrow, mcol)
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

--- Accept the next word/line of the edit on the cursor's line (jumps there first if none is).
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
  local x = parts(bufnr, e)
  local slice = partial.slice(x.new_mid, kind)
  local mrow, mcol, nrow, ncol = unpack(x.mid)
  local row, col = util.set_text(bufnr, mrow, mcol, nrow, ncol, slice)
  buffers[bufnr].own_tick = api.nvim_buf_get_changedtick(bufnr)
  -- The edit now spans its kept prefix, the accepted piece and its kept suffix.
  local now = x.old:sub(1, x.p) .. slice .. x.old:sub(#x.old - x.s + 1)
  api.nvim_buf_del_extmark(bufnr, ns_track, e.mark)
  e.mark = track(bufnr, x.srow, x.scol, util.end_of(x.srow, x.scol, now))
  util.set_cursor(bufnr, row, math.max(col - 1, 0))
  send(set, 'editserver/didAccept', { id = set.id, editIndex = e.index, partial = kind, acceptedText = slice })
  if now == e.new_text then
    finish_edit(bufnr, set, e)
  else
    render(bufnr)
  end
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
      M.request(bufnr)
    end
  end, b.opts.debounce_ms)
end

function M.attach(_, bufnr, opts)
  if buffers[bufnr] or not opts.next_edit.enabled then
    return
  end
  buffers[bufnr] = { opts = opts }
  local group = api.nvim_create_augroup('editserver.next_edit.' .. bufnr, { clear = true })
  api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI', 'InsertLeave' }, {
    group = group,
    buffer = bufnr,
    callback = function(ev)
      local b = buffers[bufnr]
      if ev.event == 'TextChanged' and b.own_tick == api.nvim_buf_get_changedtick(bufnr) then
        return -- our own apply
      end
      if ev.event ~= 'InsertLeave' then
        M.dismiss(bufnr)
      end
      if opts.next_edit.auto and ev.event ~= 'TextChangedI' then
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
  clear(bufnr)
  buffers[bufnr] = nil
  pcall(api.nvim_del_augroup_by_name, 'editserver.next_edit.' .. bufnr)
end

return M
