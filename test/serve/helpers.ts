import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { appendFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { expect, onTestFinished } from 'vitest'
import { BIN, cli, ROOT, TEST_ENV } from '../helpers/run.js'
import type { Tree } from '../fixtures/tree.js'

export interface Serve {
  url: string
  child: ChildProcess
  err: () => string
  get(path: string, init?: RequestInit): Promise<Response>
}

export const TOKEN = 'serve-test-token-0123456789abcdef'

/** `ctxagent serve --port 0` on the tree, as a real child process; stopped with SIGTERM when the test ends. */
export async function startServe(base: string, options: { config?: string; env?: Record<string, string>; args?: string[] } = {}): Promise<Serve> {
  const config = options.config ?? 'none'
  const child = spawn(process.execPath, [BIN, 'serve', '--port', '0', '--home', base, '--config', config, ...(options.args ?? [])], {
    cwd: ROOT,
    env: { ...process.env, ...TEST_ENV, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let err = ''
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()))
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.kill('SIGTERM')
      }),
  )
  const url = await new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString()
      const m = /on (http:\/\/\S+)/.exec(out)
      if (m) resolve(m[1] as string)
    })
    child.once('exit', (code) => reject(new Error(`serve exited (${code}) before listening: ${err}`)))
  })
  return { url, child, err: () => err, get: (path, init) => fetch(`${url}${path}`, { redirect: 'manual', ...init }) }
}

/** tasks.db for the tree, as an operator makes it. */
export function reindex(tree: Tree): void {
  const res = cli(['reindex', '--home', tree.base, '--config', 'none'])
  expect(res.code, res.stderr).toBe(0)
}

/** Replaces a task's messages with these (seq from 1), so its statement and transcript are what a test needs. */
export function writeMessages(dir: string, messages: Record<string, unknown>[]): void {
  writeFileSync(
    join(dir, 'messages.jsonl'),
    messages.map((m, i) => `${JSON.stringify({ seq: i + 1, timestamp: '2024-01-15T10:30:00.000Z', token_count: 5, ...m })}\n`).join(''),
  )
}

export function appendMessage(dir: string, message: Record<string, unknown>): void {
  appendFileSync(join(dir, 'messages.jsonl'), `${JSON.stringify({ timestamp: new Date().toISOString(), token_count: 5, ...message })}\n`)
}

export function configWith(tree: Tree, yaml: string): string {
  const path = join(tree.base, 'serve-config.yaml')
  writeFileSync(path, yaml)
  return path
}
