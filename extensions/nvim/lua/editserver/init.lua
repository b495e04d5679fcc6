--- editserver for Neovim: starts `editserver lsp` for the configured filetypes and shows its
--- ghost text and next edits.
---
--- Usage: require('editserver').setup({ ... }) — see lua/editserver/config.lua for every option.
---
--- Design decisions:
--- - Thin client: suggestions come from the language server; this plugin renders them.
--- - The client is started with vim.lsp.start() from a FileType autocmd (works on 0.10+). `cmd` is
---   a function so the RPC client can be wrapped to observe inline completion responses (telemetry
---   for the native 0.12 renderer, see ghost.lua).
--- - Server state comes from `editserver/status` and is kept for statuslines
---   (require('editserver').statusline()), with the completions withheld below the server's
---   threshold in the last minute; `:checkhealth` asks the server for its live state
---   (`editserver/info`). Outages are announced by the server itself (window/showMessage, once per
---   outage); the plugin shows every server message as one line of at most 80 columns with
---   vim.notify, so typing is never stopped by a "Press ENTER" prompt.
--- - A missing executable is reported once per Neovim run with what to do, not per buffer.

local config = require('editserver.config')
local util = require('editserver.util')
local ghost = require('editserver.ghost')
local nextedit = require('editserver.nextedit')
local crossfile = require('editserver.crossfile')

local api = vim.api
local M = {}

local state = {
  opts = config.resolve({}),
  problems = {},
  setup = false,
  enabled = true,
  status = {}, -- last editserver/status params: {state, message?, latencyMs?}
  told_missing = false,
}

function M.options()
  return state.opts
end

function M.problems()
  return state.problems
end

function M.is_setup()
  return state.setup
end

--- Last `editserver/status` from the server: {state?, message?, latencyMs?}.
function M.status()
  return state.status
end

--- A short string for statuslines: "editserver: ready 84ms", "editserver: unreachable", "editserver: off".
function M.statusline()
  if not state.enabled then
    return 'editserver: off'
  end
  local st = state.status
  if not st.state then
    return #vim.lsp.get_clients({ name = util.name }) > 0 and 'editserver: starting' or ''
  end
  local latency = st.state == 'ready' and st.latencyMs and (' %dms'):format(math.floor(st.latencyMs + 0.5)) or ''
  local withheld = ''
  if st.state == 'ready' and (st.withheld or 0) > 0 then
    withheld = (' (%d withheld <%s)'):format(st.withheld, st.fimThreshold or '?')
  end
  local more = crossfile.count()
  more = more and (' · %d more in %d file%s'):format(more.edits, more.files, more.files == 1 and '' or 's') or ''
  return 'editserver: ' .. st.state .. latency .. withheld .. more
end

--- One line that fits the screen without a "Press ENTER" prompt.
function M.oneline(msg)
  local line = tostring(msg):gsub('%s+', ' ')
  local max = math.min(80, math.max(20, vim.o.columns - 12))
  if vim.fn.strdisplaywidth(line) > max then
    line = vim.fn.strcharpart(line, 0, max - 1) .. '…'
  end
  return line
end

local function on_show_message(_, params)
  if type(params) ~= 'table' or type(params.message) ~= 'string' then
    return
  end
  local levels = vim.log.levels
  local level = ({ levels.WARN, levels.WARN, levels.INFO, levels.DEBUG })[params.type] or levels.INFO
  vim.schedule(function()
    vim.notify(M.oneline(params.message), level)
  end)
end

--- Live state from the language server (`editserver/info`), or nil and why.
function M.info(timeout_ms)
  local client = vim.lsp.get_clients({ name = util.name })[1]
  if not client then
    return nil, 'the language server is not running'
  end
  local res, err
  if util.has_011 then
    res, err = client:request_sync('editserver/info', {}, timeout_ms or 2000)
  else
    res, err = client.request_sync('editserver/info', {}, timeout_ms or 2000)
  end
  if not res or res.err then
    return nil, err or (res and res.err and res.err.message) or 'no answer'
  end
  return res.result
end

local function on_status(_, params)
  if type(params) ~= 'table' then
    return
  end
  local prev = state.status.latencyMs
  state.status = vim.deepcopy(params)
  state.status.at = vim.uv.now()
  if state.status.latencyMs == nil then
    state.status.latencyMs = prev
  end
  api.nvim_exec_autocmds('User', { pattern = 'EditserverStatus', modeline = false, data = state.status })
  vim.cmd.redrawstatus({ bang = true, mods = { silent = true, emsg_silent = true } })
end

