import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { leadingBlobId, readBlob, recordToolOutput } from '../../src/storage/blob/store.js'
import { inspect } from '../../src/tools/inspect.js'
import type { ToolContext } from '../../src/tools/types.js'

function taskDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-inspect-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

function context(dir: string): ToolContext {
  return {
    workspace: dir,
    hidden: [],
    sandbox: { kind: 'none' } as unknown as ToolContext['sandbox'],
    signal: new AbortController().signal,
    reads: { get: () => undefined, set: () => undefined },
    commandTimeoutSeconds: 10,
    blobs: { read: (id) => readBlob(dir, id) },
  }
}

async function call(args: Record<string, unknown>, ctx: ToolContext): Promise<{ output: string; status: string }> {
  const valid = await inspect.validate(args)
  if (!valid.ok) return { output: valid.error, status: 'invalid' }
  try {
    return await inspect.run(valid.args, ctx)
  } catch (err) {
    return { output: (err as Error).message, status: 'error' }
  }
}

const TEXT = Array.from({ length: 500 }, (_, i) => (i % 50 === 7 ? `ERROR at step ${i + 1}` : `ok step ${i + 1}`)).join('\n')

describe('inspect', () => {
  it('reads a blob of its own task in parts (offset/limit) and by grep', async () => {
    const dir = taskDir()
    const id = leadingBlobId(recordToolOutput(dir, TEXT, { thresholdBytes: 100, maxInlineBytes: 65536 })) as string
    const part = await call({ blob: id, offset: 10, limit: 3 }, context(dir))
    expect(part.output).toBe('10: ok step 10\n11: ok step 11\n12: ok step 12\n(lines up to 12 shown; use offset=13 to read more)')
    const tail = await call({ blob: `[blob:${id}]`, offset: 499 }, context(dir))
    expect(tail.output).toMatch(/^499: ok step 499\n500: ok step 500\n\(end of blob/)
    const errors = await call({ blob: id, grep: '^ERROR', limit: 3 }, context(dir))
    expect(errors.output.split('\n').slice(0, 3)).toEqual(['8: ERROR at step 8', '58: ERROR at step 58', '108: ERROR at step 108'])
    expect(errors.output).toContain('use offset=109')
    expect((await call({ blob: id, grep: 'nothing like this' }, context(dir))).output).toMatch(/^no lines of blob/)
    expect((await call({ blob: id, grep: '(a' }, context(dir))).status).toBe('error')
  })

  it("refuses another task's blob and any id that is not 64 hex digits", async () => {
    const mine = taskDir()
    const other = taskDir()
    const theirs = leadingBlobId(recordToolOutput(other, TEXT, { thresholdBytes: 100, maxInlineBytes: 65536 })) as string
    const refused = await call({ blob: theirs }, context(mine))
    expect(refused.status).toBe('error')
    expect(refused.output).toContain('this task has no blob')
    // A link planted in blobs/ under a blob's name is not followed.
    mkdirSync(join(mine, 'blobs'), { recursive: true })
    symlinkSync(join(other, 'blobs', theirs), join(mine, 'blobs', theirs))
    const linked = await call({ blob: theirs }, context(mine))
    expect(linked.status).toBe('error')
    expect(linked.output).not.toContain('ok step')
    for (const bad of ['../../etc/passwd', `../${theirs}`, `${theirs}/../x`, `/tmp/${theirs}`, 'abc']) {
      const out = await call({ blob: bad }, context(mine))
      expect(out.status, bad).toBe('error')
      expect(out.output, bad).toContain('is not a blob id')
    }
  })
})
