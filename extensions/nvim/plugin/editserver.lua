-- editserver: nothing happens until require('editserver').setup() is called (see :help editserver).
if vim.g.loaded_editserver then
  return
end
vim.g.loaded_editserver = true