local function highlights()
  local set = function(name, link)
    api.nvim_set_hl(0, name, { link = link, default = true })
  end
  -- Ghost text: a group with a terminal colour too (ComplHint links to NonText, which many
  -- colourschemes give a GUI colour only). Neovim 0.12's own renderer draws with ComplHint, so
  -- that is pointed here as well.
  -- The configured group's colours, with a grey terminal colour (8) when it has none.
  local g = api.nvim_get_hl(0, { name = state.opts.highlights.ghost, link = false })
  api.nvim_set_hl(0, 'EditserverGhost', {
    fg = g.fg,
    ctermfg = g.ctermfg or 8,
    italic = g.italic,
    cterm = { italic = g.cterm and g.cterm.italic or nil },
  })
  if state.opts.fim.native ~= false then
    api.nvim_set_hl(0, 'ComplHint', { link = 'EditserverGhost' })
  end
  local del = api.nvim_get_hl(0, { name = 'DiffDelete', link = false })
  api.nvim_set_hl(0, 'EditserverNextEditDelete', {
    default = true,
    strikethrough = true,
    bg = del.bg,
    ctermbg = del.ctermbg,
    fg = del.fg,
    ctermfg = del.ctermfg or 1,
  })
  set('EditserverNextEditInsert', 'DiffText') -- the changed tokens of a proposed edit
  set('EditserverNextEditPreview', 'DiffAdd') -- the unchanged rest of a previewed line
end

-- Keys: act when a suggestion is shown, otherwise do what the key normally does.
local function map(bufnr, mode, lhs, fn, desc)
  if not lhs then
    return
  end
  vim.keymap.set(mode, lhs, function()
    if fn(bufnr) then
      return
    end
    -- Neovim 0.11+ maps <Tab> to jump inside an active snippet; keep that working.
    if mode == 'i' and lhs == '<Tab>' and vim.snippet and vim.snippet.active({ direction = 1 }) then
      vim.snippet.jump(1)
      return
    end
    api.nvim_feedkeys(vim.keycode(lhs), 'n', false)
  end, { buffer = bufnr, desc = 'editserver: ' .. desc })
end

local function keymaps(bufnr)
  local k = state.opts.keymaps
  map(bufnr, 'i', k.accept, function(b)
    return ghost.accept(b)
  end, 'accept ghost text')
  map(bufnr, 'i', k.accept_word, function(b)
    return ghost.accept_partial('word', b)
  end, 'accept next word of ghost text')
  map(bufnr, 'i', k.accept_line, function(b)
    return ghost.accept_partial('line', b)
  end, 'accept next line of ghost text')
  map(bufnr, 'i', k.dismiss, function(b)
    return ghost.dismiss(b)
  end, 'dismiss ghost text')
  map(bufnr, 'n', k.next_edit_jump, nextedit.jump, 'jump to / apply the next proposed edit')
  map(bufnr, 'n', k.next_edit_accept, nextedit.accept, 'apply the proposed edit here')
  map(bufnr, 'n', k.next_edit_accept_word, function(b)
    return nextedit.accept_partial('word', b)
  end, 'accept next word of the proposed edit')
  map(bufnr, 'n', k.next_edit_accept_line, function(b)
    return nextedit.accept_partial('line', b)
  end, 'accept next line of the proposed edit')
  map(bufnr, 'n', k.next_edit_dismiss, nextedit.dismiss, 'dismiss proposed edits')
end

local function unmap(bufnr)
  local k = state.opts.keymaps
  for name, mode in pairs({
    accept = 'i',
    accept_word = 'i',
    accept_line = 'i',
    dismiss = 'i',
    next_edit_jump = 'n',
    next_edit_accept = 'n',
    next_edit_accept_word = 'n',
    next_edit_accept_line = 'n',
    next_edit_dismiss = 'n',
  }) do
    if k[name] then
      pcall(vim.keymap.del, mode, k[name], { buffer = bufnr })
    end
  end
end

local function on_attach(client, bufnr)
  if not state.enabled then
    return
  end
  ghost.attach(client, bufnr, state.opts)
  nextedit.attach(client, bufnr, state.opts)
  keymaps(bufnr)
end

--- Start (or reuse) the language server for `bufnr`.
function M.attach(bufnr)
  bufnr = util.buf(bufnr)
  local opts = state.opts
  local exe, reason = config.executable(opts)
  if not exe then
    if not state.told_missing then
      state.told_missing = true
      vim.notify(M.oneline('editserver: executable not found; see :checkhealth editserver'), vim.log.levels.WARN)
    end
    state.status = { state = 'unreachable', message = reason }
    return nil
  end
  local argv = config.argv(opts, exe)
  local init = config.init_options(opts, state.enabled)
  local root = vim.fs.root(bufnr, { '.git' }) or vim.fn.getcwd()
  return vim.lsp.start({
    name = util.name,
    cmd = function(dispatchers)
      return ghost.wrap_rpc(vim.lsp.rpc.start(argv, dispatchers, { cwd = root }))
    end,
    root_dir = root,
    init_options = init,
    settings = { editserver = init },
    handlers = {
      ['editserver/status'] = on_status,
      ['editserver/nextEditPartial'] = nextedit.on_partial,
      ['window/showMessage'] = on_show_message,
    },
    on_attach = on_attach,
  }, {
    bufnr = bufnr,
    reuse_client = function(client, conf)
      return client.name == conf.name and not client:is_stopped()
    end,
  })
end

local function each_editserver_buffer(fn)
  for _, client in ipairs(vim.lsp.get_clients({ name = util.name })) do
    for bufnr in pairs(client.attached_buffers) do
      fn(client, bufnr)
    end
  end
