import { createHash } from 'node:crypto'
import { lstatSync, readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { join, relative } from 'node:path'

/** Every file under `base` with its content hash, mtime and mode (a link by its target, a FIFO by its type, never opened): to prove nothing changed. */
export function snapshotTree(base: string): Record<string, string> {
  const out: Record<string, string> = {}
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name)
      const st = lstatSync(path)
      if (st.isDirectory()) walk(path)
      else if (st.isSymbolicLink()) out[relative(base, path)] = `link to ${readlinkSync(path)}`
      else if (!st.isFile()) out[relative(base, path)] = `special ${st.mode} ${st.mtimeMs}`
      else out[relative(base, path)] = `${createHash('sha256').update(readFileSync(path)).digest('hex')} ${st.mtimeMs} ${st.mode}`
    }
  }
  walk(base)
  return out
}
