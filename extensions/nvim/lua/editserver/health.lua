--- :checkhealth editserver — the executable, the language server, the model server and its model.
---
--- Design decisions:
--- - Each check says what to do when it fails (install, set an option, start the server).
--- - The model server is probed directly (GET /health) rather than through the language server, so
---   the check also works before any buffer started the client.

local M = {}

local health = vim.health

function M.check()
  local es = require('editserver')
  local config = require('editserver.config')
  local opts = es.options()

  health.start('editserver: setup')
  if not es.is_setup() then
    health.warn('require("editserver").setup() has not been called; showing the defaults', {
      'Call require("editserver").setup({}) from your init.lua.',
    })
  else
    health.ok('setup() called')
  end
  for _, p in ipairs(es.problems()) do
    health.warn('option: ' .. p)
  end
  local v = vim.version()
  if require('editserver.ghost').native_available() then
    health.ok(('Neovim %d.%d.%d: ghost text through vim.lsp.inline_completion'):format(v.major, v.minor, v.patch))
  else
    health.info(('Neovim %d.%d.%d: ghost text through the plugin\'s extmark renderer'):format(v.major, v.minor, v.patch))
  end

  health.start('editserver: executable')
  local exe, reason = config.executable(opts)
  if exe then
    health.ok('executable: ' .. exe)
  else
    health.error('executable not found: ' .. reason)
  end

  health.start('editserver: language server')
  local clients = vim.lsp.get_clients({ name = 'editserver' })
  if #clients == 0 then
    health.info('not running (it starts when you open a file of type: ' .. table.concat(opts.filetypes, ', ') .. ')')
  else
    for _, c in ipairs(clients) do
      local bufs = vim.tbl_keys(c.attached_buffers or {})
      health.ok(('running (client id %d, %d buffer(s) attached)'):format(c.id, #bufs))
    end
    local st = es.status()
    if st.state then
      local line = 'server state: ' .. st.state .. (st.message and (' (' .. st.message .. ')') or '')
      if st.state == 'ready' then
        health.ok(line)
      else
        health.warn(line)
      end
    end
  end

  health.start('editserver: model server')
  local res, err = require('editserver.http').get(opts.server_url:gsub('/+$', '') .. '/health', 2000)
  if not res then
    local advice = opts.autostart and 'The language server starts `editserver serve` when it attaches (autostart = true).'
      or 'Start it with `editserver serve`, or set autostart = true.'
    health.error(('unreachable at %s: %s'):format(opts.server_url, err), { advice })
    return
  end
  if res.status ~= 200 then
    health.error(('%s/health answered HTTP %d'):format(opts.server_url, res.status))
    return
  end
  health.ok('reachable at ' .. opts.server_url)
  local ok, body = pcall(vim.json.decode, res.body)
  if not ok or type(body) ~= 'table' then
    health.warn('/health did not return JSON')
    return
  end
  local meta = type(body.meta) == 'table' and body.meta or {}
  local extra = {}
  for _, key in ipairs({ 'preset', 'step', 'note', 'params' }) do
    if meta[key] ~= nil and meta[key] ~= vim.NIL then
      table.insert(extra, key .. '=' .. tostring(meta[key]))
    end
  end
  health.ok(('model loaded: %s on %s%s'):format(
    tostring(body.model),
    tostring(body.device),
    #extra > 0 and (' (' .. table.concat(extra, ', ') .. ')') or ''
  ))
end

return M
