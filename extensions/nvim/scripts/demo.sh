#!/usr/bin/env bash
# Reproduce the captures in extensions/README.md: Neovim in tmux with this plugin, talking to a real
# `editserver serve` at $ES_URL (default http://127.0.0.1:8000) through `editserver lsp`.
#   1. type in insert mode until ghost text shows, capture the pane;
#   2. rename a parameter in normal mode until next edits show, capture the pane.
# Needs: tmux, nvim (0.12 for native ghost text) and editserver on PATH. Polls; gives up after 120 s.
set -euo pipefail
ES_URL="${ES_URL:-http://127.0.0.1:8000}"
NVIM="${NVIM:-nvim}"
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
session="editserver-demo-$$"
trap 'tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$work"' EXIT

cat > "$work/shapes.py" <<'PY'
def area(width, height):
    return width * height


def describe(width, height):
    print("area", area(width, height))


describe(2, 3)
PY
cat > "$work/init.lua" <<LUA
vim.opt.rtp:prepend('$here')
vim.o.signcolumn = 'yes'
vim.o.number = true
vim.o.laststatus = 2
vim.o.statusline = "%f %= %{v:lua.require'editserver'.statusline()} "
require('editserver').setup({ server_url = '$ES_URL', autostart = false, telemetry = { enabled = false } })
LUA

wait_for() { # pattern, what
  for _ in $(seq 1 240); do
    if tmux capture-pane -p -t "$session" | grep -q -- "$1"; then return 0; fi
    sleep 0.5
  done
  echo "gave up waiting for $2" >&2
  tmux capture-pane -p -t "$session" >&2
  exit 1
}
lua() { # evaluate a Lua expression in the running Neovim (through its server socket)
  "$NVIM" --server "$work/nvim.sock" --remote-expr "luaeval('$1')"
}

tmux new-session -d -s "$session" -x 92 -y 17 "$NVIM --listen $work/nvim.sock -u $work/init.lua $work/shapes.py"
wait_for "editserver: ready" "the server"

tmux send-keys -t "$session" G o
tmux send-keys -t "$session" -l "result = area("
for _ in $(seq 1 240); do
  [ "$(lua "require(\"editserver\").ghost.current() ~= nil")" = "v:true" ] && break
  sleep 0.5
done
echo "--- ghost text ---"
tmux capture-pane -p -t "$session"

tmux send-keys -t "$session" C-] Escape u
tmux send-keys -t "$session" gg 0 f w
tmux send-keys -t "$session" c i w
tmux send-keys -t "$session" -l "size"
tmux send-keys -t "$session" Escape
for _ in $(seq 1 240); do
  [ "$(lua "require(\"editserver\").next_edit.current() ~= nil")" = "v:true" ] && break
  sleep 0.5
done
echo "--- next edits ---"
tmux capture-pane -p -t "$session"
