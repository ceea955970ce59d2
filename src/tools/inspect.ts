import type { RE2JS } from 're2js'
import { isBlobId } from '../storage/blob/store.js'
import { ToolError } from './errors.js'
import { compileRe2 } from './re2.js'
import { defineTool, ok, param } from './schema.js'
import { maskedHead } from '../storage/format/mask-stream.js'

/** The most an answer carries (under context.blobs.max_inline_bytes' default, so a fresh answer is sent whole). */
const MAX_OUTPUT = 48 * 1024
const MAX_LINE = 2000

/**
 * Reads a blob of this task again (docs/contract.md §5): a long tool output that is stored once in
 * the task's blobs/ and referred to as `[blob:<id>]` (`[pruned] [blob:<id>]` once old).
 * Only this task's blobs, by their id (64 hex digits): never a path.
 */
export const inspect = defineTool({
  name: 'inspect',
  description:
    'Read again a long tool output of this task that is stored as a blob: `[blob:<id>]` or `[pruned] [blob:<id>]` in an earlier result. Numbered lines ("N: text"); use offset and limit for parts, or grep (RE2 regular expression) for the matching lines.',
  parameters: {
    blob: param.text('the blob id: the 64 hex digits of [blob:<id>]'),
    offset: param.int('first line to show (1-based)', 1),
    limit: param.int('how many lines to show (at most 2000)', 200, 1, 2000),
    grep: param.optionalText('only lines matching this regular expression (RE2 syntax, e.g. "(?i)error")'),
  },
  async run({ blob, offset, limit, grep }, ctx) {
    const id = blob
      .trim()
      .replace(/^\[?blob:/, '')
      .replace(/\]$/, '')
    if (!isBlobId(id))
      throw new ToolError(`${JSON.stringify(blob.slice(0, 100))} is not a blob id: give the 64 hex digits of a [blob:<id>] reference of this task`)
    if (ctx.blobs === undefined) throw new ToolError('this session stores no blobs')
    let text: string | null
    try {
      text = ctx.blobs.read(id)
    } catch {
      // Not said to the model: where the task directory is (a link in blobs/, a damaged .gz).
      throw new ToolError(`blob ${id} of this task cannot be read`)
    }
    if (text === null) throw new ToolError(`this task has no blob ${id} (only the blobs referred to in this task's own results can be read)`)
    let regex: RE2JS | null = null
    if (grep !== undefined) {
      try {
        regex = await compileRe2(grep)
      } catch (err) {
        throw new ToolError(`invalid regular expression ${JSON.stringify(grep)} (RE2 syntax: no backreferences or lookaround): ${(err as Error).message}`)
      }
    }
    const lines = text.split('\n')
    if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop()
    const out: string[] = []
    let bytes = 0
    let last = 0
    let more = false
    for (let i = offset - 1; i < lines.length; i++) {
      const line = (lines[i] ?? '').replace(/\r$/, '')
      if (regex !== null && !regex.matcher(line).find()) continue
      const shown = `${i + 1}: ${line.length > MAX_LINE ? `${maskedHead(line, MAX_LINE)}… [cut]` : line}`
      if (out.length >= limit || bytes + shown.length > MAX_OUTPUT) {
        more = true
        break
      }
      out.push(shown)
      bytes += shown.length + 1
      last = i + 1
    }
    const what = `blob ${id.slice(0, 12)}… (${lines.length} lines)`
    if (out.length === 0) return ok(regex !== null ? `no lines of ${what} from line ${offset} match /${grep}/` : `${what}: offset ${offset} is past its end`)
    const footer = more ? `(lines up to ${last} shown; use offset=${last + 1} to read more)` : `(end of ${what})`
    return ok(`${out.join('\n')}\n${footer}`)
  },
})
