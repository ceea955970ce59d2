// The house's floors (docs/architecture.md): a file may import from its own folder and
// from folders below it, never from one above. Imports are read with TypeScript's own
// pre-processor (import and export declarations, dynamic imports, `import type`).
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import ts from 'typescript'

/** Top to bottom. A path is placed on the first floor whose prefix it starts with. */
export const FLOORS: readonly (readonly string[])[] = [
  ['cli.ts'],
  ['commands/'],
  // The page, /metrics and /api: the same core the commands call, no operation of its own.
  ['serve/'],
  // Each operator action once (pause, resume, enqueue, job cancel and retry, compress, comment, the fleet's
  // pool and lease passes): typed outcomes that commands/ print and serve/ renders.
  ['actions/'],
  ['command-env.ts'],
  ['fleet/'],
  ['run/'],
  // What a task works in: its own worktree of a checkout, the repository's trusted base and environment (setup, cache); next, clones and PR checkouts.
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
