import { lstatSync } from 'node:fs'
import { ToolError } from './errors.js'
import { checkFresh, writeWorkspaceFile } from './file-write.js'
import { defineTool, ok, param } from './schema.js'
import { resolveInWorkspace } from './workspace.js'

export const writeFile = defineTool({
  name: 'write_file',
  description: 'Create a file, or replace one you have read, with the given content (parent directories are created).',
  parameters: {
    path: param.text('path relative to the workspace'),
    content: param.text('the whole new content of the file'),
  },
  async run({ path, content }, ctx) {
    const target = resolveInWorkspace(ctx.workspace, path)
    if (target.exists) {
      if (lstatSync(target.real).isDirectory()) throw new ToolError(`${target.rel} is a directory`)
      checkFresh(ctx, target.rel, target.real)
    }
    writeWorkspaceFile(ctx, target.rel, target.real, content)
    const lines = content === '' ? 0 : content.split('\n').length - (content.endsWith('\n') ? 1 : 0)
    const bytes = Buffer.byteLength(content)
    return ok(`${target.exists ? 'replaced' : 'created'} ${target.rel} (${count(lines, 'line')}, ${count(bytes, 'byte')})`)
  },
})

const count = (n: number, word: string) => `${n.toLocaleString('en-US')} ${word}${n === 1 ? '' : 's'}`
