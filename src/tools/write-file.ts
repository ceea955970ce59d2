import { ToolError } from './errors.js'
import { boundaryOf, relOf, walkToFile } from './fd-walk.js'
import { checkFresh, statIn, writeInDir } from './file-write.js'
import { defineTool, ok, param } from './schema.js'
import { grouped } from '../text.js'

export const writeFile = defineTool({
  name: 'write_file',
  description: 'Create a file, or replace one you have read, with the given content (parent directories are created).',
  parameters: {
    path: param.text('path relative to the workspace'),
    content: param.text('the whole new content of the file'),
  },
  async run({ path, content }, ctx) {
    const boundary = boundaryOf(ctx)
    // Missing parent directories are created on the way, each opened with O_NOFOLLOW from the one before.
    const parent = walkToFile(boundary, path, true)
    let rel: string
    let existing: ReturnType<typeof statIn>
    try {
      if (parent.name === '.') throw new ToolError(`${path} is a directory`)
      rel = relOf(boundary, parent.dirFd, parent.name)
      existing = statIn(parent)
      if (existing?.isDirectory()) throw new ToolError(`${rel} is a directory`)
      if (existing?.isFile()) checkFresh(ctx, rel, existing)
      writeInDir(ctx, parent, rel, content, existing)
    } finally {
      parent.close()
    }
    const target = { rel, exists: existing !== null }
    const lines = content === '' ? 0 : content.split('\n').length - (content.endsWith('\n') ? 1 : 0)
    const bytes = Buffer.byteLength(content)
    return ok(`${target.exists ? 'replaced' : 'created'} ${target.rel} (${count(lines, 'line')}, ${count(bytes, 'byte')})`)
  },
})

const count = (n: number, word: string) => `${grouped(n)} ${word}${n === 1 ? '' : 's'}`
