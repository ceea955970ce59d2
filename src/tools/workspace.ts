import { realpathSync } from 'node:fs'
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path'

/** True when `path` is `workspace` or lies under it (both absolute, already real). */
export function inside(workspace: string, path: string): boolean {
  const rel = relative(workspace, path)
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel))
}

/**
 * Where a path leads now, whether or not it exists: the real path of its deepest existing
 * ancestor and the names below it. A place that does not exist yet (a config file a model
 * might create) is then compared with where a write would really land, even when a link
 * was made on the way to it.
 */
export function realPathOf(path: string): string {
  const absolute = resolve(path)
  const rest: string[] = []
  for (let at = absolute; ; at = dirname(at)) {
    try {
      return join(realpathSync(at), ...rest.reverse())
    } catch {
      if (dirname(at) === at) return absolute
      rest.push(basename(at))
    }
  }
}
