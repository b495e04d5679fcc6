--- Options for the editserver Neovim plugin: the documented defaults, deep-merged with the user's.
---
--- Design decisions:
--- - One table of defaults, each value documented where it is set; `setup(opts)` deep-merges the
---   user's table over it (lists such as `filetypes` are replaced, not merged).
--- - Options are validated once here; a bad value is reported with `vim.notify` and replaced by its
---   default, so a typo never leaves the plugin half-started.
--- - The LSP wants camelCase `initializationOptions`; `init_options()` is the only place that maps
---   plugin options to the protocol.

local M = {}

---@class editserver.Options
M.defaults = {
  -- The `editserver` executable: a name looked up on $PATH, or an absolute path.
  executable = 'editserver',
  -- URL of the editserver HTTP server (`editserver serve`) the language server talks to.
  -- nil: the language server starts a server of its own on a free port (never one someone else
  -- left listening); set it to share a server you started yourself.
  server_url = nil,
  -- Let the language server start `editserver serve` when nothing answers at server_url.
  autostart = true,
  -- Checkpoint directory for the autostarted server (`--model`); nil = the shipped default model.
  model = nil,
  -- Language server debug log (`--log-file`); nil = none. The model server's own log is
  -- $XDG_STATE_HOME/editserver/serve.log (`:Editserver log` opens it).
  log_file = nil,
  -- Filetypes the language server is started for.
  filetypes = { 'python', 'javascript', 'typescript', 'javascriptreact', 'typescriptreact', 'go', 'rust' },
  -- Milliseconds to wait after typing before asking for a suggestion.
  debounce_ms = 150,
  fim = {
    -- Inline completions (ghost text at the cursor, in insert mode).
    enabled = true,
    -- 'auto': Neovim 0.12's vim.lsp.inline_completion when available, else the plugin's own
    -- extmark renderer; false: always the plugin's renderer.
    native = 'auto',
  },
  next_edit = {
    -- Next-edit suggestions (edits elsewhere in the file after you change something).
    enabled = true,
    -- Ask automatically once you are idle after an edit (a normal-mode change, or leaving insert
    -- mode after typing); the language server asks the model only when the edit renamed something,
    -- changed a literal or a signature. false: only on :Editserver next_edit.
    auto = true,
    -- Idle time (ms) after such an edit before asking.
    debounce_ms = 200,
  },
  highlights = {
    -- Ghost text colour: a highlight group to link to (Comment reads in 16/256-colour terminals).
    ghost = 'Comment',
  },
  -- Files never sent to the model, used as context or stored (globs, added to the defaults .env*,
  -- *.pem, *.key, id_rsa*, *.p12, .netrc, secrets.*, credentials*; '!*.key' removes a default).
  exclude_files = {},
  -- Local-only telemetry (a SQLite file the language server writes; never sent anywhere).
  telemetry = {
    enabled = true,
    path = nil, -- nil = the language server's default location
    -- true: also keep prompt and suggestion text (for `editserver align`); else sizes and hashes only.
    keep_prompts = false,
  },
  -- Buffer-local keymaps; set any of them to false to leave that key alone.
  keymaps = {
    -- Insert mode, while ghost text is shown (otherwise the key does what it normally does).
    accept = '<Tab>',
    accept_word = '<C-Right>',
    accept_line = '<C-Down>',
    dismiss = '<C-]>',
    -- Normal mode, while next edits are shown.
    next_edit_jump = '<Tab>', -- jump to the next proposed edit; on it, apply it
    next_edit_accept = false, -- apply the edit under/after the cursor without jumping first
    next_edit_accept_word = '<C-Right>',
    next_edit_accept_line = '<C-Down>',
    next_edit_dismiss = '<Esc>',
  },
}

local function is_list_of_strings(v)
  if type(v) ~= 'table' then
    return false
  end
  for _, x in ipairs(v) do
    if type(x) ~= 'string' then
      return false
    end
  end
  return true
end

