--- :checkhealth editserver — the executable, the language server, the model server and its model.
---
--- Design decisions:
--- - Each check says what to do when it fails (install, set an option, start the server).
--- - State is read live: the language server is asked (`editserver/info`) for its state, the server
---   URL it uses (its own on a free port, or the configured one), the server log, restarts and the
---   completions withheld below the threshold in the last minute; nothing cached is shown as current.
--- - The model server is probed directly (GET /health) at the URL the language server uses (or the
---   configured one before any buffer started the client).

local M = {}

local health = vim.health

function M.check()
  local state_url
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
    local info, why = es.info(2000)
    if info then
      for k, v in pairs(info) do
        if v == vim.NIL then
          info[k] = nil
        end
      end
    end
    if not info then
      health.warn('no live state from the language server: ' .. tostring(why), { 'Try :Editserver restart' })
    else
      local line = 'server state: ' .. tostring(info.state) .. (info.message and (' (' .. info.message .. ')') or '')
      if info.state == 'ready' then
        health.ok(line)
      else
        health.warn(line, { 'See :Editserver log; :Editserver restart starts the language server again' })
      end
      health.info(('model server: %s (%s)'):format(
        info.serverUrl,
        info.ownPort and 'its own, on a free port' or 'as configured'
      ))
      health.info(('model server log: %s (:Editserver log); restarts so far: %d'):format(info.serveLog, info.restarts or 0))
      local threshold = info.fimThreshold ~= nil and tostring(info.fimThreshold) or 'not known yet'
      local withheld = ('completions withheld below the threshold (%s) in the last minute: %d'):format(
        threshold,
        info.withheld or 0
      )
      local advice = { 'To see more of them, start the server yourself with ' .. tostring(info.thresholdHelp)
        .. ' and set server_url to it' }
      if (info.withheld or 0) > 0 then
        health.warn(withheld, advice)
      else
        health.info(withheld)
      end
      -- files excludeFiles keeps out: say why they get no suggestions
      for _, e in ipairs(type(info.excluded) == 'table' and info.excluded or {}) do
        health.info(('no suggestions for %s: it matches excludeFiles pattern %q, so nothing of it is sent or stored'):format(
          tostring(e.path),
          tostring(e.pattern)
        ))
      end
      state_url = info.serverUrl
    end
  end

  health.start('editserver: model server')
  local url = state_url or opts.server_url
  if not url then
    health.info('the language server starts a server of its own (on a free port) when it attaches')
    return
  end
  url = url:gsub('/+$', '')
  local res, err = require('editserver.http').get(url .. '/health', 2000)
  if not res then
    local advice = opts.autostart and 'The language server starts `editserver serve` when it attaches (autostart = true).'
      or 'Start it with `editserver serve`, or set autostart = true.'
    health.error(('unreachable at %s: %s'):format(url, err), { advice, 'See :Editserver log, then :Editserver restart' })
    return
  end
  if res.status ~= 200 then
    health.error(('%s/health answered HTTP %d'):format(url, res.status))
    return
  end
  health.ok('reachable at ' .. url)
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
