import { createHash } from 'node:crypto'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'

/** Every file under `base` with its content hash, mtime and mode: to prove nothing changed. */
export function snapshotTree(base: string): Record<string, string> {
  const out: Record<string, string> = {}
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name)
      const st = statSync(path)
      if (st.isDirectory()) walk(path)
      else out[relative(base, path)] = `${createHash('sha256').update(readFileSync(path)).digest('hex')} ${st.mtimeMs} ${st.mode}`
    }
  }
  walk(base)
  return out
}
