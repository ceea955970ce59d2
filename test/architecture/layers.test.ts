import { describe, expect, it } from 'vitest'
import { join } from 'node:path'
import { ROOT } from '../helpers/run.js'
import { findCircle, floorOf, importGraph, upwardImports } from './layers.js'

describe('the house keeps its shape (docs/architecture.md)', () => {
  const graph = importGraph(join(ROOT, 'src'))

  it('no file in src/ imports from a folder above its own', () => {
    expect(upwardImports(graph)).toEqual([])
  })

  it('no import circles', () => {
    expect(findCircle(graph)).toBeNull()
  })

  it('places files on their floors', () => {
    expect(floorOf('cli.ts')).toBeLessThan(floorOf('commands/run.ts'))
    expect(floorOf('run/turn.ts')).toBeLessThan(floorOf('operations/reaper.ts'))
    expect(floorOf('storage/task/handle.ts')).toBeLessThan(floorOf('storage/format/jsonl.ts'))
    expect(floorOf('storage/fs/layout.ts')).toBeLessThan(floorOf('errors.ts'))
  })

  it('finds an upward import and a circle when there is one', () => {
    const bad = new Map([
      ['storage/fs/files.ts', ['run/turn.ts']],
      ['run/turn.ts', ['storage/fs/files.ts']],
    ])
    expect(upwardImports(bad)).toEqual([{ file: 'storage/fs/files.ts', imports: 'run/turn.ts' }])
    expect(findCircle(bad)).toEqual(['storage/fs/files.ts', 'run/turn.ts', 'storage/fs/files.ts'])
  })
})
