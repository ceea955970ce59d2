import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { cli } from '../helpers/run.js'

describe('enqueue --allow-shell', () => {
  it("refuses at once what run --allow-shell refuses: a workspace the sandbox's user cannot write (exit 2, nothing queued)", () => {
    const root = mkdtempSync(join(tmpdir(), 'ctxagent-enqueue-shell-'))
    onTestFinished(() => {
      chmodSync(join(root, 'ws'), 0o700)
      rmSync(root, { recursive: true, force: true })
    })
    const ws = join(root, 'ws')
    mkdirSync(ws)
    // Read-only to its owner, and nothing at all to others: no sandbox user writes it (nobody as root, this user else).
    chmodSync(ws, 0o500)
    const home = join(root, 'tree')
    // A database that is never reached: the refusal comes first.
    const env = { CTXAGENT_DATABASE_URL: 'postgres://nobody@127.0.0.1:9/none', OPENAI_API_KEY: 'sk-test-key', OPENAI_BASE_URL: 'http://127.0.0.1:9/v1' }
    const run = cli(['run', '--task', 'x', '--workspace', ws, '--allow-shell', '--home', home, '--config', 'none'], env)
    const enqueue = cli(['enqueue', '--task', 'x', '--workspace', ws, '--allow-shell', '--home', home, '--config', 'none'], env)
    expect(run.code, run.stderr).toBe(2)
    expect(enqueue.code, enqueue.stderr).toBe(2)
    const firstLine = (text: string) => text.split('\n')[0] ?? ''
    expect(firstLine(enqueue.stderr)).toBe(firstLine(run.stderr))
    expect(enqueue.stderr).toMatch(/^ctxagent: .*(cannot write the workspace|bubblewrap does not work here)/)
    expect(enqueue.stdout).toBe('')
  })
})
