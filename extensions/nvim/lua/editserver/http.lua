--- A minimal HTTP/1.1 GET over libuv, for :checkhealth (is the model server up, which model?).
---
--- Design decisions:
--- - No curl dependency: editserver listens on loopback by default and answers small JSON bodies,
---   so one request with `Connection: close`, read to EOF, is all that is needed.
--- - Synchronous for the caller (vim.wait with a timeout) because health checks are synchronous.
--- - Only http:// URLs with a literal or resolvable host; https is reported as unsupported here.

local M = {}

---@return {status: integer, body: string}? response, string? error
function M.get(url, timeout_ms)
  local scheme, host, port, base = url:match('^(https?)://([^/:]+):?(%d*)(.*)$')
  if not scheme then
    return nil, 'not an http URL: ' .. url
  end
  if scheme == 'https' then
    return nil, 'https is not checked from Neovim; the language server still uses it'
  end
  port = tonumber(port) or 80
  local path = base ~= '' and base or '/'
  local addr = vim.uv.getaddrinfo(host, nil, { socktype = 'stream' })
  if not addr or not addr[1] then
    return nil, 'cannot resolve ' .. host
  end
  local tcp = vim.uv.new_tcp()
  local chunks, done, err = {}, false, nil
  tcp:connect(addr[1].addr, port, function(cerr)
    if cerr then
      err, done = cerr, true
      return
    end
    tcp:write(('GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: application/json\r\nConnection: close\r\n\r\n'):format(path, host, port))
    tcp:read_start(function(rerr, data)
      if rerr then
        err, done = rerr, true
      elseif data then
        table.insert(chunks, data)
      else
        done = true
      end
    end)
  end)
  local finished = vim.wait(timeout_ms or 2000, function()
    return done
  end, 10)
  if not tcp:is_closing() then
    tcp:close()
  end
  if not finished then
    return nil, ('no answer within %d ms'):format(timeout_ms or 2000)
  end
  if err then
    return nil, tostring(err)
  end
  local raw = table.concat(chunks)
  local status = tonumber(raw:match('^HTTP/%d%.%d (%d+)'))
  local head, body = raw:match('^(.-)\r\n\r\n(.*)$')
  if not status or not head then
    return nil, 'not an HTTP answer'
  end
  if head:lower():find('transfer%-encoding:%s*chunked') then
    local out, rest = {}, body
    while true do
      local size, after = rest:match('^(%x+)[^\r\n]*\r\n(.*)$')
      size = size and tonumber(size, 16)
      if not size or size == 0 then
        break
      end
      table.insert(out, after:sub(1, size))
      rest = after:sub(size + 3)
    end
    body = table.concat(out)
  end
  return { status = status, body = body }
end

return M