-- Expected type of each leaf ("string|nil" etc.); keys absent here are rejected as unknown.
local schema = {
  executable = 'string',
  server_url = 'string|nil',
  autostart = 'boolean',
  model = 'string|nil',
  log_file = 'string|nil',
  filetypes = 'list',
  debounce_ms = 'number',
  fim = { enabled = 'boolean', native = 'string|boolean' },
  next_edit = { enabled = 'boolean', auto = 'boolean', debounce_ms = 'number' },
  highlights = { ghost = 'string' },
  exclude_files = 'list',
  telemetry = { enabled = 'boolean', path = 'string|nil', keep_prompts = 'boolean' },
  keymaps = {
    accept = 'string|boolean',
    accept_word = 'string|boolean',
    accept_line = 'string|boolean',
    dismiss = 'string|boolean',
    next_edit_jump = 'string|boolean',
    next_edit_accept = 'string|boolean',
    next_edit_accept_word = 'string|boolean',
    next_edit_accept_line = 'string|boolean',
    next_edit_dismiss = 'string|boolean',
  },
}

local function type_ok(expected, v)
  if expected == 'list' then
    return is_list_of_strings(v)
  end
  for t in expected:gmatch('[^|]+') do
    if (t == 'nil' and v == nil) or type(v) == t then
      return true
    end
  end
  return false
end

--- Merge `user` over `defaults` following `shape`, collecting problems instead of raising.
local function merge(defaults, user, shape, prefix, problems)
  local out = vim.deepcopy(defaults)
  if user == nil then
    return out
  end
  if type(user) ~= 'table' then
    table.insert(problems, ('%s should be a table'):format(prefix ~= '' and prefix or 'setup(opts)'))
    return out
  end
  for k, v in pairs(user) do
    local key = prefix == '' and tostring(k) or (prefix .. '.' .. tostring(k))
    local expected = shape[k]
    if expected == nil then
      table.insert(problems, ('unknown option %s'):format(key))
    elseif type(expected) == 'table' then
      out[k] = merge(defaults[k] or {}, v, expected, key, problems)
    elseif type_ok(expected, v) then
      out[k] = vim.deepcopy(v)
    else
      table.insert(problems, ('%s should be %s, got %s'):format(key, expected, vim.inspect(v)))
    end
  end
  return out
end

---@param user? table
---@return editserver.Options opts, string[] problems
function M.resolve(user)
  local problems = {}
  local opts = merge(M.defaults, user, schema, '', problems)
  if opts.debounce_ms < 0 then
    table.insert(problems, 'debounce_ms should be >= 0')
    opts.debounce_ms = M.defaults.debounce_ms
  end
  if opts.server_url and not opts.server_url:match('^https?://') then
    table.insert(problems, ('server_url should start with http:// or https://, got %q'):format(opts.server_url))
    opts.server_url = M.defaults.server_url
  end
  return opts, problems
end

--- The contract's initializationOptions (and `settings.editserver` of didChangeConfiguration).
---@param opts editserver.Options
---@param enabled boolean the :Editserver toggle
function M.init_options(opts, enabled)
  local telemetry = { enabled = opts.telemetry.enabled }
  if opts.telemetry.path then
    telemetry.path = opts.telemetry.path
  end
  if opts.telemetry.keep_prompts then
    telemetry.keepPrompts = true
  end
  local exclude = nil
  if #opts.exclude_files > 0 then
    exclude = vim.deepcopy(opts.exclude_files)
  end
  return {
    excludeFiles = exclude,
    serverUrl = opts.server_url or '',
    autostart = opts.autostart,
    debounceMs = opts.debounce_ms,
    enableFim = enabled and opts.fim.enabled,
    enableNextEdit = enabled and opts.next_edit.enabled,
    languages = vim.deepcopy(opts.filetypes),
    telemetry = telemetry,
  }
end

--- Absolute path of the executable, or nil and the reason.
---@return string? path, string? reason
function M.executable(opts)
  local exe = vim.fn.exepath(opts.executable)
  if exe ~= '' then
    return exe
  end
  if opts.executable:find('/') then
    return nil, ('%s is not an executable file (option `executable`)'):format(opts.executable)
  end
  return nil,
    ('`%s` was not found on $PATH; install editserver (`pip install -e .` in its repository) or set the `executable` option to its full path'):format(
      opts.executable
    )
end

--- Command line of the language server.
function M.argv(opts, exe)
  local argv = { exe, 'lsp' }
  if opts.server_url then
    vim.list_extend(argv, { '--server-url', opts.server_url })
  end
  if not opts.autostart then
    table.insert(argv, '--no-autostart')
  end
  if opts.model then
    vim.list_extend(argv, { '--model', opts.model })
  end
  if opts.log_file then
    vim.list_extend(argv, { '--log-file', opts.log_file })
  end
  return argv
end

return M
