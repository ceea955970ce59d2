import { readFileSync } from 'node:fs'
import { ToolError } from './errors.js'
import { checkFresh, writeWorkspaceFile } from './file-write.js'
import { defineTool, ok } from './schema.js'
import { existingPath } from './workspace.js'

interface Args {
  path: string
  old_string: string
  new_string: string
  replace_all: boolean
}

export const editFile = defineTool<Args>({
  name: 'edit_file',
  description: 'Replace exact text in a file you have read: old_string must occur exactly once (include surrounding lines to make it unique), or set replace_all. Copy old_string from the file itself, without the "N: " line prefixes of read_file.',
  parameters: {
    type: 'object',
    properties: {
      path: { type: 'string', description: 'path relative to the workspace' },
      old_string: { type: 'string', description: 'the exact text to replace' },
      new_string: { type: 'string', description: 'the text to put in its place' },
      replace_all: { type: 'boolean', default: false, description: 'replace every occurrence' },
    },
    required: ['path', 'old_string', 'new_string'],
  },
  async run({ path, old_string: oldText, new_string: newText, replace_all: all }, ctx) {
    const file = existingPath(ctx.workspace, path, 'file')
    checkFresh(ctx, file.rel, file.real)
    if (oldText === '') throw new ToolError('old_string is empty; to create or replace a whole file use write_file')
    if (oldText === newText) throw new ToolError('old_string and new_string are the same; nothing would change')
    const content = readFileSync(file.real, 'utf8')
    const count = content.split(oldText).length - 1
    if (count === 0) throw new ToolError(`old_string was not found in ${file.rel}${hint(content, oldText)}`)
    if (count > 1 && !all) throw new ToolError(`old_string occurs ${count} times in ${file.rel}; add surrounding lines to make it unique, or set replace_all: true`)
    const at = content.indexOf(oldText)
    const updated = all ? content.split(oldText).join(newText) : content.slice(0, at) + newText + content.slice(at + oldText.length)
    writeWorkspaceFile(ctx, file.rel, file.real, updated)
    return ok(`edited ${file.rel}: ${all ? count : 1} replacement${(all ? count : 1) === 1 ? '' : 's'}\n${around(updated, at, newText.length)}`)
  },
})

/** Why a string may not have matched: line-number prefixes copied from read_file, or white space. */
function hint(content: string, oldText: string): string {
  if (/^\d+: /m.test(oldText)) return '; it contains "N: " line-number prefixes from read_file, which are not part of the file'
  const squash = (s: string) => s.replace(/\s+/g, ' ').trim()
  if (squash(content).includes(squash(oldText))) return '; it matches if white space is ignored: copy the indentation and line breaks exactly'
  return '; read_file the file again and copy the text exactly'
}

/** The changed lines with three lines around them, numbered as read_file numbers them. */
function around(content: string, at: number, length: number): string {
  const firstLine = content.slice(0, at).split('\n').length
  const lastLine = firstLine + content.slice(at, at + length).split('\n').length - 1
  const lines = content.split('\n')
  const from = Math.max(1, firstLine - 3)
  const to = Math.min(lines.length, lastLine + 3)
  const out: string[] = []
  for (let n = from; n <= to; n++) out.push(`${n}: ${lines[n - 1]}`)
  return out.join('\n')
}
