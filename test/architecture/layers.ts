// The house's floors (docs/architecture.md): a file may import from its own folder and
// from folders below it, never from one above. Imports are read with TypeScript's own
// pre-processor (import and export declarations, dynamic imports, `import type`).
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import ts from 'typescript'

/** Top to bottom. A path is placed on the first floor whose prefix it starts with. */
export const FLOORS: readonly (readonly string[])[] = [
  // start.ts picks the build of cli.ts a command line needs (bundle/start.js).
  ['start.ts', 'cli.ts'],
  ['commands/'],
  // What commands share and no command owns: running a command with its env, argument parsers,
  // completion words, the lines of settled jobs (a command never imports another command).
  ['command-kit/'],
  // The page, /metrics and /api: the same core the commands call, no operation of its own.
  ['serve/'],
  // Each operator action once (pause, resume, enqueue, job cancel and retry, compress, comment, the fleet's
  // pool and lease passes): typed outcomes that commands/ print and serve/ renders.
  ['actions/'],
  ['command-env.ts'],
  // Evals: suites of tasks run as ordinary tasks with hidden checks (docs/eval.md); trials may become fleet jobs.
  ['eval/'],
  // The fleet in parts, each the only writer of its tables: the worker process, polling and the
  // review loop, the watch-locks pass over jobs; all of them over the queue (fleet_jobs and its history).
  ['fleet/worker/', 'fleet/poll/', 'fleet/recovery/'],
  ['fleet/queue/'],
  ['run/'],
  // What a task works in: its own worktree of a checkout, clones and pull-request checkouts, the repository's trusted base and environment (setup, cache), for a single-host run and a worker alike.
  ['workspace/'],
  // Delivery of a finished task's change (git, the forge's PR/MR): called by the loop, above the tools and sources it uses.
  ['delivery/'],
  ['operations/'],
  ['tools/'],
  ['sources/'],
  ['context/'],
  ['llm/'],
  // Metric and span names, OTLP export: recorded by the loop and the fleet, a leaf below them.
  ['telemetry/'],
  ['storage/task/', 'storage/blob/'],
  ['storage/lock/'],
  ['storage/index/'],
  ['storage/format/'],
  ['storage/fs/'],
  // The ground: errors, durations, text helpers, configuration, terminal output.
  ['config/', ''],
]

export function floorOf(path: string): number {
  return FLOORS.findIndex((prefixes) => prefixes.some((p) => path.startsWith(p)))
}

export interface Violation {
  file: string
  imports: string
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return name.endsWith('.ts') ? [path] : []
  })
}

/** src/'s files (paths relative to it) and the src files each one imports. */
export function importGraph(srcDir: string): Map<string, string[]> {
  const graph = new Map<string, string[]>()
  for (const path of sourceFiles(srcDir)) {
    const file = relative(srcDir, path).split(sep).join('/')
    const { importedFiles } = ts.preProcessFile(readFileSync(path, 'utf8'), true, true)
    const targets = importedFiles
      .filter(({ fileName }) => fileName.startsWith('.'))
      .map(({ fileName }) =>
        relative(srcDir, resolve(dirname(path), fileName))
          .split(sep)
          .join('/')
          .replace(/\.js$/, '.ts'),
      )
    graph.set(file, targets)
  }
  return graph
}

/** Every import that points to a floor above its own file's floor. */
export function upwardImports(graph: Map<string, string[]>): Violation[] {
  return [...graph].flatMap(([file, targets]) => targets.filter((t) => floorOf(t) < floorOf(file)).map((imports) => ({ file, imports })))
}

/** The command a file of commands/ belongs to: its folder (`commands/run/…` is `run`), or the file itself. */
function commandOf(path: string): string {
  const parts = path.split('/')
  return parts.length > 2 ? `${parts[1]}/` : (parts[1] ?? path)
}

/** Every import from one command into another: commands share only what lies below them (docs/architecture.md). */
export function crossCommandImports(graph: Map<string, string[]>): Violation[] {
  return [...graph].flatMap(([file, targets]) =>
    file.startsWith('commands/')
      ? targets.filter((t) => t.startsWith('commands/') && commandOf(t) !== commandOf(file)).map((imports) => ({ file, imports }))
      : [],
  )
}

/** The files of src/ (relative to it) whose SQL inserts into, updates or deletes from one of `tables`. */
export function tableWriters(srcDir: string, tables: readonly string[]): string[] {
  return filesMatching(srcDir, new RegExp(`\\b(INSERT\\s+INTO|UPDATE|DELETE\\s+FROM)\\s+(${tables.join('|')})\\b`))
}

/** The files of src/ (relative to it) that compare a fleet worker's heartbeat with the database's clock: the liveness rule, written out. */
export function livenessRules(srcDir: string): string[] {
  return filesMatching(srcDir, /heartbeat_at\s*[<>]=?\s*now\(\)/)
}

function filesMatching(srcDir: string, pattern: RegExp): string[] {
  return sourceFiles(srcDir)
    .filter((path) => pattern.test(readFileSync(path, 'utf8')))
    .map((path) => relative(srcDir, path).split(sep).join('/'))
    .sort()
}

/** One import circle, as the files around it, or null when there is none. */
export function findCircle(graph: Map<string, string[]>): string[] | null {
  const done = new Set<string>()
  const path: string[] = []
  const visit = (file: string): string[] | null => {
    const at = path.indexOf(file)
    if (at >= 0) return [...path.slice(at), file]
    if (done.has(file)) return null
    path.push(file)
    for (const next of graph.get(file) ?? []) {
      const circle = visit(next)
      if (circle) return circle
    }
    path.pop()
    done.add(file)
    return null
  }
  for (const file of graph.keys()) {
    const circle = visit(file)
    if (circle) return circle
  }
  return null
}
