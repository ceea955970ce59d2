import { spawnSync } from 'node:child_process'
import { readFileSync, realpathSync } from 'node:fs'
import { basename, join } from 'node:path'

/*
 * Two programs of the host run inside every sandbox before the command: prlimit (the
 * limits, limits.ts) and, behind the egress proxy, ctxagent's own node (the forwarder,
 * egress-forwarder.ts). In a sandbox whose system is an image (docs/environments.md#an-image)
 * the host's /usr is not there, nor the libraries they need: each program and exactly
 * the shared libraries it needs (the dynamic loader this process has mapped lists them by
 * soname) are shown read-only under HOST_INSIDE, and the program is started by that
 * loader with its library path there. What the program then runs (the command) is the
 * image's, with the image's own loader. Nothing else of the host is shown.
 */

export const HOST_INSIDE = '/run/ctxagent/host'
const LIB_INSIDE = join(HOST_INSIDE, 'lib')

interface HostProgram {
  file: string
  /** soname → the host's file. */
  libraries: [string, string][]
}

let loaderFound: string | null | undefined
const programs = new Map<string, HostProgram>()

/** The dynamic loader this process was started by (null: a static node). */
function loader(): string | null {
  if (loaderFound !== undefined) return loaderFound
  const mapped = readFileSync('/proc/self/maps', 'utf8')
    .split('\n')
    .map((line) => (line.includes('/') ? line.slice(line.indexOf('/')) : ''))
    .find((path) => /^ld-(linux|musl)/.test(basename(path)))
  loaderFound = mapped === undefined ? null : realpathSync(mapped)
  return loaderFound
}

function program(path: string): HostProgram {
  const cached = programs.get(path)
  if (cached !== undefined) return cached
  const file = realpathSync(path)
  const libraries: [string, string][] = []
  const ld = loader()
  if (ld !== null) {
    const listed = spawnSync(ld, ['--list', file], { encoding: 'utf8', env: {} })
    for (const m of (listed.stdout ?? '').matchAll(/^\s*([^\s/]+) => (\/\S+) \(/gm)) libraries.push([m[1] as string, realpathSync(m[2] as string)])
  }
  const found = { file, libraries }
  programs.set(path, found)
  return found
}

/** The words that start the host's `path` inside such a sandbox. */
export function hostProgram(path: string): string[] {
  const inside = join(HOST_INSIDE, basename(path))
  const ld = loader()
  return ld === null ? [inside] : [join(LIB_INSIDE, basename(ld)), '--library-path', LIB_INSIDE, inside]
}

/**
 * The bwrap arguments that show `paths` (and what they need) there: on a tmpfs of their
 * own, made read-only once they are in, so that nothing can be added beside them in the
 * directory their loader searches (docs/security.md#an-image).
 */
export function hostProgramMounts(paths: readonly string[]): string[] {
  const a: string[] = ['--tmpfs', HOST_INSIDE]
  const ld = loader()
  if (ld !== null) a.push('--ro-bind', ld, join(LIB_INSIDE, basename(ld)))
  const libs = new Map<string, string>()
  for (const path of paths) {
    const p = program(path)
    a.push('--ro-bind', p.file, join(HOST_INSIDE, basename(path)))
    for (const [soname, file] of p.libraries) libs.set(soname, file)
  }
  for (const [soname, file] of libs) a.push('--ro-bind', file, join(LIB_INSIDE, soname))
  a.push('--remount-ro', HOST_INSIDE)
  return a
}
