import { isAbsolute, relative, sep } from 'node:path'

/** True when `path` is `workspace` or lies under it (both absolute, already real). */
export function inside(workspace: string, path: string): boolean {
  const rel = relative(workspace, path)
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel))
}
