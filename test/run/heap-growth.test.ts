import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { BIN, TEST_ENV } from '../helpers/run.js'

/**
 * Issue #22: a long `ctxagent run` reached a far higher peak RSS than early on, because V8
 * let the old generation grow to up to 4× what survived the last full GC. The agent loop
 * caps that at 2× (src/run/v8-tuning.ts). V8 reports the factor of each new limit
 * (--trace-gc-verbose: "[HeapController] Limit: old size …, new limit … (2.0)"), here after
 * the full GC a hook forces as the process exits; `ctxagent demo` runs a whole agent loop
 * without an LLM server.
 */
const FULL_GC_AT_EXIT = 'data:text/javascript,process.on("exit",()=>globalThis.gc())'

function lastLimitFactor(nodeFlags: string[]): string | undefined {
  const cwd = mkdtempSync(join(tmpdir(), 'ctxagent-heap-'))
  onTestFinished(() => rmSync(cwd, { recursive: true, force: true }))
  const res = spawnSync(process.execPath, ['--trace-gc-verbose', '--expose-gc', '--import', FULL_GC_AT_EXIT, ...nodeFlags, BIN, 'demo'], {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, ...TEST_ENV, CTXAGENT_HOME: join(cwd, 'tree') },
  })
  expect(res.status, res.stderr).toBe(0)
  return [...res.stdout.matchAll(/\[HeapController\] Limit: old size: \d+ KB, new limit: \d+ KB \(([\d.]+)\)/g)].at(-1)?.[1]
}

describe('the heap of the agent loop', () => {
  it('lets the old generation grow to twice what survived a full GC, not V8’s up to 4×', () => {
    expect(lastLimitFactor([])).toBe('2.0')
  })

  it('keeps a growing factor given to node itself', () => {
    expect(lastLimitFactor(['--heap-growing-percent=50'])).toBe('1.5')
  })
})
