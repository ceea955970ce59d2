import { statSync } from 'node:fs'
import { ToolError } from './errors.js'
import { checkFresh, writeWorkspaceFile } from './file-write.js'
import { defineTool, ok } from './schema.js'
import { resolveInWorkspace } from './workspace.js'

interface Args {
  path: string
  content: string
}

export const writeFile = defineTool<Args>({
  name: 'write_file',
  description: 'Create a file, or replace one you have read, with the given content (parent directories are created).',
  parameters: {
    type: 'object',
    properties: {
      path: { type: 'string', description: 'path relative to the workspace' },
      content: { type: 'string', description: 'the whole new content of the file' },
    },
    required: ['path', 'content'],
  },
  async run({ path, content }, ctx) {
    const target = resolveInWorkspace(ctx.workspace, path)
    if (target.exists) {
      if (statSync(target.real).isDirectory()) throw new ToolError(`${target.rel} is a directory`)
      checkFresh(ctx, target.rel, target.real)
    }
    writeWorkspaceFile(ctx, target.rel, target.real, content)
    const lines = content === '' ? 0 : content.split('\n').length - (content.endsWith('\n') ? 1 : 0)
    return ok(`${target.exists ? 'replaced' : 'created'} ${target.rel} (${lines} line${lines === 1 ? '' : 's'}, ${Buffer.byteLength(content).toLocaleString('en-US')} bytes)`)
  },
})
