import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ROOT } from '../helpers/run.js'
import { crossCommandImports, findCircle, FLOORS, floorOf, importGraph, livenessRules, tableWriters, upwardImports } from './layers.js'

/** The paths of each row of docs/architecture.md's table of floors, as layers.ts spells them (no `src/`, `*.ts` for the ground's files). */
function documentedFloors(): string[][] {
  const doc = readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8')
  return doc
    .split('\n')
    .filter((line) => /^\| \d+ \|/.test(line))
    .map((line) => [...(line.split('|')[2] ?? '').matchAll(/`src\/([^`]*)`/g)].map((m) => m[1] ?? ''))
}

describe('the house keeps its shape (docs/architecture.md)', () => {
  const graph = importGraph(join(ROOT, 'src'))

  it('no file in src/ imports from a folder above its own', () => {
    expect(upwardImports(graph)).toEqual([])
  })

  it("no command imports another command (a command's own folder, like commands/run/, is one command)", () => {
    expect(crossCommandImports(graph)).toEqual([])
  })

  it('only the queue writes fleet_jobs and its history (a schema migration and the expiry of old rows aside)', () => {
    const outside = tableWriters(join(ROOT, 'src'), ['fleet_jobs', 'fleet_job_attempts']).filter((f) => !f.startsWith('fleet/queue/'))
    // queue-waits.ts fills a new column once (a migration); fleet-claim.ts is the migration that makes the queue's claim and
    // end functions (the queue calls them: claim-statement.ts, job-end.ts); retention.ts deletes rows past fleet.retention_days.
    expect(outside).toEqual(['operations/retention.ts', 'storage/index/fleet-claim.ts', 'storage/index/queue-waits.ts'])
  })

  it('"is this worker alive" is written once (storage/index/worker-liveness.ts); everyone else calls it', () => {
    expect(livenessRules(join(ROOT, 'src'))).toEqual(['storage/index/worker-liveness.ts'])
  })

  it('no import circles', () => {
    expect(findCircle(graph)).toBeNull()
  })

  it('places files on their floors', () => {
    expect(floorOf('cli.ts')).toBeLessThan(floorOf('commands/run/run.ts'))
    expect(floorOf('run/turn.ts')).toBeLessThan(floorOf('operations/reaper.ts'))
    expect(floorOf('storage/task/handle.ts')).toBeLessThan(floorOf('storage/format/jsonl.ts'))
    expect(floorOf('storage/fs/layout.ts')).toBeLessThan(floorOf('errors.ts'))
  })

  it('docs/architecture.md lists the same floors, in the same order', () => {
    const documented = documentedFloors().map((paths) => paths.map((p) => (p === '*.ts' ? '' : p)).sort())
    const checked = FLOORS.map((prefixes) => [...prefixes].sort())
    expect(documented).toEqual(checked)
  })

  it('every folder of src/ is named on a floor (a new one is placed on purpose, not left to the ground)', () => {
    const named = new Set(FLOORS.flat())
    const folders = readdirSync(join(ROOT, 'src'), { withFileTypes: true }).filter((d) => d.isDirectory())
    const unplaced = folders.flatMap((d) => {
      if (named.has(`${d.name}/`)) return []
      const inner = readdirSync(join(ROOT, 'src', d.name), { withFileTypes: true }).filter((e) => e.isDirectory())
      if (inner.length === 0) return [`${d.name}/`]
      return inner.map((e) => `${d.name}/${e.name}/`).filter((p) => !named.has(p))
    })
    expect(unplaced).toEqual([])
  })

  it('finds an upward import and a circle when there is one', () => {
    const bad = new Map([
      ['storage/fs/files.ts', ['run/turn.ts']],
      ['run/turn.ts', ['storage/fs/files.ts']],
    ])
    expect(upwardImports(bad)).toEqual([{ file: 'storage/fs/files.ts', imports: 'run/turn.ts' }])
    expect(findCircle(bad)).toEqual(['storage/fs/files.ts', 'run/turn.ts', 'storage/fs/files.ts'])
  })

  it("finds a command importing another, and lets a command's own folder import itself", () => {
    const commands = new Map([
      ['commands/run-pull.ts', ['commands/worker.ts', 'command-kit/shared.ts']],
      ['commands/run/run.ts', ['commands/run/run-prepare.ts']],
      ['commands/view/index.ts', ['commands/run/run.ts']],
    ])
    expect(crossCommandImports(commands)).toEqual([
      { file: 'commands/run-pull.ts', imports: 'commands/worker.ts' },
      { file: 'commands/view/index.ts', imports: 'commands/run/run.ts' },
    ])
  })
})