end

--- Turn suggestions on/off (the server stops computing them; state "disabled").
function M.toggle(on)
  if on == nil then
    on = not state.enabled
  end
  state.enabled = on
  local init = config.init_options(state.opts, on)
  for _, client in ipairs(vim.lsp.get_clients({ name = util.name })) do
    client.settings = { editserver = init }
    util.notify(client, 'workspace/didChangeConfiguration', { settings = { editserver = init } })
  end
  each_editserver_buffer(function(client, bufnr)
    if on then
      on_attach(client, bufnr)
    else
      ghost.detach(bufnr)
      nextedit.detach(bufnr)
      unmap(bufnr)
    end
  end)
  vim.notify('editserver: suggestions ' .. (on and 'on' or 'off'), vim.log.levels.INFO)
end

--- Stop the language server and start it again for every buffer it served.
function M.restart()
  local bufs = {}
  each_editserver_buffer(function(client, bufnr)
    bufs[bufnr] = true
    ghost.detach(bufnr)
    nextedit.detach(bufnr)
    if util.has_011 then
      client:stop(true)
    else
      client.stop(true)
    end
  end)
  state.status = {}
  vim.wait(2000, function()
    return #vim.lsp.get_clients({ name = util.name }) == 0
  end, 20)
  for bufnr in pairs(bufs) do
    if api.nvim_buf_is_valid(bufnr) then
      M.attach(bufnr)
    end
  end
end

M.next_edit = {
  request = nextedit.request,
  jump = nextedit.jump,
  accept = nextedit.accept,
  accept_partial = nextedit.accept_partial,
  dismiss = nextedit.dismiss,
  current = nextedit.current,
  last = nextedit.last,
  more = crossfile.count, -- {edits, files} proposed in other files, or nil
  other_files = crossfile.files,
  next_file = crossfile.next,
}
M.ghost = {
  accept = ghost.accept,
  accept_partial = ghost.accept_partial,
  dismiss = ghost.dismiss,
  current = ghost.current,
}

local subcommands = {
  toggle = function()
    M.toggle()
  end,
  restart = M.restart,
  status = function()
    local line = M.statusline()
    vim.notify(line ~= '' and line or 'editserver: not running', vim.log.levels.INFO)
  end,
  next_edit = function()
    nextedit.request(0)
  end,
  next_edits = function()
    -- every proposed edit, in this file and in the others, into the quickfix list
    local bufnr = api.nvim_get_current_buf()
    local shown = {}
    for _, e in ipairs((nextedit.current(bufnr) or {}).edits or {}) do
      table.insert(shown, { bufnr = bufnr, range = e.range, new = e.new })
    end
    if crossfile.quickfix(shown) > 0 then
      vim.cmd.copen()
    else
      vim.notify('editserver: no proposed edits', vim.log.levels.INFO)
    end
  end,
  log = function()
    -- the model server's log (where a crash shows), as the running language server reports it
    -- (a server someone else started logs elsewhere: then the language server's own log, if set)
    local info = M.info(1000)
    local path = info and type(info.serveLog) == 'string' and info.serveLog or M.default_serve_log()
    if vim.fn.filereadable(path) == 0 and state.opts.log_file and vim.fn.filereadable(state.opts.log_file) == 1 then
      path = state.opts.log_file
    end
    if vim.fn.filereadable(path) == 0 then
      vim.notify(M.oneline('editserver: no log yet at ' .. path), vim.log.levels.WARN)
      return
    end
    vim.cmd.split(vim.fn.fnameescape(path))
  end,
}

function M.default_serve_log()
  local base = vim.env.XDG_STATE_HOME or (vim.env.HOME .. '/.local/state')
  return base .. '/editserver/serve.log'
end

---@param opts? table see config.lua
function M.setup(opts)
  local problems
  state.opts, problems = config.resolve(opts)
  state.problems = problems
  state.setup = true
  state.told_missing = false
  for _, p in ipairs(problems) do
    vim.notify(M.oneline('editserver: ' .. p .. ' (using the default)'), vim.log.levels.WARN)
  end
  highlights()
  local group = api.nvim_create_augroup('editserver', { clear = true })
  api.nvim_create_autocmd('ColorScheme', { group = group, callback = highlights })
  api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = state.opts.filetypes,
    callback = function(ev)
      if vim.bo[ev.buf].buftype == '' then
        M.attach(ev.buf)
      end
    end,
  })
  api.nvim_create_user_command('Editserver', function(cmd)
    local fn = subcommands[cmd.fargs[1] or 'status']
    if not fn then
      vim.notify('editserver: unknown subcommand ' .. cmd.fargs[1], vim.log.levels.ERROR)
      return
    end
    fn()
  end, {
    nargs = '?',
    complete = function()
      return vim.tbl_keys(subcommands)
    end,
    desc = 'editserver: toggle | restart | status | next_edit | next_edits | log',
  })
  -- Buffers that were open before setup() ran.
  for _, bufnr in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(state.opts.filetypes, vim.bo[bufnr].filetype) then
      M.attach(bufnr)
    end
  end
end

return M
