--- Token diff of a proposed edit: which tokens it deletes and inserts, as hunks.
---
--- Design decisions:
--- - Tokens are runs of word characters (ASCII letters, digits, `_`, any non-ASCII byte, so UTF-8
---   letters are never split), runs of blanks, a line break, or one other character. A rename then
---   reads as one replaced word, never as a few letters inside one.
--- - Lines first, then tokens: a longest common subsequence over lines finds the blocks that
---   changed (so an inserted line stays a line, never glued to a neighbour's tokens), then one over
---   the tokens of each changed block. Blocks too long for that (more than MAX_CELLS table cells)
---   are one hunk.
--- - A hunk is a replaced token span `{off, old, new}` (`off`: byte offset in the old text). The
---   renderer draws hunks and partial accept applies whole hunks, so the buffer only ever holds
---   old tokens or new tokens, never half of a token.

local M = {}

local MAX_CELLS = 250000

---@param s string
---@return string[]
function M.tokens(s)
  local out = {}
  local i = 1
  while i <= #s do
    local _, e = s:find('^[%w_\128-\255]+', i)
    if not e then
      _, e = s:find('^[ \t]+', i)
    end
    e = e or i
    table.insert(out, s:sub(i, e))
    i = e + 1
  end
  return out
end

--- Matching pairs of a longest common subsequence of arrays x and y: list of {i, j}.
local function lcs_pairs(x, y)
  local n, m = #x, #y
  local lcs = {}
  for i = n + 1, 1, -1 do
    lcs[i] = {}
    for j = m + 1, 1, -1 do
      if i > n or j > m then
        lcs[i][j] = 0
      elseif x[i] == y[j] then
        lcs[i][j] = lcs[i + 1][j + 1] + 1
      else
        lcs[i][j] = math.max(lcs[i + 1][j], lcs[i][j + 1])
      end
    end
  end
  local out, i, j = {}, 1, 1
  while i <= n and j <= m do
    if x[i] == y[j] then
      table.insert(out, { i, j })
      i, j = i + 1, j + 1
    elseif lcs[i + 1][j] >= lcs[i][j + 1] then
      i = i + 1
    else
      j = j + 1
    end
  end
  return out
end

--- Walk two arrays by their LCS: calls change(x_from, x_to, y_from, y_to) for each changed block
--- (exclusive ends), in order.
local function blocks(x, y, change)
  local pi, pj = 1, 1
  local pairs_ = lcs_pairs(x, y)
  table.insert(pairs_, { #x + 1, #y + 1 })
  for _, p in ipairs(pairs_) do
    if p[1] > pi or p[2] > pj then
      change(pi, p[1], pj, p[2])
    end
    pi, pj = p[1] + 1, p[2] + 1
  end
end

local function lines_of(s)
  local out = {}
  for line in s:gmatch('[^\n]*\n?') do
    if line ~= '' then
      table.insert(out, line)
    end
  end
  return out
end

local function token_hunks(a, b, base, out)
  local x, y = M.tokens(a), M.tokens(b)
  if #x * #y > MAX_CELLS then
    table.insert(out, { off = base, old = a, new = b })
    return
  end
  local offs = { 0 }
  for i, t in ipairs(x) do
    offs[i + 1] = offs[i] + #t
  end
  blocks(x, y, function(i1, i2, j1, j2)
    table.insert(out, {
      off = base + offs[i1],
      old = table.concat(x, '', i1, i2 - 1),
      new = table.concat(y, '', j1, j2 - 1),
    })
  end)
end

--- Hunks turning `a` into `b`: list of {off = byte offset in a, old = string, new = string}.
---@param a string
---@param b string
function M.hunks(a, b)
  if a == b then
    return {}
  end
  local x, y = lines_of(a), lines_of(b)
  if #x * #y > MAX_CELLS then
    return { { off = 0, old = a, new = b } }
  end
  local offs = { 0 }
  for i, l in ipairs(x) do
    offs[i + 1] = offs[i] + #l
  end
  local out = {}
  blocks(x, y, function(i1, i2, j1, j2)
    local old = table.concat(x, '', i1, i2 - 1)
    local new = table.concat(y, '', j1, j2 - 1)
    if old == '' or new == '' then
      table.insert(out, { off = offs[i1], old = old, new = new }) -- whole lines in or out
    else
      token_hunks(old, new, offs[i1], out)
    end
  end)
  return out
end

return M
