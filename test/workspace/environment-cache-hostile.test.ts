import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readTask, runSetup } from '../run/harness.js'
import { makeOrigin } from './repo.js'

/*
 * A hostile setup (a dependency's install script) against the cache's collection
 * (docs/environments.md#the-cache): setup runs sandboxed, but its cache.paths are copied by
 * ctxagent, outside. A link it plants on the way of a cache path must not make ctxagent copy
 * what the sandbox hides (ctxagent's home here) into the cache and on into a task's workspace.
 */

/** Files under `dir` whose content holds `needle`. */
function holding(dir: string, needle: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: false })
    .map((p) => join(dir, String(p)))
    .filter((p) => {
      try {
        return statSync(p).isFile() && readFileSync(p, 'utf8').includes(needle)
      } catch {
        return false
      }
    })
}

describe('a setup planting a link on the way of a cache path', () => {
  it('gets nothing from beyond the link into the cache or the workspace', { timeout: 240_000 }, async () => {
    const s = await runSetup('tools:\n  shell: true\n')
    const secret = `HIDDEN-FROM-THE-SANDBOX-${process.pid}`
    // Readable by anyone: only the sandbox's mounts keep it from setup.
    writeFileSync(join(s.tree.base, 'operator-notes.txt'), `${secret}\n`, { mode: 0o644 })
    const env = `setup: ln -s ${s.tree.base} deps\ncache:\n  paths: [deps/operator-notes.txt, made]\n`
    const origin = makeOrigin({ '.ctxagent/environment.yml': env })
    const ws = origin.clone()
    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const run = await s.run(['run', '--task', 'look', '--workspace', ws, '--json'])
    expect(run.code, run.stderr).toBe(0)
    const uuid = JSON.parse(run.stdout).uuid as string
    expect(readTask(s.tree, uuid).state.environment).toMatchObject({ status: 'ready', restored: [] })
    expect(holding(join(s.tree.base, 'environments'), secret)).toEqual([])
    expect(holding(ws, secret)).toEqual([])
  })
})
