import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { processStart } from '../../../src/storage/fs/process-info.js'
import { makeScratchDir, sweepScratchDirs } from '../../../src/storage/fs/scratch-dir.js'

/** A pid above Linux's largest (2^22): no process has it. */
const DEAD = 4_194_305

describe('scratch directories a killed maker left (docs/contract.md §16.2)', () => {
  const made: string[] = []
  afterEach(() => {
    for (const p of made.splice(0)) rmSync(p, { recursive: true, force: true })
  })

  it('are named after their maker, private, and removed by a later sweep only once the maker is gone', async () => {
    const own = makeScratchDir('unit')
    made.push(own)
    const parts = /^ctxagent-unit-([0-9a-f]{8})-(\d+)-(\d+)-[A-Za-z0-9]{6}$/.exec(basename(own))
    expect(parts?.[2]).toBe(String(process.pid))
    expect(parts?.[3]).toBe(processStart(process.pid))
    const tag = parts?.[1] as string
    const start = parts?.[3] as string

    // In a directory of the test's own, beside this process's own directory's kind of names.
    const dir = mkdtempSync(join(tmpdir(), 'ctxagent-scratch-test-'))
    made.push(dir)
    const at = (name: string) => {
      mkdirSync(join(dir, name, 'checkout', 'node_modules'), { recursive: true })
      return name
    }
    const dead = at(`ctxagent-unit-${tag}-${DEAD}-123-aBc123`)
    // The same pid as this process, another start: the pid was given to another process since.
    const reused = at(`ctxagent-unit-${tag}-${process.pid}-${Number(start) + 1}-aBc124`)
    const alive = at(`ctxagent-unit-${tag}-${process.pid}-${start}-aBc125`)
    // Made by a process whose start could not be read: kept while its pid lives, removed once it is gone.
    const aliveUnknown = at(`ctxagent-unit-${tag}-${process.pid}-x-aBc129`)
    const deadUnknown = at(`ctxagent-unit-${tag}-${DEAD}-x-aBc130`)
    // Another host or PID namespace: its pids mean other processes.
    const elsewhere = at(`ctxagent-unit-0000ffff-${DEAD}-123-aBc126`)
    const otherKind = at(`ctxagent-other-${tag}-${DEAD}-123-aBc127`)
    const unnamed = at(`ctxagent-unit-${tag}-${DEAD}-123-toolongname`)
    // A link with a maker's name is never followed nor removed.
    const target = mkdtempSync(join(tmpdir(), 'ctxagent-scratch-target-'))
    made.push(target)
    const link = `ctxagent-unit-${tag}-${DEAD}-123-aBc128`
    symlinkSync(target, join(dir, link))

    const removed = await sweepScratchDirs('unit', dir)
    expect(removed.map((p) => basename(p)).sort()).toEqual([dead, reused, deadUnknown].sort())
    expect(readdirSync(dir).sort()).toEqual([alive, aliveUnknown, elsewhere, otherKind, unnamed, link].sort())
    expect(existsSync(target)).toBe(true)
    expect(dirname(own)).toBe(tmpdir())
  })
})
